// Whole experts beside tensor parallelism (training.expert_tensor_parallel 1,
// megatron-core's "parallel folding"): each of a tensor group's T devices
// is an expert rank, so the E spread over E of the T x D devices, tensor
// ranks first; the scenario field and its errors, the group and the ring
// that reduces the experts' gradients, ZeRO's shards, the planner's E, the
// plan file and the exports.

#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan_fixtures.h"
#include "planner_fixtures.h"
#include "scenario_docs.h"
#include "sim/engine/expert_parallel.h"
#include "sim/engine/simulator.h"
#include "sim/engine/zero.h"
#include "sim/export/plan_export.h"
#include "sim/formats/plan_io.h"
#include "sim/plan/planner.h"
#include "sim/scenario/scenario_io.h"
#include "sim_fixtures.h"

namespace pipescope {
namespace {

using testing::kMoeScenario;

// kMoeScenario (8 experts, 16 A100 in two nodes of 8) at T = 2 with
// sequence parallelism, E = `experts`, the experts whole or split over T.
Scenario tensor_moe(int experts, bool whole) {
  std::vector<std::string> set{"training.tensor_parallel=2", "training.sequence_parallel=true",
                               "training.expert_parallel=" + std::to_string(experts)};
  if (whole) set.push_back("training.expert_tensor_parallel=1");
  return parse_scenario_text(kMoeScenario, "etp.json", set);
}

void expect_scenario_error(const std::vector<std::string>& overrides, const std::string& fragment,
                           const std::string& text = kMoeScenario) {
  const ScenarioError e = testing::docs::error_of_text(text, overrides);
  EXPECT_EQ(e.json_path(), "training.expert_tensor_parallel") << e.what();
  EXPECT_NE(e.message().find(fragment), std::string::npos) << e.what();
}

TEST(ExpertTensorParallel, TheScenarioField) {
  const Scenario whole = tensor_moe(8, true);
  const Scenario split = tensor_moe(8, false);
  EXPECT_EQ(whole.training.expert_tensor_parallel, 1);
  EXPECT_EQ(split.training.expert_tensor_parallel, 0);
  EXPECT_EQ(whole.cluster.expert_fold, 2);
  EXPECT_EQ(split.cluster.expert_fold, 1);
  // One expert a device: whole, 2hf + f + h; split, (2hf + f) / 2 + h.
  const std::int64_t h = 64;
  EXPECT_EQ(whole.model.layers[1].expert_params, 2 * split.model.layers[1].expert_params - h);
  EXPECT_DOUBLE_EQ(whole.model.layers[1].fwd_flops, split.model.layers[1].fwd_flops);
  // Stated as T, the experts split as the dense layers do.
  const Scenario stated =
      parse_scenario_text(kMoeScenario, "etp.json",
                          {"training.tensor_parallel=2", "training.sequence_parallel=true",
                           "training.expert_tensor_parallel=2"});
  EXPECT_EQ(stated.training.expert_tensor_parallel, 0);
  // Without T the planner's T keeps them whole.
  EXPECT_EQ(parse_scenario_text(kMoeScenario, "etp.json", {"training.expert_tensor_parallel=1"})
                .training.expert_tensor_parallel,
            1);
}

TEST(ExpertTensorParallel, ScenarioErrors) {
  expect_scenario_error({"training.tensor_parallel=4", "training.sequence_parallel=true",
                         "training.expert_tensor_parallel=2"},
                        "expected 1 (whole experts) or training.tensor_parallel (4), got 2");
  expect_scenario_error({"training.tensor_parallel=2", "training.expert_tensor_parallel=1"},
                        "they need training.sequence_parallel true");
  expect_scenario_error({"training.expert_tensor_parallel=1"}, "has none (leave the field out)",
                        R"({
    "model": {"family": "transformer", "layers": 2, "d_model": 64, "heads": 4, "seq_len": 32,
              "vocab": 100},
    "cluster": {"preset": "dgx-a100", "devices": 8},
    "training": {"global_batch": 8, "micro_batches": 1}
  })");
}

// E = 8 of the T x D = 2 x 8 devices of one stage: ranks 0 to 7 are the
// tensor ranks of replicas 0 to 3, one node's GPUs; the experts of rank 0
// are held by ranks 0 and 8 too, a ring of 2 over the two nodes. Split over
// T, the 8 are replicas 0 to 7, every other GPU of the two nodes, and hold
// their experts alone.
TEST(ExpertTensorParallel, TheGroupTakesTheTensorRanksFirst) {
  const Scenario whole = tensor_moe(8, true);
  const DataParallel folded = data_parallel_ring(whole.cluster, 1, 8, 8);
  EXPECT_EQ(folded.experts.ranks, 8);
  EXPECT_EQ(folded.experts.per_node, 8);
  EXPECT_EQ(folded.experts.inter_bw, 0.0);
  EXPECT_EQ(folded.expert_fold, 2);
  EXPECT_EQ(expert_reduction_ring(folded).replicas, 2);
  EXPECT_EQ(expert_reduction_ring(folded).nodes, 2);
  const Scenario split = tensor_moe(8, false);
  const DataParallel apart = data_parallel_ring(split.cluster, 1, 8, 8);
  EXPECT_EQ(apart.experts.per_node, 4);
  EXPECT_EQ(expert_reduction_ring(apart).replicas, 1);
  // Inside one node and each device its own tokens' copies: the layer's
  // all-to-alls take less than the split experts' over two nodes.
  const std::vector<SimTime> near = layer_alltoalls(whole.model, folded, 1);
  const std::vector<SimTime> far = layer_alltoalls(split.model, apart, 1);
  ASSERT_EQ(near.size(), far.size());
  EXPECT_GT(near[1], 0);
  EXPECT_LT(near[1], far[1]);
  // ZeRO shards the experts over the 2 devices that hold them.
  EXPECT_EQ(expert_replicas(replica_scenario(whole, 1, 8)), 2);
  EXPECT_EQ(expert_replicas(replica_scenario(split, 1, 8)), 1);
}

// At K = 2 the 8 devices of a stage are 4 replicas of T = 2: E = 8 folds
// over them; split over T it does not divide the 4.
TEST(ExpertTensorParallel, EMayExceedTheReplicas) {
  EXPECT_EQ(data_parallel_ring(tensor_moe(8, true).cluster, 2, 4, 8).experts.ranks, 8);
  EXPECT_THROW(data_parallel_ring(tensor_moe(4, false).cluster, 2, 4, 8), ConfigError);
  try {
    data_parallel_ring(tensor_moe(8, true).cluster, 2, 2, 8);
    FAIL() << "E=8 of 2 replicas x 2 tensor ranks was laid out";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("x 2 tensor ranks with whole experts"), std::string::npos)
        << e.what();
  }
}

