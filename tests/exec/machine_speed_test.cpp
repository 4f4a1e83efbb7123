#include "exec/machine_speed.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "exec/affinity.h"

namespace pipescope::exec {
namespace {

TEST(MachineSpeed, TheSpreadIsACoresSlowestTimeOverItsFastestOverTheChecks) {
  // Two cores, three checks: the second core slows by half in the middle.
  EXPECT_NEAR(speed_spread({{1.0, 1.02}, {1.0, 1.53}, {1.01, 1.02}}), 0.5, 1e-12);
  // One core at two speeds between the checks.
  EXPECT_NEAR(speed_spread({{2.0}, {2.0}, {2.6}}), 0.3, 1e-12);
  // Two cores of different but steady speeds: no spread.
  EXPECT_DOUBLE_EQ(speed_spread({{1.0, 2.0}, {1.0, 2.0}}), 0.0);
  EXPECT_DOUBLE_EQ(speed_spread({{3.0, 1.0}}), 0.0);
  EXPECT_DOUBLE_EQ(speed_spread({}), 0.0);
  EXPECT_THROW(speed_spread({{1.0}, {0.0}}), std::invalid_argument);
}

TEST(MachineSpeed, EachStepsSpeedIsSetAgainstTheProfiles) {
  // Two profile checks, then five steps; the core slows to 1.4 after the
  // second step and is back before the fifth ends.
  const std::vector<std::vector<double>> checks{{1.0}, {1.02}, {1.01}, {1.0},
                                                {1.4}, {1.41}, {1.03}};
  const std::vector<double> s = step_speed_spreads(checks, 2);
  ASSERT_EQ(s.size(), 5u);
  EXPECT_NEAR(s[0], 0.02, 1e-12);  // between 1.02 and 1.01, the profile 1.0-1.02
  EXPECT_NEAR(s[1], 0.02, 1e-12);
  EXPECT_NEAR(s[2], 0.4, 1e-12);  // ends slow
  EXPECT_NEAR(s[3], 0.41, 1e-12);
  EXPECT_NEAR(s[4], 0.41, 1e-12);  // starts slow
  // A profile that saw two speeds puts every step at least as far.
  for (const double f : step_speed_spreads({{1.0}, {1.3}, {1.0}, {1.0}}, 2)) {
    EXPECT_NEAR(f, 0.3, 1e-12);
  }
  // Two cores of different steady speeds.
  EXPECT_EQ(step_speed_spreads({{1.0, 2.0}, {1.0, 2.0}, {1.0, 2.0}}, 1),
            (std::vector<double>{0.0, 0.0}));
  EXPECT_THROW(step_speed_spreads(checks, 0), std::invalid_argument);
  EXPECT_THROW(step_speed_spreads(checks, 8), std::invalid_argument);
}

TEST(MachineSpeed, AMeasurementAtTwoSpeedsIsDiscardedHoweverLittleElseRan) {
  // Within the spread: the share other work took, as before.
  EXPECT_DOUBLE_EQ(speed_checked_disturbance(0.02, 0.05), 0.02);
  EXPECT_DOUBLE_EQ(speed_checked_disturbance(0.02, kDiscardSpeedSpreadAbove), 0.02);
  // Beyond it: above any share, ordered by the spread.
  EXPECT_DOUBLE_EQ(speed_checked_disturbance(0.0, 0.4), 1.4);
  EXPECT_LT(speed_checked_disturbance(0.3, 0.2), speed_checked_disturbance(0.0, 0.4));
}

TEST(MachineSpeed, TheReferenceWorkIsTimedOnEachCoreARunOfThatManyThreadsUses) {
  const std::size_t allowed = std::max<std::size_t>(1, allowed_cpus().size());
  const std::vector<double> one = reference_times(1);
  ASSERT_EQ(one.size(), 1u);
  const std::vector<double> all = reference_times(static_cast<int>(allowed) + 3);
  ASSERT_EQ(all.size(), allowed);
  for (const double t : all) {
    // 192^3 multiply-adds: above 10 us (over 1.4 TFLOP/s on one core is not
    // this product) and below a second.
    EXPECT_GT(t, 1e-5);
    EXPECT_LT(t, 1.0);
  }
}

}  // namespace
}  // namespace pipescope::exec
