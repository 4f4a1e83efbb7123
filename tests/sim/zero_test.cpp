// ZeRO stages 1 and 2 over D replicas: the bytes a device keeps per
// parameter, its stage memory and optimizer step against hand computations,
// the scenario field, plans and exports.

#include <gtest/gtest.h>

#include <string>

#include "scenario_docs.h"
#include "sim/plan.h"
#include "sim/plan_export.h"
#include "sim/plan_io.h"
#include "sim/planner.h"
#include "sim/scenario_io.h"
#include "sim/simulator.h"
#include "sim/zero.h"
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
  // The gradients' traffic is an all-reduce's either way.
  EXPECT_EQ(one.stage_costs[0].allreduce, plain.stage_costs[0].allreduce);
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

TEST(Zero, ScenarioFieldAndItsErrors) {
  json doc = testing::docs::good_doc();
  doc["training"]["zero"] = 1;
  EXPECT_EQ(parse_scenario(doc, "z.json").training.zero, 1);
  doc["training"]["zero"] = 3;
  try {
    parse_scenario(doc, "z.json");
    ADD_FAILURE() << "accepted";
  } catch (const ScenarioError& e) {
    EXPECT_EQ(std::string(e.what()),
              "z.json: training.zero: ZeRO stage 3 (weights sharded and gathered for every "
              "forward and backward) is not modelled; expected 0, 1 or 2");
  }
  doc["training"]["zero"] = 4;
  EXPECT_THROW(parse_scenario(doc, "z.json"), ScenarioError);
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
}

}  // namespace
}  // namespace pipescope
