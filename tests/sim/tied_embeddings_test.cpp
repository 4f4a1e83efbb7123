// Tied embeddings under a pipeline: the device that runs the head keeps a
// copy of the token table (weights, gradients, optimizer state) and sums its
// gradient with the embedding's device every step, before their optimizer
// steps; a head on the embedding's own device (one stage, a V-shaped
// schedule) needs neither. Closed forms on exact devices.

#include <gtest/gtest.h>

#include <cmath>

#include "costmodels/model_families.h"
#include "sim/engine/simulator.h"
#include "sim/engine/zero.h"
#include "sim_fixtures.h"

namespace pipescope {
namespace {

// 8 layers of 100 parameters on 2 exact devices (1 FLOP/ns) linked at
// 1 GB/s, 2 us apart, 16 bytes a parameter.
Scenario pipeline(std::int64_t tied_table_params) {
  Scenario sc = testing::uniform_scenario(8, 2, 1000.0, 8, 4, false);
  for (LayerSpec& l : sc.model.layers) l.params = 100;
  sc.cluster.interconnect = Interconnect{TopologyKind::kAllToAll, 1e9, 2e-6};
  sc.training.bytes_per_param = 16.0;
  sc.model.tied_table_params = tied_table_params;
  return sc;
}

SimResult run(const Scenario& sc, ScheduleKind kind, int stages, int chunks = 1) {
  SimConfig cfg;
  cfg.stages = stages;
  cfg.schedule = kind;
  cfg.chunks = chunks;
  cfg.remat = Remat::kNever;
  return simulate(sc, cfg);
}

TEST(TiedEmbeddings, TheHeadsDeviceKeepsACopyAndBothSumItsGradient) {
  const SimResult untied = run(pipeline(0), ScheduleKind::k1F1B, 2);
  const Scenario sc = pipeline(50);
  const SimResult tied = run(sc, ScheduleKind::k1F1B, 2);
  ASSERT_EQ(tied.stage_costs.size(), 2u);
  const StageCost& first = tied.stage_costs[0];
  const StageCost& head = tied.stage_costs[1];
  // The copy: 50 more parameters on the head's stage, none on the first.
  EXPECT_EQ(head.tied_copy_params, 50);
  EXPECT_EQ(head.params, untied.stage_costs[1].params + 50);
  EXPECT_EQ(head.static_bytes,
            untied.stage_costs[1].static_bytes + std::llround(50 * device_bytes_per_param(sc)));
  EXPECT_EQ(first.params, untied.stage_costs[0].params);
  EXPECT_EQ(first.tied_copy_params, 0);
  // The sum: a ring of two, 2 x (2 us + B / 2 at 1 byte a ns), B the copy's
  // gradients, on both stages.
  const Bytes grads = 50 * reduced_gradient_bytes(sc);
  const SimTime sum = 2 * (2000 + grads / 2);
  EXPECT_EQ(first.tied_allreduce, sum);
  EXPECT_EQ(head.tied_allreduce, sum);
  EXPECT_EQ(head.tied_allreduce_bytes, grads);
  // The optimizer op runs it as its collective; the replicas' slot is free.
  EXPECT_EQ(op_collectives(head, OpKind::kOptimizer).tensor, sum);
  EXPECT_EQ(op_collectives(head, OpKind::kOptimizer).tensor_bytes, grads);
  EXPECT_EQ(first.allreduce, 0);
  EXPECT_EQ(head.allreduce, 0);
  // The first stage ends 1F1B's step: its sum lies on the step's path, and
  // its optimizer step is the untied one's.
  EXPECT_EQ(first.optimizer, untied.stage_costs[0].optimizer);
  EXPECT_EQ(tied.metrics.step_time, untied.metrics.step_time + sum);
}

TEST(TiedEmbeddings, AHeadOnTheEmbeddingsDeviceKeepsNoCopy) {
  // One stage.
  const SimResult one = run(pipeline(50), ScheduleKind::k1F1B, 1);
  EXPECT_EQ(one.stage_costs[0].tied_copy_params, 0);
  EXPECT_EQ(one.stage_costs[0].allreduce, 0);
  // ZB-V's last stage runs on device 0, beside the first.
  const SimResult v = run(pipeline(50), ScheduleKind::kZbV, 2, 2);
  ASSERT_EQ(v.stage_costs.size(), 4u);
  for (const StageCost& c : v.stage_costs) {
    EXPECT_EQ(c.tied_copy_params, 0);
    EXPECT_EQ(c.tied_allreduce, 0);
  }
  // The interleaved schedule's last stage is on device 1: a copy there.
  const SimResult looped = run(pipeline(50), ScheduleKind::kInterleaved1F1B, 2, 2);
  ASSERT_EQ(looped.stage_costs.size(), 4u);
  EXPECT_EQ(looped.stage_costs.back().tied_copy_params, 50);
  EXPECT_GT(looped.stage_costs.front().tied_allreduce, 0);
}

// The partitioner's problem holds the copy in the head's memory where the
// simulation does, so that the cut it chooses leaves room for it.
TEST(TiedEmbeddings, ThePartitionerWeighsTheCopyWhereTheSimulationKeepsIt) {
  const Scenario untied = pipeline(0), tied = pipeline(50);
  const auto head_params = [&](const Scenario& sc, ScheduleKind kind, int stages, int chunks) {
    return partition_problem(sc, *make_cost_model(sc), stages, 4, Remat::kNever, kind, chunks,
                             nullptr)
        .layers.back()
        .params;
  };
  EXPECT_EQ(head_params(tied, ScheduleKind::k1F1B, 2, 1),
            head_params(untied, ScheduleKind::k1F1B, 2, 1) + 50);
  EXPECT_EQ(head_params(tied, ScheduleKind::kZbV, 4, 2),
            head_params(untied, ScheduleKind::kZbV, 4, 2));
  EXPECT_EQ(head_params(tied, ScheduleKind::k1F1B, 1, 1),
            head_params(untied, ScheduleKind::k1F1B, 1, 1));
}

// A transformer with tied embeddings names its table's share of a device:
// the embedding's parameters (positions not learned), 1 / T of them under
// tensor parallelism.
TEST(TiedEmbeddings, ATiedTransformerNamesItsTablesShare) {
  TransformerParams p;
  p.layers = 2;
  p.d_model = 64;
  p.heads = 4;
  p.seq_len = 32;
  p.vocab = 1000;
  p.tied_embeddings = true;
  const ModelSpec whole = make_transformer(p, "tied");
  EXPECT_EQ(whole.tied_table_params, whole.layers.front().params);
  EXPECT_EQ(whole.tied_table_params, 1000 * 64);
  p.tied_embeddings = false;
  EXPECT_EQ(make_transformer(p, "untied").tied_table_params, 0);
}

}  // namespace
}  // namespace pipescope
