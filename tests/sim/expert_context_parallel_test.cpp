// Expert parallelism beside context parallelism: the experts over E of the
// D x C devices that hold a stage's weights, shares first (megatron-core's
// tp-cp-ep-dp-pp): the all-to-all group and the experts' holders on a
// cluster, each device's share of the tokens, the planner's D, and the plan
// file and exports of such plans.

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan_fixtures.h"
#include "sim/engine/expert_parallel.h"
#include "sim/engine/simulator.h"
#include "sim/engine/zero.h"
#include "sim/export/plan_export.h"
#include "sim/formats/plan_io.h"
#include "sim/plan/plan_candidates.h"
#include "sim/plan/planner.h"
#include "sim/scenario/scenario_io.h"

namespace pipescope {
namespace {

Scenario load_scenario_text(const std::string& text,
                            const std::vector<std::string>& overrides = {}) {
  return parse_scenario_text(text, "ep.json", overrides);
}

// Under context parallelism the experts spread over E of the D x C devices
// that hold a stage's weights, shares first (megatron-core's tp-cp-ep-dp):
// on DGX A100 nodes with C = 2, slot j is share j % 2 of replica j / 2,
// device j at K = 1.
constexpr const char* kLongMoeScenario = R"({
  "model": {"family": "transformer", "layers": 8, "d_model": 64, "heads": 4, "seq_len": 8192,
            "vocab": 100, "experts": 16, "experts_per_token": 2, "dtype": "bf16"},
  "cluster": {"preset": "dgx-a100", "devices": 32},
  "training": {"global_batch": 64, "micro_batches": 4, "optimizer": "adam"}
})";
const std::vector<std::string> kSharesOfTwo{"training.context_parallel=2"};

Scenario long_moe(const std::vector<std::string>& overrides) {
  std::vector<std::string> all = kSharesOfTwo;
  all.insert(all.end(), overrides.begin(), overrides.end());
  return load_scenario_text(kLongMoeScenario, all);
}

TEST(ExpertParallel, UnderContextParallelismTheGroupIsTheFirstESlots) {
  const Scenario sc = long_moe({"training.expert_parallel=4"});
  ASSERT_EQ(sc.cluster.context_parallel, 2);
  EXPECT_EQ(sc.model.expert_parallel, 4);
  // 16 groups of C = 2 devices. E = 4 at K = 1, D = 16: devices 0 to 3, one
  // node; E = 16: devices 0 to 15, two.
  const DataParallel four = data_parallel_ring(sc.cluster, 1, 16, 4);
  EXPECT_EQ(four.experts.ranks, 4);
  EXPECT_EQ(four.experts.per_node, 4);
  EXPECT_EQ(four.experts.inter_bw, 0.0);
  const DataParallel sixteen = data_parallel_ring(sc.cluster, 1, 16, 16);
  EXPECT_EQ(sixteen.experts.ranks, 16);
  EXPECT_EQ(sixteen.experts.per_node, 8);
  EXPECT_GT(sixteen.experts.inter_bw, 0.0);
  // The experts' holders: D x C / E = 32 / 4 = 8 devices (slots 0, 4, ...,
  // 28: four nodes), over no shares of their own; the dense ring all 32.
  const DataParallel holders = expert_reduction_ring(four);
  EXPECT_EQ(four.reducers(), 32);
  EXPECT_EQ(holders.replicas, 8);
  EXPECT_EQ(holders.reducers(), 8);
  EXPECT_EQ(holders.nodes, 4);
  EXPECT_EQ(expert_reduction_ring(sixteen).reducers(), 2);
  EXPECT_EQ(expert_reduction_ring(sixteen).nodes, 2);
  // One replica (K = 16, D = 1): E = 2 are its two shares, devices 0 and 1.
  const DataParallel one = data_parallel_ring(sc.cluster, 16, 1, 2);
  EXPECT_EQ(one.experts.ranks, 2);
  EXPECT_EQ(one.experts.per_node, 2);
  EXPECT_EQ(expert_reduction_ring(one).reducers(), 1);
  // ... on the links of its shares: PCIe through the host on such a server.
  const Scenario pcie =
      long_moe({"training.expert_parallel=2", "cluster.preset=h100-pcie", "cluster.devices=8"});
  const DataParallel host = data_parallel_ring(pcie.cluster, 4, 1, 2);
  EXPECT_EQ(host.intra, LinkClass::kPcie);
  EXPECT_EQ(host.experts.intra, LinkClass::kPcie);
  EXPECT_EQ(host.experts.ranks, 2);
  // D x C = 3 x 2 devices do not take E = 4.
  try {
    data_parallel_ring(sc.cluster, 1, 3, 4);
    FAIL() << "E = 4 spread over 6 devices";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.scenario_field(), "training.expert_parallel");
    EXPECT_NE(std::string(e.what()).find("3 data-parallel replicas x 2 context-parallel shares"),
              std::string::npos)
        << e.what();
  }
}

