// Interleaved 1F1B (Megatron-LM): v chunks per device, stage c K + d on device
// d, Megatron's warm-up and op order, M in PyTorch's rounds, and a bubble 1/v of
// 1F1B's with equal stages.

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

using testing::KxVxM;
using testing::staged_text;

using testing::KxM;

TEST(Interleaved, StagesAndOpOrder) {
  const Schedule s = build_interleaved_1f1b(2, 4, 2, Remat::kNever);
  EXPECT_EQ(s.kind, ScheduleKind::kInterleaved1F1B);
  EXPECT_EQ(s.stages, 4);
  EXPECT_EQ(s.chunks, 2);
  ASSERT_EQ(s.devices(), 2);
  EXPECT_EQ(s.stage_device, (std::vector<int>{0, 1, 0, 1}));
  // Device 0: warm-up 2 (K - 1) + (v - 1) K = 4 forwards, micro-batches in
  // groups of K = 2 per chunk; backwards start with the last chunk.
  EXPECT_EQ(staged_text(s.device_ops[0]),
            "F0.0 F0.1 F2.0 F2.1 F0.2 B2.0 F0.3 B2.1 F2.2 B0.0 F2.3 B0.1 "
            "B2.2 B2.3 B0.2 B0.3 O0 O2");
  // Device 1: warm-up (v - 1) K = 2.
  EXPECT_EQ(staged_text(s.device_ops[1]),
            "F1.0 F1.1 F3.0 B3.0 F3.1 B3.1 F1.2 B1.0 F1.3 B1.1 F3.2 B3.2 F3.3 B3.3 "
            "B1.2 B1.3 O1 O3");
  // M = K: every forward first, as Megatron does.
  EXPECT_EQ(staged_text(build_interleaved_1f1b(2, 2, 2, Remat::kAlways).device_ops[1]),
            "F1.0 F1.1 F3.0 F3.1 R3.0 B3.0 R3.1 B3.1 R1.0 B1.0 R1.1 B1.1 O1 O3");
}

// M that K does not divide, as PyTorch's ScheduleInterleaved1F1B runs it: K = 4,
// M = 6 is one round of 6 micro-batches through each chunk in turn.
TEST(Interleaved, MThatKDoesNotDivideRunsInRoundsOfMOverR) {
  const Schedule s = build_interleaved_1f1b(4, 6, 2, Remat::kNever);
  EXPECT_EQ(check_schedule(s), "");
  // The last device: 6 warm-up forwards of chunk 0, then chunk 1 one forward
  // one backward, then chunk 0's backwards.
  EXPECT_EQ(staged_text(s.device_ops[3]),
            "F3.0 F3.1 F3.2 F3.3 F3.4 F3.5 F7.0 B7.0 F7.1 B7.1 F7.2 B7.2 F7.3 B7.3 F7.4 B7.4 "
            "F7.5 B7.5 B3.0 B3.1 B3.2 B3.3 B3.4 B3.5 O3 O7");
  // Device 1: 2 (K - 1 - 1) + 6 = 10 warm-up forwards.
  EXPECT_EQ(staged_text(s.device_ops[1]),
            "F1.0 F1.1 F1.2 F1.3 F1.4 F1.5 F5.0 F5.1 F5.2 F5.3 F5.4 B5.0 F5.5 B5.1 B5.2 B5.3 "
            "B5.4 B5.5 B1.0 B1.1 B1.2 B1.3 B1.4 B1.5 O1 O5");
  // M = 10 on K = 4: two rounds of 5.
  EXPECT_EQ(staged_text(build_interleaved_1f1b(4, 10, 2, Remat::kNever).device_ops[3]),
            "F3.0 F3.1 F3.2 F3.3 F3.4 F7.0 B7.0 F7.1 B7.1 F7.2 B7.2 F7.3 B7.3 F7.4 B7.4 "
            "F3.5 B3.0 F3.6 B3.1 F3.7 B3.2 F3.8 B3.3 F3.9 B3.4 F7.5 B7.5 F7.6 B7.6 F7.7 B7.7 "
            "F7.8 B7.8 F7.9 B7.9 B3.5 B3.6 B3.7 B3.8 B3.9 O3 O7");
}

TEST(Interleaved, ValidForEveryShape) {
  for (int K : {1, 2, 3, 4}) {
    for (int v : {1, 2, 3, 4}) {
      for (int M = 1; M <= 5 * K; ++M) {
        if (!schedule_shape_problem(ScheduleKind::kInterleaved1F1B, K, M, v).empty()) continue;
        for (const Remat remat : kScheduleRemats) {
          const Schedule s = build_interleaved_1f1b(K, M, v, remat);
          EXPECT_EQ(check_schedule(s), "") << K << " " << v << " " << M;
          EXPECT_EQ(s.stages, K * v);
        }
      }
    }
  }
}

