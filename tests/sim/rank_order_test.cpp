// Rank orders: where a job's K x D x T ranks sit on a cluster of nodes. tp-pp-dp
// puts a replica's stages on consecutive groups (replicas outermost); tp-dp-pp,
// Megatron-LM's and DeepSpeed's order, puts a stage's replicas side by side
// (stages outermost). Routes, the replicas' ring, plan files and exports.

#include <gtest/gtest.h>

#include <string>

#include "scenario_docs.h"
#include "sim/engine/simulator.h"
#include "sim/export/plan_export.h"
#include "sim/formats/plan_io.h"
#include "sim/plan/plan.h"
#include "sim/plan/planner.h"
#include "sim/scenario/scenario_io.h"

namespace pipescope {
namespace {

// 16 devices of dgx-h100 (nodes of 8: NVSwitch at 450 GB/s, 2 us; 50 GB/s and
// 5 us a side between nodes), links at the kernels model's 0.8 of peak.
Scenario nodes_scenario(const std::string& order) {
  nlohmann::json doc = testing::docs::good_doc();
  doc["cluster"] = {{"preset", "dgx-h100"}, {"devices", 16}, {"rank_order", order}};
  return parse_scenario(doc, "nodes.json");
}
constexpr double kInside = 0.8 * 450e9;
constexpr double kAcross = 0.96 * 50e9;  // a NIC: network_efficiency

double bandwidth(const std::vector<Hop>& hops) {
  double b = 0.0;
  for (const Hop& h : hops) b = b == 0.0 ? h.bandwidth : std::min(b, h.bandwidth);
  return b;
}

TEST(RankOrder, ParsesAndNamesItsTwoOrders) {
  EXPECT_EQ(parse_rank_order("tp-pp-dp"), RankOrder::kTpPpDp);
  EXPECT_EQ(parse_rank_order("tp-dp-pp"), RankOrder::kTpDpPp);
  EXPECT_FALSE(parse_rank_order("pp-dp-tp").has_value());
  EXPECT_EQ(to_string(RankOrder::kTpDpPp), "tp-dp-pp");
  EXPECT_EQ(nodes_scenario("tp-dp-pp").cluster.rank_order, RankOrder::kTpDpPp);
  nlohmann::json doc = testing::docs::good_doc();
  // The framework's: megatron-core's on a GPU, ideal's elsewhere.
  EXPECT_EQ(parse_scenario(doc, "d.json").cluster.rank_order, RankOrder::kTpDpPp);
  doc["training"]["framework"] = "ideal";
  EXPECT_EQ(parse_scenario(doc, "d.json").cluster.rank_order, RankOrder::kTpPpDp);
  doc["cluster"]["rank_order"] = "dp-first";
  try {
    parse_scenario(doc, "d.json");
    ADD_FAILURE() << "accepted";
  } catch (const ScenarioError& e) {
    EXPECT_STREQ(e.what(),
                 "d.json: cluster.rank_order: unknown rank order 'dp-first' (expected one of: "
                 "tp-pp-dp, tp-dp-pp)");
  }
}

TEST(RankOrder, StagesOuterSpreadsAReplicasStagesOverTheNodes) {
  // K = 8, D = 2. tp-pp-dp: replica 0's stages are devices 0-7, one node.
  // tp-dp-pp: they are devices 0, 2, ..., 14, so stage 3 -> 4 (device 6 -> 8)
  // crosses nodes, and the replica ring's hop (device 0 -> 1) does not.
  const Scenario outer = replica_scenario(nodes_scenario("tp-dp-pp"), 8, 2);
  EXPECT_EQ(outer.cluster.group_stride, 2);
  EXPECT_DOUBLE_EQ(bandwidth(outer.cluster.route(2, 3)), kInside);
  EXPECT_DOUBLE_EQ(bandwidth(outer.cluster.route(3, 4)), kAcross);
  const Scenario inner = replica_scenario(nodes_scenario("tp-pp-dp"), 8, 2);
  EXPECT_EQ(inner.cluster.group_stride, 1);
  EXPECT_DOUBLE_EQ(bandwidth(inner.cluster.route(3, 4)), kInside);

  const DataParallel ring_outer = data_parallel_ring(nodes_scenario("tp-dp-pp").cluster, 8, 2);
  EXPECT_DOUBLE_EQ(ring_outer.bandwidth, kInside);
  EXPECT_DOUBLE_EQ(ring_outer.latency_s, 2 * 2e-6);
  const DataParallel ring_inner = data_parallel_ring(nodes_scenario("tp-pp-dp").cluster, 8, 2);
  EXPECT_DOUBLE_EQ(ring_inner.bandwidth, kAcross);
  EXPECT_DOUBLE_EQ(ring_inner.latency_s, 2 * 5e-6);
}

TEST(RankOrder, TheRingMovesAtItsSlowestHop) {
  // K = 2, D = 8 under tp-pp-dp: replicas start at devices 0, 2, ..., 14; the
  // hop 6 -> 8 and the wrap-around 14 -> 0 cross nodes, the other six do not.
  const DataParallel ring = data_parallel_ring(nodes_scenario("tp-pp-dp").cluster, 2, 8);
  EXPECT_DOUBLE_EQ(ring.bandwidth, kAcross);
  EXPECT_DOUBLE_EQ(ring.latency_s, 2 * 5e-6);
  // K = 2, D = 4 on the first 8 devices: every hop inside node 0.
  const DataParallel inside = data_parallel_ring(nodes_scenario("tp-pp-dp").cluster, 2, 4);
  EXPECT_DOUBLE_EQ(inside.bandwidth, kInside);
}

TEST(RankOrder, ChangesTheSimulatedStepOnlyThroughItsRoutes) {
  // T = 2, K = 4, D = 2 on 16 devices: under tp-pp-dp a replica's pipeline is
  // one node; under tp-dp-pp stages 1 -> 2 cross nodes (devices 4 -> 8), so its
  // transfers take longer and the gradient ring, inside a node now, less.
  const auto run = [](const std::string& order) {
    nlohmann::json doc = testing::docs::good_doc();
    doc["cluster"] = {{"preset", "dgx-h100"}, {"devices", 16}, {"rank_order", order}};
    doc["training"]["tensor_parallel"] = 2;
    const Scenario whole = parse_scenario(doc, "t.json");
    SimConfig cfg;
    cfg.stages = 4;
    cfg.data_parallel = data_parallel_ring(whole.cluster, 4, 2);
    return simulate(replica_scenario(whole, 4, 2), cfg);
  };
  const SimResult inner = run("tp-pp-dp");
  const SimResult outer = run("tp-dp-pp");
  // The trace names the devices each group runs on: group 1 on devices 2-3,
  // or, with the two replicas side by side, 4-5.
  ASSERT_EQ(outer.timeline.device_names.size(), 4u);
  EXPECT_EQ(inner.timeline.device_names[1], "group 1 (devices 2-3, dgx-h100)");
  EXPECT_EQ(outer.timeline.device_names[1], "group 1 (devices 4-5, dgx-h100)");
  EXPECT_GT(outer.metrics.comm_time, inner.metrics.comm_time);
  EXPECT_LT(outer.stage_costs[0].allreduce, inner.stage_costs[0].allreduce);
  EXPECT_EQ(outer.stage_costs[0].forward, inner.stage_costs[0].forward);
}

Plan two_replica_plan(const std::string& order, int T = 2) {
  nlohmann::json doc = testing::docs::good_doc();
  doc["cluster"] = {{"preset", "dgx-h100"}, {"devices", 4 * T}, {"rank_order", order}};
  doc["training"]["tensor_parallel"] = T;
  const Scenario whole = parse_scenario(doc, "p.json");
  SimConfig cfg;
  cfg.stages = 2;
  cfg.schedule = ScheduleKind::k1F1B;
  cfg.data_parallel = data_parallel_ring(whole.cluster, 2, 2);
  const Scenario replica = replica_scenario(whole, 2, 2);
  return make_plan(replica, simulate(replica, cfg), 2, "optimal");
}

TEST(RankOrder, PlanFilesRecordItAndRefuseAnotherScenarios) {
  const Plan p = two_replica_plan("tp-dp-pp");
  EXPECT_EQ(p.rank_order, RankOrder::kTpDpPp);
  nlohmann::json doc = plan_to_json(p);
  EXPECT_EQ(doc["cluster"]["rank_order"], "tp-dp-pp");
  EXPECT_EQ(plan_from_json(doc, "p.json").rank_order, RankOrder::kTpDpPp);
  doc["cluster"].erase("rank_order");  // plans written before rank orders
  EXPECT_EQ(plan_from_json(doc, "p.json").rank_order, RankOrder::kTpPpDp);

  nlohmann::json sc = testing::docs::good_doc();
  sc["cluster"] = {{"preset", "dgx-h100"}, {"devices", 8}, {"rank_order", "tp-pp-dp"}};
  sc["training"]["tensor_parallel"] = 2;
  try {
    check_plan_matches(p, parse_scenario(sc, "s.json"), "p.json");
    ADD_FAILURE() << "accepted";
  } catch (const ScenarioError& e) {
    EXPECT_STREQ(e.what(),
                 "p.json: cluster.rank_order: this plan places its ranks tp-dp-pp, the scenario "
                 "tp-pp-dp (--set cluster.rank_order=tp-dp-pp runs the plan's)");
  }
  sc["cluster"]["rank_order"] = "tp-dp-pp";
  EXPECT_NO_THROW(check_plan_matches(p, parse_scenario(sc, "s.json"), "p.json"));
}

TEST(RankOrder, ExportsLayTheRanksOutAsThePlanDoes) {
  const Plan inner = two_replica_plan("tp-pp-dp");
  const Plan outer = two_replica_plan("tp-dp-pp");
  // Megatron-LM's own order is tp-dp-pp; tp-pp-dp takes its mapping flag.
  EXPECT_NE(export_plan(inner, ExportFormat::kMegatron).find("--use-tp-pp-dp-mapping"),
            std::string::npos);
  EXPECT_EQ(export_plan(outer, ExportFormat::kMegatron).find("--use-tp-pp-dp-mapping"),
            std::string::npos);
  // DeepSpeed's default topology (pipe, data, model) is tp-dp-pp.
  EXPECT_NE(export_plan(two_replica_plan("tp-pp-dp", 1), ExportFormat::kDeepSpeed)
                .find("topology=ProcessTopology(axes=[\"data\", \"pipe\", \"model\"], "
                      "dims=[2, 2, 1])"),
            std::string::npos);
  EXPECT_EQ(export_plan(two_replica_plan("tp-dp-pp", 1), ExportFormat::kDeepSpeed)
                .find("ProcessTopology"),
            std::string::npos);
  // PyTorch's mesh, row-major: the outermost dimension first.
  EXPECT_NE(export_torch_device_mesh(inner).find("MESH_DIM_NAMES = (\"dp\", \"pp\", \"tp\")"),
            std::string::npos);
  EXPECT_NE(export_torch_device_mesh(outer).find("MESH_DIM_NAMES = (\"pp\", \"dp\", \"tp\")"),
            std::string::npos);
}

}  // namespace
}  // namespace pipescope
