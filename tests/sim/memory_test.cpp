// Peak and curve of per-device memory against hand computations (docs/models.md,
// "What the models assume", Memory): without remat every micro-batch's stash is live from its F to
// its B; with remat only the stage input is, plus one micro-batch's stash from R to B.

#include <gtest/gtest.h>

#include "costmodels/cost_model.h"
#include "sim/engine/memory_tracker.h"
#include "sim/engine/simulator.h"
#include "sim_fixtures.h"

namespace pipescope {
namespace {

using testing::memory_scenario;

TEST(Memory, WithoutRematEveryStashIsLiveAtOnce) {
  const int M = 4;
  const SimResult r = simulate(memory_scenario(M, false), SimConfig{});
  const Bytes statics = 2 * 1000 * 12;
  const Bytes stash = 2 * 100 * 2;  // two layers, micro-batch of 2
  ASSERT_EQ(r.metrics.devices.size(), 2u);
  EXPECT_EQ(r.metrics.devices[0].peak_memory, statics + M * stash);
  EXPECT_EQ(r.metrics.devices[1].peak_memory, statics + M * stash);
}

TEST(Memory, WithRematInputsPlusOneStash) {
  const int M = 4;
  const SimResult r = simulate(memory_scenario(M, true), SimConfig{});
  const Bytes statics = 2 * 1000 * 12;
  const Bytes stash = 2 * 100 * 2;
  const Bytes input0 = 7 * 2;   // the model input, micro-batch of 2
  const Bytes input1 = 10 * 2;  // layer 1's output
  EXPECT_EQ(r.metrics.devices[0].peak_memory, statics + M * input0 + stash);
  EXPECT_EQ(r.metrics.devices[1].peak_memory, statics + M * input1 + stash);
}

// Layer checkpoints (training.checkpoint layer): a recomputed micro-batch keeps
// every layer's input, and its recompute holds one layer's stash at most, the
// largest of the stage's. Stashes 100, 300, 50, 80 a sample; each layer's
// input 7 (the model's) or 10; micro-batch 2.
TEST(Memory, LayerCheckpointsKeepEveryInputAndTheLargestStash) {
  const int M = 4;
  Scenario sc = memory_scenario(M, true);
  const std::vector<Bytes> stashes = {100, 300, 50, 80};
  for (std::size_t l = 0; l < stashes.size(); ++l) sc.model.layers[l].stash_bytes = stashes[l];
  const Bytes statics = 2 * 1000 * 12;
  sc.training.checkpoint = Checkpoint::kStage;
  const SimResult stage = simulate(sc, SimConfig{});
  EXPECT_EQ(stage.metrics.devices[0].peak_memory, statics + M * 7 * 2 + (100 + 300) * 2);
  EXPECT_EQ(stage.metrics.devices[1].peak_memory, statics + M * 10 * 2 + (50 + 80) * 2);
  sc.training.checkpoint = Checkpoint::kLayer;
  const SimResult layer = simulate(sc, SimConfig{});
  EXPECT_EQ(layer.metrics.devices[0].peak_memory, statics + M * (7 + 10) * 2 + 300 * 2);
  EXPECT_EQ(layer.metrics.devices[1].peak_memory, statics + M * (10 + 10) * 2 + 80 * 2);
  // The same recompute either way.
  EXPECT_EQ(layer.metrics.step_time, stage.metrics.step_time);
  // The partitioner prices the stages as the simulation holds them.
  const AnalyticCostModel cost(sc.cluster.device, sc.model.dtype, 4);
  const PartitionProblem p =
      partition_problem(sc, cost, 2, M, Remat::kAlways, ScheduleKind::kGpipe, 1);
  EXPECT_EQ(stage_memory(p, 0, 1), layer.metrics.devices[0].peak_memory);
  EXPECT_EQ(stage_memory(p, 2, 3), layer.metrics.devices[1].peak_memory);
}

TEST(Memory, CurveOfOneDevice) {
  // K=1, M=2, no remat, micro-batch 2: t_f = 8000 ns (4 layers x 1000 FLOPs x 2),
  // t_b = 16000 ns.
  Scenario sc = memory_scenario(2, false);
  sc.cluster.devices = 1;
  SimConfig cfg;
  cfg.stages = 1;
  const SimResult r = simulate(sc, cfg);
  const Bytes s0 = 4 * 1000 * 12;
  const Bytes stash = 4 * 100 * 2;
  const std::vector<MemoryPoint> expected = {
      {0, s0 + stash},              // F0 starts
      {8000, s0 + 2 * stash},       // F1 starts
      {16000 + 16000, s0 + stash},  // B1 ends
      {16000 + 32000, s0},          // B0 ends
  };
  ASSERT_EQ(r.timeline.memory.size(), 1u);
  ASSERT_EQ(r.timeline.memory[0].size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(r.timeline.memory[0][i].time, expected[i].time) << i;
    EXPECT_EQ(r.timeline.memory[0][i].bytes, expected[i].bytes) << i;
  }
}

TEST(Memory, FreesComeBeforeAllocationsAtTheSameInstant) {
  // With remat on one device, B(m) ends exactly when R(m-1) starts: the peak is
  // one stash, not two.
  Scenario sc = memory_scenario(3, true);
  sc.cluster.devices = 1;
  SimConfig cfg;
  cfg.stages = 1;
  const SimResult r = simulate(sc, cfg);
  const Bytes s0 = 4 * 1000 * 12;
  EXPECT_EQ(r.metrics.devices[0].peak_memory, s0 + 3 * 7 * 2 + 4 * 100 * 2);
}

TEST(Memory, PeakAboveCapacityDoesNotFit) {
  Scenario sc = memory_scenario(4, false);
  sc.cluster.device.memory_bytes = 2 * 1000 * 12 + 4 * 400 - 1;
  const SimResult r = simulate(sc, SimConfig{});
  EXPECT_FALSE(r.metrics.fits());
  EXPECT_FALSE(r.metrics.devices[0].fits());
  sc.cluster.device.memory_bytes += 1;
  EXPECT_TRUE(simulate(sc, SimConfig{}).metrics.fits());
}

}  // namespace
}  // namespace pipescope