TEST(Interleaved, ShapeRules) {
  EXPECT_EQ(schedule_shape_problem(ScheduleKind::kInterleaved1F1B, 4, 6, 2), "");
  EXPECT_EQ(schedule_shape_problem(ScheduleKind::kInterleaved1F1B, 4, 9, 2),
            "interleaved-1f1b needs M >= K and a multiple of its rounds, max(1, M / K) (what both "
            "PyTorch's ScheduleInterleaved1F1B and Megatron-LM run): M=9, K=4, rounds 2");
  // PyTorch runs M < K in one round; Megatron-LM's groups hold at least K.
  EXPECT_EQ(schedule_shape_problem(ScheduleKind::kInterleaved1F1B, 4, 2, 2),
            "interleaved-1f1b needs M >= K and a multiple of its rounds, max(1, M / K) (what both "
            "PyTorch's ScheduleInterleaved1F1B and Megatron-LM run): M=2, K=4, rounds 1");
  EXPECT_EQ(schedule_shape_problem(ScheduleKind::k1F1B, 4, 8, 2),
            "1f1b runs one chunk per device; 2 chunks need one of interleaved-1f1b, "
            "looped-bfs, zb-v, interleaved-zb, dualpipe-v");
  EXPECT_EQ(schedule_shape_problem(ScheduleKind::kInterleaved1F1B, 4, 8, 0),
            "chunks must be at least 1, got 0");
  EXPECT_EQ(schedule_shape_problem(ScheduleKind::kInterleaved1F1B, 4, 8, 2), "");
  EXPECT_THROW(build_schedule(ScheduleKind::kInterleaved1F1B, 4, 9, Remat::kNever, 2),
               std::invalid_argument);
  EXPECT_THROW(build_schedule(ScheduleKind::kGpipe, 4, 8, Remat::kNever, 2), std::invalid_argument);
}

TEST(Interleaved, SimulatorExplainsBadShapes) {
  const Scenario sc = testing::uniform_scenario(8, 4, 1000.0, 36, 9, false);
  SimConfig config;
  config.schedule = ScheduleKind::kInterleaved1F1B;
  config.chunks = 2;
  try {
    simulate(sc, config);
    FAIL() << "M=9 on K=4 was accepted";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "interleaved-1f1b needs M >= K and a multiple of its rounds, max(1, M / K) (what "
                 "both PyTorch's ScheduleInterleaved1F1B and Megatron-LM run): M=9, K=4, rounds 2");
  }
  config.micro_batches = 8;
  config.chunks = 3;  // 12 stages of 8 layers
  try {
    simulate(sc, config);
    FAIL() << "12 stages of 8 layers were accepted";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "K=4 (the cluster's devices) x 3 chunks is 12 model stages, more than the "
                 "model's 8 layers; choose fewer chunks or a smaller K");
  }
  config.schedule = ScheduleKind::k1F1B;
  config.chunks = 2;
  EXPECT_THROW(simulate(sc, config), ConfigError);
}

class InterleavedClosedForm : public ::testing::TestWithParam<KxVxM> {};

// Equal chunks of t_f = T and t_b = 2T (a device's share is v of them), no
// communication: 1F1B over the same K devices takes (M + K - 1) 3vT, the
// interleaved schedule M 3vT + (K - 1) 3T, so its bubble is 1/v of 1F1B's.
TEST_P(InterleavedClosedForm, BubbleIsOneVthOf1F1B) {
  const auto [K, v, M] = GetParam();
  const Scenario sc = testing::uniform_scenario(K * v, K, 1000.0, 3 * M, M, false);
  const SimTime T = 1000 * 3;  // one layer (a chunk), one micro-batch of 3
  SimConfig config;
  config.schedule = ScheduleKind::kInterleaved1F1B;
  config.chunks = v;
  const SimResult inter = simulate(sc, config);
  EXPECT_EQ(inter.stages, K);
  EXPECT_EQ(inter.chunks, v);
  ASSERT_EQ(inter.stage_costs.size(), static_cast<std::size_t>(K * v));
  config.schedule = ScheduleKind::k1F1B;
  config.chunks.reset();
  const SimResult one = simulate(sc, config);
  EXPECT_EQ(one.metrics.step_time, (M + K - 1) * 3 * v * T);
  EXPECT_EQ(inter.metrics.step_time, M * 3 * v * T + (K - 1) * 3 * T);
  const SimTime busy = M * 3 * v * T;
  EXPECT_EQ(v * (inter.metrics.step_time - busy), one.metrics.step_time - busy);
}

INSTANTIATE_TEST_SUITE_P(KxVxM, InterleavedClosedForm,
                         ::testing::Values(KxVxM{1, 2, 4}, KxVxM{2, 2, 2}, KxVxM{2, 2, 8},
                                           KxVxM{4, 2, 8}, KxVxM{4, 4, 16}, KxVxM{3, 2, 9},
                                           KxVxM{8, 3, 32}, KxVxM{4, 1, 8}),
                         testing::kxvxm_name);

}  // namespace
}  // namespace pipescope
