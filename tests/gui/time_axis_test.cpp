// The timeline's time-to-pixel geometry, without a display.

#include "gui/time_axis.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace pipescope::gui {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(TimeAxis, MapsTimesToPixelsAndBack) {
  const TimeAxis a{1000.0, 3000.0, 500.0};  // 4 ns per pixel
  EXPECT_EQ(a.span_ns(), 2000);
  EXPECT_EQ(a.x_of(1000), 0);
  EXPECT_EQ(a.x_of(3000), 500);
  EXPECT_EQ(a.x_of(2000), 250);
  EXPECT_EQ(a.x_of(0), -250);  // outside the window: off the left edge
  EXPECT_EQ(a.t_of(125), 1500);
  EXPECT_EQ(a.t_of(600), 3400);
  for (const double x : {0.0, 1.0, 123.5, 499.0, 500.0, -40.0, 730.25}) {
    EXPECT_EQ(a.x_of(a.t_of(x)), x) << x;
  }
  // Awkward numbers round trip up to rounding.
  const TimeAxis b = TimeAxis::fit(0.3, 12345.7, 997);
  for (const double x : {0.0, 0.1, 1.0 / 3, 17.0, 996.9, 997.0}) {
    EXPECT_DOUBLE_EQ(b.x_of(b.t_of(x)), x) << x;
  }
}

TEST(TimeAxis, FitShowsTheFullRange) {
  const TimeAxis a = TimeAxis::fit(-20, 4000, 640);
  EXPECT_EQ(a.start_ns, -20);
  EXPECT_EQ(a.end_ns, 4000);
  EXPECT_EQ(a.width_px, 640);
}

TEST(TimeAxis, DegenerateInputBecomesTheMinimumSpanAndOnePixel) {
  // An empty full range (one instant) spans kMinSpan_ns from its start.
  const TimeAxis a = TimeAxis::fit(50, 50, 0);
  EXPECT_EQ(a.start_ns, 50);
  EXPECT_EQ(a.end_ns, 50 + kMinSpan_ns);
  EXPECT_EQ(a.width_px, 1);
  // So does a reversed one; a negative or NaN width becomes one pixel.
  EXPECT_EQ(TimeAxis::fit(100, 40, -5).end_ns, 110);
  EXPECT_EQ(TimeAxis::fit(100, 40, -5).width_px, 1);
  EXPECT_EQ(TimeAxis::fit(0, 1000, kNaN).width_px, 1);
  // A range shorter than the minimum span is widened to it.
  EXPECT_EQ(TimeAxis::fit(0, 3, 100).end_ns, kMinSpan_ns);
  // An axis built by hand with no width and no span still maps finitely, as if
  // it were 1 px over kMinSpan_ns.
  const TimeAxis h{5.0, 5.0, 0.0};
  EXPECT_EQ(h.x_of(15), 1);
  EXPECT_EQ(h.t_of(1), 15);
  // Zoom, pan and band within an empty range give the minimum window there.
  for (const TimeAxis& z : {a.zoomed(2, 0, 7, 7), a.panned(30, 7, 7), a.selected(0, 1, 7, 7)}) {
    EXPECT_EQ(z.start_ns, 7);
    EXPECT_EQ(z.end_ns, 7 + kMinSpan_ns);
    EXPECT_EQ(z.width_px, 1);
  }
}

