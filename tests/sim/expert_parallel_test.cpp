// Expert parallelism in the simulation: the all-to-all group the replicas
// form on a cluster, each op's all-to-alls after its compute (by hand on
// exact devices), the experts' memory and gradients over D / E replicas, the
// scenario fields, the command's checks and the planner's D.

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "planner_fixtures.h"
#include "scenario_docs.h"
#include "sim/engine/expert_parallel.h"
#include "sim/engine/pair_hold.h"
#include "sim/engine/schedule.h"
#include "sim/engine/simulator.h"
#include "sim/engine/timeline.h"
#include "sim/engine/zero.h"
#include "sim/plan/plan_candidates.h"
#include "sim/plan/planner.h"
#include "sim/scenario/scenario_io.h"
#include "sim_fixtures.h"

namespace pipescope {
namespace {

using testing::kMoeScenario;

// Two layers of 1000 FLOPs a sample on exact devices linked at 1 GB/s with
// 1 us latency; 100 parameters a layer, 60 of them its device's share of
// the experts of E = `experts`; two all-to-alls of 1000 bytes a sample in
// each layer's forward. Adam-like 16 bytes a parameter in fp32 (4 weights, 4
// gradients, 8 optimizer state), 4 replicas.
Scenario ep_scenario(int experts, int zero) {
  Scenario sc = testing::uniform_scenario(2, 4, 1000.0, 8, 2, false);
  sc.cluster.interconnect = Interconnect{TopologyKind::kAllToAll, 1e9, 1e-6};
  for (LayerSpec& l : sc.model.layers) {
    l.params = 100;
    l.expert_params = experts > 1 ? 60 : 0;
    l.ep_alltoalls = experts > 1 ? 2 : 0;
    l.ep_bytes = 1000;
  }
  sc.model.expert_parallel = experts;
  sc.training.expert_parallel = experts;
  sc.training.bytes_per_param = 16.0;
  sc.training.zero = zero;
  return sc;
}

Scenario load_scenario_text(const std::string& text,
                            const std::vector<std::string>& overrides = {}) {
  return parse_scenario_text(text, "ep.json", overrides);
}

// Reading `text` with `overrides` fails at `path` with a message holding
// `fragment`.
void expect_scenario_error(const std::string& text, const std::vector<std::string>& overrides,
                           const std::string& path, const std::string& fragment) {
  const ScenarioError e = testing::docs::error_of_text(text, overrides);
  EXPECT_EQ(e.json_path(), path) << e.what();
  EXPECT_NE(e.message().find(fragment), std::string::npos) << e.what();
}

SimResult ep_step(int experts, int zero, double mem_bandwidth = 1e30) {
  Scenario sc = ep_scenario(experts, zero);
  sc.cluster.device.mem_bandwidth = mem_bandwidth;
  SimConfig cfg;
  cfg.stages = 1;
  cfg.data_parallel = data_parallel_ring(sc.cluster, 1, 4, experts);
  return simulate(replica_scenario(sc, 1, 4), cfg);
}

TEST(ExpertParallel, TheGroupIsTheFirstEReplicas) {
  const Scenario sc = ep_scenario(2, 0);
  const DataParallel dp = data_parallel_ring(sc.cluster, 1, 4, 2);
  EXPECT_EQ(dp.experts.ranks, 2);
  EXPECT_EQ(dp.experts.per_node, 2);
  EXPECT_DOUBLE_EQ(dp.experts.intra_bw, 1e9);
  EXPECT_DOUBLE_EQ(dp.experts_latency_s, 1e-6);
  EXPECT_EQ(data_parallel_ring(sc.cluster, 1, 4).experts.ranks, 1);
  // 1000 bytes a sample, micro-batches of 4: each device keeps 1 / 2 of
  // 4000 and sends the rest at 1 GB/s after the latency.
  EXPECT_EQ(alltoall_time(dp, 4000), 1000 + 2000);
  EXPECT_EQ(alltoall_time(data_parallel_ring(sc.cluster, 1, 4), 4000), 0);
  EXPECT_THROW(data_parallel_ring(sc.cluster, 1, 3, 2), ConfigError);
}

// On DGX A100 nodes (8 GPUs a node): E = 8 replicas of K = 1 fill a node,
// E = 16 span two.
TEST(ExpertParallel, TheGroupOnNodes) {
  const Scenario sc = load_scenario_text(R"({
    "model": {"family": "transformer", "layers": 2, "d_model": 64, "heads": 4, "seq_len": 32,
              "vocab": 100, "experts": 16, "experts_per_token": 2},
    "cluster": {"preset": "dgx-a100", "devices": 32},
    "training": {"global_batch": 32, "micro_batches": 1}
  })");
  const std::vector<Hop> nvlink = sc.cluster.route(0, 1);
  const std::vector<Hop> network = sc.cluster.route(0, 8);
  const auto least = [](const std::vector<Hop>& hops) {
    double bw = hops.front().bandwidth;
    for (const Hop& h : hops) bw = std::min(bw, h.bandwidth);
    return bw;
  };
  const AllToAllGroup node = data_parallel_ring(sc.cluster, 1, 32, 8).experts;
  EXPECT_EQ(node.per_node, 8);
  EXPECT_DOUBLE_EQ(node.intra_bw, least(nvlink));
  EXPECT_EQ(node.inter_bw, 0.0);
  const DataParallel sixteen = data_parallel_ring(sc.cluster, 1, 32, 16);
  const AllToAllGroup two = sixteen.experts;
  EXPECT_EQ(two.per_node, 8);
  // The holders of the same experts: replicas 0 and 16, on two nodes; with
  // E = 8, replicas 0, 8, 16, 24 on four.
  EXPECT_EQ(expert_reduction_ring(sixteen).replicas, 2);
  EXPECT_EQ(expert_reduction_ring(sixteen).nodes, 2);
  // A gradient sum measured for the ranks of the dense layers is not theirs.
  DataParallel measured = sixteen;
  measured.measured_sum = {32, 1e-5, 1e9};
  EXPECT_EQ(expert_reduction_ring(measured).measured_sum.ranks, 0);
  const DataParallel eight = data_parallel_ring(sc.cluster, 1, 32, 8);
  EXPECT_EQ(expert_reduction_ring(eight).nodes, 4);
  EXPECT_EQ(eight.nodes, 4);
  EXPECT_DOUBLE_EQ(two.inter_bw, least(network));
  EXPECT_LT(two.inter_bw, two.intra_bw);
  // K = 2 under Megatron-LM's rank order (data parallelism inside the
  // pipeline's stages): replicas are neighbours, eight a node; with the
  // pipeline inside (tp-pp-dp) they are two GPUs apart, four a node.
  Cluster cluster = sc.cluster;
  cluster.rank_order = RankOrder::kTpDpPp;
  EXPECT_EQ(data_parallel_ring(cluster, 2, 16, 8).experts.per_node, 8);
  cluster.rank_order = RankOrder::kTpPpDp;
  EXPECT_EQ(data_parallel_ring(cluster, 2, 16, 8).experts.per_node, 4);
}

// Each layer's two all-to-alls run after its forward and again after its
// backward: 2 layers x 2 x (1 us + 2000 bytes x 3 / 4 at 1 GB/s), the
// micro-batch of 1 sample a replica's share (8 / 4 / 2).
TEST(ExpertParallel, OpsRunTheirAllToAllsByHand) {
  const SimResult r = ep_step(4, 0);
  const StageCost& c = r.stage_costs[0];
  const SimTime one = 1000 + 1000 * 3 / 4;
  EXPECT_EQ(c.ep_forward, 2 * 2 * one);
  EXPECT_EQ(c.ep_backward, c.ep_forward);
  EXPECT_EQ(c.ep_bytes, 2 * 2 * 1000);
  EXPECT_EQ(r.expert_parallel, 4);
  const SimResult plain = ep_step(1, 0);
  EXPECT_EQ(plain.stage_costs[0].ep_forward, 0);
  // The device runs them: two micro-batches, each a forward and a backward.
  EXPECT_EQ(r.metrics.step_time - plain.metrics.step_time,
            2 * (c.ep_forward + c.ep_backward) +
                (r.stage_costs[0].allreduce - plain.stage_costs[0].allreduce));
}

// A CPU profile's measured group of as many threads, at the micro-batch
// size it was measured at, prices the all-to-alls: 5 us + the whole 1000
// bytes at 4 GB/s, two a layer. Measured at another micro-batch size or
// for another group size, the links price them: 1 us + 3 / 4 of the buffer
// at 1 GB/s.
TEST(ExpertParallel, AMeasuredGroupPricesItsAllToAlls) {
  Scenario sc = ep_scenario(4, 0);
  auto p = std::make_shared<Profile>();
  p->alltoall_group = {true, 4, 5e-6, 4e9, 1};
  sc.cluster.profile = p;
  const DataParallel dp = data_parallel_ring(sc.cluster, 1, 4, 4);
  EXPECT_EQ(layer_alltoalls(sc.model, dp, 1), (std::vector<SimTime>{2 * 5250, 2 * 5250}));
  const SimTime links = 1000 + 2000 * 3 / 4;
  EXPECT_EQ(layer_alltoalls(sc.model, dp, 2), (std::vector<SimTime>{2 * links, 2 * links}));
  p->alltoall_group.ranks = 2;
  EXPECT_EQ(layer_alltoalls(sc.model, data_parallel_ring(sc.cluster, 1, 4, 4), 1),
            (std::vector<SimTime>{2 * 1750, 2 * 1750}));
  // Not a context group's, nor under tensor parallelism, whose groups the
  // profile did not time.
  p->alltoall_group.ranks = 4;
  p->alltoall_group.experts = false;
  EXPECT_EQ(data_parallel_ring(sc.cluster, 1, 4, 4).measured_alltoall.ranks, 0);
  p->alltoall_group.experts = true;
  EXPECT_EQ(data_parallel_ring(sc.cluster, 1, 4, 4).measured_alltoall.ranks, 4);
  sc.cluster.tensor_parallel = 2;
  EXPECT_EQ(data_parallel_ring(sc.cluster, 1, 2, 2).measured_alltoall.ranks, 0);
}

// On the timeline each op's all-to-alls have a lane of their own, the expert
// lane, right after the op's compute: one slice of the op's ep time and bytes
// per forward and backward; nothing on the tensor lane without tensor
// parallelism, and no expert lane without experts.
TEST(ExpertParallel, AllToAllsHaveTheirOwnLane) {
  const SimResult r = ep_step(4, 0);
  const StageCost& c = r.stage_costs[0];
  std::map<std::pair<int, EventKind>, const TimelineEvent*> compute;
  std::vector<const TimelineEvent*> expert;
  for (const TimelineEvent& e : r.timeline.events) {
    EXPECT_NE(e.lane, Lane::kTensor);
    if (e.lane == Lane::kCompute) compute[{e.micro_batch, e.kind}] = &e;
    if (e.lane == Lane::kExpert) expert.push_back(&e);
  }
  ASSERT_EQ(expert.size(), 4u);  // two micro-batches, a forward and a backward each
  for (const TimelineEvent* e : expert) {
    EXPECT_EQ(e->kind, EventKind::kExpertAllToAll);
    EXPECT_EQ(e->bytes, c.ep_bytes);
    EXPECT_EQ(e->end - e->start, c.ep_forward);  // = ep_backward here
    EXPECT_EQ(event_name(*e), "ep " + std::to_string(e->micro_batch));
  }
  // Each follows an op's compute at once.
  int followed = 0;
  for (const auto& [key, op] : compute) {
    for (const TimelineEvent* e : expert) {
      if (e->micro_batch == key.first && e->start == op->end) ++followed;
    }
  }
  EXPECT_EQ(followed, 4);
  for (const TimelineEvent& e : ep_step(1, 0).timeline.events) EXPECT_NE(e.lane, Lane::kExpert);
}

// DualPipeV's pairs (a forward and another micro-batch's backward, DeepSeek's
// overlapped chunks) under a framework that overlaps them
// (pair_alltoall_overlap): each all-to-all runs beside the other half's
// compute, and the op waits only for what outlasts it. Four layers on K = 2
// (2K stages in a V), M = 4, E = 4: each op of a pair ends max(0, its
// all-to-alls - its partner's compute) after its own compute, every other
// op all of them after. Without the flag every op waits for all of them.
TEST(ExpertParallel, DualPipePairsHideTheirAllToAllsBehindEachOther) {
  Scenario sc = ep_scenario(4, 0);
  sc.model.layers.push_back(sc.model.layers[0]);
  sc.model.layers.push_back(sc.model.layers[1]);
  sc.model.layers[2].name = "l2";
  sc.model.layers[3].name = "l3";
  sc.cluster.devices = 8;         // 4 replicas of K = 2
  sc.training.global_batch = 16;  // a sample a micro-batch
  sc.training.framework.pair_alltoall_overlap = true;
  SimConfig cfg;
  cfg.stages = 2;
  cfg.micro_batches = 4;
  cfg.schedule = ScheduleKind::kDualPipeV;
  cfg.chunks = 2;
  cfg.record_timeline = true;
  cfg.data_parallel = data_parallel_ring(sc.cluster, 2, 4, 4);
  const SimResult r = simulate(replica_scenario(sc, 2, 4), cfg);
  const Schedule sched = build_schedule(ScheduleKind::kDualPipeV, 2, 4, Remat::kNever, 2);
  int paired = 0;
  SimTime waited_in_all = 0;  // what the ops wait for, every device
  for (int d = 0; d < 2; ++d) {
    std::vector<const TimelineEvent*> compute;
    for (const TimelineEvent& e : r.timeline.events) {
      if (e.device != d) continue;
      if (e.lane == Lane::kCompute) compute.push_back(&e);
    }
    std::sort(compute.begin(), compute.end(),
              [](const TimelineEvent* a, const TimelineEvent* b) { return a->start < b->start; });
    const std::vector<Op>& ops = sched.device_ops[static_cast<std::size_t>(d)];
    ASSERT_EQ(compute.size(), ops.size());
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const StageCost& c = r.stage_costs[static_cast<std::size_t>(ops[i].stage)];
      const SimTime all = ops[i].kind == OpKind::kForward    ? c.ep_forward
                          : ops[i].kind == OpKind::kBackward ? c.ep_backward
                                                             : 0;
      SimTime waited = all;
      if (const Op* partner = pair_partner(ops, i); partner != nullptr) {
        const auto at = static_cast<std::size_t>(partner - ops.data());
        waited = std::max<SimTime>(0, all - (compute[at]->end - compute[at]->start));
        ++paired;
      }
      waited_in_all += waited;
      // The next op starts once this one's waited part is over, or later.
      if (i + 1 < ops.size()) {
        EXPECT_GE(compute[i + 1]->start, compute[i]->end + waited) << "device " << d << " op " << i;
      }
    }
  }
  EXPECT_GT(paired, 0);
  // Without tensor or context parallelism the ops' collectives are these.
  EXPECT_EQ(r.metrics.tensor_time, waited_in_all);
  // Hidden in part: less than every all-to-all, which is what the ops wait
  // for where the framework runs a pair's halves one after the other.
  sc.training.framework.pair_alltoall_overlap = false;
  const SimResult serial = simulate(replica_scenario(sc, 2, 4), cfg);
  EXPECT_GT(r.metrics.tensor_time, 0);
  EXPECT_LT(r.metrics.tensor_time, serial.metrics.tensor_time);
  SimTime every = 0;
  for (const StageCost& c : serial.stage_costs) every += 4 * (c.ep_forward + c.ep_backward);
  EXPECT_EQ(serial.metrics.tensor_time, every);
}

