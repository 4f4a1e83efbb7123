// Looped BFS (PyTorch's ScheduleLoopedBFS): v chunks per device, stage c K + d on
// device d, every forward of a chunk before the next chunk's, the backwards from
// the last chunk down in reverse micro-batch order; the step and the peak
// activation memory against their closed forms.

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

TEST(LoopedBfs, StagesAndOpOrder) {
  const Schedule s = build_looped_bfs(2, 3, 2, Remat::kNever);
  EXPECT_EQ(s.kind, ScheduleKind::kLoopedBfs);
  EXPECT_FALSE(s.split);
  EXPECT_EQ(s.stages, 4);
  EXPECT_EQ(s.chunks, 2);
  ASSERT_EQ(s.devices(), 2);
  EXPECT_EQ(s.stage_device, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(staged_text(s.device_ops[0]),
            "F0.0 F0.1 F0.2 F2.0 F2.1 F2.2 B2.2 B2.1 B2.0 B0.2 B0.1 B0.0 O0 O2");
  EXPECT_EQ(staged_text(s.device_ops[1]),
            "F1.0 F1.1 F1.2 F3.0 F3.1 F3.2 B3.2 B3.1 B3.0 B1.2 B1.1 B1.0 O1 O3");
  // Remat except-last: every micro-batch but the last recomputes before its B.
  EXPECT_EQ(staged_text(build_looped_bfs(1, 2, 2, Remat::kExceptLast).device_ops[0]),
            "F0.0 F0.1 F1.0 F1.1 B1.1 R1.0 B1.0 B0.1 R0.0 B0.0 O0 O1");
  EXPECT_EQ(build_schedule(ScheduleKind::kLoopedBfs, 2, 3, Remat::kNever, 2).device_ops,
            s.device_ops);
}

TEST(LoopedBfs, ValidForEveryShape) {
  for (int K : {1, 2, 3, 4}) {
    for (int v : {1, 2, 3}) {
      for (int M : {1, 2, 3, 5, 8}) {
        for (const Remat remat : kScheduleRemats) {
          const Schedule s = build_looped_bfs(K, M, v, remat);
          EXPECT_EQ(check_schedule(s), "") << K << " " << v << " " << M;
          EXPECT_EQ(s.stages, K * v);
        }
      }
    }
  }
}

TEST(LoopedBfs, ShapeRules) {
  // Any M, unlike interleaved-1f1b.
  EXPECT_EQ(schedule_shape_problem(ScheduleKind::kLoopedBfs, 4, 6, 2), "");
  EXPECT_EQ(schedule_shape_problem(ScheduleKind::kLoopedBfs, 4, 6, 0),
            "chunks must be at least 1, got 0");
  EXPECT_THROW(build_looped_bfs(4, 6, 0, Remat::kNever), std::invalid_argument);
  EXPECT_EQ(parse_schedule("looped-bfs"), ScheduleKind::kLoopedBfs);
  EXPECT_EQ(to_string(ScheduleKind::kLoopedBfs), "looped-bfs");
  EXPECT_TRUE(takes_chunks(ScheduleKind::kLoopedBfs));
  EXPECT_FALSE(splits_backward(ScheduleKind::kLoopedBfs));
}

class LoopedBfsClosedForm : public ::testing::TestWithParam<KxVxM> {};

// Equal chunks of T_F = T and T_B = 2T, no communication. Forward of stage
// c K + d, micro-batch m ends at (d + c max(M, K) + m + 1) T_F: a device runs
// its chunks back to back when M >= K, else each chunk waits for the micro-batch
// to come round the K devices. The backwards mirror it from the last stage,
// which starts them as its forwards end, so the step is
// (K - 1 + (v - 1) max(M, K) + M) (T_F + T_B); GPipe over the same K devices,
// a device's v chunks as one stage, takes (M + K - 1) v (T_F + T_B).
TEST_P(LoopedBfsClosedForm, StepAndBubble) {
  const auto [K, v, M] = GetParam();
  const Scenario sc = testing::uniform_scenario(K * v, K, 1000.0, 3 * M, M, false);
  const SimTime T = 1000 * 3;  // one layer (a chunk), one micro-batch of 3
  SimConfig config;
  config.schedule = ScheduleKind::kLoopedBfs;
  config.chunks = v;
  const SimResult bfs = simulate(sc, config);
  EXPECT_EQ(bfs.schedule, ScheduleKind::kLoopedBfs);
  EXPECT_EQ(bfs.chunks, v);
  const SimTime round = std::max(M, K);
  EXPECT_EQ(bfs.metrics.step_time, (K - 1 + (v - 1) * round + M) * 3 * T);
  config.schedule = ScheduleKind::kGpipe;
  config.chunks.reset();
  const SimResult gpipe = simulate(sc, config);
  EXPECT_EQ(gpipe.metrics.step_time, (M + K - 1) * v * 3 * T);
  if (M >= K) {  // a bubble of (K - 1)(T_F + T_B): 1/v of GPipe's
    const SimTime busy = M * 3 * v * T;
    EXPECT_EQ(v * (bfs.metrics.step_time - busy), gpipe.metrics.step_time - busy);
  }
}

// Without remat every chunk keeps all M stashes until its backward: a device
// holds v M chunk micro-batches when its backwards begin.
TEST_P(LoopedBfsClosedForm, PeakMemoryIsEveryChunkMicroBatch) {
  const auto [K, v, M] = GetParam();
  Scenario sc = testing::uniform_scenario(K * v, K, 1000.0, 3 * M, M, false);
  for (LayerSpec& l : sc.model.layers) l.stash_bytes = 100;  // per sample
  const Bytes stash = 100 * 3;                               // a chunk, a micro-batch
  SimConfig config;
  config.schedule = ScheduleKind::kLoopedBfs;
  config.chunks = v;
  const SimResult bfs = simulate(sc, config);
  ASSERT_EQ(bfs.metrics.devices.size(), static_cast<std::size_t>(K));
  for (int d = 0; d < K; ++d) {
    EXPECT_EQ(bfs.metrics.devices[static_cast<std::size_t>(d)].peak_memory, v * M * stash)
        << "device " << d;
  }
}

INSTANTIATE_TEST_SUITE_P(KxVxM, LoopedBfsClosedForm,
                         ::testing::Values(KxVxM{1, 2, 4}, KxVxM{2, 2, 2}, KxVxM{2, 2, 8},
                                           KxVxM{4, 2, 8}, KxVxM{4, 3, 6}, KxVxM{4, 2, 3},
                                           KxVxM{3, 3, 1}, KxVxM{4, 1, 8}),
                         testing::kxvxm_name);

}  // namespace
}  // namespace pipescope
