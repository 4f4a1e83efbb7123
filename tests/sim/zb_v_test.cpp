// ZB-V (PyTorch's ScheduleZBVZeroBubble): two chunks per device in a V, stage d
// and 2K - 1 - d on device d, PyTorch's op order, the backward split into B and
// W; the step and the peak activation memory against their closed forms.

#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "chunked_fixtures.h"
#include "sim/engine/schedule.h"
#include "sim/engine/simulator.h"
#include "sim_fixtures.h"

namespace pipescope {
namespace {

using testing::staged_text;

// K = 2, M = 4, written out from PyTorch's _calculate_single_rank_operations
// (B is its I, the input gradient).
TEST(ZbV, StagesAndPyTorchOpOrder) {
  const Schedule s = build_zb_v(2, 4, Remat::kNever);
  EXPECT_EQ(s.kind, ScheduleKind::kZbV);
  EXPECT_TRUE(s.split);
  EXPECT_EQ(s.stages, 4);
  EXPECT_EQ(s.chunks, 2);
  ASSERT_EQ(s.devices(), 2);
  EXPECT_EQ(s.stage_device, (std::vector<int>{0, 1, 1, 0}));
  // Device 0: 2K - 1 = 3 forwards of stage 0, K rounds F B W of stage 3, then
  // the steady state, then K rounds of B W of stage 0.
  EXPECT_EQ(staged_text(s.device_ops[0]),
            "F0.0 F0.1 F0.2 F3.0 B3.0 W3.0 F3.1 B3.1 W3.1 F0.3 B0.0 W0.0 F3.2 B3.2 W3.2 "
            "B0.1 W0.1 F3.3 B3.3 W3.3 B0.2 W0.2 B0.3 W0.3 O0 O3");
  // Device 1: one forward of stage 1, one pair (F2, F1), one round F B W of
  // stage 2, the steady state, then one pair of B with their W held back.
  EXPECT_EQ(staged_text(s.device_ops[1]),
            "F1.0 F2.0 F1.1 F2.1 B2.0 W2.0 F1.2 B1.0 W1.0 F2.2 B2.1 W2.1 F1.3 B1.1 W1.1 "
            "F2.3 B2.2 W2.2 B1.2 B2.3 B1.3 W1.2 W2.3 W1.3 O1 O2");
  EXPECT_EQ(build_schedule(ScheduleKind::kZbV, 2, 4, Remat::kNever, 2).device_ops, s.device_ops);
}

// M below 2K - 1: PyTorch writes the order for 2K - 1 micro-batches and drops
// the ops of the missing ones; remat puts R before each B.
TEST(ZbV, FewMicroBatchesDropTheMissingOnes) {
  const Schedule s = build_zb_v(2, 1, Remat::kAlways);
  EXPECT_EQ(staged_text(s.device_ops[0]), "F0.0 F3.0 R3.0 B3.0 W3.0 R0.0 B0.0 W0.0 O0 O3");
  EXPECT_EQ(staged_text(s.device_ops[1]), "F1.0 F2.0 R2.0 B2.0 W2.0 R1.0 B1.0 W1.0 O1 O2");
}

TEST(ZbV, ValidAndRunsForEveryShape) {
  for (int K : {1, 2, 3, 4}) {
    for (int M : {1, 2, 3, 5, 7, 8, 9}) {
      for (const Remat remat : kScheduleRemats) {
        const Schedule s = build_zb_v(K, M, remat);
        EXPECT_EQ(check_schedule(s), "") << K << " " << M;
      }
      // The engine runs it to the end (it names a deadlock).
      const Scenario sc = testing::uniform_scenario(2 * K, K, 1000.0, M, M, false);
      SimConfig config;
      config.schedule = ScheduleKind::kZbV;
      EXPECT_GT(simulate(sc, config).metrics.step_time, 0) << K << " " << M;
    }
  }
}

TEST(ZbV, ShapeRules) {
  EXPECT_EQ(stage_device_of(ScheduleKind::kZbV, 0, 3), 0);
  EXPECT_EQ(stage_device_of(ScheduleKind::kZbV, 2, 3), 2);
  EXPECT_EQ(stage_device_of(ScheduleKind::kZbV, 3, 3), 2);
  EXPECT_EQ(stage_device_of(ScheduleKind::kZbV, 5, 3), 0);
  EXPECT_EQ(stage_device_of(ScheduleKind::kInterleaved1F1B, 5, 3), 2);
  EXPECT_EQ(schedule_shape_problem(ScheduleKind::kZbV, 4, 3, 2), "");
  EXPECT_EQ(schedule_shape_problem(ScheduleKind::kZbV, 4, 8, 3),
            "zb-v runs exactly 2 chunks per device (its V, as PyTorch's ScheduleZBVZeroBubble), "
            "got 3");
  EXPECT_THROW(build_schedule(ScheduleKind::kZbV, 4, 8, Remat::kNever, 1), std::invalid_argument);
  EXPECT_EQ(parse_schedule("zb-v"), ScheduleKind::kZbV);
  EXPECT_TRUE(splits_backward(ScheduleKind::kZbV));
  EXPECT_TRUE(takes_chunks(ScheduleKind::kZbV));
}

// Chunks of one layer whose forward takes T = 3,000 ns; the backward 2T, split
// into B = W = T because every layer has parameters.
Scenario uniform(int K, int M) {
  Scenario sc = testing::uniform_scenario(2 * K, K, 1000.0, 3 * M, M, false);
  for (LayerSpec& l : sc.model.layers) l.params = 1;
  return sc;
}

using testing::KxM;

class ZbVClosedForm : public ::testing::TestWithParam<KxM> {};

// T_F = T_B = T_W = T per chunk, no communication, M >= 2K - 1 (PyTorch's
// least for a full pipeline): a device's work is
// 6MT. Device K - 1 cannot start before the first micro-batch has crossed K - 1
// devices, (K - 1) T; under ZB-V it then never waits, and no device ends later,
// so the step is 6MT + (K - 1) T: that start-up is all the bubble, a sixth of
// 1F1B's 6 (K - 1) T on the same devices and half of ZB-H1's 2 (K - 1) T.
TEST_P(ZbVClosedForm, StepIsWorkPlusStartUp) {
  const auto [K, M] = GetParam();
  const Scenario sc = uniform(K, M);
  const SimTime T = 1000 * 3;
  SimConfig config;
  config.schedule = ScheduleKind::kZbV;
  const SimResult zbv = simulate(sc, config);
  EXPECT_EQ(zbv.schedule, ScheduleKind::kZbV);
  EXPECT_EQ(zbv.chunks, 2);
  EXPECT_EQ(zbv.metrics.step_time, 6 * M * T + (K - 1) * T);
  config.schedule = ScheduleKind::k1F1B;
  const SimResult one = simulate(sc, config);
  EXPECT_EQ(one.metrics.step_time, (M + K - 1) * 6 * T);
  EXPECT_EQ(6 * (zbv.metrics.step_time - 6 * M * T), one.metrics.step_time - 6 * M * T);
}

// Without remat a chunk micro-batch's stash lives from its F to its W: every
// device holds at most 2K of them, K micro-batches of its two-chunk share,
// 1F1B's peak on the same K devices (its first stage's).
TEST_P(ZbVClosedForm, PeakMemoryIs1F1BPeak) {
  const auto [K, M] = GetParam();
  Scenario sc = uniform(K, M);
  for (LayerSpec& l : sc.model.layers) l.stash_bytes = 100;  // per sample
  const Bytes stash = 100 * 3;                               // a chunk, a micro-batch
  SimConfig config;
  config.schedule = ScheduleKind::kZbV;
  const SimResult zbv = simulate(sc, config);
  config.schedule = ScheduleKind::k1F1B;
  const SimResult one = simulate(sc, config);
  ASSERT_EQ(zbv.metrics.devices.size(), static_cast<std::size_t>(K));
  for (int d = 0; d < K; ++d) {
    EXPECT_EQ(zbv.metrics.devices[static_cast<std::size_t>(d)].peak_memory, 2 * K * stash)
        << "device " << d;
  }
  EXPECT_EQ(zbv.metrics.devices[0].peak_memory, one.metrics.devices[0].peak_memory);
}

INSTANTIATE_TEST_SUITE_P(KxM, ZbVClosedForm,
                         ::testing::Values(KxM{1, 1}, KxM{1, 5}, KxM{2, 3}, KxM{2, 4}, KxM{2, 9},
                                           KxM{3, 5}, KxM{3, 6}, KxM{4, 8}, KxM{4, 16}, KxM{8, 15},
                                           KxM{8, 40}),
                         testing::kxm_name);

}  // namespace
}  // namespace pipescope
