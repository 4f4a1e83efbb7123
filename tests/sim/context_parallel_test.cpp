// Context parallelism in the simulation: the ring among a group's C shares
// of the sequence on a cluster, what its exchanges add to an op beyond the
// attention they overlap (by hand), the gradient reduction over D x C, the
// scenario field and its errors, plans and the exports.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "scenario_docs.h"
#include "sim/engine/context_parallel.h"
#include "sim/engine/simulator.h"
#include "sim/engine/timeline.h"
#include "sim/export/plan_export.h"
#include "sim/formats/plan_io.h"
#include "sim/plan/plan.h"
#include "sim/plan/planner.h"
#include "sim/scenario/scenario_io.h"

namespace pipescope {
namespace {

// A cost model whose attention core takes `core` ns forward, whatever the
// layer and the batch; the rest of a layer 1 ns.
class CoreOnly final : public CostModel {
 public:
  explicit CoreOnly(SimTime core) : core_(core) {}
  std::string_view name() const override { return "core-only"; }
  std::string_view description() const override { return "test"; }
  SimTime forward(const LayerSpec&, std::int64_t) const override { return 1; }
  SimTime backward(const LayerSpec&, std::int64_t) const override { return 1; }
  SimTime recompute(const LayerSpec&, std::int64_t) const override { return 1; }
  SimTime core_recompute(const LayerSpec&, std::int64_t) const override { return core_; }
  SimTime core_backward(const LayerSpec&, std::int64_t) const override { return 2 * core_; }
  SimTime optimizer_step(std::int64_t) const override { return 0; }

 private:
  SimTime core_;
};

// A layer of C = 4 (3 steps) with 1000 bytes of keys and values a sample,
// and its ring at 1 GB/s with 2 us a step.
LayerSpec four_way_layer() {
  LayerSpec layer;
  layer.cp_steps = 3;
  layer.cp_bytes = 1000;
  return layer;
}
DataParallel four_way_ring() {
  DataParallel ring;
  ring.replicas = 4;
  ring.bandwidth = 1e9;
  ring.latency_s = 2e-6;
  return ring;
}

TEST(ContextParallel, TheExchangesCostWhatOutlastsTheirShareOfTheAttention) {
  // C = 4 (3 steps), 1000 bytes a sample a step, a micro-batch of 2, a ring
  // at 1 GB/s with 2 us a step: a forward step sends 2000 bytes in 2 + 2 =
  // 4 us beside a quarter of the 8 us attention (2 us), 2 us exposed a step;
  // a backward step sends 4000 bytes in 6 us beside twice that (4 us).
  const LayerSpec layer = four_way_layer();
  const DataParallel ring = four_way_ring();
  EXPECT_EQ(ring_step_time(ring, 2000), 4000);
  const ContextExchanges x = context_exchanges(layer, 2, ring, CoreOnly(8000));
  EXPECT_EQ(x.forward, 3 * (4000 - 2000));
  EXPECT_EQ(x.backward, 3 * (6000 - 4000));
  // An attention long enough hides them whole.
  const ContextExchanges hidden = context_exchanges(layer, 2, ring, CoreOnly(24000));
  EXPECT_EQ(hidden.forward, 0);
  EXPECT_EQ(hidden.backward, 0);
  // A layer without attention exchanges nothing.
  EXPECT_EQ(context_exchanges(LayerSpec{}, 2, ring, CoreOnly(0)).forward, 0);
}

// A transformer whose sequence C can split, on DGX A100 nodes of 8.
constexpr const char* kLongContext = R"({
  "model": {"family": "transformer", "layers": 4, "d_model": 256, "heads": 16, "kv_heads": 8,
            "seq_len": 4096, "vocab": 1000, "dtype": "bf16"},
  "cluster": {"preset": "dgx-a100", "devices": 32},
  "training": {"global_batch": 8, "micro_batches": 4, "optimizer": "adam"}
})";

Scenario load(const std::vector<std::string>& overrides = {}) {
  return parse_scenario_text(kLongContext, "cp.json", overrides);
}

double least_bandwidth(const std::vector<Hop>& hops) {
  double bw = hops.front().bandwidth;
  for (const Hop& h : hops) bw = std::min(bw, h.bandwidth);
  return bw;
}

