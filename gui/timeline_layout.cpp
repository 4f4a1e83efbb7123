#include "gui/timeline_layout.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <tuple>
#include <utility>

#include "sim/format.h"

namespace pipescope::gui {
namespace {

constexpr Lane kLanes[] = {Lane::kCompute, Lane::kSend, Lane::kRecv};

bool is_transfer(EventKind k) {
  return k == EventKind::kActivation || k == EventKind::kGradient;
}

std::string row_label(const Timeline& t, int device, Lane lane, int sub_row,
                      const std::string& prefix) {
  if (lane == Lane::kCompute && sub_row == 0) {
    std::string label = static_cast<std::size_t>(device) < t.device_names.size()
                            ? t.device_names[static_cast<std::size_t>(device)]
                            : "device " + std::to_string(device);
    return prefix.empty() ? label : prefix + ": " + label;
  }
  // Indented under their device's row, which carries the prefix.
  std::string label = "  " + std::string(to_string(lane));
  if (sub_row > 0) label += " " + std::to_string(sub_row + 1);
  return label;
}

// First fit by start time, as the trace writer assigns rows (sim/trace_io.cpp),
// so that "recv 2" here is "recv 2" there: each slice goes to the lowest row whose
// last slice ended at or before its start. A linear scan of the rows is quadratic
// when many slices overlap; a min-tree over the rows' end times finds the row in
// O(log n). Rows not used yet hold kFree, so the lowest free row is always found.
class FirstFit {
 public:
  explicit FirstFit(std::size_t slices) {
    while (leaves_ < slices) leaves_ *= 2;
    end_.assign(2 * leaves_, kFree);
  }

  std::size_t place(SimTime start, SimTime end) {
    std::size_t node = 1;  // the root; node n has children 2n and 2n + 1
    while (node < leaves_) node = end_[2 * node] <= start ? 2 * node : 2 * node + 1;
    const std::size_t row = node - leaves_;
    end_[node] = end;
    for (node /= 2; node > 0; node /= 2) end_[node] = std::min(end_[2 * node], end_[2 * node + 1]);
    rows_ = std::max(rows_, row + 1);
    return row;
  }
  std::size_t rows() const { return rows_; }

