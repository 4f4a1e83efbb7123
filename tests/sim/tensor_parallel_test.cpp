// Tensor parallelism in the simulation: the group's ring, each op's
// all-reduces after its compute (hand-computed on exact devices), the
// partitioner pricing them, the scenario fields and their errors, and plans
// that carry T.

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "scenario_docs.h"
#include "sim/engine/simulator.h"
#include "sim/engine/tensor_parallel.h"
#include "sim/export/plan_export.h"
#include "sim/formats/plan_io.h"
#include "sim/plan/plan.h"
#include "sim/scenario/scenario_io.h"
#include "sim_fixtures.h"

namespace pipescope {
namespace {

using nlohmann::json;

// Two layers of 1000 FLOPs a sample (1000 ns forward, 2000 ns backward) on
// one group of two exact devices, linked at 1 GB/s with 1 us latency; each
// layer all-reduces 4000 bytes a sample in two all-reduces forward and again
// backward.
Scenario tp_scenario(int layers, int groups, int M) {
  Scenario sc = testing::uniform_scenario(layers, groups, 1000.0, M, M, false);
  sc.cluster.tensor_parallel = 2;
  sc.cluster.interconnect = Interconnect{TopologyKind::kAllToAll, 1e9, 1e-6};
  for (LayerSpec& l : sc.model.layers) {
    l.tp_fwd_allreduces = l.tp_bwd_allreduces = 2;
    l.tp_fwd_bytes = l.tp_bwd_bytes = 4000;
  }
  sc.model.tensor_parallel = 2;
  return sc;
}

TEST(TensorParallel, LayerAllReducesByHand) {
  const Scenario sc = tp_scenario(2, 1, 2);
  const DataParallel ring = tensor_ring(sc.cluster);
  EXPECT_EQ(ring.replicas, 2);
  EXPECT_DOUBLE_EQ(ring.bandwidth, 1e9);
  EXPECT_DOUBLE_EQ(ring.latency_s, 1e-6);
  // Two all-reduces of 8000 bytes in all over a ring of 2: 2 (T - 1) steps,
  // each a latency per all-reduce and 8000 / 2 bytes at 1 GB/s:
  // 2 x (2 x 1000 + 4000) ns.
  const TensorCollectives t = tensor_collectives(sc.model.layers[0], 2, ring);
  EXPECT_EQ(t.forward, 2 * (2 * 1000 + 4000));
  EXPECT_EQ(t.backward, t.forward);
  LayerSpec none = sc.model.layers[0];
  none.tp_bwd_allreduces = 0;
  EXPECT_EQ(tensor_collectives(none, 2, ring).backward, 0);
  Cluster whole = sc.cluster;
  whole.tensor_parallel = 1;
  EXPECT_EQ(tensor_collectives(sc.model.layers[0], 2, tensor_ring(whole)).forward, 0);
}

// What a framework overlaps leaves only what outlasts the compute it hides
// behind: a backward's all-reduces its weight gradients (not under a split
// backward), a forward's its compute (Transformer Engine's userbuffers).
TEST(TensorParallel, OverlappedCollectivesCostWhatOutlastsTheirCompute) {
  const TensorCollectives c{500, 700};
  OpTimes t;
  t.forward = 300;
  t.weight = 400;
  Framework f;
  EXPECT_EQ(exposed_collectives(c, t, f, false).forward, 500);
  EXPECT_EQ(exposed_collectives(c, t, f, false).backward, 700);
  f.tp_backward_overlap = true;
  EXPECT_EQ(exposed_collectives(c, t, f, false).backward, 300);
  EXPECT_EQ(exposed_collectives(c, t, f, true).backward, 700);  // W runs apart
  EXPECT_EQ(exposed_collectives(c, t, f, false).forward, 500);
  f.tp_forward_overlap = true;
  EXPECT_EQ(exposed_collectives(c, t, f, false).forward, 200);
  t.forward = 900;
  t.weight = 900;
  EXPECT_EQ(exposed_collectives(c, t, f, false).forward, 0);
  EXPECT_EQ(exposed_collectives(c, t, f, false).backward, 0);
  // Transformer Engine's pipelined reduce-scatters (half of the forward's
  // 500) leave their last of 4 chunks exposed, 62.5 rounded, and the GEMM
  // they slow adds what it loses (290 ns on 116 of 132 SMs: 40); a layer
  // without collectives pays neither.
  f.userbuffers_exposed_share = 0.25;
  f.userbuffers_proj_fprop_sms = 16;
  f.userbuffers_fprop_sm_margin = true;
  t.te_gemms.proj_fprop = 290;
  t.te_gemms.multiprocessors = 132;
  EXPECT_EQ(exposed_collectives(c, t, f, false).forward, 63 + 40);
  t.forward = 100;
  EXPECT_EQ(exposed_collectives(c, t, f, false).forward, 400 + 40);
  EXPECT_EQ(exposed_collectives(TensorCollectives{0, 700}, t, f, false).forward, 0);
  // Sharing its SMs instead, the GEMM loses 16 / 132 of one of the
  // forward's four collectives (500 / 4): 15.2.
  f.userbuffers_fprop_sm_margin = false;
  EXPECT_EQ(exposed_collectives(c, t, f, false).forward, 400 + 15);
  f.userbuffers_fprop_sm_margin = true;
  // The backward's bulk overlaps: a weight gradient of 580 ns kept off 16
  // SMs loses 80 even where the collectives hide; sharing them, it loses
  // 16 / 132 of one collective's 700 / 4 (21.2); nothing without collectives.
  f.userbuffers_qkv_wgrad_sms = 16;
  f.userbuffers_bulk_sm_margin = true;
  t.te_gemms.qkv_wgrad = 580;
  EXPECT_EQ(exposed_collectives(c, t, f, false).backward, 80);
  f.userbuffers_bulk_sm_margin = false;
  EXPECT_EQ(exposed_collectives(c, t, f, false).backward, 21);
  EXPECT_EQ(exposed_collectives(TensorCollectives{500, 0}, t, f, false).backward, 0);
}

TEST(TensorParallel, OpsRunTheirAllReducesAfterTheirCompute) {
  // K = 1, M = 2, GPipe, no remat. Per micro-batch of 1: forward 2 x 1000 ns
  // of compute, then 2 x 2 x (2 x 1000 + 2000) = 16,000 ns of all-reduces;
  // backward 2 x 2000 ns, then 16,000 ns.
  const Scenario sc = tp_scenario(2, 1, 2);
  SimConfig cfg;
  cfg.stages = 1;
  const SimResult r = simulate(sc, cfg);
  ASSERT_EQ(r.stage_costs.size(), 1u);
  EXPECT_EQ(r.stage_costs[0].tp_forward, 16000);
  EXPECT_EQ(r.stage_costs[0].tp_backward, 16000);
  EXPECT_EQ(r.stage_costs[0].tp_forward_bytes, 8000);
  EXPECT_EQ(r.metrics.step_time, 2 * (2000 + 16000) + 2 * (4000 + 16000));
  EXPECT_EQ(r.metrics.tensor_time, 4 * 16000);
  EXPECT_EQ(r.tensor_parallel, 2);
  EXPECT_EQ(r.timeline.device_names, (std::vector<std::string>{"group 0 (devices 0-1, exact)"}));
  // The device is busy throughout: no bubble.
  EXPECT_EQ(r.metrics.devices[0].busy, r.metrics.step_time);
  std::vector<std::pair<SimTime, SimTime>> tensor;
  std::vector<std::pair<SimTime, SimTime>> compute;
  for (const TimelineEvent& e : r.timeline.events) {
    if (e.lane == Lane::kTensor) {
      EXPECT_EQ(e.kind, EventKind::kTensorAllReduce);
      EXPECT_EQ(e.bytes, 8000);
      tensor.emplace_back(e.start, e.end);
    } else if (e.lane == Lane::kCompute && e.kind != EventKind::kOptimizer) {
      compute.emplace_back(e.start, e.end);
    }
  }
  const std::vector<std::pair<SimTime, SimTime>> want_compute{
      {0, 2000}, {18000, 20000}, {36000, 40000}, {56000, 60000}};
  const std::vector<std::pair<SimTime, SimTime>> want_tensor{
      {2000, 18000}, {20000, 36000}, {40000, 56000}, {60000, 76000}};
  EXPECT_EQ(compute, want_compute);
  EXPECT_EQ(tensor, want_tensor);
}

// Two groups, one layer each, M = 1, remat on: each layer's output is 6000
// bytes a sample, whole on both devices of a group.
SimResult split_cuts(bool split, bool sequence) {
  Scenario sc = tp_scenario(2, 2, 1);
  for (LayerSpec& l : sc.model.layers) l.out_bytes = 6000;
  sc.model.sequence_parallel = sequence;
  sc.cluster.p2p_split = split;
  sc.training.remat = Remat::kAlways;
  SimConfig cfg;
  cfg.stages = 2;
  return simulate(sc, cfg);
}

// Each device's tensor-lane lengths in time order.
std::vector<std::vector<SimTime>> tensor_lengths(const SimResult& r) {
  std::vector<std::vector<SimTime>> out(2);
  std::vector<TimelineEvent> events = r.timeline.events;
  std::sort(events.begin(), events.end(),
            [](const TimelineEvent& a, const TimelineEvent& b) { return a.start < b.start; });
  for (const TimelineEvent& e : events) {
    if (e.lane == Lane::kTensor) out[static_cast<std::size_t>(e.device)].push_back(e.end - e.start);
  }
  return out;
}

TEST(TensorParallel, SplitCutsSendAShareAndGatherIt) {
  // p2p_split: each device sends 3000 of the 6000 bytes and the next group
  // all-gathers them: (T - 1) (1 us + 6000 B / (2 x 1 GB/s)) = 4000 ns, before
  // stage 1's forward and stage 0's backward, not before a recompute. A
  // layer's own all-reduces are 8000 ns an op at micro-batch 1.
  const SimResult r = split_cuts(true, false);
  ASSERT_EQ(r.stage_costs.size(), 2u);
  EXPECT_EQ(r.stage_costs[0].output_bytes, 3000);
  EXPECT_EQ(r.stage_costs[0].tp_input_gather, 0);
  EXPECT_EQ(r.stage_costs[0].tp_grad_gather, 4000);
  EXPECT_EQ(r.stage_costs[0].tp_grad_gather_bytes, 6000);
  EXPECT_EQ(r.stage_costs[1].tp_input_gather, 4000);
  EXPECT_EQ(r.stage_costs[1].tp_input_gather_bytes, 6000);
  EXPECT_EQ(r.stage_costs[1].tp_grad_gather, 0);
  const std::vector<std::vector<SimTime>> want{{8000, 8000, 8000 + 4000},
                                               {8000 + 4000, 8000, 8000}};
  EXPECT_EQ(tensor_lengths(r), want);
  // Whole copies: 6000 bytes from each device and no gathers.
  const SimResult whole = split_cuts(false, false);
  EXPECT_EQ(whole.stage_costs[0].output_bytes, 6000);
  EXPECT_EQ(whole.stage_costs[1].tp_input_gather, 0);
  EXPECT_EQ(whole.stage_costs[0].tp_grad_gather, 0);
  // Sequence parallelism has split the tensor already: nothing more to split.
  const SimResult sequence = split_cuts(true, true);
  EXPECT_EQ(sequence.stage_costs[0].output_bytes, 6000);
  EXPECT_EQ(sequence.stage_costs[1].tp_input_gather, 0);
}

TEST(TensorParallel, ASplitCutInsideADeviceIsNotGathered) {
  // zb-v on 2 groups: stages 0 1 2 3 on devices 0 1 1 0. Stages 1 and 2
  // share device 1: nothing crosses between them, so neither gathers there;
  // the cuts 0 | 1 and 2 | 3 cross devices and are gathered (4000 ns).
  Scenario sc = tp_scenario(4, 2, 2);
  for (LayerSpec& l : sc.model.layers) l.out_bytes = 6000;
  sc.cluster.p2p_split = true;
  SimConfig cfg;
  cfg.stages = 2;
  cfg.schedule = ScheduleKind::kZbV;
  cfg.remat = Remat::kNever;
  const SimResult r = simulate(sc, cfg);
  ASSERT_EQ(r.stage_costs.size(), 4u);
  EXPECT_EQ(r.stage_costs[0].tp_grad_gather, 4000);
  EXPECT_EQ(r.stage_costs[1].tp_input_gather, 4000);
  EXPECT_EQ(r.stage_costs[1].tp_grad_gather, 0);
  EXPECT_EQ(r.stage_costs[2].tp_input_gather, 0);
  EXPECT_EQ(r.stage_costs[2].tp_grad_gather, 4000);
  EXPECT_EQ(r.stage_costs[3].tp_input_gather, 4000);
}

TEST(TensorParallel, ThePartitionerPricesTheSplitCut) {
  Scenario sc = tp_scenario(2, 2, 1);
  const AnalyticCostModel cost(sc.cluster.device, sc.model.dtype, 0.0);
  EXPECT_EQ(partition_problem(sc, cost, 2, 1, Remat::kNever).cut_split, 1);
  sc.cluster.p2p_split = true;
  EXPECT_EQ(partition_problem(sc, cost, 2, 1, Remat::kNever).cut_split, 2);
  EXPECT_EQ(cut_split(sc.model, sc.cluster), 2);
  sc.model.sequence_parallel = true;
  EXPECT_EQ(cut_split(sc.model, sc.cluster), 1);
}

TEST(TensorParallel, MfuCountsTheDevicesShare) {
  // The layers are one device's share: 2 layers x 3000 FLOPs a sample, 2
  // samples, in a step of 76,000 ns at 1 FLOP/ns on K = 1 device.
  const Scenario sc = tp_scenario(2, 1, 2);
  SimConfig cfg;
  cfg.stages = 1;
  EXPECT_DOUBLE_EQ(simulate(sc, cfg).metrics.mfu, 12000.0 / 76000.0);
}

TEST(TensorParallel, SplitBackwardRunsTheAllReducesInBNotW) {
  // zb-h1, K = 1, M = 1: F 2000 + 16,000; B (the input gradients, half the
  // backward of layers with parameters) 2000 + 16,000; W 2000 alone.
  Scenario sc = tp_scenario(2, 1, 1);
  for (LayerSpec& l : sc.model.layers) l.params = 100;
  sc.training.remat = Remat::kNever;
  SimConfig cfg;
  cfg.stages = 1;
  cfg.schedule = ScheduleKind::kZbH1;
  const SimResult r = simulate(sc, cfg);
  EXPECT_EQ(r.metrics.step_time, 18000 + 18000 + 2000);
  std::vector<EventKind> before_tensor;
  EventKind last = EventKind::kOptimizer;
  for (const TimelineEvent& e : r.timeline.events) {
    if (e.lane == Lane::kTensor) before_tensor.push_back(last);
    if (e.lane == Lane::kCompute) last = e.kind;
  }
  EXPECT_EQ(before_tensor, (std::vector<EventKind>{EventKind::kForward, EventKind::kBackward}));
}

TEST(TensorParallel, RecomputeRepeatsTheForwardAllReduces) {
  Scenario sc = tp_scenario(2, 1, 1);
  sc.training.remat = Remat::kAlways;
  SimConfig cfg;
  cfg.stages = 1;
  // F 2000 + 16000, R 2000 + 16000, B 4000 + 16000.
  EXPECT_EQ(simulate(sc, cfg).metrics.step_time, 18000 + 18000 + 20000);
}

TEST(TensorParallel, PartitionerPricesTheAllReduces) {
  // Four equal layers on two stages; only the first all-reduces, for as long
  // as two layers' compute: the balanced cut puts it alone.
  Scenario sc = tp_scenario(4, 2, 1);
  for (std::size_t l = 1; l < 4; ++l) {
    sc.model.layers[l].tp_fwd_allreduces = sc.model.layers[l].tp_bwd_allreduces = 0;
  }
  // Layer 0: forward 1000 + 2 x (2 x 1000 + 2000) = 9000 ns, backward 2000 +
  // 8000; layers 1-3 1000 and 2000 each.
  sc.cluster.interconnect.bandwidth = 1e12;  // the stages' transfers cost nothing
  sc.model.layers[0].tp_fwd_bytes = sc.model.layers[0].tp_bwd_bytes = 4000;
  sc.cluster.interconnect.latency_s = 1e-6;
  const std::vector<StageRange> cut =
      choose_partition(sc, *make_cost_model(sc), PartitionMethod::kOptimal, 2, 1, Remat::kNever);
  ASSERT_EQ(cut.size(), 2u);
  EXPECT_EQ(cut[0].last_layer, 0);
  Scenario whole = sc;
  for (LayerSpec& l : whole.model.layers) l.tp_fwd_allreduces = l.tp_bwd_allreduces = 0;
  EXPECT_EQ(choose_partition(whole, *make_cost_model(whole), PartitionMethod::kOptimal, 2, 1,
                             Remat::kNever)[0]
                .last_layer,
            1);
}

TEST(TensorParallel, ScenarioGroupsTheDevicesAndSplitsTheModel) {
  json doc = testing::docs::good_doc();
  doc["model"]["heads"] = 8;
  doc["cluster"] = {{"preset", "dgx-a100"}, {"devices", 16}};
  doc["training"]["tensor_parallel"] = 8;
  const Scenario sc = parse_scenario(doc, "tp.json");
  EXPECT_EQ(sc.cluster.devices, 2);
  EXPECT_EQ(sc.cluster.tensor_parallel, 8);
  EXPECT_EQ(sc.cluster.physical_devices(), 16);
  EXPECT_EQ(sc.model.tensor_parallel, 8);
  EXPECT_EQ(sc.training.tensor_parallel, 8);
  // A group's ring runs inside a node, over NVSwitch (two hops); the route
  // between groups leaves the node.
  const double f = sc.cluster.achievable_fraction();
  const DataParallel ring = tensor_ring(sc.cluster);
  EXPECT_DOUBLE_EQ(ring.bandwidth, f * 300e9);
  EXPECT_DOUBLE_EQ(ring.latency_s, 2 * 2e-6);
  const std::vector<Hop> across = sc.cluster.route(0, 1);
  ASSERT_FALSE(across.empty());
  EXPECT_DOUBLE_EQ(across.front().bandwidth, sc.cluster.achievable_fraction(true) * 25e9);
  EXPECT_DOUBLE_EQ(sc.cluster.achievable_fraction(true), 0.96);  // a NIC's, as NCCL reaches
  EXPECT_EQ(ring.nodes, 1);
  EXPECT_TRUE(ring.nccl);
}

TEST(TensorParallel, ARingAcrossNodesRunsAtTheNetworksSpeed) {
  // T = 16 on nodes of 8: two of the ring's hops leave the node, each over
  // its devices' own InfiniBand links (5 us a hop, two hops a route).
  json doc = testing::docs::good_doc();
  doc["model"]["heads"] = 16;
  doc["cluster"] = {{"preset", "dgx-a100"}, {"devices", 32}};
  doc["training"]["tensor_parallel"] = 16;
  const Scenario sc = parse_scenario(doc, "tp.json");
  const DataParallel ring = tensor_ring(sc.cluster);
  EXPECT_EQ(ring.replicas, 16);
  EXPECT_DOUBLE_EQ(ring.bandwidth, sc.cluster.achievable_fraction(true) * 25e9);
  EXPECT_DOUBLE_EQ(ring.latency_s, 2 * 5e-6);
  EXPECT_EQ(ring.nodes, 2);  // NCCL's steps between nodes pay the network's latency
}

TEST(TensorParallel, HopsThatShareALinkShareItsBandwidth) {
  // Four devices behind one PCIe switch, no peer-to-peer: every hop of the
  // ring goes up the switch's uplink and down it, so the four share each way.
  Scenario sc = tp_scenario(2, 1, 1);
  sc.cluster.tensor_parallel = 4;
  sc.cluster.interconnect = Interconnect{TopologyKind::kPcieHost, 8e9, 1e-6};
  sc.cluster.interconnect.devices_per_switch = 4;
  sc.cluster.build_topology();
  const DataParallel ring = tensor_ring(sc.cluster);
  EXPECT_DOUBLE_EQ(ring.bandwidth, 8e9 / 4);
  EXPECT_DOUBLE_EQ(ring.latency_s, 2e-6);  // charged on each device's link, twice a route
}

std::string scenario_error(const json& doc) {
  return testing::docs::scenario_error(doc, "tp.json");
}

TEST(TensorParallel, ScenarioErrorsNameTheField) {
  json doc = testing::docs::good_doc();  // 4 heads, 2 devices
  doc["training"]["tensor_parallel"] = 4;
  EXPECT_EQ(scenario_error(doc),
            "tp.json: training.tensor_parallel: 4 does not divide the cluster's 2 devices: they "
            "form groups of tensor_parallel devices");
  doc["cluster"]["devices"] = 6;
  doc["training"]["tensor_parallel"] = 3;
  EXPECT_EQ(scenario_error(doc),
            "tp.json: training.tensor_parallel: 3 tensor-parallel devices do not divide heads 4");
  doc["training"]["tensor_parallel"] = 0;
  EXPECT_NE(scenario_error(doc).find("training.tensor_parallel"), std::string::npos);
  doc["training"].erase("tensor_parallel");
  doc["training"]["sequence_parallel"] = true;
  EXPECT_EQ(scenario_error(doc),
            "tp.json: training.sequence_parallel: sequence parallelism splits activations among "
            "tensor-parallel devices: it needs tensor_parallel above 1");
  json layers = testing::docs::layer_list_doc();
  layers["training"]["tensor_parallel"] = 2;
  EXPECT_NE(scenario_error(layers).find(
                "training.tensor_parallel: tensor parallelism splits a transformer's layers"),
            std::string::npos);
}

TEST(TensorParallel, PlansCarryTAndExportItToMegatron) {
  json doc = testing::docs::good_doc();
  doc["cluster"]["devices"] = 4;
  doc["training"]["tensor_parallel"] = 2;
  doc["training"]["sequence_parallel"] = true;
  const Scenario sc = parse_scenario(doc, "tp.json");
  SimConfig cfg;
  cfg.stages = 2;
  const Plan plan = make_plan(sc, simulate(sc, cfg), 1, "optimal");
  EXPECT_EQ(plan.tensor_parallel, 2);
  EXPECT_EQ(plan.devices, 4);
  const Plan back = plan_from_json(plan_to_json(plan), "p.json");
  EXPECT_EQ(back.tensor_parallel, 2);
  EXPECT_TRUE(back.sequence_parallel);
  check_plan_matches(back, sc, "p.json");  // the same split: no error
  doc["training"].erase("sequence_parallel");
  try {
    check_plan_matches(back, parse_scenario(doc, "tp.json"), "p.json");
    ADD_FAILURE() << "a plan of another split was accepted";
  } catch (const ScenarioError& e) {
    EXPECT_EQ(e.json_path(), "T");
    EXPECT_NE(std::string(e.what()).find("T=2 with sequence parallelism"), std::string::npos);
  }
  const std::string megatron = export_plan(plan, ExportFormat::kMegatron);
  EXPECT_NE(megatron.find("--tensor-model-parallel-size 2"), std::string::npos);
  EXPECT_NE(megatron.find("--sequence-parallel"), std::string::npos);
  EXPECT_NE(megatron.find("K x D x T = 4 GPUs"), std::string::npos);
  EXPECT_THROW(export_plan(plan, ExportFormat::kDeepSpeed), std::invalid_argument);
  // A plan file of another size is refused with the product it expected.
  json bad = plan_to_json(plan);
  bad["cluster"]["devices"] = 8;
  try {
    plan_from_json(bad, "p.json");
    ADD_FAILURE() << "accepted";
  } catch (const ScenarioError& e) {
    EXPECT_NE(std::string(e.what()).find("expected K x D x T x C = 4 devices, got 8"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace pipescope
