// Selective recomputation (remat selective, Korthikanti et al. 2022): each
// layer keeps its stash but its attention core and reruns the core's forward
// before its backward. Stage costs, the step and the memory by hand on exact
// devices; the kernel model's core time against its kernels; the planner's
// choice when nothing else fits as fast; the scenario, command-line and plan
// names; and the refusal on models without attention.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "costmodels/device.h"
#include "costmodels/kernel_cost_model.h"
#include "costmodels/model_families.h"
#include "sim/engine/simulator.h"
#include "sim/export/plan_export.h"
#include "sim/formats/plan_io.h"
#include "sim/plan/plan.h"
#include "sim/plan/planner.h"
#include "sim_fixtures.h"

namespace pipescope {
namespace {

// Four layers of 1000 FLOPs a sample (backward 2000) on two exact devices,
// each stashing 100 bytes a sample of which 40 are its attention core, whose
// forward is 250 of the 1000 FLOPs. Micro-batches of one sample.
Scenario core_scenario(int M) {
  Scenario sc = testing::uniform_scenario(4, 2, 1000.0, M, M, false);
  for (LayerSpec& l : sc.model.layers) {
    l.stash_bytes = 100;
    l.core_stash_bytes = 40;
    l.core_fwd_flops = 250.0;
  }
  sc.training.schedule = ScheduleKind::k1F1B;
  return sc;
}

SimResult run(const Scenario& sc, Remat remat) {
  SimConfig cfg;
  cfg.stages = 2;
  cfg.remat = remat;
  return simulate(sc, cfg);
}

TEST(SelectiveRecompute, StageCostsByHand) {
  const Scenario sc = core_scenario(4);
  const SimResult never = run(sc, Remat::kNever);
  const SimResult selective = run(sc, Remat::kSelective);
  ASSERT_EQ(selective.stage_costs.size(), 2u);
  const StageCost& n = never.stage_costs[0];
  const StageCost& s = selective.stage_costs[0];
  // Two layers: forwards unchanged, each backward 2 x 250 ns longer, and the
  // stash 2 x 40 bytes smaller.
  EXPECT_EQ(s.forward, 2000);
  EXPECT_EQ(s.backward, n.backward + 500);
  EXPECT_EQ(s.backward, 4500);
  EXPECT_EQ(s.recompute, 500);
  EXPECT_EQ(s.stash_bytes, 2 * 60);
  EXPECT_EQ(n.stash_bytes, 2 * 100);
}

TEST(SelectiveRecompute, StepAndMemoryByHand) {
  // 1F1B with K = 2 equal stages and M = 4: (M + K - 1)(F + B) with F =
  // 2000, B = 4000 (never) or 4500 (selective); no R op runs.
  const Scenario sc = core_scenario(4);
  const SimResult never = run(sc, Remat::kNever);
  const SimResult selective = run(sc, Remat::kSelective);
  EXPECT_EQ(never.metrics.step_time, 5 * 6000);
  EXPECT_EQ(selective.metrics.step_time, 5 * 6500);
  EXPECT_EQ(selective.metrics.recompute_time, 0);
  for (const TimelineEvent& e : selective.timeline.events) {
    EXPECT_NE(e.kind, EventKind::kRecompute);
  }
  // Device 0 holds min(K, M) = 2 micro-batches' stashes at its peak, device
  // 1 one: 2 x 2 x 40 and 1 x 2 x 40 bytes fewer.
  ASSERT_EQ(selective.metrics.devices.size(), 2u);
  EXPECT_EQ(never.metrics.devices[0].peak_memory - selective.metrics.devices[0].peak_memory, 160);
  EXPECT_EQ(never.metrics.devices[1].peak_memory - selective.metrics.devices[1].peak_memory, 80);
  EXPECT_EQ(selective.remat, Remat::kSelective);
}

TEST(SelectiveRecompute, SplitBackwardRerunsTheCoreBeforeB) {
  Scenario sc = core_scenario(4);
  sc.training.schedule = ScheduleKind::kZbH1;
  const SimResult never = run(sc, Remat::kNever);
  const SimResult selective = run(sc, Remat::kSelective);
  EXPECT_EQ(selective.stage_costs[0].input, never.stage_costs[0].input + 500);
  EXPECT_EQ(selective.stage_costs[0].weight, never.stage_costs[0].weight);
}

TEST(SelectiveRecompute, PartitionerPricesTheKeptStashAndTheLongerBackward) {
  const Scenario sc = core_scenario(4);
  const auto cost = make_cost_model(sc);
  const PartitionProblem never = partition_problem(sc, *cost, 2, 4, Remat::kNever);
  const PartitionProblem selective = partition_problem(sc, *cost, 2, 4, Remat::kSelective);
  ASSERT_EQ(selective.layers.size(), 4u);
  EXPECT_EQ(selective.layers[0].stash_bytes, 60);
  EXPECT_EQ(selective.layers[0].backward, never.layers[0].backward + 250);
  EXPECT_EQ(selective.layers[0].forward, never.layers[0].forward);
}

// The kernel model's core is the forward of the layer's attention-core
// kernels: unfused, the scores, softmax, dropout and product with V.
TEST(SelectiveRecompute, KernelModelTimesTheCoreKernels) {
  TransformerParams p;
  p.layers = 1;
  p.d_model = 1024;
  p.heads = 16;
  p.seq_len = 1024;
  p.vocab = 1000;
  p.dtype = DType::kBf16;
  p.fused_attention = false;
  const ModelSpec m = make_transformer(p, "t");
  const Device a100 = find_device_preset("a100-80g")->device;
  const KernelCostModel cost(a100, DType::kBf16, false, 16.0);
  const LayerSpec& block = m.layers[1];
  double core = 0.0, all = 0.0;
  for (const Kernel& k : *block.kernels) {
    const double f = kernel_times(k, 2, a100.kernels, a100.peak_flops(DType::kBf16),
                                  a100.peak_flops(DType::kBf16), a100.mem_bandwidth, 2)
                         .forward;
    all += f;
    if (k.attention_core) core += f;
  }
  EXPECT_EQ(cost.core_recompute(block, 2), seconds_to_simtime(core));
  EXPECT_GT(cost.core_recompute(block, 2), 0);
  EXPECT_LT(core, all);
  EXPECT_EQ(cost.op_times(block, 2).core, cost.core_recompute(block, 2));
  EXPECT_EQ(cost.core_recompute(m.layers[0], 2), 0);  // the embedding has no core
}

// The analytic model and profiles take the core's share of the recompute by
// FLOPs.
TEST(SelectiveRecompute, OtherModelsTakeTheCoresShareOfTheRecompute) {
  const Scenario sc = core_scenario(4);
  const auto cost = make_cost_model(sc);
  EXPECT_EQ(cost->core_recompute(sc.model.layers[0], 4), 1000);  // 250 x 4 samples
  LayerSpec plain = sc.model.layers[0];
  plain.core_fwd_flops = 0.0;
  EXPECT_EQ(cost->core_recompute(plain, 4), 0);
}

TEST(SelectiveRecompute, PlannerChoosesItWhenKeepingEveryStashDoesNotFit) {
  // Keeping every stash needs at least 400 bytes on some device at every
  // shape (two micro-batches of two layers, or one of four); selective keeps
  // 60 of each 100; recomputing whole forwards costs 1000 ns a layer against
  // the core's 250.
  Scenario sc = core_scenario(4);
  sc.cluster.device.memory_bytes = 350;
  PlanRequest req;
  req.threads = 1;
  const PlanReport report = run_planner(sc, req);
  ASSERT_FALSE(report.ranked.empty());
  EXPECT_EQ(report.ranked.front().remat, Remat::kSelective);
  bool never_tried = false;
  for (const PlanCandidate& c : report.rejected) never_tried |= c.remat == Remat::kNever;
  EXPECT_TRUE(never_tried);
  for (const PlanCandidate& c : report.ranked) EXPECT_NE(c.remat, Remat::kNever);
  // Brute force over the best shape's remat modes: selective is the fastest
  // that fits.
  const PlanCandidate& best = report.ranked.front();
  for (const Remat remat : kAllRemats) {
    SimConfig cfg;
    cfg.stages = best.stages;
    cfg.micro_batches = best.micro_batches;
    cfg.schedule = best.schedule;
    cfg.chunks = best.chunks;
    cfg.remat = remat;
    const Scenario replica = replica_scenario(sc, best.stages, best.data_parallel);
    const SimResult r = simulate(replica, cfg);
    if (r.metrics.fits() && remat != Remat::kSelective) {
      EXPECT_GE(r.metrics.step_time, best.result.metrics.step_time) << to_string(remat);
    }
  }
}

TEST(SelectiveRecompute, PlannerLeavesItOutWithoutAttention) {
  Scenario sc = testing::uniform_scenario(4, 2, 1000.0, 4, 4, false);
  PlanRequest req;
  req.threads = 1;
  const PlanReport report = run_planner(sc, req);
  for (const PlanCandidate& c : report.ranked) EXPECT_NE(c.remat, Remat::kSelective);
  for (const PlanCandidate& c : report.rejected) EXPECT_NE(c.remat, Remat::kSelective);
}

TEST(SelectiveRecompute, ModelsWithoutAttentionRefuseIt) {
  Scenario sc = testing::uniform_scenario(4, 2, 1000.0, 4, 4, false);
  try {
    (void)run(sc, Remat::kSelective);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "remat selective recomputes attention's core, and model 'uniform' has no attention "
              "(a transformer has); use never, except-last or always");
    EXPECT_EQ(e.scenario_field(), "");
  }
  sc.training.remat = Remat::kSelective;
  try {
    (void)simulate(sc, SimConfig{});
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.scenario_field(), "training.remat");
  }
}

