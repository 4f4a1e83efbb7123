// Data parallelism: D replicas of the pipeline, each stage all-reducing its
// gradients over a ring of the replicas once its last backward ends, before its
// optimizer step. Closed forms with exact devices: the ring time, the step of
// pure data parallelism (nothing to overlap) and of a 2-stage pipeline whose
// last stage's all-reduce hides behind the first stage's backward.

#include <gtest/gtest.h>

#include <sstream>

#include "scenario_docs.h"
#include "sim/engine/simulator.h"
#include "sim/formats/trace_io.h"
#include "sim/plan/planner.h"
#include "sim/scenario/scenario_io.h"
#include "sim_fixtures.h"

namespace pipescope {
namespace {

// `layers` layers of 1000 FLOPs per sample and 100 fp32 parameters each, on
// `devices` exact devices (1 FLOP/ns) linked all-to-all at 1 GB/s, 2 us apart.
Scenario dp_scenario(int layers, int devices, std::int64_t batch, int M) {
  Scenario sc = testing::uniform_scenario(layers, devices, 1000.0, batch, M, false);
  for (LayerSpec& l : sc.model.layers) l.params = 100;
  sc.cluster.interconnect = Interconnect{TopologyKind::kAllToAll, 1e9, 2e-6};
  return sc;
}

TEST(DataParallel, RingAllReduceTime) {
  DataParallel dp;
  dp.replicas = 4;
  dp.bandwidth = 1e9;
  dp.latency_s = 2e-6;
  // 2 (D - 1) steps of a quarter of the bytes each: 6 x (2 us + 1000 ns).
  EXPECT_EQ(allreduce_time(dp, 4000), 6 * (2000 + 1000));
  dp.replicas = 1;
  EXPECT_EQ(allreduce_time(dp, 4000), 0);
}

TEST(DataParallel, RingFollowsTheClusterRouteBetweenReplicas) {
  Scenario sc = dp_scenario(4, 8, 8, 1);
  const DataParallel all = data_parallel_ring(sc.cluster, 2, 4);
  EXPECT_EQ(all.replicas, 4);
  EXPECT_EQ(all.bandwidth, 1e9);
  EXPECT_EQ(all.latency_s, 2e-6);
  // On a ring of 8, device 0 reaches device 2 in two hops.
  sc.cluster.interconnect.topology = TopologyKind::kRing;
  EXPECT_EQ(data_parallel_ring(sc.cluster, 2, 4).latency_s, 4e-6);
  EXPECT_EQ(data_parallel_ring(sc.cluster, 2, 1).replicas, 1);
  EXPECT_THROW(data_parallel_ring(sc.cluster, 4, 4), ConfigError);  // 16 > 8 devices
}

TEST(DataParallel, ReplicasInOtherNodesAllReduceOverTheSpine) {
  // dgx-h100 nodes of 8: K = 8 fills a node, so a replica's device d talks to
  // its twin through its NIC, the spine and the twin's NIC. The kernels model
  // (the preset's default) runs links at their achievable share, 0.8 of
  // NVLink and 0.96 of a NIC. Replicas outermost (tp-pp-dp).
  nlohmann::json doc = testing::docs::good_doc();
  doc["cluster"] = {{"preset", "dgx-h100"}, {"devices", 16}, {"rank_order", "tp-pp-dp"}};
  const Scenario sc = parse_scenario(doc, "dgx.json");
  const DataParallel across = data_parallel_ring(sc.cluster, 8, 2);
  EXPECT_DOUBLE_EQ(across.bandwidth, 0.96 * 50e9);
  EXPECT_EQ(across.nodes, 2);
  EXPECT_DOUBLE_EQ(across.latency_s, 2 * 5e-6);
  const DataParallel inside = data_parallel_ring(sc.cluster, 4, 2);  // both in node 0
  EXPECT_DOUBLE_EQ(inside.bandwidth, 0.8 * 450e9);
  EXPECT_DOUBLE_EQ(inside.latency_s, 2 * 2e-6);
  // Explicit: the same topology, and what it needs.
  doc["cluster"] = {
      {"devices", 4},
      {"device", doc["cluster"]["device"]},
      {"interconnect", {{"topology", "nodes"}, {"bandwidth", 1e9}, {"latency_s", 0.0}}}};
  doc["cluster"]["device"] = {{"name", "x"},          {"peak_flops", 1e12}, {"memory_bytes", 1e9},
                              {"mem_bandwidth", 1e9}, {"op_overhead_s", 0}, {"efficiency", 1.0}};
  try {
    parse_scenario(doc, "n.json");
    ADD_FAILURE() << "accepted";
  } catch (const ScenarioError& e) {
    EXPECT_STREQ(e.what(), "n.json: cluster.interconnect.devices_per_node: missing required key");
  }
  doc["cluster"]["interconnect"]["devices_per_node"] = 2;
  doc["cluster"]["interconnect"]["inter_node_bandwidth"] = 1e8;
  doc["cluster"]["interconnect"]["inter_node_latency_s"] = 1e-6;
  const Scenario explicit_nodes = parse_scenario(doc, "n.json");
  EXPECT_EQ(explicit_nodes.cluster.link_name(explicit_nodes.cluster.route(1, 2)[0].link), "1->ib");
}

TEST(DataParallel, PureDataParallelismPaysTheWholeAllReduce) {
  // K = 1, D = 4, one micro-batch of 2 samples per replica: 4 layers take
  // tf = 8000 ns and tb = 16000 ns; then 400 params x 4 B = 1600 B all-reduce in
  // 6 x (2000 + 400) ns; then the optimizer step.
  const Scenario whole = dp_scenario(4, 4, 8, 1);
  SimConfig cfg;
  cfg.stages = 1;
  cfg.data_parallel = data_parallel_ring(whole.cluster, 1, 4);
  const SimResult r = simulate(replica_scenario(whole, 1, 4), cfg);
  ASSERT_EQ(r.stage_costs.size(), 1u);
  EXPECT_EQ(r.stage_costs[0].grad_bytes, 1600);
  EXPECT_EQ(r.stage_costs[0].allreduce, 6 * 2400);
  EXPECT_EQ(r.data_parallel, 4);
  EXPECT_EQ(r.metrics.step_time, 8000 + 16000 + 6 * 2400 + r.stage_costs[0].optimizer);
  EXPECT_EQ(r.metrics.allreduce_time, 6 * 2400);
  // Without replicas the same step has no all-reduce.
  SimConfig alone;
  alone.stages = 1;
  EXPECT_EQ(simulate(replica_scenario(whole, 1, 4), alone).metrics.step_time,
            8000 + 16000 + r.stage_costs[0].optimizer);
}

// A framework that reduces bucket by bucket as the last backward produces
// the gradients (overlap_grad_reduce) starts the all-reduce with that
// backward: the step pays only what outlasts it.
TEST(DataParallel, AnOverlappedReductionStartsWithTheLastBackward) {
  Scenario whole = dp_scenario(4, 4, 8, 1);
  SimConfig cfg;
  cfg.stages = 1;
  cfg.data_parallel = data_parallel_ring(whole.cluster, 1, 4);
  whole.training.framework.overlap_grad_reduce = true;
  const SimResult r = simulate(replica_scenario(whole, 1, 4), cfg);
  ASSERT_EQ(r.stage_costs.size(), 1u);
  EXPECT_TRUE(r.stage_costs[0].allreduce_with_backward);
  // tf = 8000, tb = 16000, the all-reduce 6 x 2400 = 14400 within tb.
  EXPECT_EQ(r.metrics.step_time, 8000 + 16000 + r.stage_costs[0].optimizer);
  // A reduction longer than the backward shows its excess.
  whole.cluster.interconnect.bandwidth = 1e8;
  cfg.data_parallel = data_parallel_ring(whole.cluster, 1, 4);
  const SimResult slow = simulate(replica_scenario(whole, 1, 4), cfg);
  const SimTime a = slow.stage_costs[0].allreduce;
  EXPECT_GT(a, 16000);
  EXPECT_EQ(slow.metrics.step_time, 8000 + a + slow.stage_costs[0].optimizer);
}

// Under ZB-V the middle two stages share a device, and a backward's gradient
// to the stage below arrives at once, starting the device's next op before
// the backward's own gradients were counted: that op, the stage's last
// weight gradient, must still start the overlapped reduction, or the
// optimizer step waits for it forever.
TEST(DataParallel, AnOverlappedReductionStartsWhereTheGradientStaysOnTheDevice) {
  Scenario whole = dp_scenario(8, 8, 8, 2);
  whole.training.framework.overlap_grad_reduce = true;
  SimConfig cfg;
  cfg.stages = 4;
  cfg.schedule = ScheduleKind::kZbV;
  cfg.chunks = 2;
  cfg.remat = Remat::kNever;
  cfg.data_parallel = data_parallel_ring(whole.cluster, 4, 2);
  const SimResult r = simulate(replica_scenario(whole, 4, 2), cfg);
  ASSERT_EQ(r.stage_costs.size(), 8u);
  // Every stage's reduction ran: 8 all-reduces on the timeline, each of its
  // stage's 100 parameters in fp32 (one layer a stage).
  int reductions = 0;
  for (const TimelineEvent& e : r.timeline.events) {
    if (e.kind != EventKind::kAllReduce) continue;
    ++reductions;
    EXPECT_EQ(e.bytes, 400);
    EXPECT_EQ(e.end - e.start, r.stage_costs[static_cast<std::size_t>(e.stage)].allreduce);
  }
  EXPECT_EQ(reductions, 8);
}

// ZeRO-1's all-gather of the updated weights, where the framework runs it
// during the next step's first forward (overlap_param_gather), costs the
// step only what outlasts that forward.
TEST(DataParallel, AnOverlappedWeightGatherCostsWhatOutlastsAForward) {
  Scenario whole = dp_scenario(4, 4, 8, 1);
  whole.training.zero = 1;
  whole.training.zero_replicas = 4;
  const DataParallel dp = data_parallel_ring(whole.cluster, 1, 4);
  StageCost c;
  c.params = 400;
  c.forward = 1000;
  const SimTime gather = reduce_scatter_time(dp, 400 * 4);  // fp32 weights
  EXPECT_EQ(step_gather(whole, dp, c), gather);
  whole.training.framework.overlap_param_gather = true;
  EXPECT_EQ(step_gather(whole, dp, c), gather - 1000);
  c.forward = gather + 1;
  EXPECT_EQ(step_gather(whole, dp, c), 0);
}

// ZeRO-1 sums the gradients by a reduce-scatter, each replica stepping its
// quarter, then all-gathers the updated weights; a framework that all-reduces
// them whole instead (zero1_allreduce, DeepSpeed's) pays the full all-reduce
// before the same gather. K = 1, D = 4, as above: tf = 8000 ns, tb = 16000
// ns, 1600 B of gradients and of weights.
TEST(DataParallel, AZeroOneThatAllReducesPaysTheAllReduceBeforeTheGather) {
  Scenario whole = dp_scenario(4, 4, 8, 1);
  whole.training.zero = 1;
  whole.training.zero_replicas = 4;
  SimConfig cfg;
  cfg.stages = 1;
  cfg.data_parallel = data_parallel_ring(whole.cluster, 1, 4);
  // A reduce-scatter and an all-gather: (D - 1) steps of a quarter each,
  // 3 x (2000 + 400) ns.
  const SimTime half = 3 * 2400;
  const SimResult rs = simulate(replica_scenario(whole, 1, 4), cfg);
  ASSERT_EQ(rs.stage_costs.size(), 1u);
  EXPECT_FALSE(rs.stage_costs[0].zero1_allreduce);
  EXPECT_EQ(rs.stage_costs[0].allreduce, half);
  EXPECT_EQ(rs.stage_costs[0].zero_step_gather, half);
  EXPECT_EQ(rs.metrics.step_time, 8000 + 16000 + half + rs.stage_costs[0].optimizer + half);
  whole.training.framework.zero1_allreduce = true;
  const SimResult ar = simulate(replica_scenario(whole, 1, 4), cfg);
  EXPECT_TRUE(ar.stage_costs[0].zero1_allreduce);
  EXPECT_EQ(ar.stage_costs[0].allreduce, 6 * 2400);
  EXPECT_EQ(ar.stage_costs[0].zero_step_gather, half);
  // The optimizer still steps a quarter of the stage.
  EXPECT_EQ(ar.stage_costs[0].optimizer, rs.stage_costs[0].optimizer);
  EXPECT_EQ(ar.metrics.step_time, 8000 + 16000 + 6 * 2400 + ar.stage_costs[0].optimizer + half);
  // The timeline names the collective an all-reduce, not a reduce-scatter.
  int allreduces = 0;
  for (const TimelineEvent& e : ar.timeline.events) {
    if (e.kind == EventKind::kAllReduce && e.collective == ReplicaCollective::kAllReduce) {
      ++allreduces;
    }
  }
  EXPECT_EQ(allreduces, 1);
}

TEST(DataParallel, LastStagesAllReduceOverlapsTheFirstStagesBackward) {
  // K = 2 stages of 2 layers, D = 2, M = 1 micro-batch of 2: tf = 4000, tb =
  // 8000 per stage, and the activation and the gradient each take the 2 us hop
  // between the stages. Stage 1's backward ends at 2 tf + tb + hop; its
  // all-reduce (200 params x 4 B over 2 replicas: 2 x (2000 + 400) ns) runs
  // during stage 0's backward; stage 0's starts at 2 tf + 2 tb + 2 hops and its
  // optimizer step follows.
  const Scenario whole = dp_scenario(4, 4, 4, 1);
  SimConfig cfg;
  cfg.stages = 2;
  cfg.data_parallel = data_parallel_ring(whole.cluster, 2, 2);
  const SimResult r = simulate(replica_scenario(whole, 2, 2), cfg);
  const SimTime tf = 4000, tb = 8000, hop = 2000, a = 2 * 2400;
  EXPECT_EQ(r.stage_costs[1].allreduce, a);
  EXPECT_LT(a, tb);  // hidden behind stage 0's backward
  EXPECT_EQ(r.metrics.step_time, 2 * tf + 2 * tb + 2 * hop + a + r.stage_costs[0].optimizer);
  // The timeline: one all-reduce per stage, on its device's send lane, after its
  // backward and before its optimizer step.
  std::vector<const TimelineEvent*> reduces;
  for (const TimelineEvent& e : r.timeline.events) {
    if (e.kind == EventKind::kAllReduce) reduces.push_back(&e);
  }
  ASSERT_EQ(reduces.size(), 2u);
  for (const TimelineEvent* e : reduces) {
    EXPECT_EQ(e->lane, Lane::kSend);
    EXPECT_EQ(e->device, e->stage);
    EXPECT_EQ(e->bytes, 800);
    EXPECT_EQ(e->end - e->start, a);
    for (const TimelineEvent& o : r.timeline.events) {
      if (o.stage != e->stage) continue;
      if (o.kind == EventKind::kBackward) {
        EXPECT_LE(o.end, e->start);
      }
      if (o.kind == EventKind::kOptimizer) {
        EXPECT_GE(o.start, e->end);
      }
    }
  }
  EXPECT_EQ(reduces[0]->stage, 1);
  EXPECT_EQ(reduces[0]->start, 2 * tf + tb + hop);
  // The trace keeps them: written and read back, the same events.
  std::stringstream trace;
  write_chrome_trace(trace, r.timeline);
  const Timeline back = read_chrome_trace(trace, "t.json");
  std::size_t read = 0;
  for (const TimelineEvent& e : back.events) {
    if (e.kind != EventKind::kAllReduce) continue;
    ++read;
    EXPECT_EQ(e.bytes, 800);
    EXPECT_EQ(e.lane, Lane::kSend);
  }
  EXPECT_EQ(read, 2u);
}

// The CPU executor's ranks sum their gradients on their own threads, in the
// optimizer op (a measured sum of the ring's 2 ranks: 1 us + 800 B at 0.1
// GB/s, a = 9 us): the step takes it as its collective, not the link. With
// a core each, the step is as long as with the sum on the link; where the
// two stages share one core, stage 0's backward waits for stage 1's step and
// its sum, which the link would have run beside it.
TEST(DataParallel, AGradientSumOnTheRanksThreadsIsTheStepsAndHoldsItsCore) {
  const Scenario whole = dp_scenario(4, 4, 4, 1);
  SimConfig cfg;
  cfg.stages = 2;
  cfg.data_parallel = data_parallel_ring(whole.cluster, 2, 2);
  Scenario replica = replica_scenario(whole, 2, 2);
  const SimResult on_link = simulate(replica, cfg);
  EXPECT_FALSE(on_link.stage_costs[1].allreduce_in_step);
  cfg.data_parallel.measured_sum = {2, 1e-6, 1e8};
  const SimTime tf = 4000, tb = 8000, hop = 2000, a = 9000;
  const SimResult own = simulate(replica, cfg);
  ASSERT_TRUE(own.stage_costs[1].allreduce_in_step);
  EXPECT_EQ(own.stage_costs[1].allreduce, a);
  const SimTime opt = own.stage_costs[0].optimizer;
  EXPECT_EQ(own.metrics.step_time, 2 * tf + 2 * tb + 2 * hop + a + opt);
  // Each sum on its device's tensor lane, right after its optimizer's compute;
  // none on the link.
  int sums = 0;
  for (const TimelineEvent& e : own.timeline.events) {
    EXPECT_NE(e.kind, EventKind::kAllReduce);
    if (e.lane != Lane::kTensor) continue;
    ++sums;
    EXPECT_EQ(e.end - e.start, a);
    EXPECT_EQ(e.bytes, 800);
    for (const TimelineEvent& o : own.timeline.events) {
      if (o.kind == EventKind::kOptimizer && o.stage == e.stage) {
        EXPECT_EQ(o.end, e.start);
      }
    }
  }
  EXPECT_EQ(sums, 2);
  replica.cluster.shared_cores = 1;
  EXPECT_EQ(simulate(replica, cfg).metrics.step_time, 2 * tf + 2 * tb + hop + 2 * (opt + a));
  // On the link, the ring's own time (2 x 2400 ns) runs beside the backward.
  cfg.data_parallel.measured_sum = {};
  const SimTime ring = on_link.stage_costs[1].allreduce;
  EXPECT_EQ(ring, 2 * 2400);
  EXPECT_EQ(simulate(replica, cfg).metrics.step_time, 2 * tf + 2 * tb + 2 * hop + ring + opt);
}

}  // namespace
}  // namespace pipescope
