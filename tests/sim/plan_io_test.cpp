// Plan JSON: round trips, the golden file, the model hash, plans made from a
// simulation, a plan checked against its scenario. Bad plans:
// plan_errors_test.cpp.

#include "sim/formats/plan_io.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "plan_fixtures.h"
#include "sim/engine/simulator.h"
#include "sim/scenario/scenario_io.h"
#include "sim_fixtures.h"

#include "golden.h"

namespace pipescope {
namespace {

using testing::error_of;
using testing::expect_golden;
using testing::read_text;
using testing::sample_plan;
using testing::temp_path;

using nlohmann::json;
namespace fs = std::filesystem;

void expect_same_split(const std::optional<MemorySplit>& a, const std::optional<MemorySplit>& b) {
  ASSERT_EQ(a.has_value(), b.has_value());
  if (!a) return;
  EXPECT_EQ(a->weights, b->weights);
  EXPECT_EQ(a->gradients, b->gradients);
  EXPECT_EQ(a->optimizer, b->optimizer);
  EXPECT_EQ(a->activations, b->activations);
}

void expect_same(const Plan& a, const Plan& b) {
  EXPECT_EQ(a.scenario_name, b.scenario_name);
  EXPECT_EQ(a.model_name, b.model_name);
  EXPECT_EQ(a.model_hash, b.model_hash);
  EXPECT_EQ(a.layer_count, b.layer_count);
  EXPECT_EQ(a.layer_names, b.layer_names);
  EXPECT_EQ(a.cluster_name, b.cluster_name);
  EXPECT_EQ(a.devices, b.devices);
  EXPECT_EQ(a.memory_capacity, b.memory_capacity);
  EXPECT_EQ(a.stages, b.stages);
  EXPECT_EQ(a.data_parallel, b.data_parallel);
  EXPECT_EQ(a.micro_batches, b.micro_batches);
  EXPECT_EQ(a.global_batch, b.global_batch);
  EXPECT_EQ(a.micro_batch_size, b.micro_batch_size);
  EXPECT_EQ(a.schedule, b.schedule);
  EXPECT_EQ(a.remat, b.remat);
  EXPECT_EQ(a.partition_method, b.partition_method);
  ASSERT_EQ(a.stage_plans.size(), b.stage_plans.size());
  for (std::size_t i = 0; i < a.stage_plans.size(); ++i) {
    SCOPED_TRACE("stage " + std::to_string(i));
    EXPECT_EQ(a.stage_plans[i].layers, b.stage_plans[i].layers);
    EXPECT_EQ(a.stage_plans[i].device, b.stage_plans[i].device);
    // Exact: JSON numbers are written with enough digits to read back every bit.
    EXPECT_EQ(a.stage_plans[i].fwd_s, b.stage_plans[i].fwd_s);
    EXPECT_EQ(a.stage_plans[i].bwd_s, b.stage_plans[i].bwd_s);
    EXPECT_EQ(a.stage_plans[i].recompute_s, b.stage_plans[i].recompute_s);
    EXPECT_EQ(a.stage_plans[i].peak_memory, b.stage_plans[i].peak_memory);
    expect_same_split(a.stage_plans[i].memory_split, b.stage_plans[i].memory_split);
  }
  EXPECT_EQ(a.step_time_s, b.step_time_s);
  EXPECT_EQ(a.throughput_samples_per_s, b.throughput_samples_per_s);
  EXPECT_EQ(a.bubble_fraction, b.bubble_fraction);
  EXPECT_EQ(a.fits, b.fits);
}

TEST(PlanIo, RoundTripsThroughAFile) {
  const Plan plan = sample_plan();
  const fs::path path = temp_path("round_trip.json");
  write_plan_file(path, plan);
  EXPECT_FALSE(fs::exists(fs::path(path.string() + ".tmp")));
  const Plan back = read_plan_file(path);
  fs::remove(path);
  expect_same(plan, back);
  EXPECT_EQ(back.stage_ranges(), (std::vector<StageRange>{{0, 2}, {3, 4}, {5, 6}}));
}

TEST(PlanIo, RoundTripsThroughJson) {
  Plan plan = sample_plan();
  plan.remat = Remat::kNever;
  plan.data_parallel = 2;
  plan.devices = 6;
  plan.global_batch = 16;
  plan.fits = false;
  expect_same(plan, plan_from_json(plan_to_json(plan), "p.json"));
}

TEST(PlanIo, RematModeRoundTripsAndOlderPlansReadTheBool) {
  Plan plan = sample_plan();
  plan.remat = Remat::kExceptLast;
  json doc = plan_to_json(plan);
  EXPECT_EQ(doc["remat"], true);
  EXPECT_EQ(doc["remat_mode"], "except-last");
  EXPECT_EQ(plan_from_json(doc, "p.json").remat, Remat::kExceptLast);
  doc.erase("remat_mode");  // a plan written before the modes
  EXPECT_EQ(plan_from_json(doc, "p.json").remat, Remat::kAlways);
  doc["remat"] = false;
  EXPECT_EQ(plan_from_json(doc, "p.json").remat, Remat::kNever);
  doc["remat_mode"] = "always";
  EXPECT_EQ(error_of(doc), "p.json: remat_mode: remat mode 'always' contradicts \"remat\": false");
  doc["remat_mode"] = "sometimes";
  EXPECT_EQ(error_of(doc),
            "p.json: remat_mode: unknown remat mode 'sometimes' (expected one of: always, "
            "except-last, selective, never (or on, off))");
}

TEST(PlanIo, WritesTheGoldenFile) {
  const fs::path path = temp_path("golden.json");
  write_plan_file(path, sample_plan());
  const std::string text = read_text(path);
  fs::remove(path);
  expect_golden("plan.json", text);
  // The format and version lead the file, as docs/file-formats.md ("Plans") shows them.
  EXPECT_EQ(text.rfind("{\n  \"format\": \"pipescope-plan\",\n  \"version\": 1,", 0), 0u);
}

TEST(PlanIo, WriteFailureNamesTheFile) {
  const fs::path path = temp_path("no_such_dir") / "plan.json";
  try {
    write_plan_file(path, sample_plan());
    FAIL() << "the write succeeded";
  } catch (const std::runtime_error& e) {
    // The path first; sim/base/file_io.h words the reason.
    EXPECT_EQ(std::string(e.what()).rfind(path.string() + ": ", 0), 0u) << e.what();
  }
}

// --- The model hash ---

ModelSpec small_model() {
  ModelSpec m;
  m.name = "tiny";
  m.family = "layers";
  m.dtype = DType::kBf16;
  m.input_bytes = 64;
  m.tokens_per_sample = 16;
  const auto layer = [](const char* name, Flops fwd, Flops bwd, std::int64_t params, Bytes out,
                        Bytes stash) {
    LayerSpec l;
    l.name = name;
    l.fwd_flops = fwd;
    l.bwd_flops = bwd;
    l.params = params;
    l.out_bytes = out;
    l.stash_bytes = stash;
    return l;
  };
  m.layers = {layer("in", 1e6, 2e6, 1000, 256, 64), layer("out", 0.5, 1.0, 0, 4, 0)};
  return m;
}

TEST(ModelHash, IsStable) {
  // Computed independently (Python, FNV-1a over the serialisation plan.cpp
  // documents); a change here breaks every saved plan.
  EXPECT_EQ(model_hash(small_model()), "332b31cf20504114");
  EXPECT_EQ(model_hash(small_model()), model_hash(small_model()));
}

TEST(ModelHash, ChangesWithEveryLayerFieldButNotTheName) {
  const std::string base = model_hash(small_model());
  const auto changed = [&](auto edit) {
    ModelSpec m = small_model();
    edit(m);
    return model_hash(m);
  };
  EXPECT_NE(changed([](ModelSpec& m) { m.layers[1].name = "head"; }), base);
  EXPECT_NE(changed([](ModelSpec& m) { m.layers[0].fwd_flops = 1e6 + 1; }), base);
  EXPECT_NE(changed([](ModelSpec& m) { m.layers[0].bwd_flops = 3e6; }), base);
  EXPECT_NE(changed([](ModelSpec& m) { m.layers[0].params = 1001; }), base);
  EXPECT_NE(changed([](ModelSpec& m) { m.layers[1].out_bytes = 8; }), base);
  EXPECT_NE(changed([](ModelSpec& m) { m.layers[1].stash_bytes = 1; }), base);
  EXPECT_NE(changed([](ModelSpec& m) { m.dtype = DType::kFp16; }), base);
  EXPECT_NE(changed([](ModelSpec& m) { m.input_bytes = 65; }), base);
  EXPECT_NE(changed([](ModelSpec& m) { m.tokens_per_sample = 8; }), base);
  EXPECT_NE(changed([](ModelSpec& m) { m.layers.pop_back(); }), base);
  // A layer graph differs from the plain sequence of the same layers.
  EXPECT_NE(changed([](ModelSpec& m) { m.layers[1].inputs = {"input", "in"}; }), base);
  EXPECT_NE(changed([](ModelSpec& m) {
              m.layers[1].inputs = {"input", "in"};
            }),
            changed([](ModelSpec& m) {
              m.layers[1].inputs = {"in", "input"};
            }));
  EXPECT_EQ(changed([](ModelSpec& m) { m.name = "renamed"; }), base);
}

// --- make_plan ---

TEST(MakePlan, FillsEveryFieldFromTheSimulation) {
  // Six equal layers on K=3, M=2 micro-batches of 2: every stage has two layers of
  // 1000 FLOPs per sample, 4000 ns forward per micro-batch.
  const Scenario sc = testing::uniform_scenario(6, 3, 1000.0, 4, 2, true);
  SimConfig config;
  config.partition = PartitionMethod::kUniform;
  const SimResult r = simulate(sc, config);
  const Plan p = make_plan(sc, r, 2, "uniform");
  EXPECT_EQ(p.scenario_name, "uniform");
  EXPECT_EQ(p.model_name, "uniform");
  EXPECT_EQ(p.model_hash, model_hash(sc.model));
  EXPECT_EQ(p.layer_count, 6);
  EXPECT_EQ(p.layer_names, (std::vector<std::string>{"l0", "l1", "l2", "l3", "l4", "l5"}));
  EXPECT_EQ(p.cluster_name, "exact");
  EXPECT_EQ(p.devices, 6);
  EXPECT_EQ(p.memory_capacity, sc.cluster.device.memory_bytes);
  EXPECT_EQ(p.stages, 3);
  EXPECT_EQ(p.data_parallel, 2);
  EXPECT_EQ(p.micro_batches, 2);
  EXPECT_EQ(p.micro_batch_size, 2);
  EXPECT_EQ(p.global_batch, 8);  // D x M x micro-batch size
  EXPECT_EQ(p.remat, Remat::kAlways);
  EXPECT_EQ(p.partition_method, "uniform");
  ASSERT_EQ(p.stage_plans.size(), 3u);
  for (int s = 0; s < 3; ++s) {
    const PlanStage& st = p.stage_plans[static_cast<std::size_t>(s)];
    EXPECT_EQ(st.layers, (StageRange{2 * s, 2 * s + 1}));
    EXPECT_EQ(st.device, s);
    EXPECT_DOUBLE_EQ(st.fwd_s, 4000e-9);
    EXPECT_DOUBLE_EQ(st.bwd_s, 8000e-9);
    EXPECT_DOUBLE_EQ(st.recompute_s, 4000e-9);
    EXPECT_EQ(st.peak_memory, r.metrics.devices[static_cast<std::size_t>(s)].peak_memory);
  }
  EXPECT_EQ(p.step_time_s, r.metrics.step_time_s());
  EXPECT_EQ(p.throughput_samples_per_s, 2 * r.metrics.samples_per_s);
  EXPECT_EQ(p.bubble_fraction, r.metrics.bubble_fraction);
  EXPECT_TRUE(p.fits);
  // What make_plan produces, plan_from_json accepts.
  expect_same(p, plan_from_json(plan_to_json(p), "p.json"));
}

// Each stage carries its device's peak split as memory_splits gives it, the four
// parts adding up to the peak, and the plan file keeps them exactly.
TEST(MakePlan, CarriesEachDevicesMemorySplit) {
  // 1000 parameters of 12 bytes per layer, stashes of 100 bytes a sample: every
  // part of the peak is there.
  const Scenario sc = testing::memory_scenario(4, false);
  const SimResult r = simulate(sc, SimConfig{});
  const std::vector<MemorySplit> splits = memory_splits(r);
  const Plan p = make_plan(sc, r, 1, "optimal");
  ASSERT_EQ(p.stage_plans.size(), 2u);
  for (std::size_t s = 0; s < 2; ++s) {
    SCOPED_TRACE("stage " + std::to_string(s));
    const PlanStage& st = p.stage_plans[s];
    ASSERT_TRUE(st.memory_split.has_value());
    const MemorySplit& m = *st.memory_split;
    const MemorySplit& want = splits[static_cast<std::size_t>(st.device)];
    EXPECT_EQ(m.weights, want.weights);
    EXPECT_EQ(m.gradients, want.gradients);
    EXPECT_EQ(m.optimizer, want.optimizer);
    EXPECT_EQ(m.activations, want.activations);
    EXPECT_GT(m.weights, 0);
    EXPECT_GT(m.activations, 0);
    EXPECT_EQ(m.weights + m.gradients + m.optimizer + m.activations, st.peak_memory);
    EXPECT_EQ(st.peak_memory, r.metrics.devices[s].peak_memory);
  }
  const fs::path path = temp_path("split.json");
  write_plan_file(path, p);
  const Plan back = read_plan_file(path);
  const json doc = json::parse(read_text(path));
  fs::remove(path);
  expect_same(p, back);
  // Written as `simulate --json` names them, beside the peak.
  EXPECT_EQ(doc["stages"][1]["weights_bytes"], splits[1].weights);
  EXPECT_EQ(doc["stages"][1]["gradients_bytes"], splits[1].gradients);
  EXPECT_EQ(doc["stages"][1]["optimizer_bytes"], splits[1].optimizer);
  EXPECT_EQ(doc["stages"][1]["activations_bytes"], splits[1].activations);
}

// With chunks a device runs several stages; each carries the device's split.
TEST(MakePlan, ChunkedStagesCarryTheirDevicesSplit) {
  Scenario sc = testing::memory_scenario(4, false);
  sc.model.layers.resize(8, sc.model.layers[0]);
  for (std::size_t l = 0; l < 8; ++l) sc.model.layers[l].name = "l" + std::to_string(l);
  SimConfig config;
  config.schedule = ScheduleKind::kInterleaved1F1B;
  config.chunks = 2;
  config.micro_batches = 4;
  const SimResult r = simulate(sc, config);
  const std::vector<MemorySplit> splits = memory_splits(r);
  const Plan p = make_plan(sc, r, 1, "optimal");
  ASSERT_EQ(p.stage_plans.size(), 4u);
  for (const PlanStage& st : p.stage_plans) {
    const MemorySplit& want = splits[static_cast<std::size_t>(st.device)];
    ASSERT_TRUE(st.memory_split.has_value());
    EXPECT_EQ(st.memory_split->weights, want.weights);
    EXPECT_EQ(st.memory_split->activations, want.activations);
    EXPECT_EQ(st.memory_split->weights + st.memory_split->gradients + st.memory_split->optimizer +
                  st.memory_split->activations,
              st.peak_memory);
  }
  // Device 0's weights are those of its two stages, 0 and 2.
  EXPECT_EQ(p.stage_plans[0].memory_split->weights,
            r.stage_costs[0].weight_bytes + r.stage_costs[2].weight_bytes);
  expect_same(p, plan_from_json(plan_to_json(p), "p.json"));
}

// Plans written before the split load with it unknown, not zero, and are written
// back without it.
TEST(PlanIo, PlansWithoutTheSplitLoadWithItUnknown) {
  json doc = plan_to_json(sample_plan());
  for (json& stage : doc["stages"]) {
    for (const char* key :
         {"weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes"}) {
      ASSERT_EQ(stage.erase(key), 1u) << key;
    }
  }
  const Plan old = plan_from_json(doc, "p.json");
  ASSERT_EQ(old.stage_plans.size(), 3u);
  for (const PlanStage& st : old.stage_plans) EXPECT_FALSE(st.memory_split.has_value());
  EXPECT_EQ(old.stage_plans[1].peak_memory, 900'000);
  EXPECT_EQ(plan_to_json(old), doc);
}

// --- Bad plans ---

// A zb-v plan places its stages in the V (device d runs stages d and
// 2K - 1 - d), reads back as written, and refuses a stage moved off the V.
TEST(MakePlan, ZbVStagesFollowTheV) {
  const Scenario sc = testing::uniform_scenario(8, 2, 1000.0, 4, 4, false);
  SimConfig config;
  config.schedule = ScheduleKind::kZbV;
  const Plan p = make_plan(sc, simulate(sc, config), 1, "optimal");
  ASSERT_EQ(p.stage_plans.size(), 4u);
  std::vector<int> devices;
  for (const PlanStage& st : p.stage_plans) devices.push_back(st.device);
  EXPECT_EQ(devices, (std::vector<int>{0, 1, 1, 0}));
  expect_same(p, plan_from_json(plan_to_json(p), "p.json"));
  json doc = plan_to_json(p);
  doc["stages"][3]["device"] = 1;  // s mod K
  try {
    plan_from_json(doc, "p.json");
    FAIL() << "a zb-v stage off its V was accepted";
  } catch (const std::exception& e) {
    EXPECT_STREQ(e.what(),
                 "p.json: stages[3].device: expected 0, got 1: PipeScope runs model stage 3 on "
                 "device 0 (zb-v's V: stages d and 2K-1-d on device d, K=2), and a plan's stages "
                 "cannot be moved to other devices");
  }
}

// --- Matching a plan to a scenario ---

Scenario scenario_for(const Plan& plan) {
  Scenario sc = testing::uniform_scenario(7, 3, 1000.0, plan.global_batch, 4, true);
  sc.model.name = "toy7";
  return sc;
}

// "JSON_PATH | MESSAGE" of the mismatch check_plan_matches reports, or "(matches)".
std::string mismatch(const Plan& plan, const Scenario& sc) {
  try {
    check_plan_matches(plan, sc, "p.json");
  } catch (const ScenarioError& e) {
    return e.json_path() + " | " + e.what();
  }
  return "(matches)";
}

TEST(CheckPlanMatches, AcceptsItsOwnScenario) {
  Plan plan = sample_plan();
  Scenario sc = scenario_for(plan);
  plan.model_hash = model_hash(sc.model);
  EXPECT_EQ(mismatch(plan, sc), "(matches)");
  sc.cluster.devices = 8;  // more devices than the plan uses are fine
  sc.model.name = "renamed";
  EXPECT_EQ(mismatch(plan, sc), "(matches)");
}

TEST(CheckPlanMatches, RejectsAForeignModel) {
  Plan plan = sample_plan();
  Scenario sc = scenario_for(plan);
  plan.model_hash = model_hash(sc.model);
  sc.model.name = "other";
  sc.model.layers[3].fwd_flops = 2000.0;
  EXPECT_EQ(mismatch(plan, sc),
            "model.hash | p.json: model.hash: this plan was made for model 'toy7' (hash " +
                plan.model_hash + "), not for the scenario's model 'other' (hash " +
                model_hash(sc.model) + ")");
}

TEST(CheckPlanMatches, RejectsTooFewDevicesAndAnotherBatch) {
  Plan plan = sample_plan();
  Scenario sc = scenario_for(plan);
  plan.model_hash = model_hash(sc.model);
  sc.cluster.devices = 2;
  EXPECT_EQ(mismatch(plan, sc),
            "cluster.devices | p.json: cluster.devices: this plan needs 3 devices, but the "
            "scenario's cluster has 2");
  sc.cluster.devices = 3;
  sc.training.global_batch = 16;
  EXPECT_EQ(mismatch(plan, sc),
            "global_batch | p.json: global_batch: this plan was made for global_batch 8, but the "
            "scenario's is 16");
}

}  // namespace
}  // namespace pipescope
