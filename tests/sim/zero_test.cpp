// ZeRO stages 0 to 3 over D replicas: the bytes a device keeps per
// parameter, its stage memory, optimizer step and the step's collectives
// against hand computations, the scenario field, plans and exports.

#include <gtest/gtest.h>

#include "costmodels/cost_model.h"

#include <sstream>
#include <string>
#include <vector>

#include "scenario_docs.h"
#include "sim/engine/simulator.h"
#include "sim/engine/timeline.h"
#include "sim/engine/zero.h"
#include "sim/export/plan_export.h"
#include "sim/formats/plan_io.h"
#include "sim/formats/trace_io.h"
#include "sim/plan/plan.h"
#include "sim/plan/planner.h"
#include "sim/scenario/scenario_io.h"
#include "sim_fixtures.h"

namespace pipescope {
namespace {

using nlohmann::json;

TEST(Zero, ParameterBytesSplitIntoWeightsGradientsAndOptimizer) {
  // Adam in mixed precision: 16-bit weights and gradients, 12 bytes of fp32
  // master weights and slots; in fp32: 4 + 4 and 8 of slots.
  const ParamBytes mixed = param_bytes(16.0, DType::kBf16);
  EXPECT_DOUBLE_EQ(mixed.weights, 2.0);
  EXPECT_DOUBLE_EQ(mixed.gradients, 2.0);
  EXPECT_DOUBLE_EQ(mixed.optimizer, 12.0);
  const ParamBytes fp32 = param_bytes(16.0, DType::kFp32);
  EXPECT_DOUBLE_EQ(fp32.optimizer, 8.0);
  const ParamBytes few = param_bytes(3.0, DType::kBf16);  // bytes_per_param given as 3
  EXPECT_DOUBLE_EQ(few.gradients, 1.0);
  EXPECT_DOUBLE_EQ(few.optimizer, 0.0);
}

TEST(Zero, BytesPerParameterOfEachStage) {
  // Rajbhandari et al. 2020, figure 1's accounting with K = 12 bytes of
  // optimizer state: 2 + 2 + 12 whole, 2 + 2 + 12/D, 2 + 14/D.
  EXPECT_DOUBLE_EQ(zero_bytes_per_param(16.0, DType::kBf16, 0, 4), 16.0);
  EXPECT_DOUBLE_EQ(zero_bytes_per_param(16.0, DType::kBf16, 1, 4), 2.0 + 2.0 + 3.0);
  EXPECT_DOUBLE_EQ(zero_bytes_per_param(16.0, DType::kBf16, 2, 4), 2.0 + 14.0 / 4);
  EXPECT_DOUBLE_EQ(zero_bytes_per_param(16.0, DType::kBf16, 2, 1), 16.0);
  // Stage 3: (2 + 2 + 12) / D, the gathered layers counted apart.
  EXPECT_DOUBLE_EQ(zero_bytes_per_param(16.0, DType::kBf16, 3, 4), 16.0 / 4);
  EXPECT_DOUBLE_EQ(zero_bytes_per_param(16.0, DType::kBf16, 3, 8), 2.0);
  EXPECT_DOUBLE_EQ(zero_bytes_per_param(16.0, DType::kBf16, 3, 1), 16.0);
}

// 4 layers of 100 fp32 parameters (16 bytes each with Adam), K = 1, two
// replicas; memory read and written at 1 GB/s, so the optimizer step over
// n parameters takes 2 n 16 bytes / 1 GB/s = 32 n ns.
SimResult replica_step(int zero) {
  Scenario sc = testing::uniform_scenario(4, 2, 1000.0, 4, 2, false);
  for (LayerSpec& l : sc.model.layers) l.params = 100;
  sc.training.bytes_per_param = 16.0;
  sc.training.zero = zero;
  sc.cluster.device.mem_bandwidth = 1e9;
  SimConfig cfg;
  cfg.stages = 1;
  cfg.data_parallel = data_parallel_ring(sc.cluster, 1, 2);
  return simulate(replica_scenario(sc, 1, 2), cfg);
}

TEST(Zero, ShardsMemoryAndTheOptimizerStep) {
  const SimResult plain = replica_step(0);
  const SimResult one = replica_step(1);
  const SimResult two = replica_step(2);
  EXPECT_EQ(plain.stage_costs[0].static_bytes, 400 * 16);
  EXPECT_EQ(one.stage_costs[0].static_bytes, 400 * (4 + 4 + 8 / 2));
  EXPECT_EQ(two.stage_costs[0].static_bytes, 400 * (4 + (4 + 8) / 2));
  EXPECT_EQ(plain.metrics.devices[0].peak_memory - one.metrics.devices[0].peak_memory, 400 * 4);
  EXPECT_EQ(plain.stage_costs[0].optimizer, 32 * 400);
  EXPECT_EQ(one.stage_costs[0].optimizer, 32 * 200);  // each replica steps its half
  EXPECT_EQ(two.stage_costs[0].optimizer, 32 * 200);
  // The gradients' traffic is an all-reduce's either way: under stage 1 a
  // reduce-scatter before the step and an all-gather after it, half each.
  EXPECT_EQ(one.stage_costs[0].allreduce + one.stage_costs[0].zero_step_gather,
            plain.stage_costs[0].allreduce);
  EXPECT_EQ(one.stage_costs[0].allreduce, plain.stage_costs[0].allreduce / 2);
  EXPECT_EQ(one.stage_costs[0].zero_reduce_scatter, 0);  // not after every backward
  // One stage on the device, the link free: the step is plain's less the
  // optimizer's half.
  EXPECT_EQ(plain.metrics.step_time - one.metrics.step_time, 32 * 200);
  EXPECT_EQ(one.zero, 1);
}

TEST(Zero, DeviceMemorySplitsIntoStateAndActivations) {
  // fp32 Adam: weights 4, gradients 4, optimizer 8 bytes a parameter; ZeRO-2
  // over 2 replicas halves the last two.
  const SimResult two = replica_step(2);
  EXPECT_EQ(two.stage_costs[0].weight_bytes, 400 * 4);
  EXPECT_EQ(two.stage_costs[0].gradient_bytes, 400 * 2);
  EXPECT_EQ(two.stage_costs[0].optimizer_bytes, 400 * 4);
  const MemorySplit m = memory_split(two, 0);
  EXPECT_EQ(m.weights, 1600);
  EXPECT_EQ(m.gradients, 800);
  EXPECT_EQ(m.optimizer, 1600);
  EXPECT_EQ(m.weights + m.gradients + m.optimizer + m.activations,
            two.metrics.devices[0].peak_memory);
  const SimResult plain = replica_step(0);
  EXPECT_EQ(memory_split(plain, 0).optimizer, 400 * 8);
  EXPECT_EQ(memory_split(plain, 0).activations, m.activations);
}

// memory_scenario's two stages of 2000 fp32 parameters at 12 bytes (weights
// 4, gradients 4, optimizer 4) over D = 2 replicas.
SimResult memory_run(int zero) {
  Scenario sc = testing::memory_scenario(2, false);
  sc.cluster.devices = 4;
  sc.training.global_batch = 8;  // 4 a replica: micro-batches of 2
  sc.training.zero = zero;
  SimConfig cfg;
  cfg.stages = 2;
  cfg.partition = PartitionMethod::kUniform;
  cfg.data_parallel = data_parallel_ring(sc.cluster, 2, 2);
  return simulate(replica_scenario(sc, 2, 2), cfg);
}

TEST(Zero, StageMemoryOfEachStage) {
  // Per parameter: 0: 4 + 4 + 4; 1: 4 + 4 + 4/2; 2: 4 + (4 + 4)/2;
  // 3: the shard (4 + 4 + 4)/2 and the gathered copy of the weights, 4.
  const Bytes expected[] = {2000 * 12, 2000 * 10, 2000 * 8, 2000 * 10};
  const Bytes weights[] = {2000 * 4, 2000 * 4, 2000 * 4, 2000 * (4 + 2)};
  const Bytes gradients[] = {2000 * 4, 2000 * 4, 2000 * 2, 2000 * 2};
  const Bytes optimizer[] = {2000 * 4, 2000 * 2, 2000 * 2, 2000 * 2};
  const SimResult plain = memory_run(0);
  for (int zero = 0; zero <= 3; ++zero) {
    SCOPED_TRACE(zero);
    const SimResult r = memory_run(zero);
    for (const StageCost& c : r.stage_costs) {
      EXPECT_EQ(c.params, 2000);
      EXPECT_EQ(c.static_bytes, expected[zero]);
      EXPECT_EQ(c.weight_bytes, weights[zero]);
      EXPECT_EQ(c.gradient_bytes, gradients[zero]);
      EXPECT_EQ(c.optimizer_bytes, optimizer[zero]);
    }
    // The activations are the same under every stage; the peak moves with
    // the static bytes alone.
    for (int d = 0; d < 2; ++d) {
      EXPECT_EQ(r.metrics.devices[static_cast<std::size_t>(d)].peak_memory -
                    plain.metrics.devices[static_cast<std::size_t>(d)].peak_memory,
                expected[zero] - expected[0]);
    }
  }
}

// K = 2, M = 2, D = 2 under 1F1B: 4 layers of 4000 fp32 parameters and 1000
// FLOPs a sample, 4 samples a replica, so micro-batches of 2: a stage's
// forward 4000 ns, its backward 8000 ns; no bytes between stages and no
// optimizer time (bytes_per_param 0). A stage's gradients, and its weights,
// are 8000 x 4 = 32000 bytes; the replica link moves 1 byte/ns without
// latency, so an all-reduce takes 2 (D - 1) 32000 / (D 1 B/ns) = 32000 ns and
// a reduce-scatter or all-gather half that, 16000 ns.
SimResult collective_run(int zero) {
  Scenario sc = testing::uniform_scenario(4, 4, 1000.0, 8, 2, false);
  for (LayerSpec& l : sc.model.layers) l.params = 4000;
  sc.training.schedule = ScheduleKind::k1F1B;
  sc.training.zero = zero;
  SimConfig cfg;
  cfg.stages = 2;
  cfg.partition = PartitionMethod::kUniform;
  cfg.data_parallel = data_parallel_ring(sc.cluster, 2, 2);
  return simulate(replica_scenario(sc, 2, 2), cfg);
}

TEST(Zero, CollectiveTimesAreRingHalves) {
  const DataParallel dp =
      data_parallel_ring(testing::uniform_scenario(4, 4, 1.0, 4, 1, false).cluster, 2, 2);
  EXPECT_EQ(allreduce_time(dp, 32000), 32000);
  EXPECT_EQ(reduce_scatter_time(dp, 32000), 16000);
  const SimResult two = collective_run(2);
  EXPECT_EQ(two.stage_costs[0].allreduce, 0);
  EXPECT_EQ(two.stage_costs[0].zero_reduce_scatter, 16000);
  EXPECT_EQ(two.stage_costs[0].zero_step_gather, 16000);
  EXPECT_EQ(two.stage_costs[0].zero_op_gather, 0);
  const SimResult three = collective_run(3);
  EXPECT_EQ(three.stage_costs[1].zero_reduce_scatter, 16000);
  EXPECT_EQ(three.stage_costs[1].zero_step_gather, 0);
  EXPECT_EQ(three.stage_costs[1].zero_op_gather, 16000);
}

TEST(Zero, StageOneAllReducesOnceAStep) {
  // Device 0: F0 0-4000, F1 4000-8000, B0 16000-24000 (device 1's B0 runs
  // 8000-16000), B1 28000-36000 (device 1's B1 20000-28000); its all-reduce
  // 36000-68000, device 1's 28000-60000. The same as without ZeRO.
  for (int zero : {0, 1}) {
    SCOPED_TRACE(zero);
    const SimResult r = collective_run(zero);
    EXPECT_EQ(r.metrics.step_time, 68000);
    EXPECT_EQ(r.metrics.allreduce_time, 2 * 32000);
  }
}

TEST(Zero, StageTwoReduceScattersEveryBackward) {
  // The same compute; device 1's reduce-scatters run 16000-32000 and
  // 32000-48000, then its all-gather 48000-64000; device 0's B0 ends at
  // 24000 and B1 at 36000, but the link carries B0's reduce-scatter until
  // 40000: B1's runs 40000-56000, the optimizer step (no time) at 56000, the
  // all-gather 56000-72000. Four reduce-scatters and two all-gathers.
  const SimResult r = collective_run(2);
  EXPECT_EQ(r.metrics.step_time, 72000);
  EXPECT_EQ(r.metrics.allreduce_time, 6 * 16000);
  EXPECT_EQ(r.metrics.devices[0].busy, 2 * 4000 + 2 * 8000);  // the link's time is not compute
}

TEST(Zero, StageThreeGathersBeforeEveryForwardAndBackward) {
  // Each stage's two layers gather 8000 ns each, one after the other on the
  // device's link (G, 16000 in all), booked when the device reaches the op
  // (before its input has arrived); the op computes once the first layer's
  // is there and stalls while the second's arrives: a forward (2000 + 2000)
  // ends 8000 + 4000 + 6000 after its gathers start, a backward (4000 +
  // 4000) 8000 + 8000 + 4000 after (gather_flow). R, the reduce-scatter
  // after a backward, 16000.
  //   device 0: G 0-16000, F0 8000-18000, G 18000-34000, F1 26000-36000,
  //             G 36000-52000, B0 48000-60000 (its gradient from 48000),
  //             R 60000-76000, G 76000-92000, B1 102000-114000, O 114000,
  //             R 114000-130000;
  //   device 1: G 0-16000, F0 18000-28000, G 28000-44000, B0 36000-48000,
  //             R 48000-64000, G 64000-80000, F1 72000-82000,
  //             G 82000-98000, B1 90000-102000, O 102000, R 102000-118000.
  const SimResult r = collective_run(3);
  EXPECT_EQ(r.metrics.step_time, 130000);
  EXPECT_EQ(r.metrics.allreduce_time, (8 + 4) * 16000);
  EXPECT_EQ(r.metrics.devices[0].busy, 2 * 4000 + 2 * 8000);
}

// gather_flow against hand timelines: two layers of compute 2 and gathers 8
// (gathers back to back, 0-8 and 8-16, the second layer waits 6 for its
// weights); three of compute 10 and gathers 4 (gathers 0-4, 4-8 and 14-18,
// each after the layer before has started, every one after the first hidden
// behind it); and L layers of compute c and gather g, which take
// g + L c + (L - 1) max(0, g - c).
TEST(Zero, StageThreeGatherFlowByHand) {
  EXPECT_EQ(gather_flow({2, 2}, {8, 8}), (GatherFlow{8, 6, 16}));
  EXPECT_EQ(gather_flow({10, 10, 10}, {4, 4, 4}), (GatherFlow{4, 0, 18}));
  // Layer 1's gather (9) follows layer 0's; layer 2's (1) starts when layer
  // 1 starts computing and ends before layer 1 is done: gathers 0-3, 3-12,
  // 12-13; computes 3-5, 12-15, 15-17. It ends at 17 = 3 + 7 computing + 7
  // stalled.
  EXPECT_EQ(gather_flow({2, 3, 2}, {3, 9, 1}), (GatherFlow{3, 7, 13}));
  for (const SimTime c : {1, 5, 9}) {
    for (const SimTime g : {2, 5, 8}) {
      for (const std::size_t L : {1u, 2u, 5u}) {
        const GatherFlow f = gather_flow(std::vector<SimTime>(L, c), std::vector<SimTime>(L, g));
        EXPECT_EQ(f.lead, g);
        EXPECT_EQ(f.stall, static_cast<SimTime>(L - 1) * std::max<SimTime>(0, g - c))
            << c << " " << g << " " << L;
      }
    }
  }
}

// A stage of four layers of 100, 300, 200 and 50 fp32 parameters under
// ZeRO-3 over two replicas keeps its shard, (4 + 4 + 4) / 2 bytes a
// parameter, and the most two adjacent layers hold, 300 + 200, whole.
TEST(Zero, StageThreeKeepsTheShardAndTwoLayersGathered) {
  Scenario sc = testing::uniform_scenario(4, 2, 1000.0, 4, 2, false);
  const std::int64_t params[] = {100, 300, 200, 50};
  for (std::size_t l = 0; l < 4; ++l) sc.model.layers[l].params = params[l];
  sc.training.bytes_per_param = 12.0;
  sc.training.zero = 3;
  SimConfig cfg;
  cfg.stages = 1;
  cfg.data_parallel = data_parallel_ring(sc.cluster, 1, 2);
  const SimResult r = simulate(replica_scenario(sc, 1, 2), cfg);
  ASSERT_EQ(r.stage_costs.size(), 1u);
  const StageCost& c = r.stage_costs[0];
  EXPECT_EQ(c.gathered_bytes, 500 * 4);
  EXPECT_EQ(c.static_bytes, 650 * 6 + 500 * 4);
  EXPECT_EQ(c.weight_bytes, 650 * 2 + 500 * 4);
  EXPECT_EQ(c.gradient_bytes, 650 * 2);
  EXPECT_EQ(c.optimizer_bytes, 650 * 2);
  // The partitioner prices the stage at the simulated peak, and any range of
  // its layers by the same rule.
  const Scenario replica = replica_scenario(sc, 1, 2);
  const AnalyticCostModel cost(replica.cluster.device, replica.model.dtype, 12);
  const PartitionProblem p =
      partition_problem(replica, cost, 1, 2, Remat::kNever, ScheduleKind::kGpipe, 1);
  EXPECT_EQ(stage_memory(p, 0, 3), r.metrics.devices[0].peak_memory);
  // Layers 2 and 3 (no stash): 250 parameters' shard, and both gathered.
  EXPECT_EQ(stage_memory(p, 2, 3), 250 * 6 + 250 * 4);
  EXPECT_EQ(stage_memory(p, 1, 1), 300 * 6 + 300 * 4);
}

TEST(Zero, StageThreeGathersForRecomputesToo) {
  // Under remat always each device runs 2 forwards, 2 recomputes and 2
  // backwards, each after a gather: 12 gathers and 4 reduce-scatters.
  Scenario sc = testing::uniform_scenario(4, 4, 1000.0, 8, 2, true);
  for (LayerSpec& l : sc.model.layers) l.params = 4000;
  sc.training.remat = Remat::kAlways;
  sc.training.zero = 3;
  SimConfig cfg;
  cfg.stages = 2;
  cfg.partition = PartitionMethod::kUniform;
  cfg.data_parallel = data_parallel_ring(sc.cluster, 2, 2);
  const SimResult r = simulate(replica_scenario(sc, 2, 2), cfg);
  EXPECT_EQ(r.metrics.allreduce_time, (12 + 4) * 16000);
}

// Device 0's collectives over the replicas in the timeline, in order, by name.
std::vector<std::string> replica_collectives(const SimResult& r) {
  std::vector<std::string> out;
  for (const TimelineEvent& e : r.timeline.events) {
    if (e.kind == EventKind::kAllReduce && e.device == 0) out.push_back(event_name(e));
  }
  return out;
}

TEST(Zero, TheTimelineNamesEachCollective) {
  using V = std::vector<std::string>;
  EXPECT_EQ(replica_collectives(collective_run(0)), V{"all-reduce"});
  // ZeRO-1: the reduce-scatter where the all-reduce was, the step's all-gather.
  EXPECT_EQ(replica_collectives(collective_run(1)), (V{"reduce-scatter", "all-gather"}));
  // ZeRO-2: a reduce-scatter after each backward (B0, B1), then the all-gather.
  EXPECT_EQ(replica_collectives(collective_run(2)),
            (V{"reduce-scatter", "reduce-scatter", "all-gather"}));
  // ZeRO-3: a gather before each F and B, a reduce-scatter after each B.
  EXPECT_EQ(replica_collectives(collective_run(3)),
            (V{"all-gather", "all-gather", "all-gather", "reduce-scatter", "all-gather",
               "reduce-scatter"}));
  // A trace keeps the names: written and read back, the same collectives.
  const SimResult two = collective_run(2);
  std::stringstream trace;
  write_chrome_trace(trace, two.timeline);
  SimResult back;
  back.timeline = read_chrome_trace(trace, "t.json");
  EXPECT_EQ(replica_collectives(back), replica_collectives(two));
}

TEST(Zero, ScenarioFieldAndItsErrors) {
  json doc = testing::docs::good_doc();
  doc["training"]["zero"] = 1;
  EXPECT_EQ(parse_scenario(doc, "z.json").training.zero, 1);
  doc["training"]["zero"] = 3;
  EXPECT_EQ(parse_scenario(doc, "z.json").training.zero, 3);
  for (int bad : {4, -1}) {
    doc["training"]["zero"] = bad;
    try {
      parse_scenario(doc, "z.json");
      ADD_FAILURE() << "accepted " << bad;
    } catch (const ScenarioError& e) {
      EXPECT_EQ(
          std::string(e.what()),
          "z.json: training.zero: expected a ZeRO stage, 0, 1, 2 or 3, got " + std::to_string(bad));
    }
  }
}

TEST(Zero, PlansCarryTheStageAndExportIt) {
  json doc = testing::docs::good_doc();
  doc["cluster"]["devices"] = 4;
  doc["training"]["zero"] = 1;
  const Scenario sc = parse_scenario(doc, "z.json");
  SimConfig cfg;
  cfg.stages = 2;
  cfg.data_parallel = data_parallel_ring(sc.cluster, 2, 2);
  const Plan plan = make_plan(replica_scenario(sc, 2, 2), simulate(replica_scenario(sc, 2, 2), cfg),
                              2, "optimal");
  EXPECT_EQ(plan.zero, 1);
  EXPECT_EQ(plan_from_json(plan_to_json(plan), "p.json").zero, 1);
  EXPECT_NE(export_plan(plan, ExportFormat::kMegatron).find("--use-distributed-optimizer"),
            std::string::npos);
  EXPECT_NE(
      export_plan(plan, ExportFormat::kDeepSpeed).find("\"zero_optimization\": {\"stage\": 1}"),
      std::string::npos);
  EXPECT_THROW(export_plan(plan, ExportFormat::kTorchGpipe), std::invalid_argument);
  Plan two = plan;
  two.zero = 2;
  EXPECT_THROW(export_plan(two, ExportFormat::kDeepSpeed), std::invalid_argument);
  EXPECT_THROW(export_plan(two, ExportFormat::kMegatron), std::invalid_argument);
  Plan three = plan;
  three.zero = 3;
  for (const ExportFormat f : {ExportFormat::kDeepSpeed, ExportFormat::kMegatron,
                               ExportFormat::kTorchPipelining, ExportFormat::kTorchGpipe}) {
    SCOPED_TRACE(std::string(to_string(f)));
    EXPECT_THROW(export_plan(three, f), std::invalid_argument);
  }
  const auto message = [](const Plan& p, ExportFormat f) {
    try {
      export_plan(p, f);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(exported)");
  };
  EXPECT_EQ(message(three, ExportFormat::kDeepSpeed),
            "cannot export this plan to deepspeed: its pipeline engine, which runs the exported "
            "PipelineModule even with one stage, refuses ZeRO stage 3; plan with training.zero 1 "
            "or 0");
  // One stage too: DeepSpeed's pipeline engine asserts on ZeRO 2 and 3 whatever
  // the stage count.
  json one_doc = testing::docs::good_doc();
  one_doc["cluster"]["devices"] = 4;
  one_doc["training"]["zero"] = 2;
  const Scenario one_sc = parse_scenario(one_doc, "z.json");
  SimConfig one_cfg;
  one_cfg.stages = 1;
  one_cfg.data_parallel = data_parallel_ring(one_sc.cluster, 1, 4);
  const Scenario one_replica = replica_scenario(one_sc, 1, 4);
  const Plan one_stage = make_plan(one_replica, simulate(one_replica, one_cfg), 4, "optimal");
  ASSERT_EQ(one_stage.stages, 1);
  EXPECT_EQ(message(one_stage, ExportFormat::kDeepSpeed),
            "cannot export this plan to deepspeed: its pipeline engine, which runs the exported "
            "PipelineModule even with one stage, refuses ZeRO stage 2; plan with training.zero 1 "
            "or 0");
  EXPECT_EQ(message(three, ExportFormat::kMegatron),
            "cannot export this plan to megatron: Megatron-LM has no ZeRO stage 3; its "
            "distributed optimizer shards the optimizer state (ZeRO stage 1), not the gradients "
            "or the weights; plan with training.zero 1");
  EXPECT_NE(message(three, ExportFormat::kTorchPipelining).find("as ZeRO stage 3 does"),
            std::string::npos);
}

}  // namespace
}  // namespace pipescope