// A pair's partner: the backward of its forward and back, past a recompute
// between them; in a custom group of more, the k-th of a kind with the k-th
// of the other, one to one.
TEST(ExpertParallel, PairPartnersAreOneToOne) {
  const Op f{OpKind::kForward, 0, 1, true};
  const Op r{OpKind::kRecompute, 1, 0, true};
  const Op b{OpKind::kBackward, 1, 0, true};
  const Op w{OpKind::kWeight, 1, 0, false};
  const std::vector<Op> pair{f, r, b, w};
  EXPECT_EQ(pair_partner(pair, 0), &pair[2]);
  EXPECT_EQ(pair_partner(pair, 2), &pair[0]);
  EXPECT_EQ(pair_partner(pair, 1), nullptr);
  EXPECT_EQ(pair_partner(pair, 3), nullptr);
  Op f2 = f;
  f2.micro_batch = 2;
  Op last = b;
  last.paired = false;  // the group's last op
  const std::vector<Op> three{f, f2, last, f};
  EXPECT_EQ(pair_partner(three, 0), &three[2]);
  EXPECT_EQ(pair_partner(three, 1), nullptr);  // no second backward
  EXPECT_EQ(pair_partner(three, 2), &three[0]);
  EXPECT_EQ(pair_partner(three, 3), nullptr);  // in no group
}