 private:
  static constexpr SimTime kFree = std::numeric_limits<SimTime>::min();
  std::size_t leaves_ = 1;
  std::size_t rows_ = 0;
  std::vector<SimTime> end_;  // min of the rows' end times under each node
};

// Appends the rows and items of one device's lane; `events` are its events in
// order of start.
void lay_out_lane(const Timeline& t, int source, int device, Lane lane,
                  const std::vector<std::size_t>& events, const std::string& prefix,
                  TimelineLayout& layout) {
  FirstFit fit(events.size());
  std::vector<std::size_t> sub_row(events.size());
  for (std::size_t k = 0; k < events.size(); ++k) {
    sub_row[k] = fit.place(t.events[events[k]].start, t.events[events[k]].end);
  }
  // A device's compute row stays even when it is idle: its bubble is the point.
  const std::size_t rows = std::max<std::size_t>(fit.rows(), lane == Lane::kCompute ? 1 : 0);
  // Items go row by row, each row in order of start (hit_test relies on it): a
  // counting sort by sub-row, stable in start order.
  std::vector<std::size_t> begin(rows + 1, 0);
  for (const std::size_t r : sub_row) ++begin[r + 1];
  std::partial_sum(begin.begin(), begin.end(), begin.begin());
  const int first_row = static_cast<int>(layout.rows.size());
  const std::size_t first_item = layout.items.size();
  layout.items.resize(first_item + events.size());
  for (std::size_t k = 0; k < events.size(); ++k) {
    layout.items[first_item + begin[sub_row[k]]++] =
        TimelineItem{source, events[k], first_row + static_cast<int>(sub_row[k])};
  }
  for (std::size_t r = 0; r < rows; ++r) {
    const int sub = static_cast<int>(r);
    layout.rows.push_back(
        TimelineRow{source, device, lane, sub, row_label(t, device, lane, sub, prefix)});
  }
}

}  // namespace

TimelineLayout layout_timelines(const std::vector<const Timeline*>& sources,
                                const std::vector<std::string>& prefixes, bool show_transfers) {
  TimelineLayout layout;
  bool any = false;
  for (std::size_t s = 0; s < sources.size(); ++s) {
    if (sources[s] == nullptr) continue;
    const Timeline& t = *sources[s];
    const std::string& prefix = s < prefixes.size() ? prefixes[s] : std::string();
    // Events by (device, lane, start), ties in timeline order as in the trace
    // writer. An event with a negative device (corrupt input) has no row.
    std::vector<std::size_t> order;
    order.reserve(t.events.size());
    int devices = static_cast<int>(t.device_names.size());
    for (std::size_t i = 0; i < t.events.size(); ++i) {
      const TimelineEvent& e = t.events[i];
      if (e.device < 0) continue;
      order.push_back(i);
      devices = std::max(devices, e.device + 1);
      // The extent counts hidden transfers too: the axis does not jump when
      // they are switched on.
      const double start = static_cast<double>(e.start), end = static_cast<double>(e.end);
      layout.start_ns = any ? std::min(layout.start_ns, start) : start;
      layout.end_ns = any ? std::max(layout.end_ns, end) : end;
      any = true;
    }
    const auto key = [&](std::size_t i) {
      const TimelineEvent& e = t.events[i];
      return std::make_tuple(e.device, static_cast<int>(e.lane), e.start, i);
    };
    std::sort(order.begin(), order.end(),
              [&](std::size_t a, std::size_t b) { return key(a) < key(b); });

    std::size_t next = 0;  // into order
    std::vector<std::size_t> lane_events;
    for (int d = 0; d < devices; ++d) {
      for (const Lane lane : kLanes) {
        lane_events.clear();
        while (next < order.size() && t.events[order[next]].device == d &&
               t.events[order[next]].lane == lane) {
          lane_events.push_back(order[next++]);
        }
        if (lane != Lane::kCompute && (!show_transfers || lane_events.empty())) continue;
        lay_out_lane(t, static_cast<int>(s), d, lane, lane_events, prefix, layout);
      }
    }
  }
  return layout;
}

namespace {

const TimelineEvent& event_of(const TimelineLayout& layout,
                              const std::vector<const Timeline*>& sources, std::size_t item) {
  const TimelineItem& it = layout.items[item];
  return sources[static_cast<std::size_t>(it.source)]->events[it.event];
}

}  // namespace

std::optional<std::size_t> hit_test(const TimelineLayout& layout,
                                    const std::vector<const Timeline*>& sources, int row,
                                    double time_ns, double tolerance_ns) {
  // The row's items: items are sorted by row, and a row's by start.
  const auto by_row = [](const TimelineItem& a, const TimelineItem& b) { return a.row < b.row; };
  const auto [lo_it, hi_it] =
      std::equal_range(layout.items.begin(), layout.items.end(), TimelineItem{0, 0, row}, by_row);
  const auto lo = static_cast<std::size_t>(lo_it - layout.items.begin());
  const auto hi = static_cast<std::size_t>(hi_it - layout.items.begin());
  if (lo == hi) return std::nullopt;
  // One past the last item starting at or before time_ns. Slices of a row do not
  // overlap, so only that item can contain time_ns, and it and the next are the
  // nearest on either side.
  const auto start_of = [&](std::size_t i) {
    return static_cast<double>(event_of(layout, sources, i).start);
  };
  std::size_t first = lo, count = hi - lo;
  while (count > 0) {
    const std::size_t half = count / 2;
    if (start_of(first + half) <= time_ns) {
      first += half + 1;
      count -= half + 1;
    } else {
      count = half;
    }
  }
  std::optional<std::size_t> best;
  double best_distance = 0.0;
  if (first > lo) {
    const double end = static_cast<double>(event_of(layout, sources, first - 1).end);
    if (time_ns <= end) return first - 1;
    if (time_ns - end <= tolerance_ns) best = first - 1, best_distance = time_ns - end;
  }
  if (first < hi) {
    // Strictly nearer: a tie goes to the slice before, which ended there.
    const double d = start_of(first) - time_ns;
    if (d <= tolerance_ns && (!best || d < best_distance)) best = first;
  }
  return best;
}

namespace {

// One kind of related item: an op of `stage`, or a transfer sent by `stage`, of
// the same micro-batch unless any_micro_batch. The sender is enough: activations
// go from s to s + 1 and gradients back (DESIGN.md, "Ops").
struct Related {
  EventKind kind;
  int stage;
  bool before;
  bool any_micro_batch = false;
};

bool matches(const Related& r, const TimelineEvent& e, int micro_batch) {
  return e.kind == r.kind && e.stage == r.stage &&
         (r.any_micro_batch || e.micro_batch == micro_batch);
}

// What the schedule says an event depends on and feeds (DESIGN.md, "Ops").
std::vector<Related> related_to(const TimelineEvent& me) {
  const int s = me.stage;
  using K = EventKind;
  switch (me.kind) {
    case K::kForward:
      return {{K::kActivation, s - 1, true},
              {K::kForward, s - 1, true},
              {K::kActivation, s, false},
              {K::kForward, s + 1, false}};
    case K::kRecompute:
      return {{K::kForward, s, true}, {K::kBackward, s, false}};
    case K::kBackward:
      return {{K::kGradient, s + 1, true}, {K::kBackward, s + 1, true},
              {K::kForward, s, true},      {K::kRecompute, s, true},
              {K::kGradient, s, false},    {K::kBackward, s - 1, false},
              {K::kWeight, s, false}};
    case K::kWeight:
      return {{K::kBackward, s, true}, {K::kOptimizer, s, false, true}};
    case K::kOptimizer:
      // The step needs every backward (and weight gradient) of its stage, and
      // with data parallelism its all-reduce.
      return {{K::kBackward, s, true, true},
              {K::kWeight, s, true, true},
              {K::kAllReduce, s, true, true}};
    case K::kAllReduce:
      return {{K::kBackward, s, true, true},
              {K::kWeight, s, true, true},
              {K::kOptimizer, s, false, true}};
    case K::kActivation:
    case K::kGradient: {
      // The receiving stage, when a trace left it out, follows from the kind.
      const K op = me.kind == K::kActivation ? K::kForward : K::kBackward;
      const int to = me.peer_stage.value_or(me.kind == K::kActivation ? s + 1 : s - 1);
      return {{op, s, true}, {op, to, false}};
    }
  }
  return {};
}

}  // namespace

Dependencies dependencies_of(const TimelineLayout& layout,
                             const std::vector<const Timeline*>& sources, std::size_t item) {
  Dependencies deps;
  if (item >= layout.items.size()) return deps;
  const int source = layout.items[item].source;
  const TimelineEvent& me = event_of(layout, sources, item);
  const std::vector<Related> related = related_to(me);
  const bool transfer = is_transfer(me.kind);
  // One pass over this source's items (contiguous: sources are laid out one
  // after another), testing each against the handful of related kinds. A lookup
  // index would have to be rebuilt per call, as the layout has nowhere to keep it,
  // and building it costs more than this pass: about 1 ms for 100k events.
  const auto by_source = [](const TimelineItem& a, const TimelineItem& b) {
    return a.source < b.source;
  };
  const auto [lo, hi] = std::equal_range(layout.items.begin(), layout.items.end(),
                                         TimelineItem{source, 0, 0}, by_source);
  for (auto it = lo; it != hi; ++it) {
    const auto i = static_cast<std::size_t>(it - layout.items.begin());
    if (i == item) continue;
    const TimelineEvent& e = sources[static_cast<std::size_t>(source)]->events[it->event];
    if (transfer && me.flow && e.flow == me.flow) {
      // The other half of this transfer: the send comes before its receive.
      if (e.lane != me.lane) (me.lane == Lane::kSend ? deps.after : deps.before).push_back(i);
      continue;
    }
    for (const Related& r : related) {
      if (matches(r, e, me.micro_batch)) {
        (r.before ? deps.before : deps.after).push_back(i);
        break;
      }
    }
  }
  return deps;
}

std::string item_label(const TimelineEvent& e) {
  return event_name(e);
}

std::string item_tooltip(const Timeline& timeline, const TimelineEvent& e) {
  const bool transfer = is_transfer(e.kind);
  // "F3: forward", "act 3: activation (recv)", but not "optimizer: optimizer".
  std::string text = item_label(e);
  if (text != to_string(e.kind)) text += ": " + std::string(to_string(e.kind));
  if (transfer) text += " (" + std::string(to_string(e.lane)) + ")";
  text += ", stage " + std::to_string(e.stage);
  if (e.peer_stage) text += " -> " + std::to_string(*e.peer_stage);
  if (has_micro_batch(e.kind)) text += ", micro-batch " + std::to_string(e.micro_batch);
  if (e.kind == EventKind::kAllReduce) text += ", " + format_bytes(static_cast<double>(e.bytes));
  const SimTime duration = e.end - e.start;
  text += "\nstart " + format_seconds(simtime_to_seconds(e.start)) + ", duration " +
          format_seconds(simtime_to_seconds(duration));
  if (transfer) {
    text += "\n" + format_bytes(static_cast<double>(e.bytes));
    // A route no transfer took has no name (""); skip rather than print "over ".
    if (e.route && *e.route >= 0 &&
        static_cast<std::size_t>(*e.route) < timeline.route_names.size() &&
        !timeline.route_names[static_cast<std::size_t>(*e.route)].empty()) {
      text += " over " + timeline.route_names[static_cast<std::size_t>(*e.route)];
    }
  }
  if (e.cpu_time) {
    // Below 100 % the OS or a hypervisor took the rest (steal).
    text += "\nCPU time " + format_seconds(simtime_to_seconds(*e.cpu_time));
    if (duration > 0) {
      text += " (" +
              format_percent(static_cast<double>(*e.cpu_time) / static_cast<double>(duration)) +
              " of the duration)";
    }
  }
  return text;
}

}  // namespace pipescope::gui
