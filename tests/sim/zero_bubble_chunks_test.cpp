// Interleaved zero bubble (PyTorch's ScheduleInterleavedZeroBubble) and
// DualPipeV (PyTorch's ScheduleDualPipeV): PyTorch's op orders, the shape
// rules, and the step and peak activation memory against their closed forms.

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "chunked_fixtures.h"
#include "sim/engine/schedule.h"
#include "sim/engine/simulator.h"
#include "sim_fixtures.h"

namespace pipescope {
namespace {

using testing::KxM;
using testing::KxVxM;
using testing::staged_text;

// K = 2, v = 2, M = 2 (one round of two), written out from PyTorch's
// _calculate_single_rank_operations (B is its I, the input gradient).
TEST(InterleavedZb, StagesAndPyTorchOpOrder) {
  const Schedule s = build_interleaved_zb(2, 2, 2, Remat::kNever);
  EXPECT_EQ(s.kind, ScheduleKind::kInterleavedZb);
  EXPECT_TRUE(s.split);
  EXPECT_EQ(s.stages, 4);
  EXPECT_EQ(s.stage_device, (std::vector<int>{0, 1, 0, 1}));
  // Device 0: (v - 1) M / R + K - 1 = 3 warm-up forwards, then F and B each
  // followed by the oldest W, then B and W.
  EXPECT_EQ(staged_text(s.device_ops[0]),
            "F0.0 F0.1 F2.0 F2.1 B2.0 W2.0 B2.1 W2.1 B0.0 W0.0 B0.1 W0.1 O0 O2");
  // Device 1: 2 warm-up forwards; its first W waits one B (d = 1).
  EXPECT_EQ(staged_text(s.device_ops[1]),
            "F1.0 F1.1 F3.0 B3.0 F3.1 B3.1 W3.0 B1.0 W3.1 B1.1 W1.0 W1.1 O1 O3");
  EXPECT_EQ(build_schedule(ScheduleKind::kInterleavedZb, 2, 2, Remat::kNever, 2).device_ops,
            s.device_ops);
}

TEST(InterleavedZb, ShapeRules) {
  EXPECT_EQ(schedule_shape_problem(ScheduleKind::kInterleavedZb, 4, 6, 3), "");   // 1 round of 6
  EXPECT_EQ(schedule_shape_problem(ScheduleKind::kInterleavedZb, 4, 10, 2), "");  // 2 of 5
  EXPECT_EQ(schedule_shape_problem(ScheduleKind::kInterleavedZb, 4, 9, 2),
            "interleaved-zb needs M to be a multiple of its rounds, max(1, M / K) (as "
            "PyTorch's ScheduleInterleavedZeroBubble): M=9, K=4, rounds 2");
  EXPECT_THROW(build_schedule(ScheduleKind::kInterleavedZb, 4, 9, Remat::kNever, 2),
               std::invalid_argument);
  EXPECT_EQ(stage_device_of(ScheduleKind::kInterleavedZb, 5, 3), 2);
  EXPECT_EQ(parse_schedule("interleaved-zb"), ScheduleKind::kInterleavedZb);
  EXPECT_TRUE(splits_backward(ScheduleKind::kInterleavedZb));
  EXPECT_TRUE(takes_chunks(ScheduleKind::kInterleavedZb));
  EXPECT_FALSE(v_shaped(ScheduleKind::kInterleavedZb));
}

// K = 2, M = 4, written out from PyTorch's _calculate_single_rank_operations:
// a whole backward is B then its W.
TEST(DualPipeV, StagesAndPyTorchOpOrder) {
  const Schedule s = build_dualpipe_v(2, 4, Remat::kNever);
  EXPECT_EQ(s.kind, ScheduleKind::kDualPipeV);
  EXPECT_TRUE(s.split);
  EXPECT_EQ(s.stage_device, (std::vector<int>{0, 1, 1, 0}));
  // Device 0: 2 forwards of stage 0, one pair, one round B3 W F3, one DualPipe
  // round (F0 paired with a whole B3, F3 with a whole B0), one of whole B3 and
  // F3 paired with a whole B0, one pair of whole backwards, one round W owed
  // and B0.
  EXPECT_EQ(staged_text(s.device_ops[0]),
            "F0.0 F0.1 F0.2 F3.0 B3.0 W3.0 F3.1 F0.3+ B3.1+ W3.1 F3.2+ B0.0+ W0.0 B3.2 W3.2 F3.3+ "
            "B0.1+ W0.1 B3.3 W3.3 B0.2 W0.2 B0.3 W0.3 O0 O3");
  // Device 1: two pairs, F1 and a whole B2 (the last device does not overlap its
  // first), then DualPipe rounds, then two pairs of backwards, the second split
  // (from the middle pair on), their W last.
  EXPECT_EQ(staged_text(s.device_ops[1]),
            "F1.0 F2.0 F1.1 F2.1 F1.2 B2.0 W2.0 F2.2+ B1.0+ W1.0 F1.3+ B2.1+ W2.1 F2.3+ B1.1+ "
            "W1.1 B2.2 W2.2 B1.2 W1.2 B2.3 B1.3 W2.3 W1.3 O1 O2");
}

TEST(DualPipeV, ShapeRules) {
  EXPECT_EQ(schedule_shape_problem(ScheduleKind::kDualPipeV, 4, 8, 2), "");
  EXPECT_EQ(schedule_shape_problem(ScheduleKind::kDualPipeV, 4, 7, 2),
            "dualpipe-v needs M >= 2K, its stage count (as PyTorch's ScheduleDualPipeV): M=7, K=4");
  EXPECT_EQ(schedule_shape_problem(ScheduleKind::kDualPipeV, 4, 8, 3),
            "dualpipe-v runs exactly 2 chunks per device (its V, as PyTorch's ScheduleDualPipeV), "
            "got 3");
  EXPECT_EQ(stage_device_of(ScheduleKind::kDualPipeV, 5, 3), 0);
  EXPECT_EQ(parse_schedule("dualpipe-v"), ScheduleKind::kDualPipeV);
  EXPECT_TRUE(v_shaped(ScheduleKind::kDualPipeV));
}

TEST(ZeroBubbleChunks, ValidAndRunForEveryShape) {
  for (int K : {1, 2, 3, 4}) {
    for (int M : {1, 2, 3, 4, 6, 8, 9, 12}) {
      for (const ScheduleKind kind : {ScheduleKind::kInterleavedZb, ScheduleKind::kDualPipeV}) {
        for (int v : {1, 2, 3}) {
          if (!schedule_shape_problem(kind, K, M, v).empty()) continue;
          for (const Remat remat : kScheduleRemats) {
            EXPECT_EQ(check_schedule(build_schedule(kind, K, M, remat, v)), "")
                << to_string(kind) << " K=" << K << " M=" << M << " v=" << v;
          }
          // The engine runs it to the end (it names a deadlock).
          const Scenario sc = testing::uniform_scenario(v * K, K, 1000.0, M, M, false);
          SimConfig config;
          config.schedule = kind;
          config.chunks = v;
          EXPECT_GT(simulate(sc, config).metrics.step_time, 0)
              << to_string(kind) << " K=" << K << " M=" << M << " v=" << v;
        }
      }
    }
  }
}

// Chunks of one layer whose forward takes T = 3,000 ns; the backward 2T, split
// into B = W = T because every layer has parameters; 100 stash bytes a sample.
Scenario uniform(int stages, int K, int M) {
  Scenario sc = testing::uniform_scenario(stages, K, 1000.0, 3 * M, M, false);
  for (LayerSpec& l : sc.model.layers) {
    l.params = 1;
    l.stash_bytes = 100;
  }
  return sc;
}
constexpr SimTime T = 1000 * 3;
constexpr Bytes kStash = 100 * 3;  // a chunk's stash of one micro-batch

class InterleavedZbClosedForm : public ::testing::TestWithParam<KxVxM> {};

// T_F = T_B = T_W = T per chunk, no communication, M a multiple of K: a device's
// work is 3vMT, and the step is that and (K - 1) T, the start-up of the last
// device, ZB-H1's bubble (K - 1) (T_F + T_B - T_W) at a chunk's scale: 1/v of
// ZB-H1's on the same devices.
TEST_P(InterleavedZbClosedForm, StepIsWorkPlusStartUp) {
  const auto [K, v, M] = GetParam();
  const Scenario sc = uniform(K * v, K, M);
  SimConfig config;
  config.schedule = ScheduleKind::kInterleavedZb;
  config.chunks = v;
  const SimResult izb = simulate(sc, config);
  EXPECT_EQ(izb.chunks, v);
  EXPECT_EQ(izb.metrics.step_time, 3 * v * M * T + (K - 1) * T);
  config.schedule = ScheduleKind::kZbH1;
  config.chunks = 1;
  const SimResult zbh1 = simulate(sc, config);
  EXPECT_EQ(zbh1.metrics.step_time - 3 * v * M * T, v * (K - 1) * T);
}

// Without remat a chunk micro-batch's stash lives from its F to its W: a device
// holds at most its warm-up's forwards, (v - 1) M / R + K - 1 - d, and the d + 1
// whose W the schedule defers: (v - 1) K + K chunk micro-batches when M is a
// multiple of K (M / R = K), on every device.
TEST_P(InterleavedZbClosedForm, PeakMemoryIsWarmUpAndDeferredW) {
  const auto [K, v, M] = GetParam();
  const Scenario sc = uniform(K * v, K, M);
  SimConfig config;
  config.schedule = ScheduleKind::kInterleavedZb;
  config.chunks = v;
  const SimResult izb = simulate(sc, config);
  const int held = std::min(v * K, v * M);
  for (int d = 0; d < K; ++d) {
    EXPECT_EQ(izb.metrics.devices[static_cast<std::size_t>(d)].peak_memory, held * kStash)
        << "device " << d;
  }
  EXPECT_EQ(most_stashes_held(build_interleaved_zb(K, M, v, Remat::kNever)), held);
}

INSTANTIATE_TEST_SUITE_P(KxVxM, InterleavedZbClosedForm,
                         ::testing::Values(KxVxM{1, 2, 3}, KxVxM{2, 2, 2}, KxVxM{2, 2, 4},
                                           KxVxM{2, 3, 8}, KxVxM{3, 2, 6}, KxVxM{4, 2, 8},
                                           KxVxM{4, 3, 16}, KxVxM{8, 2, 16}, KxVxM{8, 4, 32}),
                         testing::kxvxm_name);

class DualPipeVClosedForm : public ::testing::TestWithParam<KxM> {};

// T_F = T_B = T_W = T per chunk, no communication, M >= 2K: a device's work is
// 6MT; DualPipe's published bubble (PP/2 - 1) (F&B + B - 3W) with PP = 2K
// stages, B the whole backward (2T) and F&B = F + B = 3T (the pair runs one op
// after the other: there is no expert all-to-all to hide here) is 2 (K - 1) T.
TEST_P(DualPipeVClosedForm, StepIsWorkPlusPublishedBubble) {
  const auto [K, M] = GetParam();
  const Scenario sc = uniform(2 * K, K, M);
  SimConfig config;
  config.schedule = ScheduleKind::kDualPipeV;
  const SimResult dpv = simulate(sc, config);
  EXPECT_EQ(dpv.chunks, 2);
  const SimTime F = T, B = 2 * T, W = T;
  EXPECT_EQ(dpv.metrics.step_time, 6 * M * T + (2 * K / 2 - 1) * ((F + B) + B - 3 * W));
}

// The published activation memory: PP + 1 = 2K + 1 chunk micro-batches on a
// device at most (on device 0, whose warm-up is the longest).
TEST_P(DualPipeVClosedForm, PeakMemoryIsPublishedActivation) {
  const auto [K, M] = GetParam();
  const Scenario sc = uniform(2 * K, K, M);
  SimConfig config;
  config.schedule = ScheduleKind::kDualPipeV;
  const SimResult dpv = simulate(sc, config);
  Bytes peak = 0;
  for (const DeviceMetrics& d : dpv.metrics.devices) peak = std::max(peak, d.peak_memory);
  EXPECT_EQ(peak, (2 * K + 1) * kStash);
  EXPECT_EQ(dpv.metrics.devices[0].peak_memory, peak);
  EXPECT_EQ(most_stashes_held(build_dualpipe_v(K, M, Remat::kNever)), 2 * K + 1);
}

INSTANTIATE_TEST_SUITE_P(KxM, DualPipeVClosedForm,
                         ::testing::Values(KxM{1, 2}, KxM{1, 5}, KxM{2, 4}, KxM{2, 9}, KxM{3, 6},
                                           KxM{4, 8}, KxM{4, 16}, KxM{8, 16}, KxM{8, 40}),
                         testing::kxm_name);

}  // namespace
}  // namespace pipescope
