// The planner's search over T: which T it tries, that its best plan is the
// best of planning every T alone (brute force over T), and a model whose
// blocks fit a device only when split.

#include <gtest/gtest.h>

#include <vector>

#include "scenario_docs.h"
#include "sim/engine/tensor_parallel.h"
#include "sim/plan/planner.h"
#include "sim/scenario/scenario_io.h"

namespace pipescope {
namespace {

using nlohmann::json;

// A small transformer on one DGX A100 node of 8 GPUs.
Scenario node_scenario() {
  json doc = testing::docs::good_doc();  // 4 blocks of 64, 4 heads, batch 32
  doc["model"]["heads"] = 8;
  doc["cluster"] = {{"preset", "dgx-a100"}, {"devices", 8}};
  doc["training"]["global_batch"] = 16;
  return parse_scenario(doc, "node.json");
}

TEST(TensorPlanner, TriesEveryTThatDividesANodeAndTheModel) {
  const Scenario sc = node_scenario();
  EXPECT_EQ(tensor_parallel_choices(sc), (std::vector<int>{1, 2, 4, 8}));
  Scenario six_heads = sc;
  six_heads.model.transformer = nullptr;  // not a transformer: whole layers only
  EXPECT_EQ(tensor_parallel_choices(six_heads), std::vector<int>{1});
  // Without nodes (all-to-all links) the planner keeps T = 1 unless told.
  json doc = testing::docs::good_doc();
  EXPECT_EQ(tensor_parallel_choices(parse_scenario(doc, "a.json")), std::vector<int>{1});
  // A scenario that gives T keeps it.
  doc["cluster"] = {{"preset", "dgx-a100"}, {"devices", 8}};
  doc["training"]["tensor_parallel"] = 1;
  const PlanReport fixed = run_planner(parse_scenario(doc, "a.json"), PlanRequest{});
  EXPECT_EQ(fixed.tensor_parallel, std::vector<int>{1});
}

TEST(TensorPlanner, BestPlanIsTheBestOfEachTPlannedAlone) {
  const Scenario sc = node_scenario();
  PlanRequest req;
  req.max_micro_batches = 4;
  req.remat = Remat::kAlways;
  const PlanReport all = run_planner(sc, req);
  ASSERT_FALSE(all.ranked.empty());
  EXPECT_EQ(all.tensor_parallel, (std::vector<int>{1, 2, 4, 8}));
  double best = 0.0;
  int best_t = 0;
  std::size_t tried = 0;
  for (const int T : {1, 2, 4, 8}) {
    PlanRequest one = req;
    one.tensor_parallel = T;
    const PlanReport r = run_planner(sc, one);
    tried += r.ranked.size() + r.rejected.size() + r.dominated.size() + r.bounded.size();
    for (const PlanCandidate& c : r.ranked) {
      EXPECT_EQ(c.tensor_parallel, T);
      EXPECT_EQ(c.stages * c.data_parallel * T, 8) << c.label();
    }
    if (!r.ranked.empty() && r.ranked.front().samples_per_s > best) {
      best = r.ranked.front().samples_per_s;
      best_t = T;
    }
  }
  EXPECT_EQ(all.ranked.size() + all.rejected.size() + all.dominated.size() + all.bounded.size(),
            tried);
  EXPECT_DOUBLE_EQ(all.ranked.front().samples_per_s, best);
  EXPECT_EQ(all.ranked.front().tensor_parallel, best_t);
  EXPECT_EQ(all.ranked.front().scenario->cluster.tensor_parallel, best_t);
}

TEST(TensorPlanner, BlocksTooLargeForOneDeviceAreSplit) {
  // Blocks of 8192 hold 805 M parameters, 12.9 GB with Adam in bf16 (16 bytes
  // each): more than a device's 12 GiB unless split over 2 or more.
  json doc = testing::docs::good_doc();
  doc["model"] = {{"family", "transformer"}, {"layers", 2},   {"d_model", 8192}, {"heads", 64},
                  {"seq_len", 256},          {"vocab", 1024}, {"dtype", "bf16"}};
  doc["cluster"] = {{"preset", "dgx-a100"}, {"devices", 8}};
  // ZeRO 0: sharding the optimizer over the replicas would let whole blocks fit.
  doc["training"] = {{"global_batch", 8}, {"micro_batches", 1}, {"optimizer", "adam"}, {"zero", 0}};
  Scenario sc = parse_scenario(doc, "big.json");
  sc.cluster.device.memory_bytes = Bytes{12} << 30;
  PlanRequest req;
  req.max_micro_batches = 2;
  const PlanReport r = run_planner(sc, req);
  ASSERT_FALSE(r.ranked.empty());
  for (const PlanCandidate& c : r.ranked) EXPECT_GT(c.tensor_parallel, 1) << c.label();
  PlanRequest whole = req;
  whole.tensor_parallel = 1;
  EXPECT_TRUE(run_planner(sc, whole).ranked.empty());
}

}  // namespace
}  // namespace pipescope
