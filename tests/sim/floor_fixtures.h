#pragma once
// What the step-floor tests check a simulated candidate's floors with: its
// replica, the problem the planner bounds it by (candidate_problem: ZeRO's
// gathers and reduce-scatters and the mixtures' all-to-alls included) and
// the cut it was simulated on.

#include <memory>
#include <vector>

#include "sim/engine/simulator.h"
#include "sim/plan/planner.h"

namespace pipescope::testing {

struct SimulatedCut {
  Scenario replica;
  PartitionProblem problem;
  std::vector<StageRange> cut;
};

inline SimulatedCut simulated_cut(const PlanCandidate& c) {
  SimulatedCut out{replica_scenario(*c.scenario, c.stages, c.data_parallel), {}, {}};
  const std::unique_ptr<CostModel> cost = make_cost_model(out.replica);
  out.problem = candidate_problem(
      out.replica, *cost, c,
      data_parallel_ring(c.scenario->cluster, c.stages, c.data_parallel, c.expert_parallel()));
  for (const StageCost& s : c.result.stage_costs) out.cut.push_back(s.layers);
  return out;
}

// `p` without ZeRO-2/3's reduce-scatters.
inline PartitionProblem without_reduce_scatters(PartitionProblem p) {
  p.dense_grad_bytes.clear();
  p.expert_grad_bytes.clear();
  return p;
}

}  // namespace pipescope::testing