TEST(ContextParallel, TheScenarioGroupsTTimesCDevices) {
  const Scenario sc = load({"training.tensor_parallel=2", "training.context_parallel=4"});
  EXPECT_EQ(sc.training.context_parallel, 4);
  EXPECT_EQ(sc.model.context_parallel, 4);
  EXPECT_EQ(sc.cluster.context_parallel, 4);
  EXPECT_EQ(sc.cluster.group_size(), 8);
  EXPECT_EQ(sc.cluster.devices, 4);  // 32 devices in groups of 8
  EXPECT_EQ(sc.cluster.physical_devices(), 32);
  EXPECT_EQ(sc.cluster.devices_text(4), "4 groups of T=2 x C=4 devices");
  // Each block computes a quarter of the whole model's block.
  const Scenario whole = load({"training.tensor_parallel=2"});
  EXPECT_DOUBLE_EQ(sc.model.layers[1].fwd_flops * 4, whole.model.layers[1].fwd_flops);
}

TEST(ContextParallel, TheRingRunsInsideANodeOrAcrossNodes) {
  // T = 2, C = 4: devices 0, 2, 4, 6 of a node; T = 8, C = 2: devices 0 and
  // 8, on two nodes.
  const Scenario inside = load({"training.tensor_parallel=2", "training.context_parallel=4"});
  const DataParallel a = context_ring(inside.cluster);
  EXPECT_EQ(a.replicas, 4);
  EXPECT_EQ(a.nodes, 1);
  EXPECT_DOUBLE_EQ(a.bandwidth, least_bandwidth(inside.cluster.physical_route(0, 2)));
  const Scenario across = load({"training.tensor_parallel=8", "training.context_parallel=2"});
  const DataParallel b = context_ring(across.cluster);
  EXPECT_EQ(b.replicas, 2);
  EXPECT_EQ(b.nodes, 2);
  EXPECT_DOUBLE_EQ(b.bandwidth, least_bandwidth(across.cluster.physical_route(0, 8)));
  EXPECT_LT(b.bandwidth, a.bandwidth);
}

// The T rings of a group run at once: across nodes whose 8 GPUs share one
// NIC each, T = 8 rings of C = 2 give each an eighth of the NIC; with a NIC
// a GPU, each its own. (T = 8 puts each share's group on a node of its own.)
TEST(ContextParallel, TheTensorRanksRingsShareTheNodesNics) {
  const auto cluster_of = [](int nics) {
    Scenario sc = load({"training.tensor_parallel=8", "training.context_parallel=2"});
    sc.cluster.interconnect.nics_per_node = nics;
    sc.cluster.graph.reset();
    sc.cluster.build_topology();
    return sc.cluster;
  };
  const Cluster own_nics = cluster_of(8);
  const DataParallel own = context_ring(own_nics);
  const DataParallel shared = context_ring(cluster_of(1));
  ASSERT_EQ(own.replicas, 2);
  EXPECT_DOUBLE_EQ(own.bandwidth, least_bandwidth(own_nics.physical_route(0, 8)));
  EXPECT_DOUBLE_EQ(shared.bandwidth, own.bandwidth / 8);
  EXPECT_DOUBLE_EQ(shared.latency_s, own.latency_s);
}

TEST(ContextParallel, TheGradientsReduceOverTheShares) {
  // One replica of C = 2 still reduces its gradients, over its two shares;
  // with D = 2 over the four devices that hold the same weights.
  const Scenario sc = load({"training.tensor_parallel=8", "training.context_parallel=2"});
  const DataParallel one = data_parallel_ring(sc.cluster, 2, 1);
  EXPECT_EQ(one.replicas, 1);
  EXPECT_EQ(one.context, 2);
  EXPECT_EQ(one.reducers(), 2);
  EXPECT_GT(allreduce_time(one, 1 << 20), 0);
  const DataParallel two = data_parallel_ring(sc.cluster, 1, 2);
  EXPECT_EQ(two.reducers(), 4);
  EXPECT_EQ(two.nodes, 4);  // replicas of a two-node group
  SimConfig cfg;
  cfg.stages = 2;
  cfg.data_parallel = one;
  const SimResult r = simulate(replica_scenario(sc, 2, 1), cfg);
  EXPECT_EQ(r.context_parallel, 2);
  for (const StageCost& c : r.stage_costs) {
    EXPECT_EQ(c.allreduce, allreduce_time(one, c.grad_bytes));
    EXPECT_GT(c.allreduce, 0);
  }
  // ZeRO shards over D x C.
  EXPECT_EQ(replica_scenario(sc, 1, 2).training.zero_replicas, 4);
}

