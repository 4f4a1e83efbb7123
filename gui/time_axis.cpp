#include "gui/time_axis.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace pipescope::gui {
namespace {

// [full_start, full_end] with at least kMinSpan_ns.
void full_range(double& start, double& end) {
  if (!(end - start >= kMinSpan_ns)) end = start + kMinSpan_ns;
}

// A window of `span` inside the full range, as close to `start` as it fits.
TimeAxis clamped(double start, double span, double width_px, double full_start, double full_end) {
  full_range(full_start, full_end);
  span = std::clamp(span, kMinSpan_ns, full_end - full_start);
  start = std::clamp(start, full_start, full_end - span);
  return TimeAxis{start, start + span, std::max(1.0, width_px)};
}

}  // namespace

double TimeAxis::x_of(double t_ns) const {
  return (t_ns - start_ns) / span_ns() * width_px;
}

double TimeAxis::t_of(double x) const {
  return start_ns + x / width_px * span_ns();
}

TimeAxis TimeAxis::fit(double full_start_ns, double full_end_ns, double width) {
  full_range(full_start_ns, full_end_ns);
  return TimeAxis{full_start_ns, full_end_ns, std::max(1.0, width)};
}

TimeAxis TimeAxis::zoomed(double factor, double x, double full_start_ns, double full_end_ns) const {
  if (!(factor > 0) || !std::isfinite(factor)) return *this;
  const double anchor = t_of(x);
  const double span = std::max(kMinSpan_ns, span_ns() / factor);
  // Keep the anchor at the same pixel: start = anchor - x / width * span.
  const double start = anchor - x / width_px * span;
  return clamped(start, span, width_px, full_start_ns, full_end_ns);
}

TimeAxis TimeAxis::panned(double dx_px, double full_start_ns, double full_end_ns) const {
  return clamped(start_ns + dx_px / width_px * span_ns(), span_ns(), width_px, full_start_ns,
                 full_end_ns);
}

TimeAxis TimeAxis::selected(double x0, double x1, double full_start_ns, double full_end_ns) const {
  const double t0 = t_of(std::min(x0, x1)), t1 = t_of(std::max(x0, x1));
  // A band narrower than the minimum span widens about its middle.
  const double span = std::max(kMinSpan_ns, t1 - t0);
  return clamped((t0 + t1 - span) / 2, span, width_px, full_start_ns, full_end_ns);
}

TimeAxis TimeAxis::resized(double new_width_px) const {
  return TimeAxis{start_ns, end_ns, std::max(1.0, new_width_px)};
}

double tick_step_ns(const TimeAxis& axis, double min_spacing_px) {
  const double min_step = axis.span_ns() / axis.width_px * std::max(1.0, min_spacing_px);
  // The smallest 1-2-5 multiple of a power of ten that is at least min_step.
  double step = std::pow(10.0, std::floor(std::log10(std::max(min_step, 1e-3))));
  for (const double m : {1.0, 2.0, 5.0, 10.0}) {
    if (step * m >= min_step) return step * m;
  }
  return step * 10;
}

namespace {

// A time in the unit of the step, with as many decimals as the step needs.
std::string tick_label(double t_ns, double step_ns) {
  const char* unit = "ns";
  double scale = 1;
  // The unit of which the step is at least a tenth: 0.2 ms steps read
  // "0.2 ms", not "200 us"; 20 ns steps stay in ns.
  if (step_ns >= 1e8) {
    unit = "s", scale = 1e9;
  } else if (step_ns >= 1e5) {
    unit = "ms", scale = 1e6;
  } else if (step_ns >= 1e2) {
    unit = "us", scale = 1e3;
  }
  const double step_in_unit = step_ns / scale;
  int decimals = 0;
  while (decimals < 6 && std::fabs(step_in_unit * std::pow(10.0, decimals) -
                                   std::round(step_in_unit * std::pow(10.0, decimals))) > 1e-6) {
    ++decimals;
  }
  double v = t_ns / scale;
  if (std::fabs(v) < step_in_unit * 1e-9) v = 0;  // no "-0"
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f %s", decimals, v, unit);
  return buf;
}

}  // namespace

std::vector<Tick> time_ticks(const TimeAxis& axis, double min_spacing_px) {
  std::vector<Tick> ticks;
  const double step = tick_step_ns(axis, min_spacing_px);
  if (!(step > 0) || !std::isfinite(step)) return ticks;
  const double first = std::ceil(axis.start_ns / step);
  const double last = std::floor(axis.end_ns / step);
  const double bound = axis.width_px / std::max(1.0, min_spacing_px) + 2;
  for (double i = first; i <= last && static_cast<double>(ticks.size()) < bound; ++i) {
    const double t = i * step;
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
