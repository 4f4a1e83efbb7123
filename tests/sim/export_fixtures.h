#pragma once
// Plans the tests share: the golden plan file and plans of any cut, and what
// checking a plan against a scenario says.

#include <cstdint>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "sim/formats/plan_io.h"
#include "sim/plan/plan.h"
#include "sim/scenario/scenario_io.h"

#include "golden.h"

namespace pipescope::testing {

// The golden plan (written by plan_io_test): seven layers embed, block0..block4,
// head cut 3 / 2 / 2 over K=3 stages, M=4 micro-batches of 2, remat on.
inline Plan golden_plan() {
  return read_plan_file(kGolden / "plan.json");
}

// A plan with the given layers per stage; layer i is named names[i] (or "l<i>").
inline Plan plan_with(const std::vector<int>& balance, int m, int d, Remat remat,
                      std::vector<std::string> names = {}) {
  Plan p = golden_plan();
  p.layer_count = std::accumulate(balance.begin(), balance.end(), 0);
  if (names.empty()) {
    for (int i = 0; i < p.layer_count; ++i) names.push_back("l" + std::to_string(i));
  }
  p.layer_names = std::move(names);
  p.stages = static_cast<int>(balance.size());
  p.data_parallel = d;
  p.devices = p.stages * d;
  p.micro_batches = m;
  p.micro_batch_size = 3;
  p.global_batch = std::int64_t{3} * m * d;
  p.remat = remat;
  p.stage_plans.clear();
  int first = 0;
  for (std::size_t s = 0; s < balance.size(); ++s) {
    PlanStage st;
    st.layers = {first, first + balance[s] - 1};
    st.device = static_cast<int>(s);
    first += balance[s];
    p.stage_plans.push_back(st);
  }
  return p;
}

// An interleaved plan: K = 2 ranks, v = 2 chunks each, stage s on rank s mod 2.
inline Plan interleaved_plan(const std::vector<int>& balance) {
  Plan p = plan_with(balance, 4, 1, Remat::kNever);
  p.stages = 2;
  p.chunks = 2;
  p.devices = 2;
  for (std::size_t s = 0; s < p.stage_plans.size(); ++s) {
    p.stage_plans[s].device = static_cast<int>(s % 2);
  }
  return p;
}

// What check_plan_matches says of `p` against `scenario` read as "s.json",
// the plan being "p.json"; "matches" when nothing.
inline std::string plan_mismatch(const Plan& p, const nlohmann::json& scenario) {
  try {
    check_plan_matches(p, parse_scenario(scenario, "s.json"), "p.json");
  } catch (const ScenarioError& e) {
    return e.what();
  }
  return "matches";
}

}  // namespace pipescope::testing
