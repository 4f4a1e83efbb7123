#include "gui/time_axis.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace pipescope::gui {
namespace {

// An axis built by hand may break the header's invariants (width > 0,
// end > start). Geometry on it then behaves as if it were 1 px wide or
// kMinSpan_ns long instead of dividing by zero.
double usable_width(double width_px) {
  return width_px > 0 && std::isfinite(width_px) ? width_px : 1.0;
}
double usable_span(double span_ns) {
  return span_ns > 0 && std::isfinite(span_ns) ? span_ns : kMinSpan_ns;
}
// Widths the constructors produce: at least one pixel, so that a widget not yet
// shown (width 0) still has an axis.
double new_width(double width_px) {
  return width_px >= 1.0 && std::isfinite(width_px) ? width_px : 1.0;
}

struct Range {
  double start = 0.0;
  double end = kMinSpan_ns;
};

// The limits of every window. An empty, reversed or non-finite range (a timeline
// with no events, or one instant) becomes kMinSpan_ns from its start.
Range full_range(double start, double end) {
  if (!std::isfinite(start)) start = 0.0;
  if (!std::isfinite(end) || !(end - start >= kMinSpan_ns)) end = start + kMinSpan_ns;
  return {start, end};
}

// A window of about `span` inside the range, as close to `start` as it fits.
// Written with comparisons rather than std::clamp: at large times rounding can
// make full.end - span fall below full.start, and std::clamp with lo > hi is
// undefined. A NaN span or start falls back to the smallest window at the start.
TimeAxis clamped(double start, double span, double width_px, Range full) {
  if (!(span >= kMinSpan_ns)) span = kMinSpan_ns;
  span = std::min(span, full.end - full.start);
  if (start > full.end - span) start = full.end - span;
  if (!(start >= full.start)) start = full.start;
  return TimeAxis{start, std::min(start + span, full.end), new_width(width_px)};
}

}  // namespace

double TimeAxis::x_of(double t_ns) const {
  return (t_ns - start_ns) / usable_span(span_ns()) * usable_width(width_px);
}

double TimeAxis::t_of(double x) const {
  return start_ns + x / usable_width(width_px) * usable_span(span_ns());
}

TimeAxis TimeAxis::fit(double full_start_ns, double full_end_ns, double width) {
  const Range full = full_range(full_start_ns, full_end_ns);
  return TimeAxis{full.start, full.end, new_width(width)};
}

TimeAxis TimeAxis::zoomed(double factor, double x, double full_start_ns, double full_end_ns) const {
  const Range full = full_range(full_start_ns, full_end_ns);
  if (!(factor > 0) || !std::isfinite(factor)) {
    return clamped(start_ns, span_ns(), width_px, full);
  }
  const double w = usable_width(width_px);
  const double anchor = t_of(x);
  const double span = usable_span(span_ns()) / factor;
  // The anchor stays at pixel x: t_of'(x) = start' + x / w * span' = anchor.
  // Only the limits (range, minimum span) can move it.
  return clamped(anchor - x / w * std::max(span, kMinSpan_ns), span, width_px, full);
}

TimeAxis TimeAxis::panned(double dx_px, double full_start_ns, double full_end_ns) const {
  const double span = usable_span(span_ns());
  return clamped(start_ns + dx_px / usable_width(width_px) * span, span, width_px,
                 full_range(full_start_ns, full_end_ns));
}

TimeAxis TimeAxis::selected(double x0, double x1, double full_start_ns, double full_end_ns) const {
  const Range full = full_range(full_start_ns, full_end_ns);
  // A band dragged past an end of the range selects up to that end.
  const double t0 = std::max(full.start, t_of(std::min(x0, x1)));
  const double t1 = std::min(full.end, t_of(std::max(x0, x1)));
  // A band narrower than the minimum span (a click with a twitch) widens about
  // its middle rather than from its left edge.
  const double span = std::max(kMinSpan_ns, t1 - t0);
  return clamped((t0 + t1 - span) / 2, span, width_px, full);
}

TimeAxis TimeAxis::resized(double new_width_px) const {
  return TimeAxis{start_ns, end_ns, new_width(new_width_px)};
}

namespace {

double usable_spacing(double min_spacing_px) {
  return min_spacing_px >= 1.0 && std::isfinite(min_spacing_px) ? min_spacing_px : 1.0;
}

}  // namespace

double tick_step_ns(const TimeAxis& axis, double min_spacing_px) {
  // Times are whole nanoseconds, so no step is finer than 1 ns; every step is
  // then a whole number of ns and its multiples are exact.
  const double min_step = std::max(1.0, usable_span(axis.span_ns()) / usable_width(axis.width_px) *
                                            usable_spacing(min_spacing_px));
  if (!std::isfinite(min_step)) return min_step;
  // The smallest 1-2-5 multiple of a power of ten that is at least min_step.
  // log10 may round across a power of ten; the check puts the decade back below.
  double decade = std::pow(10.0, std::floor(std::log10(min_step)));
  if (decade > min_step) decade /= 10;
  for (const double m : {1.0, 2.0, 5.0}) {
    if (decade * m >= min_step) return decade * m;
  }
  return decade * 10;
}

namespace {

// A tick time in the largest unit of which the step is at least a tenth: a
// 0.2 ms step reads "0.2 ms", not "200 us"; a 20 ns step stays in ns. Steps are
// 1-2-5 multiples of at least 1 ns, so in that unit a step is 0.1, 0.2 or 0.5
// (one decimal) or a whole number (none).
std::string tick_label(double t_ns, double step_ns) {
  const char* unit = "ns";
  double scale = 1;
  if (step_ns >= 1e8) {
    unit = "s", scale = 1e9;
  } else if (step_ns >= 1e5) {
    unit = "ms", scale = 1e6;
  } else if (step_ns >= 1e2) {
    unit = "us", scale = 1e3;
  }
  const int decimals = step_ns / scale < 0.99 ? 1 : 0;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f %s", decimals, t_ns / scale, unit);
  return buf;
}

}  // namespace

std::vector<Tick> time_ticks(const TimeAxis& axis, double min_spacing_px) {
  std::vector<Tick> ticks;
  const double step = tick_step_ns(axis, min_spacing_px);
  if (!(step > 0) || !std::isfinite(step)) return ticks;
  const double first = std::ceil(axis.start_ns / step);
  const double last = std::floor(axis.end_ns / step);
  if (!(last >= first)) return ticks;
  // Neighbours are >= spacing apart, so a width holds at most width / spacing + 1
  // of them; the cap guards against rounding and hand-made axes.
  const double most = std::floor(usable_width(axis.width_px) / usable_spacing(min_spacing_px)) + 2;
  const auto count = static_cast<std::size_t>(std::min(last - first + 1, most));
  ticks.reserve(count);
  // Counting with an integer: at large times first + 1 == first in doubles, and
  // a loop on the double would never end. The sum is never -0 (-0 + 0 = +0), so
  // a window starting just before zero labels it "0 ms", not "-0 ms".
  for (std::size_t k = 0; k < count; ++k) {
    const double t = (first + static_cast<double>(k)) * step;
    ticks.push_back(Tick{t, axis.x_of(t), tick_label(t, step)});
  }
  return ticks;
}

std::optional<TimeAxis> ZoomStack::pop() {
  if (stack_.empty()) return std::nullopt;
  const TimeAxis top = stack_.back();
  stack_.pop_back();
  return top;
}

}  // namespace pipescope::gui
