#pragma once
// The time-to-pixel geometry of the timeline, as plain code without Qt, tested
// without a display (hotspot's shape): a visible window of time mapped onto a
// pixel width, zoom about a point, pan, a zoom stack for "back", and axis ticks
// at 1-2-5 steps labelled in one sensible unit.

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace pipescope::gui {

// Times are nanoseconds as doubles (zooming needs fractions of a ns per pixel).
struct TimeAxis {
  double start_ns = 0.0;  // time at x = 0
  double end_ns = 1.0;    // time at x = width_px; > start_ns
  double width_px = 1.0;  // > 0

  double span_ns() const { return end_ns - start_ns; }
  double x_of(double t_ns) const;  // pixel of a time (may be outside [0, width])
  double t_of(double x) const;     // time at a pixel

  // The axis showing [full_start, full_end] over width_px.
  static TimeAxis fit(double full_start_ns, double full_end_ns, double width_px);
  // factor > 1 zooms in, < 1 out, keeping the time under pixel x where it is.
  // The result stays inside [full_start, full_end] and never narrower than
  // kMinSpan_ns; zooming out never goes beyond the full range.
  TimeAxis zoomed(double factor, double x, double full_start_ns, double full_end_ns) const;
  // Moves the window by dx pixels (positive: later times come into view),
  // clamped to [full_start, full_end].
  TimeAxis panned(double dx_px, double full_start_ns, double full_end_ns) const;
  // The window between two pixels (a rubber band), with the same limits.
  TimeAxis selected(double x0, double x1, double full_start_ns, double full_end_ns) const;
  // The same window over another width (the widget was resized).
  TimeAxis resized(double new_width_px) const;
};

inline constexpr double kMinSpan_ns = 10.0;

struct Tick {
  double time_ns = 0.0;
  double x = 0.0;
  std::string label;  // e.g. "1.5 ms"
};

// Ticks at multiples of a 1-2-5 step (…, 1 us, 2 us, 5 us, 10 us, …) chosen so
// that neighbouring ticks are at least min_spacing_px apart; every tick inside
// the visible window, labelled in the largest unit (ns, us, ms, s) of which
// the step is at least a tenth, with the decimals the step needs ("0.0 ms",
// "0.5 ms", "1.0 ms" for a 0.5 ms step; "0 ms", "2 ms" for a 2 ms step).
std::vector<Tick> time_ticks(const TimeAxis& axis, double min_spacing_px);
// The step time_ticks uses.
double tick_step_ns(const TimeAxis& axis, double min_spacing_px);

// Past windows, for "zoom back"; reset() empties it.
class ZoomStack {
 public:
  void push(const TimeAxis& axis) { stack_.push_back(axis); }
  std::optional<TimeAxis> pop();
  void reset() { stack_.clear(); }
  std::size_t size() const { return stack_.size(); }

 private:
  std::vector<TimeAxis> stack_;
};

}  // namespace pipescope::gui
