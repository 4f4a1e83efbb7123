// DeepEP's dispatch (training.moe_dispatcher deepep): the scenario field and
// its errors, a mixture layer's all-to-alls priced by what DeepEP sends, the
// plan file and the exports (the executor's refusal:
// tests/exec/expert_parallel_test.cpp).

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "costmodels/collective.h"
#include "plan_fixtures.h"
#include "planner_fixtures.h"
#include "scenario_docs.h"
#include "sim/engine/expert_parallel.h"
#include "sim/export/plan_export.h"
#include "sim/formats/cost_model_file.h"
#include "sim/formats/plan_io.h"
#include "sim/scenario/scenario_io.h"
#include "sim_fixtures.h"

namespace pipescope {
namespace {

using testing::kMoeScenario;

// kMoeScenario (8 experts, top 2, on 16 A100 in two nodes of 8) with its
// experts over 16 replicas, exchanging tokens as `dispatcher` says.
Scenario moe(const std::string& dispatcher, int experts = 8) {
  return parse_scenario_text(kMoeScenario, "deepep.json",
                             {"training.expert_parallel=" + std::to_string(experts),
                              "training.moe_dispatcher=\"" + dispatcher + "\""});
}

void expect_error(const std::vector<std::string>& overrides, const std::string& fragment,
                  const std::string& text = kMoeScenario) {
  const ScenarioError e = testing::docs::error_of_text(text, overrides);
  EXPECT_EQ(e.json_path(), "training.moe_dispatcher") << e.what();
  EXPECT_NE(e.message().find(fragment), std::string::npos) << e.what();
}

// E = 4 of D = 16 replicas at K = 1: four GPUs of one node, two experts
// each. DeepEP sends each token once to each other GPU holding any of its 2
// experts (3 x (1 - C(6, 2) / C(8, 2)) = 3 x 13 / 28 copies), where NCCL's
// all-to-all sends its 2 copies' 3 / 4: less over the same links. With one
// expert a GPU (E = 8) there is nothing to merge: 7 x 7 / 28 = 2 x 7 / 8.
TEST(DeepEp, TheLayersAllToAllsCarryWhatDeepEpSends) {
  const Scenario deepep = moe("deepep", 4);
  const Scenario nccl = moe("alltoall", 4);
  ASSERT_TRUE(deepep.cluster.nccl());
  EXPECT_EQ(deepep.training.moe_dispatcher, MoeDispatcher::kDeepEp);
  EXPECT_TRUE(deepep.cluster.deepep);
  EXPECT_FALSE(nccl.cluster.deepep);
  const DataParallel dp = data_parallel_ring(deepep.cluster, 1, 16, 4);
  EXPECT_TRUE(dp.deepep);
  EXPECT_EQ(dp.experts.per_node, 4);
  const LayerSpec& block = deepep.model.layers[1];
  ASSERT_GT(block.ep_bytes, 0);
  EXPECT_NEAR(deepep_copies(8, 2, dp.experts).nvlink, 3.0 * 13.0 / 28.0, 1e-12);
  EXPECT_NEAR(deepep_copies(8, 2, data_parallel_ring(deepep.cluster, 1, 16, 8).experts).nvlink,
              7.0 * 7.0 / 28.0, 1e-12);
  const std::vector<SimTime> with = layer_alltoalls(deepep.model, dp, 2);
  EXPECT_EQ(with[1], block.ep_alltoalls *
                         seconds_to_simtime(deepep_alltoall_seconds(
                             static_cast<double>(block.ep_bytes * 2) / 2, 8, 2, dp.experts)));
  const std::vector<SimTime> without =
      layer_alltoalls(nccl.model, data_parallel_ring(nccl.cluster, 1, 16, 4), 2);
  EXPECT_EQ(without[1],
            block.ep_alltoalls * seconds_to_simtime(nccl_alltoall_seconds(
                                     static_cast<double>(block.ep_bytes * 2), dp.experts)));
  EXPECT_LT(with[1], without[1]);
  EXPECT_EQ(with[0], 0);  // the embedding has no experts
}

TEST(DeepEp, ScenarioErrors) {
  expect_error({"training.moe_dispatcher=\"nccl\""}, "expected one of: alltoall, deepep");
  expect_error({"training.moe_dispatcher=\"deepep\""}, "has none (expected alltoall)", R"({
    "model": {"family": "transformer", "layers": 2, "d_model": 64, "heads": 4, "seq_len": 32,
              "vocab": 100},
    "cluster": {"preset": "dgx-a100", "devices": 8},
    "training": {"global_batch": 8, "micro_batches": 1}
  })");
  expect_error({"training.moe_dispatcher=\"deepep\"", "cluster.cost_model=\"analytic\""},
               "runs on GPUs' NVLink and RDMA");
  // A cost model given after the scenario is read is checked too: the
  // roofline would drop DeepEP's dispatch.
  Scenario sc = moe("deepep");
  try {
    apply_cost_model_argument(sc, "analytic");
    FAIL() << "the roofline took DeepEP's dispatch";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("--cost-model analytic: training.moe_dispatcher: ", 0),
              0u)
        << e.what();
  }
  EXPECT_NO_THROW(apply_cost_model_argument(sc, "kernels"));
}

// With E = 1 nothing is exchanged: the scenario takes the field, and a plan
// of E = 1 (which the planner may choose) records no dispatcher, so that
// replaying it asks nothing of DeepEP.
TEST(DeepEp, OneExpertRankExchangesNothing) {
  const Scenario sc = moe("deepep", 1);
  EXPECT_TRUE(sc.cluster.deepep);
  const Plan plan = testing::simulated_plan(sc, 1, 16);
  EXPECT_EQ(plan.moe_dispatcher, MoeDispatcher::kAllToAll);
  EXPECT_FALSE(plan_to_json(plan).contains("moe_dispatcher"));
}

TEST(DeepEp, PlansCarryItMegatronRunsItTheOthersRefuse) {
  const Scenario sc = moe("deepep");
  const Plan plan = testing::simulated_plan(sc, 1, 16);
  EXPECT_EQ(plan.moe_dispatcher, MoeDispatcher::kDeepEp);
  const nlohmann::json doc = plan_to_json(plan);
  EXPECT_EQ(doc["moe_dispatcher"], "deepep");
  EXPECT_FALSE(
      plan_to_json(testing::simulated_plan(moe("alltoall"), 1, 16)).contains("moe_dispatcher"));
  EXPECT_EQ(plan_from_json(doc, "p.json").moe_dispatcher, MoeDispatcher::kDeepEp);
  try {
    check_plan_matches(plan, moe("alltoall"), "p.json");
    FAIL() << "a plan of DeepEP matched a scenario of the all-to-all";
  } catch (const ScenarioError& e) {
    EXPECT_NE(std::string(e.what()).find("this plan's experts exchange tokens by deepep, the "
                                         "scenario's by alltoall"),
              std::string::npos)
        << e.what();
  }
  const std::string megatron = export_plan(plan, ExportFormat::kMegatron);
  EXPECT_NE(megatron.find("--moe-token-dispatcher-type flex"), std::string::npos) << megatron;
  EXPECT_NE(megatron.find("--moe-enable-deepep"), std::string::npos) << megatron;
  EXPECT_EQ(megatron.find("--moe-token-dispatcher-type alltoall"), std::string::npos) << megatron;
  try {
    export_plan(plan, ExportFormat::kTorchPipelining);
    FAIL() << "the device mesh took DeepEP";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("exchange tokens by DeepEP"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace pipescope
