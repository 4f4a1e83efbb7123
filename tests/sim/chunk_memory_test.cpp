// The device partitioner's memory for schedules that run several stages a
// device, against the simulated memory curve.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "costmodels/cost_model.h"
#include "sim/device_partition.h"
#include "sim/schedule.h"
#include "sim/simulator.h"
#include "sim_fixtures.h"

namespace pipescope {
namespace {

// 16 layers: a light first layer (an embedding) and a last one whose stash is
// twenty times a block's (a language model's logits).
Scenario head_heavy(int K, int M) {
  Scenario sc = testing::uniform_scenario(16, K, 1000.0, 8 * M, M, false);
  for (LayerSpec& l : sc.model.layers) {
    l.stash_bytes = 100;
    l.params = 10;
  }
  sc.model.layers.front().stash_bytes = 20;
  sc.model.layers.back().stash_bytes = 2000;
  sc.training.bytes_per_param = 4;
  return sc;
}

// Each stage's micro-batches priced as its device holds them at its peak
// (stashes_at_peak), a device's memory in the partitioner is what the
// simulator's curve peaks at, even where the stages' stashes differ twentyfold
// (spread evenly over the chunks, as before, device 3 of interleaved-1f1b at
// K = 4, M = 8 was priced at 4.7 times its peak). Without remat: with it, a
// split backward keeps a recomputed stash until its W, which the partitioner's
// one stash a stage does not count (docs/models.md, "The partitioner").
TEST(ChunkMemory, PartitionerPricesEachDeviceAtItsSimulatedPeak) {
  int cases = 0;
  for (const ScheduleKind kind : kAllSchedules) {
    if (!takes_chunks(kind)) continue;
    for (const auto& [K, M] : {std::pair{2, 8}, {4, 8}, {4, 16}, {3, 12}}) {
      if (!schedule_shape_problem(kind, K, M, 2).empty()) continue;
      SCOPED_TRACE(std::string(to_string(kind)) + " K=" + std::to_string(K) +
                   " M=" + std::to_string(M));
      const Scenario sc = head_heavy(K, M);
      const AnalyticCostModel cost(sc.cluster.device, sc.model.dtype, 4);
      const PartitionProblem p = partition_problem(sc, cost, 2 * K, M, Remat::kNever, kind, 2);
      const PartitionResult r = partition_devices(p, K, std::nullopt);
      SimConfig cfg;
      cfg.stages = K;
      cfg.micro_batches = M;
      cfg.schedule = kind;
      cfg.chunks = 2;
      cfg.remat = Remat::kNever;
      cfg.stage_ranges = r.stages;
      const SimResult sim = simulate(sc, cfg, cost);
      const std::vector<DeviceLoad> loads = device_loads(p, r.stages, K);
      for (int d = 0; d < K; ++d) {
        EXPECT_EQ(loads[static_cast<std::size_t>(d)].memory,
                  sim.metrics.devices[static_cast<std::size_t>(d)].peak_memory)
            << "device " << d;
      }
      ++cases;
    }
  }
  EXPECT_EQ(cases, 20);
}

// The counts at the peak add up to most_stashes_held on the fullest device, and
// under the V the first device's first chunk holds nearly all of them.
TEST(ChunkMemory, StashesAtPeakSumToTheMostHeld) {
  const Schedule v = build_schedule(ScheduleKind::kZbV, 4, 8, Remat::kNever, 2);
  EXPECT_EQ(stashes_at_peak(v), (std::vector<int>{7, 6, 5, 4, 4, 3, 2, 1}));
  EXPECT_EQ(most_stashes_held(v), 8);
  const Schedule loop = build_schedule(ScheduleKind::kInterleaved1F1B, 4, 8, Remat::kNever, 2);
  EXPECT_EQ(most_stashes_held(loop), 11);
  const std::vector<int> at_peak = stashes_at_peak(loop);
  EXPECT_EQ(at_peak[0] + at_peak[4], 11);
}

}  // namespace
}  // namespace pipescope