// Under ZeRO-1 over D = 4 the 40 dense parameters a layer keep 4 + 4 + 8 / 4
// bytes; the 60 of the experts' share, held alike by D / E replicas, 4 + 4
// + 8 / (D / E): unsharded at E = 4, halved at E = 2. Each replica steps the
// optimizer on its shard of each.
TEST(ExpertParallel, ExpertsShardOverTheirReplicas) {
  const StageCost four = ep_step(4, 1).stage_costs[0];
  EXPECT_EQ(four.expert_params, 120);
  EXPECT_EQ(four.static_bytes, 80 * (4 + 4 + 2) + 120 * (4 + 4 + 8));
  EXPECT_EQ(four.weight_bytes, 200 * 4);
  EXPECT_EQ(four.gradient_bytes, 200 * 4);
  const StageCost two = ep_step(2, 1).stage_costs[0];
  EXPECT_EQ(two.static_bytes, 80 * (4 + 4 + 2) + 120 * (4 + 4 + 4));
  Scenario sc = replica_scenario(ep_scenario(2, 1), 1, 4);
  EXPECT_EQ(expert_replicas(sc), 2);
  EXPECT_DOUBLE_EQ(expert_bytes_per_param(sc), 12.0);
  EXPECT_EQ(dense_equivalent_params(sc, 100, 60), 40 + 60 * 12 / 10);
  // With memory at 1 GB/s the step over n parameters of 16 bytes takes 32 n
  // ns: each replica steps 80 / 4 dense parameters and 120 / (4 / E) of the
  // experts' (all 200 / 4 without them).
  EXPECT_EQ(ep_step(2, 1, 1e9).stage_costs[0].optimizer, 32 * (20 + 60));
  EXPECT_EQ(ep_step(4, 1, 1e9).stage_costs[0].optimizer, 32 * (20 + 120));
  EXPECT_EQ(ep_step(1, 1, 1e9).stage_costs[0].optimizer, 32 * 50);
}