// A CPU profile's gradient sum of as many ranks at T = 1 times the
// shares' reduction (latency + B / bandwidth), in any simulation with the
// profile; of another count of ranks, beside T > 1, over replicas as well
// (which the executor does not run as one group) or from a GPU profile, the
// links do.
TEST(ContextParallel, TheProfilesGradientSumTimesTheSharesReduction) {
  const auto ring = [](const std::string& T, int ranks, int replicas, const char* backend) {
    Scenario sc = load({"training.tensor_parallel=" + T, "training.context_parallel=2"});
    auto profile = std::make_shared<Profile>();
    profile->backend = backend;
    profile->gradient_sum = {ranks, 30e-6, 2e9};
    sc.cluster.profile = profile;
    return data_parallel_ring(sc.cluster, 2 / replicas, replicas);
  };
  const DataParallel measured = ring("1", 2, 1, "cpu");
  EXPECT_EQ(measured.measured_sum.ranks, 2);
  const double sum_s = 30e-6 + (1 << 20) / 2e9;
  EXPECT_NEAR(simtime_to_seconds(allreduce_time(measured, 1 << 20)), sum_s, 1e-9);
  EXPECT_NEAR(simtime_to_seconds(allreduce_time(measured, 1 << 20, 3)), sum_s + 60e-6, 1e-9);
  const DataParallel other = ring("1", 4, 1, "cpu");
  EXPECT_EQ(other.measured_sum.ranks, 0);
  EXPECT_GT(std::abs(simtime_to_seconds(allreduce_time(other, 1 << 20)) - sum_s), 1e-7);
  EXPECT_EQ(ring("2", 2, 1, "cpu").measured_sum.ranks, 0);
  EXPECT_EQ(ring("1", 4, 2, "cpu").measured_sum.ranks, 0);
  EXPECT_EQ(ring("1", 2, 1, "cuda").measured_sum.ranks, 0);
}

TEST(ContextParallel, AnOpEndsWithWhatItsExchangesAdd) {
  // Across two nodes the ring is slow against a short sequence's attention,
  // and each block's forward and backward end with what it adds.
  Scenario sc = load({"training.tensor_parallel=8", "training.context_parallel=2"});
  sc.cluster.interconnect.inter_node_bandwidth = 1e8;
  sc.cluster.graph.reset();
  sc.cluster.build_topology();
  SimConfig cfg;
  cfg.stages = 1;
  cfg.remat = Remat::kNever;
  cfg.data_parallel = data_parallel_ring(sc.cluster, 1, 1);
  const SimResult r = simulate(replica_scenario(sc, 1, 1), cfg);
  ASSERT_EQ(r.stage_costs.size(), 1u);
  const StageCost& c = r.stage_costs[0];
  const DataParallel ring = context_ring(sc.cluster);
  const std::unique_ptr<CostModel> cost = make_cost_model(sc);
  SimTime forward = 0, backward = 0;
  for (const LayerSpec& l : sc.model.layers) {
    const ContextExchanges x = context_exchanges(l, 2, ring, *cost);
    forward += x.forward;
    backward += x.backward;
  }
  EXPECT_GT(forward, 0);
  EXPECT_EQ(c.cp_forward, forward);
  EXPECT_EQ(c.cp_backward, backward);
  // Four blocks, one step each of K and V: 2 x 2048 tokens x d_kv / T
  // (8 key/value heads of 16 over T = 8: 16) x 2 bytes a sample, two
  // samples a micro-batch.
  EXPECT_EQ(c.cp_bytes, 4 * 2 * 2048 * 16 * 2 * 2);
  // On the timeline: a context lane after each forward and backward.
  int exchanges = 0;
  for (const TimelineEvent& e : r.timeline.events) {
    if (e.kind != EventKind::kContextExchange) continue;
    ++exchanges;
    EXPECT_EQ(e.lane, Lane::kContext);
  }
  EXPECT_EQ(exchanges, 2 * 4);  // F and B of 4 micro-batches (remat off)
}

