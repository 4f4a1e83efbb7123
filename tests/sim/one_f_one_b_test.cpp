// 1F1B (PipeDream-Flush, Narayanan et al. 2021): the op order, at most K - s
// micro-batches in flight on stage s, GPipe's bubble with equal stages, and
// activation memory that stops growing with M.

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "sim/engine/schedule.h"
#include "sim/engine/simulator.h"
#include "sim_fixtures.h"

namespace pipescope {
namespace {

using testing::ops_text;

TEST(OneFOneB, WarmUpSteadyStateCoolDown) {
  const Schedule s = build_1f1b(3, 4, Remat::kNever);
  EXPECT_EQ(s.kind, ScheduleKind::k1F1B);
  ASSERT_EQ(s.devices(), 3);
  EXPECT_EQ(ops_text(s.device_ops[0]), "F0 F1 F2 B0 F3 B1 B2 B3 O");
  EXPECT_EQ(ops_text(s.device_ops[1]), "F0 F1 B0 F2 B1 F3 B2 B3 O");
  EXPECT_EQ(ops_text(s.device_ops[2]), "F0 B0 F1 B1 F2 B2 F3 B3 O");
  EXPECT_EQ(ops_text(build_1f1b(2, 3, Remat::kAlways).device_ops[0]),
            "F0 F1 R0 B0 F2 R1 B1 R2 B2 O");
  // Fewer micro-batches than stages: the warm-up is cut to M.
  EXPECT_EQ(ops_text(build_1f1b(4, 2, Remat::kNever).device_ops[0]), "F0 F1 B0 B1 O");
}

TEST(OneFOneB, ValidAndAtMostKMinusSInFlight) {
  for (int K : {1, 2, 3, 4, 8}) {
    for (int M : {1, 2, 3, 8, 17}) {
      for (const Remat remat : kScheduleRemats) {
        const Schedule s = build_1f1b(K, M, remat);
        EXPECT_EQ(check_schedule(s), "") << K << " " << M;
        for (int st = 0; st < K; ++st) {
          int in_flight = 0, most = 0;
          for (const Op& op : s.device_ops[static_cast<std::size_t>(st)]) {
            if (op.kind == OpKind::kForward) most = std::max(most, ++in_flight);
            if (op.kind == OpKind::kBackward) --in_flight;
          }
          EXPECT_EQ(most, std::min(K - st, M)) << "K=" << K << " M=" << M << " stage " << st;
        }
      }
    }
  }
  EXPECT_EQ(build_schedule(ScheduleKind::k1F1B, 3, 4, Remat::kNever).device_ops,
            build_1f1b(3, 4, Remat::kNever).device_ops);
}

using testing::KxM;

class OneFOneBClosedForm : public ::testing::TestWithParam<KxM> {};

// Equal stages, no communication or overhead: the same step and bubble as GPipe,
// (M + K - 1)(t_f + t_b) and (K - 1) / (M + K - 1).
TEST_P(OneFOneBClosedForm, SameBubbleAsGpipe) {
  const auto [K, M] = GetParam();
  const Scenario sc = testing::uniform_scenario(2 * K, K, 1000.0, 3 * M, M, false);
  SimConfig config;
  config.schedule = ScheduleKind::k1F1B;
  const SimResult r = simulate(sc, config);
  EXPECT_EQ(r.schedule, ScheduleKind::k1F1B);
  const SimTime tf = 2 * 1000 * 3;
  const SimTime tb = 2 * tf;
  EXPECT_EQ(r.metrics.step_time, (M + K - 1) * (tf + tb));
  EXPECT_DOUBLE_EQ(r.metrics.bubble_fraction, static_cast<double>(K - 1) / (M + K - 1));
}

// Without remat a stage holds the stash of every micro-batch in flight: GPipe's
// first stage M of them, 1F1B's min(K, M), and stage s min(K - s, M).
TEST_P(OneFOneBClosedForm, PeakActivationMemoryIsKMicroBatches) {
  const auto [K, M] = GetParam();
  Scenario sc = testing::uniform_scenario(2 * K, K, 1000.0, 3 * M, M, false);
  for (LayerSpec& l : sc.model.layers) l.stash_bytes = 100;  // per sample
  const Bytes stash = 2 * 100 * 3;                           // a stage, a micro-batch
  SimConfig config;
  config.schedule = ScheduleKind::k1F1B;
  const SimResult one = simulate(sc, config);
  config.schedule = ScheduleKind::kGpipe;
  const SimResult gpipe = simulate(sc, config);
  for (int s = 0; s < K; ++s) {
    const auto d = static_cast<std::size_t>(s);
    EXPECT_EQ(one.metrics.devices[d].peak_memory, std::min(K - s, M) * stash) << "stage " << s;
    EXPECT_EQ(gpipe.metrics.devices[d].peak_memory, M * stash) << "stage " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(KxM, OneFOneBClosedForm,
                         ::testing::Values(KxM{1, 1}, KxM{1, 8}, KxM{2, 1}, KxM{2, 4}, KxM{4, 4},
                                           KxM{4, 16}, KxM{8, 1}, KxM{8, 32}, KxM{3, 7}),
                         testing::kxm_name);

// The partitioner knows 1F1B needs less memory: a model whose GPipe cut does not
// fit without remat fits under 1F1B.
TEST(OneFOneB, PartitionerCountsKMicroBatchesInFlight) {
  Scenario sc = testing::uniform_scenario(4, 2, 1000.0, 32, 16, false);
  for (LayerSpec& l : sc.model.layers) l.stash_bytes = 1000;
  // A stage of 2 layers stashes 2 * 1000 * 2 bytes per micro-batch of 2: GPipe
  // holds 16 of them (64,000 B), 1F1B at most 2 (8,000 B).
  sc.cluster.device.memory_bytes = 10'000;
  const AnalyticCostModel cost(sc.cluster.device, sc.model.dtype, sc.training.bytes_per_param);
  EXPECT_GT(
      min_peak_memory(partition_problem(sc, cost, 2, 16, Remat::kNever, ScheduleKind::kGpipe)),
      sc.cluster.device.memory_bytes);
  EXPECT_EQ(min_peak_memory(partition_problem(sc, cost, 2, 16, Remat::kNever, ScheduleKind::k1F1B)),
            8'000);
  SimConfig config;
  config.schedule = ScheduleKind::k1F1B;
  EXPECT_TRUE(simulate(sc, config).metrics.fits());
  config.schedule = ScheduleKind::kGpipe;
  EXPECT_FALSE(simulate(sc, config).metrics.fits());
}

}  // namespace
}  // namespace pipescope
