// Interleaved 1F1B (Megatron-LM): v chunks per device, stage c K + d on device
// d, Megatron's warm-up and op order, M a multiple of K, and a bubble 1/v of
// 1F1B's with equal stages.

#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "chunked_fixtures.h"
#include "sim/schedule.h"
#include "sim/simulator.h"
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

TEST(Interleaved, ValidForEveryShape) {
  for (int K : {1, 2, 3, 4}) {
    for (int v : {1, 2, 3, 4}) {
      for (int groups : {1, 2, 5}) {
        for (const Remat remat : kScheduleRemats) {
          const Schedule s = build_interleaved_1f1b(K, K * groups, v, remat);
          EXPECT_EQ(check_schedule(s), "") << K << " " << v << " " << groups;
          EXPECT_EQ(s.stages, K * v);
        }
      }
    }
  }
}

TEST(Interleaved, ShapeRules) {
  EXPECT_EQ(schedule_shape_problem(ScheduleKind::kInterleaved1F1B, 4, 6, 2),
            "interleaved-1f1b needs M to be a multiple of K (as Megatron-LM does): M=6, K=4");
  EXPECT_EQ(schedule_shape_problem(ScheduleKind::k1F1B, 4, 8, 2),
            "1f1b runs one chunk per device; 2 chunks need one of interleaved-1f1b, "
            "looped-bfs, zb-v, interleaved-zb, dualpipe-v");
  EXPECT_EQ(schedule_shape_problem(ScheduleKind::kInterleaved1F1B, 4, 8, 0),
            "chunks must be at least 1, got 0");
  EXPECT_EQ(schedule_shape_problem(ScheduleKind::kInterleaved1F1B, 4, 8, 2), "");
  EXPECT_THROW(build_schedule(ScheduleKind::kInterleaved1F1B, 4, 6, Remat::kNever, 2),
               std::invalid_argument);
  EXPECT_THROW(build_schedule(ScheduleKind::kGpipe, 4, 8, Remat::kNever, 2), std::invalid_argument);
}

TEST(Interleaved, SimulatorExplainsBadShapes) {
  const Scenario sc = testing::uniform_scenario(8, 4, 1000.0, 24, 6, false);
  SimConfig config;
  config.schedule = ScheduleKind::kInterleaved1F1B;
  config.chunks = 2;
  try {
    simulate(sc, config);
    FAIL() << "M=6 on K=4 was accepted";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "interleaved-1f1b needs M to be a multiple of K (as Megatron-LM does): M=6, K=4");
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
