// A plan of expert parallelism: E in its label and its file, against the
// scenario it is replayed on, and in the exports (Megatron-LM's flags,
// PyTorch's device mesh; those that cannot run it refuse it).

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan_fixtures.h"
#include "planner_fixtures.h"
#include "sim/export/plan_export.h"
#include "sim/formats/plan_io.h"
#include "sim/plan/plan.h"
#include "sim/plan/planner.h"
#include "sim/scenario/scenario_io.h"
#include "sim_fixtures.h"

namespace pipescope {
namespace {

using testing::kMoeScenario;

Scenario moe_scenario(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return parse_scenario_text(text, "ep.json", overrides);
}

// PyTorch's device mesh lays the replicas out as two dimensions, r = g E +
// e: "ep" the E consecutive replicas of an expert group, "edp" the D / E
// that hold the same experts; the wrapper reduces the experts it is given
// over "edp" and the rest over both (beside context parallelism:
// tests/sim/expert_context_parallel_test.cpp).
TEST(ExpertParallel, PyTorchsDeviceMeshHasEpDimensions) {
  const auto has = [](const std::string& text, const std::string& part) {
    EXPECT_NE(text.find(part), std::string::npos) << part << "\n" << text;
  };
  const Scenario sc = moe_scenario(kMoeScenario, {"training.expert_parallel=4"});
  ASSERT_EQ(sc.cluster.rank_order, RankOrder::kTpDpPp);
  const Plan plan = testing::simulated_plan(sc, 2, 8);
  EXPECT_FALSE(export_plan(plan, ExportFormat::kTorchPipelining).empty());
  const std::string mesh = export_torch_device_mesh(plan);
  has(mesh, "MESH_SHAPE = (2, 2, 4, 1)\n");
  has(mesh, "MESH_DIM_NAMES = (\"pp\", \"edp\", \"ep\", \"tp\")\n");
  has(mesh,
      "def pipescope_data_parallel(module, mesh, experts=()):\n"
      "    for expert in experts:\n"
      "        replicate(expert, mesh=mesh[\"edp\"])\n"
      "    return replicate(module, mesh=mesh[\"edp\", \"ep\"]._flatten(\"dp\"))\n");
  // The replicas outermost, and ZeRO-1's fully_shard.
  Scenario outer = moe_scenario(kMoeScenario, {"training.expert_parallel=4",
                                               "cluster.rank_order=tp-pp-dp", "training.zero=1"});
  const std::string sharded = export_torch_device_mesh(testing::simulated_plan(outer, 2, 8));
  has(sharded, "MESH_SHAPE = (2, 4, 2, 1)\n");
  has(sharded, "MESH_DIM_NAMES = (\"edp\", \"ep\", \"pp\", \"tp\")\n");
  has(sharded, "        fully_shard(expert, mesh=mesh[\"edp\"], reshard_after_forward=False)\n");
  // Without E the replicas stay one dimension.
  const std::string dense =
      export_torch_device_mesh(testing::simulated_plan(moe_scenario(kMoeScenario), 2, 8));
  has(dense, "MESH_DIM_NAMES = (\"pp\", \"dp\", \"tp\")\n");
  EXPECT_EQ(dense.find("\"ep\""), std::string::npos) << dense;
}

// A plan carries E: in its label and its file, against the scenario it is
// replayed on, and into Megatron-LM's flags; the exports that cannot run
// expert parallelism refuse it.
TEST(ExpertParallel, PlansCarryE) {
  const Scenario sc = moe_scenario(kMoeScenario, {"training.expert_parallel=8"});
  PlanRequest request;
  request.stages = 2;
  request.schedule = ScheduleKind::k1F1B;
  const PlanReport report = run_planner(sc, request);
  ASSERT_FALSE(report.ranked.empty());
  const PlanCandidate& best = report.ranked.front();
  EXPECT_NE(best.label().find(" D=8 E=8 "), std::string::npos) << best.label();
  const Plan plan = make_plan(replica_scenario(*best.scenario, best.stages, best.data_parallel),
                              best.result, best.data_parallel, "optimal");
  EXPECT_EQ(plan.expert_parallel, 8);
  const nlohmann::json doc = plan_to_json(plan);
  EXPECT_EQ(doc["E"], 8);
  EXPECT_EQ(plan_from_json(doc, "p.json").expert_parallel, 8);
  nlohmann::json odd = doc;
  odd["E"] = 3;  // without the spec, which 3 cannot split
  odd["model"]["spec"] = nullptr;
  try {
    plan_from_json(odd, "p.json");
    FAIL() << "E=3 of D=8 was read";
  } catch (const ScenarioError& e) {
    EXPECT_EQ(e.json_path(), "E");
  }
  EXPECT_NO_THROW(check_plan_matches(plan, sc, "p.json"));
  const Scenario other = moe_scenario(kMoeScenario, {"training.expert_parallel=4"});
  try {
    check_plan_matches(plan, other, "p.json");
    FAIL() << "a plan of E=8 matched a scenario of E=4";
  } catch (const ScenarioError& e) {
    EXPECT_NE(std::string(e.what()).find("this plan spreads the experts over E=8 replicas, the "
                                         "scenario over E=4"),
              std::string::npos)
        << e.what();
  }
  const std::string megatron = export_plan(plan, ExportFormat::kMegatron);
  for (const char* flag :
       {"--expert-model-parallel-size 8", "--moe-token-dispatcher-type alltoall"}) {
    EXPECT_NE(megatron.find(flag), std::string::npos) << flag << " in\n" << megatron;
  }
  try {
    export_plan(plan, ExportFormat::kDeepSpeed);
    FAIL() << "deepspeed took expert parallelism";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("it spreads the experts over E=8 replicas"),
              std::string::npos)
        << e.what();
  }
  // With the replicas outermost and a pipeline, megatron-core refuses
  // expert parallelism (its tp-ep-pp-dp expert ranks would cut across the
  // pipelines); tp-dp-pp, or one stage, it takes.
  Plan outer = plan;
  outer.rank_order = RankOrder::kTpPpDp;
  try {
    export_plan(outer, ExportFormat::kMegatron);
    FAIL() << "megatron took E=8 under tp-pp-dp with K=2";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("rank order tp-pp-dp), which megatron-core refuses "
                                         "beside a pipeline"),
              std::string::npos)
        << e.what();
  }
  outer.rank_order = RankOrder::kTpDpPp;
  EXPECT_NO_THROW(export_plan(outer, ExportFormat::kMegatron));
}

}  // namespace
}  // namespace pipescope
