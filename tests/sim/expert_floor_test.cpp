// The planner's step floors under expert parallelism: every forward and
// backward of a mixture waits for its all-to-alls (sim/engine/expert_parallel.h),
// so the floors count them (PartitionProblem::exchanges), stay under every
// simulated step, and leave out no candidate that could be among the best.

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "floor_fixtures.h"
#include "sim/engine/expert_parallel.h"
#include "sim/engine/simulator.h"
#include "sim/plan/planner.h"
#include "sim/plan/step_floor.h"
#include "sim/scenario/scenario_io.h"

namespace pipescope {
namespace {

// 4 blocks of 8 experts, 2 a token, on 16 A100s: E up to 8 searched.
constexpr const char* kMoe = R"({
  "model": {"family": "transformer", "layers": 4, "d_model": 256, "heads": 4, "seq_len": 128,
            "vocab": 1000, "experts": 8, "experts_per_token": 2},
  "cluster": {"preset": "dgx-a100", "devices": 16},
  "training": {"global_batch": 64, "micro_batches": 4, "optimizer": "adam"}
})";

Scenario moe(const std::vector<std::string>& overrides = {}) {
  return parse_scenario_text(kMoe, "moe.json", overrides);
}

// Each mixture layer's all-to-alls are its ep_alltoalls at alltoall_time of
// its bytes for the micro-batch, as the stages' add_expert_collectives sums.
TEST(ExpertFloor, LayerAllToAllsAreTheStagesParts) {
  const Scenario sc = moe({"training.expert_parallel=4"});
  const Scenario replica = replica_scenario(sc, 2, 8);
  const DataParallel ring = data_parallel_ring(sc.cluster, 2, 8, 4);
  const std::vector<SimTime> each = layer_alltoalls(replica.model, ring, 2);
  ASSERT_EQ(each.size(), replica.model.layers.size());
  int mixtures = 0;
  for (std::size_t l = 0; l < each.size(); ++l) {
    const LayerSpec& layer = replica.model.layers[l];
    EXPECT_EQ(each[l], layer.ep_alltoalls * alltoall_time(ring, layer.ep_bytes * 2)) << l;
    mixtures += each[l] > 0 ? 1 : 0;
  }
  EXPECT_EQ(mixtures, 4);
  std::vector<StageCost> stages(1);
  stages[0].layers = {0, static_cast<int>(each.size()) - 1};
  add_expert_collectives(replica.model, ring, 2, stages);
  SimTime sum = 0;
  for (const SimTime t : each) sum += t;
  EXPECT_EQ(stages[0].ep_forward, sum);
  EXPECT_EQ(stages[0].ep_backward, sum);
  EXPECT_TRUE(layer_alltoalls(replica.model, data_parallel_ring(sc.cluster, 2, 8), 2).empty());
}

// Every candidate of E > 1, simulated: its floor as the planner bounds it
// (candidate_problem: the all-to-alls, and under ZeRO-2 the reduce-scatters
// of the dense and of the experts' gradients) on the cut it ran stays under
// its step, above the floor without the all-to-alls, and the floor under
// every cut under both.
TEST(ExpertFloor, IsNeverAboveTheSimulatedStep) {
  PlanRequest every;
  every.max_micro_batches = 8;
  every.exact_top = 100000;  // simulate everything not dominated
  int checked = 0;
  int zero2 = 0;
  for (const Scenario& sc : {moe(), moe({"training.zero=2"})}) {
    const PlanReport r = run_planner(sc, every);
    for (const PlanCandidate& c : r.ranked) {
      if (c.expert_parallel() == 1) continue;
      const testing::SimulatedCut sim = testing::simulated_cut(c);
      const PartitionProblem& p = sim.problem;
      const std::vector<StageRange>& cut = sim.cut;
      ASSERT_EQ(p.exchanges.size(), sim.replica.model.layers.size()) << c.label();
      PartitionProblem no_exchanges = p;
      no_exchanges.exchanges.clear();
      const SimTime without = step_floor(no_exchanges, cut, c.stages);
      const SimTime floor = step_floor(p, cut, c.stages);
      EXPECT_LE(floor, c.result.metrics.step_time) << c.label();
      EXPECT_GT(floor, without) << c.label();
      EXPECT_LE(step_floor_any_cut(p, c.stages), floor) << c.label();
      zero2 += c.zero == 2 && !p.expert_grad_bytes.empty() ? 1 : 0;
      ++checked;
    }
  }
  EXPECT_GT(checked, 100);
  EXPECT_GT(zero2, 10);  // the experts' reduce-scatters over their own ring too
}

// Leaving out what cannot beat the best 16 changes none of them, and leaves
// some out.
TEST(ExpertFloor, CandidatesLeftOutCannotBeatTheBest) {
  PlanRequest bounded;
  bounded.max_micro_batches = 8;
  PlanRequest every = bounded;
  every.exact_top = 100000;
  const PlanReport a = run_planner(moe(), bounded);
  const PlanReport b = run_planner(moe(), every);
  EXPECT_FALSE(a.bounded.empty());
  ASSERT_GE(a.ranked.size(), 16u);
  for (std::size_t i = 0; i < 16; ++i) {
    EXPECT_EQ(a.ranked[i].label(), b.ranked[i].label()) << i;
    EXPECT_EQ(a.ranked[i].samples_per_s, b.ranked[i].samples_per_s) << i;
  }
}

}  // namespace
}  // namespace pipescope
