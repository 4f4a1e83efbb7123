// Layer checkpoints (training.checkpoint layer): the scenario field and its
// error, what a simulated step holds, plan files that record the unit and
// refuse a scenario that keeps another, and the exports' flags. The memory
// tracker's figures are checked by hand in memory_test.cpp and the
// partitioner's against sums and maxima in partition_test.cpp.

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "costmodels/cost_model.h"
#include "export_fixtures.h"
#include "scenario_docs.h"
#include "sim/engine/simulator.h"
#include "sim/engine/stage_costs.h"
#include "sim/export/plan_export.h"
#include "sim/formats/plan_io.h"
#include "sim/plan/plan.h"
#include "sim/scenario/scenario_io.h"

namespace pipescope {
namespace {

using testing::plan_mismatch;
using testing::docs::scenario_error;

TEST(LayerCheckpoint, ParsesAndNamesItsUnits) {
  EXPECT_EQ(parse_checkpoint("stage"), Checkpoint::kStage);
  EXPECT_EQ(parse_checkpoint("layer"), Checkpoint::kLayer);
  EXPECT_FALSE(parse_checkpoint("block").has_value());
  EXPECT_EQ(to_string(Checkpoint::kLayer), "layer");
  nlohmann::json doc = testing::docs::good_doc();
  EXPECT_EQ(parse_scenario(doc, "s.json").training.checkpoint, Checkpoint::kStage);  // default
  doc["training"]["checkpoint"] = "layer";
  EXPECT_EQ(parse_scenario(doc, "s.json").training.checkpoint, Checkpoint::kLayer);
  doc["training"]["checkpoint"] = "block";
  EXPECT_EQ(scenario_error(doc),
            "s.json: training.checkpoint: unknown checkpoint unit 'block' (expected one of: "
            "stage, layer)");
  doc["training"]["checkpoint"] = 1;
  EXPECT_NE(scenario_error(doc).find("s.json: training.checkpoint: "), std::string::npos);
}

// A transformer of 8 blocks on two stages: layer checkpoints hold less at the
// peak than stage checkpoints (each block's input, 1/10 or so of its stash,
// against a stage's whole stash rebuilt at once), at the same step time.
TEST(LayerCheckpoint, HoldLessAtTheSameStepTime) {
  nlohmann::json doc = testing::docs::good_doc();
  doc["model"]["layers"] = 8;
  doc["training"]["micro_batches"] = 8;
  SimConfig cfg;
  cfg.stages = 2;
  cfg.schedule = ScheduleKind::k1F1B;
  const SimResult stage = simulate(parse_scenario(doc, "s.json"), cfg);
  doc["training"]["checkpoint"] = "layer";
  const SimResult layer = simulate(parse_scenario(doc, "s.json"), cfg);
  EXPECT_EQ(layer.checkpoint, Checkpoint::kLayer);
  EXPECT_EQ(layer.metrics.step_time, stage.metrics.step_time);
  for (std::size_t d = 0; d < 2; ++d) {
    EXPECT_LT(layer.metrics.devices[d].peak_memory, stage.metrics.devices[d].peak_memory) << d;
  }
  // Without remat nothing is recomputed: the unit changes nothing.
  cfg.remat = Remat::kNever;
  const SimResult kept = simulate(parse_scenario(doc, "s.json"), cfg);
  doc["training"]["checkpoint"] = "stage";
  EXPECT_EQ(simulate(parse_scenario(doc, "s.json"), cfg).metrics.devices[0].peak_memory,
            kept.metrics.devices[0].peak_memory);
}

// Under a split backward (zb-h1 and the other zero-bubble schedules) W reads
// every layer's stash after B, so a recompute rebuilds the whole stage's even
// with layer checkpoints; the forward still keeps every layer's input. The
// stage costs and the partitioner agree.
TEST(LayerCheckpoint, SplitBackwardsRebuildTheWholeStash) {
  nlohmann::json doc = testing::docs::good_doc();
  doc["training"]["checkpoint"] = "layer";
  const Scenario sc = parse_scenario(doc, "s.json");
  const AnalyticCostModel cost(sc.cluster.device, sc.model.dtype, 4);
  const std::vector<StageRange> one{{0, static_cast<int>(sc.model.layers.size()) - 1}};
  for (const bool split : {false, true}) {
    SCOPED_TRACE(split);
    const StageCost c = compute_stage_costs(sc.model, one, cost, 8, 16.0, Remat::kAlways,
                                            Checkpoint::kLayer, split)[0];
    Bytes inputs = 0;
    Bytes largest = 0;
    for (int l = 0; l <= one[0].last_layer; ++l) {
      inputs += sc.model.input_bytes_of(l) * 8;
      largest = std::max(largest, sc.model.layers[static_cast<std::size_t>(l)].stash_bytes * 8);
    }
    EXPECT_EQ(c.checkpoint_bytes, inputs);
    EXPECT_EQ(c.rebuilt_bytes, split ? c.stash_bytes : largest);
    EXPECT_LT(largest, c.stash_bytes);
    const PartitionProblem p = partition_problem(
        sc, cost, 1, 4, Remat::kAlways, split ? ScheduleKind::kZbH1 : ScheduleKind::k1F1B, 1);
    EXPECT_EQ(p.backward_split, split);
    // One stage (K = 1) holds one micro-batch of 8 at a time: its inputs and
    // one rebuilt stash.
    EXPECT_EQ(stage_memory(p, 0, one[0].last_layer),
              std::llround(static_cast<double>(c.params) * p.bytes_per_param) + inputs +
                  (split ? c.stash_bytes : largest));
  }
}

TEST(LayerCheckpoint, PlanFilesRecordItAndRefuseAnotherScenarios) {
  nlohmann::json doc = testing::docs::good_doc();
  doc["training"]["checkpoint"] = "layer";
  const Scenario sc = parse_scenario(doc, "p.json");
  SimConfig cfg;
  cfg.stages = 2;
  const Plan p = make_plan(sc, simulate(sc, cfg), 1, "optimal");
  EXPECT_EQ(p.checkpoint, Checkpoint::kLayer);
  nlohmann::json file = plan_to_json(p);
  EXPECT_EQ(file["checkpoint"], "layer");
  EXPECT_EQ(plan_from_json(file, "p.json").checkpoint, Checkpoint::kLayer);
  file.erase("checkpoint");  // plans written before the unit
  EXPECT_EQ(plan_from_json(file, "p.json").checkpoint, Checkpoint::kStage);
  file["checkpoint"] = "block";
  EXPECT_THROW(plan_from_json(file, "p.json"), ScenarioError);

  EXPECT_EQ(plan_mismatch(p, doc), "matches");
  nlohmann::json other = doc;
  other["training"].erase("checkpoint");
  EXPECT_EQ(plan_mismatch(p, other),
            "p.json: training.checkpoint: this plan's remat keeps each layer's input, the "
            "scenario's each stage's (--set training.checkpoint=layer runs the plan's)");
  // Without remat the unit does not matter.
  Plan off = p;
  off.remat = Remat::kNever;
  EXPECT_EQ(plan_mismatch(off, other), "matches");
}

TEST(LayerCheckpoint, ExportsCheckpointEachLayer) {
  const std::vector<std::string> names{"embed", "b", "c", "d", "e", "f", "g", "h", "i", "head"};
  Plan p = testing::plan_with({3, 2, 2, 3}, 4, 1, Remat::kAlways, names);
  p.checkpoint = Checkpoint::kLayer;
  const std::string mg = export_plan(p, ExportFormat::kMegatron);
  EXPECT_NE(mg.find("--recompute-num-layers 1 "), std::string::npos) << mg;
  EXPECT_NE(mg.find("# Remat layer by layer (training.checkpoint layer)"), std::string::npos);
  EXPECT_NE(mg.find("remat on (layer by layer)."), std::string::npos);
  const std::string ds = export_plan(p, ExportFormat::kDeepSpeed);
  EXPECT_NE(ds.find("activation_checkpoint_interval 1: one checkpoint around each layer"),
            std::string::npos)
      << ds;
  EXPECT_NE(ds.find("activation_checkpoint_interval=1,"), std::string::npos);
  const std::string gpipe = export_plan(p, ExportFormat::kTorchGpipe);
  EXPECT_NE(gpipe.find("# torchgpipe checkpoints a whole partition"), std::string::npos);
  EXPECT_NE(gpipe.find("checkpoint='always')"), std::string::npos);
  // Stage checkpoints: the whole stage, as before.
  p.checkpoint = Checkpoint::kStage;
  EXPECT_NE(export_plan(p, ExportFormat::kMegatron).find("--recompute-num-layers 2"),
            std::string::npos);
  EXPECT_NE(export_plan(p, ExportFormat::kDeepSpeed).find("activation_checkpoint_interval 3:"),
            std::string::npos);
  EXPECT_EQ(export_plan(p, ExportFormat::kTorchGpipe).find("checkpoints a whole partition"),
            std::string::npos);
}

}  // namespace
}  // namespace pipescope