// The dense gradients reduce over all D = 4 replicas, the experts' over the
// D / E = 2 that hold the same ones.
TEST(ExpertParallel, ExpertGradientsReduceOverTheirReplicas) {
  const Scenario sc = ep_scenario(2, 0);
  const DataParallel dp = data_parallel_ring(sc.cluster, 1, 4, 2);
  const DataParallel experts = expert_reduction_ring(dp);
  EXPECT_EQ(experts.replicas, 2);
  EXPECT_EQ(experts.experts.ranks, 1);
  const StageCost c = ep_step(2, 0).stage_costs[0];
  EXPECT_EQ(c.allreduce, allreduce_time(dp, 80 * 4) + allreduce_time(experts, 120 * 4));
  const StageCost one = ep_step(2, 1).stage_costs[0];
  EXPECT_EQ(one.allreduce, reduce_scatter_time(dp, 80 * 4) + reduce_scatter_time(experts, 120 * 4));
  EXPECT_EQ(one.zero_step_gather, one.allreduce);  // the weights, as many bytes in fp32
}

TEST(ExpertParallel, TheRunNeedsItsReplicas) {
  const Scenario sc = ep_scenario(4, 0);
  SimConfig cfg;
  cfg.stages = 1;
  try {
    simulate(sc, cfg);
    FAIL() << "E = 4 ran on one replica";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.scenario_field(), "training.expert_parallel");
    EXPECT_NE(std::string(e.what()).find("give --data-parallel a multiple of E"), std::string::npos)
        << e.what();
  }
}

