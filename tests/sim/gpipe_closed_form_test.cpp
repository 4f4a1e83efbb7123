// GPipe's closed forms (docs/schedules.md, "What the tests hold the schedules to"):
// K equal stages, no communication or overhead, no remat: step = (M + K - 1)(t_f +
// t_b), bubble = (K - 1) / (M + K - 1). With remat each stage adds one forward per
// micro-batch; the first recompute of every stage overlaps the wait for gradients,
// which gives step = (M+K-1)(t_f+t_b) + M t_r.

#include <gtest/gtest.h>

#include "sim/engine/simulator.h"
#include "sim_fixtures.h"

namespace pipescope {
namespace {

using testing::KxM;

class GpipeClosedForm : public ::testing::TestWithParam<KxM> {};

TEST_P(GpipeClosedForm, StepAndBubbleWithoutRemat) {
  const auto [K, M] = GetParam();
  // Two layers per stage of 1000 FLOPs per sample; micro-batch of 3 samples.
  const Scenario sc = testing::uniform_scenario(2 * K, K, 1000.0, 3 * M, M, false);
  const SimResult r = simulate(sc, SimConfig{});
  const SimTime tf = 2 * 1000 * 3;  // ns
  const SimTime tb = 2 * tf;
  EXPECT_EQ(r.stage_costs[0].forward, tf);
  EXPECT_EQ(r.stage_costs[0].backward, tb);
  EXPECT_EQ(r.metrics.step_time, (M + K - 1) * (tf + tb));
  EXPECT_EQ(r.metrics.bubble_fraction, static_cast<double>(K - 1) / (M + K - 1));
  for (const DeviceMetrics& d : r.metrics.devices) {
    EXPECT_EQ(d.busy, M * (tf + tb));
    EXPECT_EQ(d.bubble_fraction, static_cast<double>(K - 1) / (M + K - 1));
  }
  EXPECT_EQ(r.metrics.recompute_time, 0);
}

TEST_P(GpipeClosedForm, RematAddsOneForwardPerMicroBatch) {
  const auto [K, M] = GetParam();
  const Scenario sc = testing::uniform_scenario(2 * K, K, 1000.0, 3 * M, M, true);
  const SimResult r = simulate(sc, SimConfig{});
  const SimTime tf = 6000;
  const SimTime tb = 2 * tf;
  const SimTime tr = tf;
  EXPECT_EQ(r.stage_costs[0].recompute, tr);
  EXPECT_EQ(r.metrics.step_time, (M + K - 1) * (tf + tb) + M * tr);
  EXPECT_EQ(r.metrics.recompute_time, K * M * tr);
  for (const DeviceMetrics& d : r.metrics.devices) EXPECT_EQ(d.busy, M * (tf + tb + tr));
}

INSTANTIATE_TEST_SUITE_P(KxM, GpipeClosedForm,
                         ::testing::Values(KxM{1, 1}, KxM{1, 8}, KxM{2, 1}, KxM{2, 4}, KxM{4, 4},
                                           KxM{4, 16}, KxM{8, 1}, KxM{8, 32}, KxM{3, 7}),
                         testing::kxm_name);

TEST(GpipeClosedForm, BubbleIsNegligibleWhenMIsFourTimesK) {
  // The paper's rule of thumb: at M = 4K the bubble is (K-1)/(5K-1) < 20 %.
  const Scenario sc = testing::uniform_scenario(8, 8, 1000.0, 32, 32, false);
  const SimResult r = simulate(sc, SimConfig{});
  EXPECT_DOUBLE_EQ(r.metrics.bubble_fraction, 7.0 / 39.0);
}

TEST(GpipeClosedForm, OverridesFromConfigWin) {
  const Scenario sc = testing::uniform_scenario(8, 8, 1000.0, 32, 32, false);
  SimConfig cfg;
  cfg.stages = 2;
  cfg.micro_batches = 4;
  const SimResult r = simulate(sc, cfg);
  EXPECT_EQ(r.stages, 2);
  EXPECT_EQ(r.micro_batches, 4);
  EXPECT_EQ(r.micro_batch_size, 8);
  const SimTime tf = 4 * 1000 * 8;
  EXPECT_EQ(r.metrics.step_time, (4 + 2 - 1) * 3 * tf);
}

TEST(SimConfigErrors, RejectsImpossibleChoices) {
  const Scenario sc = testing::uniform_scenario(4, 4, 1000.0, 8, 2, false);
  SimConfig too_many_stages;
  too_many_stages.stages = 5;
  EXPECT_THROW(simulate(sc, too_many_stages), ConfigError);
  SimConfig bad_m;
  bad_m.micro_batches = 3;
  try {
    simulate(sc, bad_m);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "M=3 does not divide the global batch of 8");
  }
  Scenario small_cluster = sc;
  small_cluster.cluster.devices = 2;
  SimConfig four;
  four.stages = 4;
  try {
    simulate(small_cluster, four);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "K=4 is more stages than the cluster's 2 devices");
  }
}

}  // namespace
}  // namespace pipescope
