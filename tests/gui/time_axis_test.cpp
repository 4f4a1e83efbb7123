// The timeline's time-to-pixel geometry, without a display.

#include "gui/time_axis.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace pipescope::gui {
namespace {

TEST(TimeAxis, MapsTimesToPixelsAndBack) {
  const TimeAxis a{1000.0, 3000.0, 500.0};
  EXPECT_DOUBLE_EQ(a.x_of(1000), 0);
  EXPECT_DOUBLE_EQ(a.x_of(3000), 500);
  EXPECT_DOUBLE_EQ(a.x_of(2000), 250);
  EXPECT_DOUBLE_EQ(a.t_of(125), 1500);
  for (const double x : {0.0, 1.0, 123.5, 499.0, 500.0}) EXPECT_DOUBLE_EQ(a.x_of(a.t_of(x)), x);
}

TEST(TimeAxis, FitGuardsDegenerateInput) {
  const TimeAxis a = TimeAxis::fit(50, 50, 0);
  EXPECT_EQ(a.start_ns, 50);
  EXPECT_EQ(a.end_ns, 50 + kMinSpan_ns);
  EXPECT_EQ(a.width_px, 1);
}

TEST(TimeAxis, ZoomKeepsTheTimeUnderTheCursor) {
  const TimeAxis a = TimeAxis::fit(0, 1e6, 1000);
  const double anchor = a.t_of(300);
  const TimeAxis z = a.zoomed(4, 300, 0, 1e6);
  EXPECT_NEAR(z.span_ns(), 2.5e5, 1e-6);
  EXPECT_NEAR(z.t_of(300), anchor, 1e-6);
  // Zooming back out by the same factor returns to the whole range.
  const TimeAxis back = z.zoomed(0.25, 300, 0, 1e6);
  EXPECT_NEAR(back.start_ns, 0, 1e-6);
  EXPECT_NEAR(back.end_ns, 1e6, 1e-6);
}

TEST(TimeAxis, ZoomStaysInsideTheRangeAndAboveTheMinimumSpan) {
  const TimeAxis a = TimeAxis::fit(0, 1e6, 1000);
  // Zooming in near the left edge cannot start before 0.
  const TimeAxis left = a.zoomed(10, 0, 0, 1e6);
  EXPECT_EQ(left.start_ns, 0);
  EXPECT_NEAR(left.span_ns(), 1e5, 1e-6);
  // Zooming out never exceeds the full range.
  const TimeAxis out = left.zoomed(0.001, 500, 0, 1e6);
  EXPECT_EQ(out.start_ns, 0);
  EXPECT_EQ(out.end_ns, 1e6);
  // Far in: the span stops at kMinSpan_ns.
  const TimeAxis in = a.zoomed(1e12, 500, 0, 1e6);
  EXPECT_DOUBLE_EQ(in.span_ns(), kMinSpan_ns);
  // A zero or negative factor changes nothing.
  EXPECT_EQ(a.zoomed(0, 10, 0, 1e6).span_ns(), a.span_ns());
  EXPECT_EQ(a.zoomed(-2, 10, 0, 1e6).start_ns, a.start_ns);
}

TEST(TimeAxis, PanMovesByPixelsAndStopsAtTheEnds) {
  const TimeAxis a{100.0, 200.0, 100.0};  // 1 ns per pixel in a range 0..1000
  const TimeAxis p = a.panned(30, 0, 1000);
  EXPECT_DOUBLE_EQ(p.start_ns, 130);
  EXPECT_DOUBLE_EQ(p.end_ns, 230);
  EXPECT_DOUBLE_EQ(a.panned(-500, 0, 1000).start_ns, 0);
  EXPECT_DOUBLE_EQ(a.panned(5000, 0, 1000).end_ns, 1000);
  EXPECT_DOUBLE_EQ(a.panned(5000, 0, 1000).span_ns(), 100);
}

TEST(TimeAxis, RubberBandSelectsTheWindowBetweenTwoPixels) {
  const TimeAxis a = TimeAxis::fit(0, 1000, 100);  // 10 ns per pixel
  const TimeAxis s = a.selected(60, 20, 0, 1000);  // either order
  EXPECT_DOUBLE_EQ(s.start_ns, 200);
  EXPECT_DOUBLE_EQ(s.end_ns, 600);
  EXPECT_DOUBLE_EQ(s.width_px, 100);
  // A band thinner than the minimum span widens about its middle.
  const TimeAxis thin = a.selected(50, 50.1, 0, 1000);
  EXPECT_DOUBLE_EQ(thin.span_ns(), kMinSpan_ns);
  EXPECT_NEAR((thin.start_ns + thin.end_ns) / 2, 500.5, 1e-9);
}

TEST(TimeAxis, ResizeKeepsTheWindow) {
  const TimeAxis a{10.0, 20.0, 100.0};
  const TimeAxis r = a.resized(400);
  EXPECT_EQ(r.start_ns, 10);
  EXPECT_EQ(r.end_ns, 20);
  EXPECT_EQ(r.width_px, 400);
  EXPECT_EQ(a.resized(-3).width_px, 1);
}

std::vector<std::string> labels(const std::vector<Tick>& ticks) {
  std::vector<std::string> out;
  for (const Tick& t : ticks) out.push_back(t.label);
  return out;
}

TEST(TimeTicks, OneTwoFiveStepsInOneUnit) {
  // 10 ms over 1000 px, ticks at least 90 px apart: 0.9 ms -> 1 ms steps.
  const TimeAxis ms = TimeAxis::fit(0, 10e6, 1000);
  EXPECT_DOUBLE_EQ(tick_step_ns(ms, 90), 1e6);
  const auto t = time_ticks(ms, 90);
  ASSERT_EQ(t.size(), 11u);
  EXPECT_EQ(t[0].label, "0 ms");
  EXPECT_EQ(t[3].label, "3 ms");
  EXPECT_EQ(t[10].label, "10 ms");
  EXPECT_DOUBLE_EQ(t[3].x, 300);
  // 1.8 ms over 1000 px at 90 px: 0.162 ms -> 0.2 ms steps, labelled in ms.
  const TimeAxis fine = TimeAxis::fit(0, 1.8e6, 1000);
  EXPECT_DOUBLE_EQ(tick_step_ns(fine, 90), 2e5);
  EXPECT_EQ(labels(time_ticks(fine, 90)),
            (std::vector<std::string>{"0.0 ms", "0.2 ms", "0.4 ms", "0.6 ms", "0.8 ms", "1.0 ms",
                                      "1.2 ms", "1.4 ms", "1.6 ms", "1.8 ms"}));
  // 50 us steps: below a tenth of a ms, so in us.
  const TimeAxis us = TimeAxis::fit(0, 4e5, 800);
  EXPECT_DOUBLE_EQ(tick_step_ns(us, 90), 5e4);
  EXPECT_EQ(time_ticks(us, 90)[1].label, "50 us");
  // 5-steps and seconds.
  const TimeAxis s = TimeAxis::fit(0, 30e9, 600);
  EXPECT_DOUBLE_EQ(tick_step_ns(s, 90), 5e9);
  EXPECT_EQ(labels(time_ticks(s, 90)),
            (std::vector<std::string>{"0 s", "5 s", "10 s", "15 s", "20 s", "25 s", "30 s"}));
  // Nanoseconds, and a window that does not start at zero.
  const TimeAxis ns = TimeAxis{95.0, 205.0, 500.0};
  EXPECT_DOUBLE_EQ(tick_step_ns(ns, 90), 20);
  EXPECT_EQ(labels(time_ticks(ns, 90)),
            (std::vector<std::string>{"100 ns", "120 ns", "140 ns", "160 ns", "180 ns", "200 ns"}));
}

TEST(TimeTicks, DecimalsOnlyWhereTheStepNeedsThem) {
  // 2.5 s over 1000 px at 90 px: 0.225 s -> 0.5 s steps.
  const TimeAxis a = TimeAxis::fit(0, 2.5e9, 1000);
  EXPECT_EQ(labels(time_ticks(a, 90)),
            (std::vector<std::string>{"0.0 s", "0.5 s", "1.0 s", "1.5 s", "2.0 s", "2.5 s"}));
}

TEST(TimeTicks, BoundedInNumber) {
  const TimeAxis a = TimeAxis::fit(0, 1e9, 1000);
  for (const double spacing : {0.0, 1.0, 10.0, 90.0, 2000.0}) {
    EXPECT_LE(static_cast<double>(time_ticks(a, spacing).size()), 1000 / std::max(1.0, spacing) + 2)
        << spacing;
  }
}

TEST(ZoomStack, PopsInReverseOrderAndResets) {
  ZoomStack z;
  EXPECT_FALSE(z.pop());
  z.push(TimeAxis{0, 10, 1});
  z.push(TimeAxis{2, 8, 1});
  EXPECT_EQ(z.size(), 2u);
  EXPECT_EQ(z.pop()->start_ns, 2);
  EXPECT_EQ(z.pop()->start_ns, 0);
  EXPECT_FALSE(z.pop());
  z.push(TimeAxis{0, 10, 1});
  z.reset();
  EXPECT_EQ(z.size(), 0u);
}

}  // namespace
}  // namespace pipescope::gui