TEST(ExpertParallel, TheScenarioField) {
  const Scenario whole = load_scenario_text(kMoeScenario);
  const Scenario sc = load_scenario_text(kMoeScenario, {"training.expert_parallel=4"});
  EXPECT_EQ(sc.training.expert_parallel, 4);
  EXPECT_TRUE(sc.training.expert_parallel_given);
  EXPECT_EQ(sc.model.expert_parallel, 4);
  EXPECT_EQ(sc.model.total_params() + 3 * sc.model.layers[1].expert_params * 4,
            whole.model.total_params());
  const Scenario busy = load_scenario_text(
      kMoeScenario, {"training.expert_parallel=4", "model.expert_imbalance=1.25"});
  EXPECT_DOUBLE_EQ(busy.model.transformer->moe.imbalance, 1.25);
  EXPECT_GT(busy.model.layers[1].stash_bytes, sc.model.layers[1].stash_bytes);
  // E with tensor parallelism: each device a share of each of its experts.
  const Scenario both = load_scenario_text(
      kMoeScenario, {"training.expert_parallel=2", "training.tensor_parallel=2"});
  EXPECT_EQ(both.model.expert_parallel, 2);
  EXPECT_EQ(both.model.tensor_parallel, 2);
}

TEST(ExpertParallel, ScenarioErrors) {
  expect_scenario_error(kMoeScenario, {"training.expert_parallel=3"}, "training.expert_parallel",
                        "3 expert-parallel devices do not divide the 8 experts");
  expect_scenario_error(kMoeScenario, {"training.expert_parallel=2", "model.expert_imbalance=3"},
                        "training.expert_parallel", "at most 2");
  expect_scenario_error(kMoeScenario, {"training.expert_parallel=2", "training.zero=3"},
                        "training.expert_parallel", "ZeRO-3 with expert parallelism");
  expect_scenario_error(kMoeScenario, {"model.expert_imbalance=0.5"}, "model.expert_imbalance",
                        "expected at least 1");
  expect_scenario_error(kMoeScenario, {"training.expert_parallel=0"}, "training.expert_parallel",
                        "expected a positive integer, got 0");
  // Checked before the tensor split builds the model: an error, not a crash.
  expect_scenario_error(kMoeScenario, {"training.expert_parallel=3", "training.tensor_parallel=2"},
                        "training.expert_parallel",
                        "3 expert-parallel devices do not divide the 8 experts");
  expect_scenario_error(
      kMoeScenario,
      {"training.expert_parallel=2", "training.tensor_parallel=2", "model.expert_imbalance=4"},
      "training.expert_parallel", "at most 2");
  expect_scenario_error(R"({
    "model": {"family": "transformer", "layers": 2, "d_model": 64, "heads": 4, "seq_len": 32,
              "vocab": 100},
    "cluster": {"preset": "dgx-a100", "devices": 8},
    "training": {"global_batch": 8, "micro_batches": 1, "expert_parallel": 2}
  })",
                        {}, "training.expert_parallel", "has none (expected 1)");
}

