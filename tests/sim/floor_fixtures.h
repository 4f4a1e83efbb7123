#pragma once
// What the step-floor tests check a simulated candidate's floors with: its
// replica, the partition problem of its shape (without ZeRO's or the
// mixtures' terms, which each test adds) and the cut it was simulated on.

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
  out.problem = partition_problem(out.replica, *cost, c.stages * c.chunks, c.micro_batches, c.remat,
                                  c.schedule, c.chunks, c.custom.get());
  for (const StageCost& s : c.result.stage_costs) out.cut.push_back(s.layers);
  return out;
}

}  // namespace pipescope::testing
