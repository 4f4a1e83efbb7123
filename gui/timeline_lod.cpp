#include "gui/timeline_lod.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace pipescope::gui {
namespace {

// Every EventKind.
constexpr std::size_t kKinds = std::size(kAllEventKinds);

// Time and items of each kind in the span being built.
struct Tally {
  std::array<double, kKinds> ns{};
  std::array<std::size_t, kKinds> items{};

  void add(EventKind kind, double ns_in_window) {
    ns[static_cast<std::size_t>(kind)] += ns_in_window;
    ++items[static_cast<std::size_t>(kind)];
  }
  EventKind most() const {
    std::size_t best = 0;
    for (std::size_t k = 1; k < kKinds; ++k) {
      if (ns[k] > ns[best] || (ns[k] == ns[best] && items[k] > items[best])) best = k;
    }
    return static_cast<EventKind>(best);
  }
};

}  // namespace

std::vector<RowSpan> row_spans(const TimelineLayout& layout, int row, const TimeAxis& axis) {
  std::vector<RowSpan> spans;
  const double t0 = axis.start_ns, t1 = axis.end_ns;
  const ItemRange range = items_in(layout, row, t0, t1);
  if (range.size() == 0 || !(axis.span_ns() > 0) || !(axis.width_px > 0)) return spans;
  const double px_per_ns = axis.width_px / axis.span_ns();
  const double last_column = std::max(0.0, std::ceil(axis.width_px) - 1);

  Tally tally;
  std::size_t wide = 0;  // items of the span at least a pixel wide on screen
  std::size_t wide_item = 0;
  double column = -1;
  const auto finish = [&] {
    RowSpan& span = spans.back();
    span.kind = tally.most();
    if (span.count == 1) {
      span.item = span.first;
    } else if (wide == 1) {
      span.item = wide_item;
    }
  };
  for (std::size_t i = range.first; i < range.last; ++i) {
    const TimelineItem& it = layout.items[i];
    const double start = static_cast<double>(it.start);
    const double end = static_cast<double>(std::max(it.start, it.end));
    const double c = std::clamp(std::floor((start - t0) * px_per_ns), 0.0, last_column);
    if (c != column) {
      if (!spans.empty()) finish();
      spans.push_back(RowSpan{it.start, it.start, it.kind, i, 0, std::nullopt});
      tally = Tally{};
      wide = 0;
      column = c;
    }
    RowSpan& span = spans.back();
    span.end = std::max(span.end, std::max(it.start, it.end));
    ++span.count;
    const double shown_ns = std::max(0.0, std::min(end, t1) - std::max(start, t0));
    tally.add(it.kind, shown_ns);
    if (shown_ns * px_per_ns >= 1.0) ++wide, wide_item = i;
  }
  finish();
  return spans;
}

}  // namespace pipescope::gui