// Each device routes its own share's tokens: 4,096 of a sample, a C-th of
// what the whole sequence sends; and ZeRO shards the experts over their
// D x C / E holders.
TEST(ExpertParallel, UnderContextParallelismEachDeviceRoutesItsShare) {
  const Scenario whole = load_scenario_text(kLongMoeScenario, {"training.expert_parallel=4"});
  const Scenario share = long_moe({"training.expert_parallel=4"});
  // e s k h: 2 x 4,096 x 2 x 64 bytes, half the whole sequence's.
  EXPECT_EQ(share.model.layers[1].ep_bytes, 2 * 4096 * 2 * 64);
  EXPECT_EQ(share.model.layers[1].ep_bytes * 2, whole.model.layers[1].ep_bytes);
  const Scenario replica = replica_scenario(share, 1, 16);
  EXPECT_EQ(replica.training.zero_replicas, 32);
  EXPECT_EQ(expert_replicas(replica), 8);
}

// The planner lays out D whose D x C the E divides, not only D that E does:
// E = 4 at C = 2 takes D = 2.
TEST(ExpertParallel, ThePlannerKeepsDTimesCAMultipleOfE) {
  const Scenario sc = long_moe({"training.expert_parallel=4"});
  PlanRequest request;
  request.tensor_parallel = 1;
  request.schedule = ScheduleKind::k1F1B;
  const PlanReport report = run_planner(sc, request);
  ASSERT_FALSE(report.ranked.empty());
  std::set<int> ds;
  for (const PlanCandidate& c : report.ranked) {
    EXPECT_EQ(c.data_parallel * 2 % 4, 0) << c.label();
    EXPECT_EQ(c.context_parallel(), 2) << c.label();
  }
  for (const PlanCandidate& c : candidates_of(std::make_shared<const Scenario>(sc), request, 16)) {
    ds.insert(c.data_parallel);
  }
  EXPECT_EQ(ds, (std::set<int>{2, 4, 8, 16}));
  // Searched: E beside C, each E of the 16 experts with each C.
  const PlanReport searched = run_planner(load_scenario_text(kLongMoeScenario), request);
  EXPECT_EQ(searched.context_parallel, (std::vector<int>{1, 2}));
  EXPECT_EQ(searched.expert_parallel, (std::vector<int>{1, 2, 4, 8, 16}));
  std::set<std::pair<int, int>> tried;
  for (const auto* list : {&searched.ranked, &searched.dominated, &searched.bounded}) {
    for (const PlanCandidate& c : *list) {
      tried.insert({c.expert_parallel(), c.context_parallel()});
    }
  }
  EXPECT_TRUE(tried.count({4, 2})) << "E = 4 beside C = 2 was not tried";
}

// Such a plan's file and exports: Megatron-LM takes it (under tp-pp-dp
// beside a pipeline only E = C), PyTorch's device mesh has no layout for it.
TEST(ExpertParallel, PlansOfEBesideCReadBackAndExport) {
  const Scenario both = long_moe({"training.expert_parallel=4"});
  const Plan shares = testing::simulated_plan(both, 1, 16);
  // The plan's file keeps E of the D x C (D = 16 takes E = 4 either way;
  // the reader's check is of D x C, so E = 32 of D = 16 reads back).
  nlohmann::json doc = plan_to_json(shares);
  EXPECT_EQ(plan_from_json(doc, "p.json").expert_parallel, 4);
  doc["E"] = 32;
  doc["model"]["spec"] = nullptr;  // without the spec, which 32 cannot split
  EXPECT_EQ(plan_from_json(doc, "p.json").expert_parallel, 32);
  doc["E"] = 64;
  try {
    plan_from_json(doc, "p.json");
    FAIL() << "E=64 of D x C = 32 was read";
  } catch (const ScenarioError& e) {
    EXPECT_EQ(e.json_path(), "E");
    EXPECT_NE(std::string(e.what()).find("expected a divisor of D x C = 32"), std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(export_plan(shares, ExportFormat::kMegatron));
  // Megatron-LM under tp-pp-dp beside a pipeline: only E = C keeps the
  // experts' data parallelism, D x C / E, the whole D that megatron-core
  // asks for.
  const Plan e_is_c = testing::simulated_plan(
      long_moe({"training.expert_parallel=2", "cluster.rank_order=tp-pp-dp"}), 2, 8);
  EXPECT_NO_THROW(export_plan(e_is_c, ExportFormat::kMegatron));
  const Plan e_over_c = testing::simulated_plan(
      long_moe({"training.expert_parallel=4", "cluster.rank_order=tp-pp-dp"}), 2, 8);
  try {
    export_plan(e_over_c, ExportFormat::kMegatron);
    FAIL() << "megatron took E=4 beside C=2 under tp-pp-dp with K=2";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("D x C / E, to be the whole D); plan with "
                                         "cluster.rank_order tp-dp-pp, or with E = C"),
              std::string::npos)
        << e.what();
  }
  try {
    export_plan(shares, ExportFormat::kTorchPipelining);
    FAIL() << "the device mesh took E beside C";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("of the D x C devices (expert parallelism beside "
                                         "context parallelism), which the device mesh does not "
                                         "lay out; export it to megatron"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace pipescope