TEST(ContextParallel, TheFieldsErrorsNameIt) {
  const auto error = [](const std::vector<std::string>& overrides) {
    return testing::docs::error_of_text(kLongContext, overrides);
  };
  const ScenarioError odd = error({"training.context_parallel=3"});
  EXPECT_EQ(odd.json_path(), "training.context_parallel");
  EXPECT_NE(odd.message().find("do not divide"), std::string::npos) << odd.what();
  const ScenarioError unfused = error({"training.context_parallel=2", "model.attention=unfused"});
  EXPECT_EQ(unfused.json_path(), "training.context_parallel");
  EXPECT_NE(unfused.message().find("unfused"), std::string::npos) << unfused.what();
  const ScenarioError zero3 = error({"training.context_parallel=2", "training.zero=3"});
  EXPECT_NE(zero3.message().find("ZeRO-3"), std::string::npos) << zero3.what();
  const ScenarioError groups =
      error({"training.context_parallel=64"});  // 32 devices cannot hold groups of 64
  EXPECT_EQ(groups.json_path(), "training.context_parallel");
  EXPECT_NE(groups.message().find("does not divide the cluster's"), std::string::npos)
      << groups.what();
  const ScenarioError zero = error({"training.context_parallel=0"});
  EXPECT_EQ(zero.json_path(), "training.context_parallel");
}

TEST(ContextParallel, PlansCarryCAndMegatronRunsIt) {
  const Scenario sc = load({"training.tensor_parallel=4", "training.context_parallel=2"});
  PlanRequest req;
  req.stages = 2;
  req.micro_batches = 4;
  req.schedule = ScheduleKind::k1F1B;
  const PlanReport report = run_planner(sc, req);
  ASSERT_FALSE(report.ranked.empty());
  const PlanCandidate& best = report.ranked.front();
  EXPECT_EQ(best.context_parallel(), 2);
  const Plan plan = make_plan(replica_scenario(*best.scenario, best.stages, best.data_parallel),
                              best.result, best.data_parallel, "optimal");
  EXPECT_EQ(plan.context_parallel, 2);
  EXPECT_EQ(plan.devices, 2 * best.data_parallel * 4 * 2);
  const Plan back = plan_from_json(plan_to_json(plan), "p.json");
  EXPECT_EQ(back.context_parallel, 2);
  const std::string flags = export_plan(plan, ExportFormat::kMegatron);
  EXPECT_NE(flags.find("--context-parallel-size 2"), std::string::npos) << flags;
  EXPECT_NE(flags.find("K x D x T x C"), std::string::npos) << flags;
  Plan flat = plan;  // nothing else torchgpipe refuses
  flat.zero = 0;
  flat.tensor_parallel = 1;
  flat.devices = plan.devices / 4;
  // Megatron-LM's validate_args asks for one connection a device with C > 1
  // as with T > 1.
  EXPECT_NE(export_plan(flat, ExportFormat::kMegatron)
                .find("# With C > 1 Megatron-LM's context-parallel layers need "
                      "CUDA_DEVICE_MAX_CONNECTIONS=1"),
            std::string::npos);
  try {
    (void)export_plan(flat, ExportFormat::kTorchGpipe);
    ADD_FAILURE() << "torchgpipe took a plan of C = 2";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("context parallelism"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("megatron or torch-pipelining"), std::string::npos);
  }
  // A scenario of another C does not run the plan.
  try {
    check_plan_matches(plan, load({"training.tensor_parallel=4"}), "p.json");
    ADD_FAILURE() << "a plan of C = 2 ran on C = 1";
  } catch (const ScenarioError& e) {
    EXPECT_NE(std::string(e.what()).find("C=2"), std::string::npos) << e.what();
  }
}