// The planner lays out only D that E divides, and tries ZeRO 1 and 2 (3
// without experts spread); with no D left it says why.
TEST(ExpertParallel, ThePlannerKeepsDAMultipleOfE) {
  const Scenario sc = load_scenario_text(kMoeScenario, {"training.expert_parallel=8"});
  const PlanReport report = run_planner(sc, PlanRequest{});
  ASSERT_FALSE(report.ranked.empty());
  for (const PlanCandidate& p : report.ranked) {
    EXPECT_EQ(p.data_parallel % 8, 0) << "K=" << p.stages << " D=" << p.data_parallel;
  }
  const auto stages_tried = [](const Scenario& s) {
    std::set<int> zero;
    for (const PlanCandidate& c : candidates_of(std::make_shared<const Scenario>(s), {}, 16)) {
      if (c.data_parallel > 1) zero.insert(c.zero);
    }
    return zero;
  };
  EXPECT_EQ(stages_tried(sc), (std::set<int>{1, 2}));
  EXPECT_EQ(stages_tried(load_scenario_text(kMoeScenario)), (std::set<int>{1, 2, 3}));
  PlanRequest two;
  two.stages = 4;  // D = 4, which E = 8 does not divide
  try {
    run_planner(sc, two);
    FAIL() << "a D of 4 was planned for E = 8";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("with D a multiple of training.expert_parallel 8"),
              std::string::npos)
        << e.what();
  }
}

