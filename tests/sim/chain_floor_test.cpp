// The chain of one micro-batch under every floor (sim/plan/step_floor.h):
// its forward through every layer, then its backward back through them.

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "sim/engine/partition.h"
#include "sim/engine/simulator.h"
#include "sim/plan/step_floor.h"
#include "sim_fixtures.h"

namespace pipescope {
namespace {

// Eight layers of forward 100 ns and backward 200 ns (a kept and a dropped
// forward alike), cut into 8 stages on 4 devices (two chunks each).
PartitionProblem eight_layers(int micro_batches, bool split) {
  PartitionProblem p;
  p.layers.assign(8, LayerCost{100, 200, 100, 0, 0, 100});
  p.cut_bytes.assign(9, 0);
  p.stages = 8;
  p.micro_batches = micro_batches;
  p.remat = Remat::kNever;
  p.backward_split = split;
  return p;
}

// The rounding slack step_floor takes off: a nanosecond a layer and
// micro-batch, and one more a layer.
SimTime slack(const PartitionProblem& p) {
  return static_cast<SimTime>(p.layers.size()) * (p.micro_batches + 1);
}

// One micro-batch on four devices: the devices' mean compute (8 x 300 / 4
// = 600 ns) is a quarter of what the micro-batch waits for on its way
// through every layer and back (2,400 ns); with M = 3 the last micro-batch
// starts after two others' first layer (2,600 ns against a mean of 1,800).
// Under a split backward only the forwards are on the chain (800 ns), and
// at M = 3 the mean compute is the larger again.
TEST(ChainFloor, OneMicroBatchWaitsForEveryLayerInTurn) {
  const PartitionProblem one = eight_layers(1, false);
  EXPECT_EQ(step_floor_any_cut(one, 4), 2400 - slack(one));
  const PartitionProblem three = eight_layers(3, false);
  EXPECT_EQ(step_floor_any_cut(three, 4), 2600 - slack(three));
  const PartitionProblem split = eight_layers(1, true);
  EXPECT_EQ(step_floor_any_cut(split, 4), 800 - slack(split));
  const PartitionProblem split_three = eight_layers(3, true);
  EXPECT_EQ(step_floor_any_cut(split_three, 4), 1800 - slack(split_three));
  // The floor of a cut is never below the floor under every cut.
  std::vector<StageRange> cut;
  for (int l = 0; l < 8; ++l) cut.push_back({l, l});
  EXPECT_EQ(step_floor(one, cut, 4), 2400 - slack(one));
}

// A micro-batch's forwards are the least of a kept and a dropped one's, as
// a step that recomputes all but the last micro-batch may run either.
TEST(ChainFloor, TakesTheLeastForward) {
  PartitionProblem p = eight_layers(1, false);
  for (LayerCost& l : p.layers) l.least_forward = 40;
  EXPECT_EQ(step_floor_any_cut(p, 4), 8 * 240 - slack(p));
}

// On 8 equal layers, 8 stages on 4 devices (looped
// breadth-first, two chunks) with 1, 2 and 4 micro-batches, the simulated step is at least
// the floor under every cut, which is at least the chain.
TEST(ChainFloor, IsNeverAboveTheSimulatedStep) {
  const Scenario sc = testing::uniform_scenario(8, 4, 1e9, 8, 1, false);
  for (const int M : {1, 2, 4}) {
    const std::unique_ptr<CostModel> cost = make_cost_model(sc);
    const PartitionProblem p =
        partition_problem(sc, *cost, 8, M, Remat::kNever, ScheduleKind::kLoopedBfs, 2, nullptr);
    SimConfig config;
    config.stages = 4;
    config.chunks = 2;
    config.micro_batches = M;
    config.schedule = ScheduleKind::kLoopedBfs;
    config.remat = Remat::kNever;
    config.record_timeline = false;
    const SimResult r = simulate(sc, config, *cost);
    EXPECT_LE(step_floor_any_cut(p, 4), r.metrics.step_time) << M;
    // The devices' mean compute alone is a quarter (M = 1) and a half
    // (M = 2) of the chain.
    if (M < 4) {
      EXPECT_GT(step_floor_any_cut(p, 4), r.metrics.step_time / 2) << M;
    }
  }
}

// A cost model whose forwards that keep their stash are faster than those
// that drop it (as a CPU's may be measured).
class KeptFaster final : public CostModel {
 public:
  std::string_view name() const override { return "kept-faster"; }
  std::string_view description() const override { return "test"; }
  SimTime forward(const LayerSpec&, std::int64_t) const override { return 100; }
  SimTime forward_keeping_stash(const LayerSpec&, std::int64_t) const override { return 60; }
  SimTime backward(const LayerSpec&, std::int64_t) const override { return 200; }
  SimTime recompute(const LayerSpec&, std::int64_t) const override { return 100; }
  SimTime optimizer_step(std::int64_t) const override { return 0; }
};

// The partition problem gives each layer the least of its two forwards
// whatever the remat mode (except-last runs both), and the chain the least
// factor a measured concurrency slowdown below 1 may scale the ops by.
TEST(ChainFloor, TheProblemGivesTheLeastForwardAndTheLeastSlowdown) {
  Scenario sc = testing::uniform_scenario(4, 4, 1e9, 8, 2, false);
  const KeptFaster cost;
  for (const Remat remat : {Remat::kNever, Remat::kExceptLast, Remat::kAlways}) {
    const PartitionProblem p =
        partition_problem(sc, cost, 4, 2, remat, ScheduleKind::kGpipe, 1, nullptr);
    for (const LayerCost& l : p.layers) EXPECT_EQ(l.least_forward, 60);
    EXPECT_EQ(p.compute_scale, 1.0);
  }
  sc.cluster.concurrency_slowdown = {1.0, 0.8, 1.2};
  const PartitionProblem slowed =
      partition_problem(sc, cost, 4, 2, Remat::kNever, ScheduleKind::kGpipe, 1, nullptr);
  EXPECT_EQ(slowed.compute_scale, 0.8);
  PartitionProblem half = eight_layers(1, false);
  half.compute_scale = 0.5;
  EXPECT_EQ(step_floor_any_cut(half, 4), 1200 - slack(half));
}

// Under a profile's concurrency slowdown below 1 the simulation scales
// every op down, so the devices' compute terms scale too: M = 8 on the
// eight layers, one a stage. The floor of that cut is device 3's fill (three
// forwards, 300 ns), its two stages' compute for 8 micro-batches (4,800) and
// its drain (three backwards, 600); the floor under every cut the mean
// compute, 4,800. Halved, 2,850 and 2,400.
TEST(ChainFloor, ComputeScalesWithTheLeastSlowdown) {
  PartitionProblem p = eight_layers(8, false);
  std::vector<StageRange> cut;
  for (int l = 0; l < 8; ++l) cut.push_back({l, l});
  EXPECT_EQ(step_floor(p, cut, 4), 5700 - slack(p));
  EXPECT_EQ(step_floor_any_cut(p, 4), 4800 - slack(p));
  p.compute_scale = 0.5;
  EXPECT_EQ(step_floor(p, cut, 4), 2850 - slack(p));
  EXPECT_EQ(step_floor_any_cut(p, 4), 2400 - slack(p));
}

}  // namespace
}  // namespace pipescope