// cp_comm_type all_gather (Transformer Engine's AttnFuncWithCPAndKVAllGather):
// a forward gathers the keys, then the values, before the attention; a
// backward gathers both again and reduce-scatters their gradients; none
// hides behind the attention. By hand, C = 4, 1000 bytes of keys and values
// a sample, a micro-batch of 2, a ring at 1 GB/s with 2 us a step: each
// collective 3 steps of 1000 bytes, 3 x (2 + 1) = 9 us; 2 of them forward,
// 4 backward.
TEST(ContextParallel, AnAllGatherIsExposedWhole) {
  const LayerSpec layer = four_way_layer();
  const DataParallel ring = four_way_ring();
  const ContextExchanges x =
      context_exchanges(layer, 2, ring, CoreOnly(1'000'000), ContextExchange::kAllGather);
  EXPECT_EQ(x.forward, 2 * 9000);
  EXPECT_EQ(x.backward, 4 * 9000);
  // The scenario's field: the simulation's forwards pay it where the ring
  // hid its exchanges.
  const auto stages = [](const Scenario& sc) {
    SimConfig cfg;
    cfg.stages = 2;
    cfg.micro_batches = 4;
    cfg.schedule = ScheduleKind::k1F1B;
    return simulate(sc, cfg).stage_costs;
  };
  const Scenario ring_sc = load({"training.context_parallel=2"});
  const Scenario gather_sc =
      load({"training.context_parallel=2", "training.cp_comm_type=all_gather"});
  EXPECT_EQ(ring_sc.training.cp_comm_type, ContextExchange::kP2p);
  EXPECT_EQ(gather_sc.training.cp_comm_type, ContextExchange::kAllGather);
  const std::vector<StageCost> p2p = stages(ring_sc), gathered = stages(gather_sc);
  EXPECT_GT(gathered[1].cp_forward, p2p[1].cp_forward);
  EXPECT_EQ(gathered[1].cp_backward, 2 * gathered[1].cp_forward);
  const ScenarioError bad = testing::docs::error_of_text(
      kLongContext, {"training.context_parallel=2", "training.cp_comm_type=ulysses"});
  EXPECT_EQ(bad.json_path(), "training.cp_comm_type");
  EXPECT_NE(bad.message().find("p2p, all_gather, a2a"), std::string::npos) << bad.what();
}

// The plan of 2 replicas of K = 2 (1F1B, M = 4) of `sc`.
Plan two_replica_plan(const Scenario& sc) {
  SimConfig cfg;
  cfg.stages = 2;
  cfg.micro_batches = 4;
  cfg.schedule = ScheduleKind::k1F1B;
  cfg.data_parallel = data_parallel_ring(sc.cluster, 2, 2);
  const Scenario replica = replica_scenario(sc, 2, 2);
  return make_plan(replica, simulate(replica, cfg), 2, "optimal");
}