// Where the scenario does not say E, the planner searches it: every E that
// divides the experts, and its best plan is the best of the plans each E
// fixed finds (one schedule without chunks, so that no second pass ranks
// the union apart from the parts). A scenario's E, or the request's, is kept.
TEST(ExpertParallel, ThePlannerSearchesE) {
  const Scenario sc = load_scenario_text(kMoeScenario);
  PlanRequest request;
  request.tensor_parallel = 1;
  request.schedule = ScheduleKind::k1F1B;
  const PlanReport report = run_planner(sc, request);
  EXPECT_EQ(report.expert_parallel, (std::vector<int>{1, 2, 4, 8}));
  ASSERT_FALSE(report.ranked.empty());
  std::set<int> ranked_e;
  for (const PlanCandidate& c : report.ranked) {
    ranked_e.insert(c.expert_parallel());
    EXPECT_EQ(c.data_parallel % c.expert_parallel(), 0) << c.label();
  }
  EXPECT_EQ(ranked_e, (std::set<int>{1, 2, 4, 8}));
  double best_of_each = 0.0;
  for (const int E : {1, 2, 4, 8}) {
    PlanRequest fixed = request;
    fixed.expert_parallel = E;
    const PlanReport one = run_planner(sc, fixed);
    EXPECT_EQ(one.expert_parallel, std::vector<int>{E});
    ASSERT_FALSE(one.ranked.empty()) << "E=" << E;
    for (const PlanCandidate& c : one.ranked) EXPECT_EQ(c.expert_parallel(), E) << c.label();
    best_of_each = std::max(best_of_each, one.ranked.front().samples_per_s);
  }
  EXPECT_DOUBLE_EQ(report.ranked.front().samples_per_s, best_of_each);

  // On 4 devices no D is a multiple of 8: E=8 is not searched, nor listed.
  PlanRequest four = request;
  four.devices = 4;
  EXPECT_EQ(run_planner(sc, four).expert_parallel, (std::vector<int>{1, 2, 4}));
  const PlanReport given =
      run_planner(load_scenario_text(kMoeScenario, {"training.expert_parallel=4"}), request);
  EXPECT_EQ(given.expert_parallel, std::vector<int>{4});
  PlanRequest odd = request;
  odd.expert_parallel = 3;
  try {
    run_planner(sc, odd);
    FAIL() << "E=3 of 8 experts was planned";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("E=3: 3 expert-parallel devices do not divide the 8"),
              std::string::npos)
        << e.what();
  }
  // A dense model has no E to search.
  EXPECT_EQ(
      run_planner(testing::uniform_scenario(4, 4, 1000.0, 8, 4, false), request).expert_parallel,
      std::vector<int>{1});
}

}  // namespace
}  // namespace pipescope