TEST(TimeAxis, ZoomKeepsTheTimeUnderTheCursor) {
  const TimeAxis a = TimeAxis::fit(0, 1e6, 1000);
  // 4x in at x = 300 (t = 300 us): 250 us wide, 30 % of it left of the cursor.
  const TimeAxis z = a.zoomed(4, 300, 0, 1e6);
  EXPECT_EQ(z.start_ns, 225'000);
  EXPECT_EQ(z.end_ns, 475'000);
  EXPECT_EQ(z.width_px, 1000);
  EXPECT_EQ(z.t_of(300), 300'000);
  // Again, at another pixel.
  const TimeAxis zz = z.zoomed(2.5, 640, 0, 1e6);
  const double anchor = z.t_of(640);  // 385 us
  EXPECT_EQ(anchor, 385'000);
  EXPECT_DOUBLE_EQ(zz.span_ns(), 100'000);
  EXPECT_DOUBLE_EQ(zz.t_of(640), anchor);
  EXPECT_DOUBLE_EQ(zz.start_ns, 321'000);
  // Zooming out by the product of the factors returns to the whole range.
  const TimeAxis back = zz.zoomed(0.1, 640, 0, 1e6);
  EXPECT_DOUBLE_EQ(back.start_ns, 0);
  EXPECT_DOUBLE_EQ(back.end_ns, 1e6);
}

TEST(TimeAxis, ZoomStaysInsideTheRangeAndAboveTheMinimumSpan) {
  const TimeAxis a = TimeAxis::fit(0, 1e6, 1000);
  // In at either edge: the edge stays put.
  const TimeAxis left = a.zoomed(10, 0, 0, 1e6);
  EXPECT_EQ(left.start_ns, 0);
  EXPECT_EQ(left.end_ns, 1e5);
  const TimeAxis right = a.zoomed(10, 1000, 0, 1e6);
  EXPECT_EQ(right.start_ns, 9e5);
  EXPECT_EQ(right.end_ns, 1e6);
  // Out from a window near the end, where keeping the cursor's time would pass
  // the end (450 us + 625 us): the window moves back inside, its span kept.
  const TimeAxis mid = a.zoomed(2, 900, 0, 1e6);
  EXPECT_EQ(mid.start_ns, 450'000);
  EXPECT_EQ(mid.end_ns, 950'000);
  const TimeAxis out = mid.zoomed(0.8, 0, 0, 1e6);
  EXPECT_EQ(out.start_ns, 375'000);
  EXPECT_EQ(out.end_ns, 1e6);
  // Out far: never beyond the full range.
  const TimeAxis all = left.zoomed(0.001, 500, 0, 1e6);
  EXPECT_EQ(all.start_ns, 0);
  EXPECT_EQ(all.end_ns, 1e6);
  // In far: the span stops at kMinSpan_ns, still about the cursor.
  const TimeAxis in = a.zoomed(1e12, 500, 0, 1e6);
  EXPECT_EQ(in.start_ns, 499'995);
  EXPECT_EQ(in.end_ns, 500'005);
  EXPECT_DOUBLE_EQ(in.zoomed(3, 200, 0, 1e6).start_ns, 499'995);
  EXPECT_DOUBLE_EQ(in.zoomed(3, 200, 0, 1e6).span_ns(), kMinSpan_ns);
  // A zero, negative, NaN or infinite factor leaves the window as it was.
  for (const double f : {0.0, -2.0, kNaN, kInf}) {
    const TimeAxis same = mid.zoomed(f, 10, 0, 1e6);
    EXPECT_EQ(same.start_ns, mid.start_ns) << f;
    EXPECT_EQ(same.end_ns, mid.end_ns) << f;
  }
}

TEST(TimeAxis, PanMovesByPixelsAndStopsAtTheEnds) {
  const TimeAxis a{100.0, 200.0, 100.0};  // 1 ns per pixel in a range 0..1000
  const TimeAxis later = a.panned(30, 0, 1000);
  EXPECT_EQ(later.start_ns, 130);
  EXPECT_EQ(later.end_ns, 230);
  const TimeAxis earlier = a.panned(-60.5, 0, 1000);
  EXPECT_EQ(earlier.start_ns, 39.5);
  EXPECT_EQ(earlier.end_ns, 139.5);
  const TimeAxis first = a.panned(-500, 0, 1000);
  EXPECT_EQ(first.start_ns, 0);
  EXPECT_EQ(first.end_ns, 100);
  const TimeAxis last = a.panned(5000, 0, 1000);
  EXPECT_EQ(last.start_ns, 900);
  EXPECT_EQ(last.end_ns, 1000);
  // A pixel is worth more time when zoomed out: 10 ns per pixel.
  EXPECT_EQ((TimeAxis{0, 1000, 100}).panned(7, 0, 5000).start_ns, 70);
  // Nothing to pan over when the window shows everything.
  const TimeAxis whole = TimeAxis::fit(0, 1000, 100).panned(25, 0, 1000);
  EXPECT_EQ(whole.start_ns, 0);
  EXPECT_EQ(whole.end_ns, 1000);
}

TEST(TimeAxis, RubberBandSelectsTheWindowBetweenTwoPixels) {
  const TimeAxis a = TimeAxis::fit(0, 1000, 100);  // 10 ns per pixel
  const TimeAxis s = a.selected(60, 20, 0, 1000);  // either order
  EXPECT_EQ(s.start_ns, 200);
  EXPECT_EQ(s.end_ns, 600);
  EXPECT_EQ(s.width_px, 100);
  EXPECT_EQ(a.selected(20, 60, 0, 1000).start_ns, 200);
  // Then zoomed further, the band is taken from the zoomed window.
  const TimeAxis s2 = s.selected(25, 50, 0, 1000);  // 4 ns per pixel
  EXPECT_EQ(s2.start_ns, 300);
  EXPECT_EQ(s2.end_ns, 400);
  // A band thinner than the minimum span widens about its middle.
  const TimeAxis thin = a.selected(50, 50.1, 0, 1000);
  EXPECT_DOUBLE_EQ(thin.span_ns(), kMinSpan_ns);
  EXPECT_DOUBLE_EQ(thin.start_ns, 495.5);
  // A band dragged past an end selects up to that end.
  const TimeAxis past_left = a.selected(-50, 30, 0, 1000);
  EXPECT_EQ(past_left.start_ns, 0);
  EXPECT_EQ(past_left.end_ns, 300);
  const TimeAxis past_right = a.selected(80, 400, 0, 1000);
  EXPECT_EQ(past_right.start_ns, 800);
  EXPECT_EQ(past_right.end_ns, 1000);
  // A thin band at the very end widens inward.
  const TimeAxis at_end = a.selected(100, 100, 0, 1000);
  EXPECT_EQ(at_end.start_ns, 1000 - kMinSpan_ns);
  EXPECT_EQ(at_end.end_ns, 1000);
}

TEST(TimeAxis, ResizeKeepsTheWindow) {
  const TimeAxis a{10.0, 20.0, 100.0};
  const TimeAxis r = a.resized(400);
  EXPECT_EQ(r.start_ns, 10);
  EXPECT_EQ(r.end_ns, 20);
  EXPECT_EQ(r.width_px, 400);
  // The same time lands on the same fraction of the width.
  EXPECT_EQ(a.x_of(15), 50);
  EXPECT_EQ(r.x_of(15), 200);
  EXPECT_EQ(a.resized(0).width_px, 1);
  EXPECT_EQ(a.resized(-3).width_px, 1);
  EXPECT_EQ(a.resized(kInf).width_px, 1);
}

TEST(ZoomStack, PopsInReverseOrderAndResets) {
  ZoomStack z;
  EXPECT_EQ(z.size(), 0u);
  EXPECT_FALSE(z.pop());
  const TimeAxis whole = TimeAxis::fit(0, 1e6, 800);
  const TimeAxis in = whole.zoomed(4, 400, 0, 1e6);
  z.push(whole);
  z.push(in);
  EXPECT_EQ(z.size(), 2u);
  const auto first = z.pop();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->start_ns, in.start_ns);
  EXPECT_EQ(first->end_ns, in.end_ns);
  const auto second = z.pop();
  ASSERT_TRUE(second);
  EXPECT_EQ(second->start_ns, 0);
  EXPECT_EQ(second->end_ns, 1e6);
  EXPECT_EQ(second->width_px, 800);
  EXPECT_EQ(z.size(), 0u);
  EXPECT_FALSE(z.pop());
  z.push(whole);
  z.push(in);
  z.reset();
  EXPECT_EQ(z.size(), 0u);
  EXPECT_FALSE(z.pop());
}

std::vector<std::string> labels(const std::vector<Tick>& ticks) {
  std::vector<std::string> out;
  for (const Tick& t : ticks) out.push_back(t.label);
  return out;
}

TEST(TimeTicks, StepIsTheSmallestOneTwoFiveAtTheSpacing) {
  struct Case {
    double span_ns, width_px, spacing_px, step_ns;
  };
  // min step = span / width * spacing, rounded up to 1, 2 or 5 x 10^n ns.
  for (const Case& c : std::vector<Case>{
           {10e6, 1000, 90, 1e6},     // 0.9 ms
           {1.8e6, 1000, 90, 2e5},    // 0.162 ms
           {2.5e6, 500, 90, 5e5},     // 0.45 ms
           {30e9, 600, 90, 5e9},      // 4.5 s
           {10e9, 500, 90, 2e9},      // 1.8 s
           {1000, 1000, 100, 100},    // exactly a power of ten
           {1000, 1000, 200, 200},    // exactly 2 x
           {1000, 1000, 500, 500},    // exactly 5 x
           {1000, 1000, 501, 1000},   // just above 5 x
           {10, 1000, 90, 1},         // never finer than 1 ns
           {3.6e12, 1000, 90, 5e11},  // an hour
       }) {
    EXPECT_EQ(tick_step_ns(TimeAxis{0, c.span_ns, c.width_px}, c.spacing_px), c.step_ns)
        << c.span_ns << " ns over " << c.width_px << " px at " << c.spacing_px << " px";
  }
}

TEST(TimeTicks, LabelsInOneUnitWithTheDecimalsTheStepNeeds) {
  // 1 ms steps: whole ms, at their pixels.
  const auto ms = time_ticks(TimeAxis::fit(0, 10e6, 1000), 90);
  ASSERT_EQ(ms.size(), 11u);
  EXPECT_EQ(ms[0].label, "0 ms");
  EXPECT_EQ(ms[1].label, "1 ms");
  EXPECT_EQ(ms[10].label, "10 ms");
  EXPECT_EQ(ms[3].time_ns, 3e6);
  EXPECT_EQ(ms[3].x, 300);
  // 0.5 ms steps: a tenth of a ms or more, so in ms with one decimal.
  EXPECT_EQ(labels(time_ticks(TimeAxis::fit(0, 2.5e6, 500), 90)),
            (std::vector<std::string>{"0.0 ms", "0.5 ms", "1.0 ms", "1.5 ms", "2.0 ms", "2.5 ms"}));
  // 0.2 ms steps read "0.2 ms", not "200 us".
  EXPECT_EQ(labels(time_ticks(TimeAxis::fit(0, 1.8e6, 1000), 90)),
            (std::vector<std::string>{"0.0 ms", "0.2 ms", "0.4 ms", "0.6 ms", "0.8 ms", "1.0 ms",
                                      "1.2 ms", "1.4 ms", "1.6 ms", "1.8 ms"}));
  // 50 us steps: below a tenth of a ms, so in us.
  const auto us = time_ticks(TimeAxis::fit(0, 6e5, 1200), 90);
  ASSERT_EQ(us.size(), 13u);
  EXPECT_EQ(us[1].label, "50 us");
  EXPECT_EQ(us[10].label, "500 us");
  EXPECT_EQ(us[12].label, "600 us");
  // 2 s steps.
  EXPECT_EQ(labels(time_ticks(TimeAxis::fit(0, 10e9, 500), 90)),
            (std::vector<std::string>{"0 s", "2 s", "4 s", "6 s", "8 s", "10 s"}));
  // 20 ns steps in a window that does not start on a tick.
  const auto ns = time_ticks(TimeAxis{95.0, 205.0, 500.0}, 90);
  EXPECT_EQ(labels(ns),
            (std::vector<std::string>{"100 ns", "120 ns", "140 ns", "160 ns", "180 ns", "200 ns"}));
  EXPECT_DOUBLE_EQ(ns[0].x, 5 / 110.0 * 500);
  EXPECT_EQ(labels(time_ticks(TimeAxis{0.0, 100.0, 500.0}, 90)),
            (std::vector<std::string>{"0 ns", "20 ns", "40 ns", "60 ns", "80 ns", "100 ns"}));
  // 1 ns steps at the minimum span.
  EXPECT_EQ(time_ticks(TimeAxis::fit(0, 10, 1000), 90).size(), 11u);
}

TEST(TimeTicks, ZeroHasNoSign) {
  // 0.1 us steps over a window that starts before zero.
  EXPECT_EQ(labels(time_ticks(TimeAxis{-150.0, 250.0, 400.0}, 90)),
            (std::vector<std::string>{"-0.1 us", "0.0 us", "0.1 us", "0.2 us"}));
  // A window starting less than a step before zero: the first tick index is
  // ceil(-0.5) = -0.0.
  EXPECT_EQ(labels(time_ticks(TimeAxis{-50.0, 350.0, 400.0}, 90)),
            (std::vector<std::string>{"0.0 us", "0.1 us", "0.2 us", "0.3 us"}));
  EXPECT_EQ(labels(time_ticks(TimeAxis{-2e6, 1.5e6, 350}, 90)),
            (std::vector<std::string>{"-2 ms", "-1 ms", "0 ms", "1 ms"}));
}

// The ticks of any axis: inside the window, on multiples of the step, at least
// the spacing apart and no more than width / spacing + 2 of them.
void expect_well_formed(const TimeAxis& a, double spacing) {
  const std::vector<Tick> ticks = time_ticks(a, spacing);
  const double step = tick_step_ns(a, spacing);
  EXPECT_LE(static_cast<double>(ticks.size()), a.width_px / std::max(1.0, spacing) + 2);
  for (std::size_t i = 0; i < ticks.size(); ++i) {
    EXPECT_GE(ticks[i].time_ns, a.start_ns);
    EXPECT_LE(ticks[i].time_ns, a.end_ns);
    EXPECT_EQ(std::fmod(ticks[i].time_ns, step), 0) << ticks[i].time_ns << " / " << step;
    if (i > 0) {
      EXPECT_GE(ticks[i].x - ticks[i - 1].x, std::max(1.0, spacing) * (1 - 1e-12));
    }
  }
}

TEST(TimeTicks, WellFormedAndBoundedInNumber) {
  for (const double span : {10.0, 37.0, 1e3, 7.7e4, 1e6, 2.2e8, 1e9, 5.5e11}) {
    for (const double width : {1.0, 97.0, 1000.0, 3840.0}) {
      for (const double spacing : {0.0, 1.0, 10.0, 90.0, 2000.0}) {
        SCOPED_TRACE(std::to_string(span) + " ns, " + std::to_string(width) + " px, " +
                     std::to_string(spacing) + " px");
        expect_well_formed(TimeAxis{1234.0, 1234.0 + span, width}, spacing);
      }
    }
  }
}

TEST(TimeTicks, DegenerateAxesGiveFewTicksAndEnd) {
  // No width and no span: as 1 px over kMinSpan_ns.
  EXPECT_LE(time_ticks(TimeAxis{0.0, 0.0, 0.0}, 90).size(), 2u);
  EXPECT_LE(time_ticks(TimeAxis{0.0, -50.0, -3.0}, 90).size(), 2u);
  EXPECT_TRUE(time_ticks(TimeAxis{kNaN, kNaN, 100.0}, 90).empty());
  // Far from zero, where adding 1 to a tick index in doubles changes nothing.
  const TimeAxis far{1e17, 1e17 + 1e4, 1000.0};
  EXPECT_LE(time_ticks(far, 1).size(), 1002u);
  EXPECT_EQ(tick_step_ns(far, 1), 10);
}

}  // namespace
}  // namespace pipescope::gui