// cp_comm_type a2a (DeepSpeed-Ulysses; Transformer Engine's
// AttnFuncWithCPAndQKVOA2A): all-to-alls of the queries, the keys and the
// values before the attention and of its output after it, and as many in a
// backward, none hidden. By hand, C = 2 in one node at 100 GB/s, 5 us a
// call (not NCCL), 1 MB of queries and 4 MB of keys and values a sample, a
// micro-batch of 2: each device sends half of each buffer, 1 MB of the
// queries (10 us) and 2 MB of the keys (20 us): 2 (5 + 10) + 2 (5 + 20) =
// 80 us each way.
TEST(ContextParallel, AllToAllsOfHeadsAreExposedWhole) {
  LayerSpec layer;
  layer.cp_steps = 1;
  layer.cp_q_bytes = 1'000'000;
  layer.cp_bytes = 4'000'000;
  DataParallel group;
  group.replicas = 2;
  group.experts = {2, 2, LinkClass::kNvlink, 100e9, 0.0};
  group.experts_latency_s = 5e-6;
  const ContextExchanges x =
      context_exchanges(layer, 2, group, CoreOnly(1'000'000'000), ContextExchange::kAllToAll);
  EXPECT_EQ(x.forward, 80'000);
  EXPECT_EQ(x.backward, 80'000);
  // The scenario's: the group of the C is the cluster's (two GPUs of a DGX
  // A100 at T = 1), a backward trades as many bytes as a forward, and C must
  // divide each device's heads and key-value heads (8 of them at T = 2).
  SimConfig cfg;
  cfg.stages = 2;
  cfg.micro_batches = 4;
  cfg.schedule = ScheduleKind::k1F1B;
  const Scenario sc = load({"training.context_parallel=2", "training.cp_comm_type=a2a"});
  const std::vector<StageCost> a2a = simulate(sc, cfg).stage_costs;
  const DataParallel cluster_group = context_alltoall_group(sc.cluster);
  EXPECT_EQ(cluster_group.experts.ranks, 2);
  EXPECT_EQ(cluster_group.experts.per_node, 2);
  EXPECT_DOUBLE_EQ(cluster_group.experts.intra_bw,
                   least_bandwidth(sc.cluster.physical_route(0, 1)));
  EXPECT_GT(a2a[1].cp_forward, 0);
  EXPECT_EQ(a2a[1].cp_backward, a2a[1].cp_forward);
  EXPECT_EQ(a2a[1].cp_backward_bytes, a2a[1].cp_bytes);
  // Half of the queries, keys, values and output of each block: 4096 / 2
  // tokens, 256 wide (16 heads of 16) and 128 (8 of them), bf16, 2 samples.
  const std::int64_t block = 2048 * (2 * 256 + 2 * 128) * 2 * 2 / 2;
  std::int64_t blocks = 0;
  for (int l = a2a[1].layers.first_layer; l <= a2a[1].layers.last_layer; ++l) {
    blocks += sc.model.layers[static_cast<std::size_t>(l)].cp_steps > 0 ? 1 : 0;
  }
  EXPECT_GT(blocks, 0);
  EXPECT_EQ(a2a[1].cp_bytes, block * blocks);
  const ScenarioError heads = testing::docs::error_of_text(
      kLongContext,
      {"training.tensor_parallel=4", "training.context_parallel=4", "training.cp_comm_type=a2a"});
  EXPECT_NE(heads.message().find("4 does not divide 2 (kv_heads / T)"), std::string::npos)
      << heads.what();
}

// A plan of the all-to-all form keeps it, Megatron-LM runs it, PyTorch's
// context_parallel cannot and the export says so; the planner skips a C
// that does not divide a device's heads.
TEST(ContextParallel, PlansCarryTheAllToAllForm) {
  const Plan plan =
      two_replica_plan(load({"training.context_parallel=2", "training.cp_comm_type=a2a"}));
  const Plan back = plan_from_json(plan_to_json(plan), "p.json");
  EXPECT_EQ(back.cp_comm_type, ContextExchange::kAllToAll);
  EXPECT_EQ(back.model_hash, plan.model_hash);
  EXPECT_NE(export_plan(plan, ExportFormat::kMegatron).find("--cp-comm-type a2a"),
            std::string::npos);
  try {
    export_plan(plan, ExportFormat::kTorchPipelining);
    ADD_FAILURE() << "an a2a plan exported to PyTorch";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("(cp_comm_type a2a), which PyTorch's context_parallel "
                                         "does not run"),
              std::string::npos)
        << e.what();
  }
  PlanRequest request;
  request.schedule = ScheduleKind::k1F1B;
  const std::vector<std::string> four_ways{"model.seq_len=16384", "training.tensor_parallel=4"};
  EXPECT_EQ(run_planner(load(four_ways), request).context_parallel, (std::vector<int>{1, 2, 4}));
  std::vector<std::string> heads = four_ways;
  heads.push_back("training.cp_comm_type=a2a");
  EXPECT_EQ(run_planner(load(heads), request).context_parallel, (std::vector<int>{1, 2}));
}

// A plan of the all-gather form keeps it, refuses a scenario of the ring,
// and tells Megatron-LM and PyTorch to gather.
TEST(ContextParallel, PlansCarryTheAllGatherForm) {
  const Plan plan =
      two_replica_plan(load({"training.context_parallel=2", "training.cp_comm_type=all_gather"}));
  EXPECT_EQ(plan.cp_comm_type, ContextExchange::kAllGather);
  const Plan back = plan_from_json(plan_to_json(plan), "p.json");
  EXPECT_EQ(back.cp_comm_type, ContextExchange::kAllGather);
  EXPECT_NE(export_plan(plan, ExportFormat::kMegatron).find("--cp-comm-type all_gather"),
            std::string::npos);
  EXPECT_NE(export_torch_device_mesh(plan).find("    set_rotate_method(\"allgather\")"),
            std::string::npos);
  try {
    check_plan_matches(plan, load({"training.context_parallel=2"}), "p.json");
    ADD_FAILURE() << "an all-gather plan ran on the ring";
  } catch (const ScenarioError& e) {
    EXPECT_EQ(e.json_path(), "training.cp_comm_type");
    EXPECT_NE(std::string(e.what()).find("--set training.cp_comm_type=all_gather"),
              std::string::npos)
        << e.what();
  }
}

// PyTorch's device mesh of a plan of C = 2: a "cp" dimension between the
// outer two and "tp" (a stage's T x C ranks neighbours, c T + t within its
// group, as the cluster places them), torch's context_parallel over
// mesh["cp"] with the ring, and the gradients reduced over the D x C ranks
// that hold the same weights, also at D = 1.
TEST(ContextParallel, PyTorchsDeviceMeshHasACpDimension) {
  const Scenario sc = load({"training.tensor_parallel=4", "training.context_parallel=2"});
  ASSERT_EQ(sc.cluster.rank_order, RankOrder::kTpDpPp);
  const auto plan_of = [](const Scenario& whole, int D) {
    SimConfig cfg;
    cfg.stages = 2;
    cfg.micro_batches = 4;
    cfg.schedule = ScheduleKind::k1F1B;
    cfg.data_parallel = data_parallel_ring(whole.cluster, 2, D);
    const Scenario replica = replica_scenario(whole, 2, D);
    return make_plan(replica, simulate(replica, cfg), D, "optimal");
  };
  const auto has = [](const std::string& text, const std::string& part) {
    EXPECT_NE(text.find(part), std::string::npos) << part << "\n" << text;
  };
  const Plan two = plan_of(sc, 2);
  ASSERT_EQ(two.devices, 2 * 2 * 4 * 2);
  EXPECT_FALSE(export_plan(two, ExportFormat::kTorchPipelining).empty());
  const std::string mesh = export_torch_device_mesh(two);
  has(mesh, "MESH_SHAPE = (2, 2, 2, 4)\n");
  has(mesh, "MESH_DIM_NAMES = (\"pp\", \"dp\", \"cp\", \"tp\")\n");
  has(mesh, "rank ((d D + r) C + c) T + t is");
  has(mesh, "    return context_parallel(mesh[\"cp\"], buffers=buffers, buffer_seq_dims=seq_dims,");
  has(mesh, "    set_rotate_method(\"alltoall\")");
  has(mesh, "    return replicate(module, mesh=mesh[\"dp\", \"cp\"]._flatten(\"dp_cp\"))\n");
  // One replica still reduces over its C ranks.
  const std::string one = export_torch_device_mesh(plan_of(sc, 1));
  has(one, "MESH_SHAPE = (2, 1, 2, 4)\n");
  has(one, "Data parallelism over D=1 replica");
  has(one, "def pipescope_data_parallel(module, mesh):");
  // Without C the mesh keeps its three dimensions.
  const std::string whole =
      export_torch_device_mesh(plan_of(load({"training.tensor_parallel=4"}), 2));
  has(whole, "MESH_SHAPE = (2, 2, 4)\n");
  EXPECT_EQ(whole.find("\"cp\""), std::string::npos) << whole;
}

// Without a C of its own the planner tries 1 and every power of two that
// leaves a device 4,096 tokens a sample: 16,384 tokens give 1, 2 and 4. Its
// best is the best of the plans of each C alone (each with the scenario's
// C fixed), and a sequence of 4,096 tokens is not split.
TEST(ContextParallel, ThePlannerSearchesC) {
  const std::vector<std::string> long_sequences{"model.seq_len=16384",
                                                "training.tensor_parallel=2"};
  PlanRequest request;
  request.schedule = ScheduleKind::k1F1B;
  const PlanReport report = run_planner(load(long_sequences), request);
  EXPECT_EQ(report.context_parallel, (std::vector<int>{1, 2, 4}));
  ASSERT_FALSE(report.ranked.empty());
  double best_of_each = 0.0;
  for (const int C : {1, 2, 4}) {
    std::vector<std::string> fixed = long_sequences;
    fixed.push_back("training.context_parallel=" + std::to_string(C));
    const PlanReport one = run_planner(load(fixed), request);
    EXPECT_EQ(one.context_parallel, std::vector<int>{C});
    ASSERT_FALSE(one.ranked.empty()) << "C=" << C;
    for (const PlanCandidate& c : one.ranked) {
      EXPECT_EQ(c.context_parallel(), C) << c.label();
      EXPECT_NE(c.zero, 3) << c.label();  // not modelled beside C > 1
    }
    // One replica of C > 1 still has C devices to shard over: ZeRO 1 and 2.
    for (const auto* list : {&one.ranked, &one.rejected, &one.dominated, &one.bounded}) {
      for (const PlanCandidate& c : *list) {
        if (C > 1 && c.data_parallel == 1) {
          EXPECT_GT(c.zero, 0) << c.label();
        }
      }
    }
    best_of_each = std::max(best_of_each, one.ranked.front().samples_per_s);
  }
  EXPECT_DOUBLE_EQ(report.ranked.front().samples_per_s, best_of_each);
  EXPECT_EQ(run_planner(load({"training.tensor_parallel=2"}), request).context_parallel,
            std::vector<int>{1});
}

// Latent attention splits its sequence as the usual attention does: the
// planner searches C for it, and the ring passes the up-projected keys and
// values, (qk_nope + rope) + v = 24 + 16 wide a head.
TEST(ContextParallel, ThePlannerSearchesCForLatentAttention) {
  constexpr const char* kLatent = R"({
    "model": {"family": "transformer", "layers": 4, "d_model": 256, "heads": 16,
              "seq_len": 16384, "vocab": 1000, "dtype": "bf16",
              "latent_attention": {"kv_lora_rank": 32, "qk_nope_head_dim": 16,
                                   "qk_rope_head_dim": 8, "v_head_dim": 16}},
    "cluster": {"preset": "dgx-a100", "devices": 32},
    "training": {"global_batch": 8, "micro_batches": 4, "optimizer": "adam",
                 "tensor_parallel": 2}
  })";
  PlanRequest request;
  request.schedule = ScheduleKind::k1F1B;
  const PlanReport report = run_planner(parse_scenario_text(kLatent, "mla.json"), request);
  EXPECT_EQ(report.context_parallel, (std::vector<int>{1, 2, 4}));
  ASSERT_FALSE(report.ranked.empty());
  // C = 2 of T = 2: 8,192 tokens and 8 heads a device, bf16.
  const Scenario two = parse_scenario_text(kLatent, "mla.json", {"training.context_parallel=2"});
  const LayerSpec& block = two.model.layers[1];
  EXPECT_EQ(block.cp_steps, 1);
  EXPECT_EQ(block.cp_bytes, 8192 * 8 * (24 + 16) * 2);
}

// PlanRequest::context_parallel fixes C as the scenario's field does; a C
// the scenario cannot take, or another than the one it splits by, is refused.
TEST(ContextParallel, APlanRequestFixesC) {
  const Scenario sc = load({"model.seq_len=16384", "training.tensor_parallel=2"});
  PlanRequest request;
  request.schedule = ScheduleKind::k1F1B;
  request.context_parallel = 2;
  const PlanReport report = run_planner(sc, request);
  EXPECT_EQ(report.context_parallel, std::vector<int>{2});
  ASSERT_FALSE(report.ranked.empty());
  for (const PlanCandidate& c : report.ranked) EXPECT_EQ(c.context_parallel(), 2) << c.label();
  request.context_parallel = 3;
  EXPECT_THROW(run_planner(sc, request), ConfigError);
  request.context_parallel = 4;
  const Scenario split =
      load({"model.seq_len=16384", "training.tensor_parallel=2", "training.context_parallel=2"});
  try {
    run_planner(split, request);
    ADD_FAILURE() << "C=4 planned on a scenario split over C=2";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("C=4: the scenario splits each sequence over C=2"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace pipescope
