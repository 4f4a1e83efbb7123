// Peak and curve of per-device memory against hand computations (docs/models.md,
// "What the models assume", Memory): without remat every micro-batch's stash is live from its F to
// its B; with remat only the stage input is, plus one micro-batch's stash from R to B.

#include <gtest/gtest.h>

#include "sim/memory_tracker.h"
#include "sim/simulator.h"
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