TEST(SelectiveRecompute, NamesAndPlanFiles) {
  EXPECT_EQ(parse_remat("selective"), Remat::kSelective);
  EXPECT_EQ(to_string(Remat::kSelective), "selective");
  EXPECT_EQ(remat_label(Remat::kSelective), "selective");
  EXPECT_FALSE(reruns_forwards(Remat::kSelective));
  EXPECT_EQ(recomputed_count(Remat::kSelective, 4), 0);
  const Scenario sc = core_scenario(4);
  const Plan plan = make_plan(sc, run(sc, Remat::kSelective), 1, "optimal");
  const nlohmann::json doc = plan_to_json(plan);
  EXPECT_EQ(doc["remat_mode"], "selective");
  EXPECT_EQ(doc["remat"], true);  // something is recomputed
  EXPECT_EQ(plan_from_json(doc, "p.json").remat, Remat::kSelective);
  // The stage table reports the core's rerun as the stage's recompute.
  ASSERT_EQ(plan.stage_plans.size(), 2u);
  EXPECT_DOUBLE_EQ(plan.stage_plans[0].recompute_s, 500e-9);
}

TEST(SelectiveRecompute, OnlyMegatronExportsIt) {
  const Scenario sc = core_scenario(4);
  const Plan plan = make_plan(sc, run(sc, Remat::kSelective), 1, "optimal");
  const std::string megatron = export_plan(plan, ExportFormat::kMegatron, nullptr);
  EXPECT_NE(megatron.find("--recompute-granularity selective"), std::string::npos);
  EXPECT_EQ(megatron.find("--recompute-method"), std::string::npos);
  for (const ExportFormat f :
       {ExportFormat::kTorchGpipe, ExportFormat::kDeepSpeed, ExportFormat::kTorchPipelining}) {
    try {
      (void)export_plan(plan, f, nullptr);
      FAIL() << to_string(f);
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()),
                "cannot export this plan to " + std::string(to_string(f)) +
                    ": it recomputes attention's core alone (remat selective), which only "
                    "Megatron-LM's --recompute-granularity selective runs; export it to "
                    "megatron, or plan with another --remat");
    }
  }
}

}  // namespace
}  // namespace pipescope