// The planner at T = 2 and K = 2 (D = 4) lays E = 8 out only with whole
// experts, with sequence parallelism.
TEST(ExpertTensorParallel, ThePlannerFoldsE) {
  PlanRequest request;
  request.tensor_parallel = 2;
  request.stages = 2;
  request.schedule = ScheduleKind::k1F1B;
  const auto planned_e = [&](const Scenario& sc) {
    std::set<int> out;
    for (const PlanCandidate& c : run_planner(sc, request).ranked) {
      EXPECT_EQ(c.data_parallel, 4) << c.label();
      EXPECT_TRUE(c.scenario->training.sequence_parallel) << c.label();
      out.insert(c.expert_parallel());
    }
    return out;
  };
  const Scenario whole =
      parse_scenario_text(kMoeScenario, "etp.json", {"training.expert_tensor_parallel=1"});
  // Whole experts: E a multiple of T (whole_experts_problem).
  EXPECT_EQ(planned_e(whole), (std::set<int>{2, 4, 8}));
  const Scenario split = parse_scenario_text(kMoeScenario, "etp.json");
  EXPECT_EQ(planned_e(split), (std::set<int>{1, 2, 4}));
}

TEST(ExpertTensorParallel, PlansCarryItAndMegatronTakesIt) {
  const Scenario sc = tensor_moe(8, true);
  ASSERT_EQ(sc.cluster.rank_order, RankOrder::kTpDpPp);
  const Plan plan = testing::simulated_plan(sc, 2, 4);
  EXPECT_EQ(plan.expert_tensor_parallel, 1);
  const nlohmann::json doc = plan_to_json(plan);
  EXPECT_EQ(doc["expert_tensor_parallel"], 1);
  EXPECT_FALSE(plan_to_json(testing::simulated_plan(tensor_moe(4, false), 2, 4))
                   .contains("expert_tensor_parallel"));
  const Plan read = plan_from_json(doc, "p.json");
  EXPECT_EQ(read.expert_tensor_parallel, 1);
  EXPECT_EQ(read.expert_parallel, 8);
  nlohmann::json bad = doc;
  bad["sequence_parallel"] = false;
  EXPECT_NE(testing::error_of(bad).find("need sequence parallelism"), std::string::npos);
  EXPECT_NO_THROW(check_plan_matches(plan, sc, "p.json"));
  try {
    check_plan_matches(plan, tensor_moe(8, false), "p.json");
    FAIL() << "a plan of whole experts matched a scenario of split ones";
  } catch (const ScenarioError& e) {
    EXPECT_NE(std::string(e.what()).find("this plan's experts are whole (expert_tensor_parallel "
                                         "1), the scenario's split over T"),
              std::string::npos)
        << e.what();
  }
  const std::string megatron = export_plan(plan, ExportFormat::kMegatron);
  for (const char* flag : {"--expert-model-parallel-size 8", "--expert-tensor-parallel-size 1",
                           "--tensor-model-parallel-size 2", "--sequence-parallel"}) {
    EXPECT_NE(megatron.find(flag), std::string::npos) << flag << " in\n" << megatron;
  }
  try {
    export_plan(plan, ExportFormat::kTorchPipelining);
    FAIL() << "the device mesh took whole experts beside T";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("keeps each expert whole beside T=2"), std::string::npos)
        << e.what();
  }
  // Replicas outermost with a pipeline: megatron-core keeps its groups only
  // for E = C x T = 2.
  Plan outer = plan;
  outer.rank_order = RankOrder::kTpPpDp;
  try {
    export_plan(outer, ExportFormat::kMegatron);
    FAIL() << "megatron took E=8 under tp-pp-dp with K=2";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("or with E = C x T = 2"), std::string::npos) << e.what();
  }
  outer.expert_parallel = 2;
  EXPECT_NO_THROW(export_plan(outer, ExportFormat::kMegatron));
}

}  // namespace
}  // namespace pipescope
