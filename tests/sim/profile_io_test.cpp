// Profile JSON and profiles as the simulator's cost model: round trips, every
// kind of bad profile with the message the user sees, and exact step times from
// measured figures, with and without cores shared between devices.

#include "sim/formats/profile_io.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "sim/engine/simulator.h"
#include "sim/formats/result_json.h"
#include "sim/scenario/scenario_io.h"
#include "sim_fixtures.h"

namespace pipescope {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// One entry for the uniform scenario's layers ("l0", "l1", ... share it): per
// sample 100 ns forward, 200 ns backward, 150 ns recompute, measured at 1 and 4.
Profile uniform_profile(const Scenario& sc, int cores) {
  Profile p;
  p.machine = "test machine";
  p.cores = cores;
  p.model_name = sc.model.name;
  LayerProfile e;
  e.signature = layer_signature(sc.model.layers[0]);
  e.example = sc.model.layers[0].name;
  e.batch_sizes = {1, 4};
  // A forward costs the same whether it keeps its stash (the recompute's
  // figure) or not; ForwardThatKeepsItsStashCostsTheRecompute tells them apart.
  e.forward = {100, 400};
  e.backward = {200, 800};
  e.recompute = {100, 400};
  p.layers.push_back(e);
  p.optimizer = "sgd";
  p.optimizer_overhead = 0;
  p.optimizer_ns_per_param = 0.0;
  p.transport_latency_s = 0.0;
  p.transport_bandwidth = 1e9;
  return p;
}

TEST(ProfileIo, RoundTripsThroughJsonAndAFile) {
  const Scenario sc = testing::uniform_scenario(4, 2, 1000.0, 8, 4, false);
  Profile p = uniform_profile(sc, 3);
  p.optimizer_overhead = 1234;
  p.optimizer_ns_per_param = 0.5;
  p.transport_latency_s = 2e-5;
  p.transport_bandwidth = 5e9;
  p.concurrency_slowdown = {1.0, 1.25, 1.5};
  const fs::path file = fs::temp_directory_path() / "pipescope_profile_roundtrip.json";
  write_profile_file(file, p);
  const Profile q = read_profile_file(file);
  fs::remove(file);
  EXPECT_EQ(q.machine, "test machine");
  EXPECT_EQ(q.cores, 3);
  ASSERT_EQ(q.layers.size(), 1u);
  EXPECT_EQ(q.layers[0].signature, p.layers[0].signature);
  EXPECT_EQ(q.layers[0].batch_sizes, p.layers[0].batch_sizes);
  EXPECT_EQ(q.layers[0].forward, p.layers[0].forward);
  EXPECT_EQ(q.layers[0].backward, p.layers[0].backward);
  EXPECT_EQ(q.layers[0].recompute, p.layers[0].recompute);
  EXPECT_TRUE(q.layers[0].weight.empty());  // not measured: no weight_s written
  EXPECT_EQ(q.optimizer, "sgd");
  EXPECT_EQ(q.optimizer_overhead, 1234);
  EXPECT_DOUBLE_EQ(q.optimizer_ns_per_param, 0.5);
  EXPECT_DOUBLE_EQ(q.transport_latency_s, 2e-5);
  EXPECT_DOUBLE_EQ(q.transport_bandwidth, 5e9);
  EXPECT_EQ(q.concurrency_slowdown, (std::vector<double>{1.0, 1.25, 1.5}));
}

std::string error_of(const json& doc) {
  try {
    profile_from_json(doc, "p.json");
  } catch (const ScenarioError& e) {
    return e.what();
  }
  return "(accepted)";
}

// A measured weight-gradient share round-trips, reaches the cost model, and may
// not exceed the backward it is part of.
TEST(ProfileIo, WeightGradientTimes) {
  Scenario sc = testing::uniform_scenario(4, 2, 1000.0, 8, 4, false);
  for (LayerSpec& l : sc.model.layers) l.params = 1;  // a layer without parameters has no W
  Profile p = uniform_profile(sc, 2);
  p.layers[0].weight = {90, 300};
  const Profile q = profile_from_json(profile_to_json(p), "p.json");
  EXPECT_EQ(q.layers[0].weight, (std::vector<SimTime>{90, 300}));
  const LayerSpec& layer = sc.model.layers[0];
  EXPECT_EQ(ProfiledCostModel(std::make_shared<const Profile>(q)).weight_grad(layer, 4), 300);
  // Without it, half the backward.
  EXPECT_EQ(ProfiledCostModel(std::make_shared<const Profile>(uniform_profile(sc, 2)))
                .weight_grad(layer, 4),
            400);
  json doc = profile_to_json(p);
  doc["layers"][0]["weight_s"][1] = 1e-6;  // 1000 ns, backward is 800
  EXPECT_EQ(error_of(doc),
            "p.json: layers[0].weight_s[1]: the weight gradient is part of the backward, but "
            "1.00 us is more than backward_s's 800 ns");
  doc["layers"][0]["weight_s"] = {1e-7};
  EXPECT_EQ(error_of(doc), "p.json: layers[0].weight_s: has 1 entries but batch_sizes has 2");
}

// Four layers with parameters (a layer without them has no W) on two devices,
// and a profile whose split backward costs more than the whole: B 150 and
// 700 ns, W 90 and 300 ns at 1 and 4 samples, against a backward of 200 and
// 800 ns.
Scenario split_scenario() {
  Scenario sc = testing::uniform_scenario(4, 2, 1000.0, 8, 4, false);
  for (LayerSpec& l : sc.model.layers) l.params = 1;
  return sc;
}
Profile split_profile(const Scenario& sc) {
  Profile p = uniform_profile(sc, 2);
  p.layers[0].weight = {90, 300};
  p.layers[0].input = {150, 700};
  return p;
}

// A split backward's measured B round-trips and reaches the cost model; B and
// W together may exceed the backward (a deferred W's operands are out of the
// caches). Without it, B is the rest of the backward.
TEST(ProfileIo, SplitBackwardInputTimes) {
  const Scenario sc = split_scenario();
  const Profile p = split_profile(sc);
  const json doc = profile_to_json(p);
  ASSERT_EQ(doc["layers"][0]["input_s"].size(), 2u);
  EXPECT_DOUBLE_EQ(doc["layers"][0]["input_s"][1].get<double>(), 7e-7);
  const Profile q = profile_from_json(doc, "p.json");
  EXPECT_EQ(q.layers[0].input, (std::vector<SimTime>{150, 700}));
  const LayerSpec& layer = sc.model.layers[0];
  const ProfiledCostModel measured(std::make_shared<const Profile>(q));
  EXPECT_EQ(measured.input_grad(layer, 4), 700);
  EXPECT_EQ(measured.op_times(layer, 4).input, 700);
  Profile old = p;
  old.layers[0].input.clear();
  EXPECT_FALSE(profile_to_json(old)["layers"][0].contains("input_s"));
  EXPECT_EQ(ProfiledCostModel(std::make_shared<const Profile>(old)).input_grad(layer, 4),
            800 - 300);
  // With B measured, W is no longer capped by the backward.
  json more = doc;
  more["layers"][0]["weight_s"][1] = 1e-6;  // 1000 ns, backward is 800
  const Profile r = profile_from_json(more, "p.json");
  EXPECT_EQ(ProfiledCostModel(std::make_shared<const Profile>(r)).weight_grad(layer, 4), 1000);
  json alone = doc;
  alone["layers"][0].erase("weight_s");
  EXPECT_EQ(error_of(alone),
            "p.json: layers[0].input_s: needs weight_s beside it (B and W of a split backward are "
            "timed together)");
  json bad = doc;
  bad["layers"][0]["input_s"] = {1e-7};
  EXPECT_EQ(error_of(bad), "p.json: layers[0].input_s: has 1 entries but batch_sizes has 2");
}

// The partitioner prices a layer of a split schedule with its B and W, which
// here come to more than the fused backward it prices under 1F1B.
TEST(ProfiledSimulation, PartitionerPricesASplitBackwardsHalves) {
  Scenario sc = split_scenario();
  const auto profile = std::make_shared<const Profile>(split_profile(sc));
  apply_profile(sc, profile, "p.json");
  const ProfiledCostModel cost(profile);
  const LayerSpec& layer = sc.model.layers[0];
  const PartitionProblem split =
      partition_problem(sc, cost, 2, 4, Remat::kNever, ScheduleKind::kZbH1);
  const PartitionProblem fused =
      partition_problem(sc, cost, 2, 4, Remat::kNever, ScheduleKind::k1F1B);
  EXPECT_EQ(split.layers[0].backward, cost.input_grad(layer, 2) + cost.weight_grad(layer, 2));
  EXPECT_EQ(fused.layers[0].backward, cost.backward(layer, 2));
  EXPECT_GT(split.layers[0].backward, fused.layers[0].backward);
  // A custom schedule says for itself whether it splits.
  CustomSchedule custom;
  custom.stages = 2;
  custom.micro_batches = 4;
  custom.stage_rank = {0, 1};
  custom.split = true;
  const PartitionProblem custom_split =
      partition_problem(sc, cost, 2, 4, Remat::kNever, ScheduleKind::kCustom, 1, &custom);
  EXPECT_EQ(custom_split.layers[0].backward, split.layers[0].backward);
  custom.split = false;
  EXPECT_EQ(partition_problem(sc, cost, 2, 4, Remat::kNever, ScheduleKind::kCustom, 1, &custom)
                .layers[0]
                .backward,
            fused.layers[0].backward);
}

// Under a split schedule each B lasts its stage's measured input gradients and
// each W its weight gradients, while a fused backward keeps the whole: K=2
// stages of two layers, micro-batches of 2 samples (B 2 x 2 x 150 ... 700
// interpolated: 150 + (700 - 150) / 3 = 333 a layer at 2 samples).
TEST(ProfiledSimulation, SplitBackwardRunsTheMeasuredHalves) {
  Scenario sc = split_scenario();
  apply_profile(sc, std::make_shared<const Profile>(split_profile(sc)), "p.json");
  SimConfig config;
  config.schedule = ScheduleKind::kZbH1;
  config.record_timeline = true;
  const SimResult r = simulate(sc, config);
  ASSERT_EQ(r.stage_costs.size(), 2u);
  const SimTime input = 2 * (150 + (700 - 150) / 3);  // two layers at 2 samples
  const SimTime weight = 2 * (90 + (300 - 90) / 3);
  EXPECT_EQ(r.stage_costs[0].input, input);
  EXPECT_EQ(r.stage_costs[0].weight, weight);
  EXPECT_EQ(r.stage_costs[0].backward, 2 * 400);
  int backwards = 0, weights = 0;
  for (const TimelineEvent& e : r.timeline.events) {
    if (e.lane != Lane::kCompute) continue;
    if (e.kind == EventKind::kBackward) {
      EXPECT_EQ(e.end - e.start, input);
      ++backwards;
    } else if (e.kind == EventKind::kWeight) {
      EXPECT_EQ(e.end - e.start, weight);
      ++weights;
    }
  }
  EXPECT_EQ(backwards, 2 * 4);
  EXPECT_EQ(weights, 2 * 4);
  // What the result says a stage's backward costs is what it runs: B + W.
  EXPECT_TRUE(r.split_backward());
  EXPECT_DOUBLE_EQ(to_json(r)["stages"][0]["bwd_s"].get<double>(),
                   simtime_to_seconds(input + weight));
  // 1F1B runs the whole backward.
  config.schedule = ScheduleKind::k1F1B;
  for (const TimelineEvent& e : simulate(sc, config).timeline.events) {
    if (e.lane == Lane::kCompute && e.kind == EventKind::kBackward) {
      EXPECT_EQ(e.end - e.start, 2 * 400);
    }
  }
}

// The machine's GEMM rate round-trips; a profile without it (a GPU's, or one
// written before it was measured) is read with none, and writes none.
TEST(ProfileIo, MachineGemmRate) {
  const Scenario sc = testing::uniform_scenario(4, 2, 1000.0, 8, 4, false);
  Profile p = uniform_profile(sc, 2);
  EXPECT_FALSE(profile_to_json(p).contains("gemm"));
  EXPECT_EQ(profile_from_json(profile_to_json(p), "p.json").gemm.flop_s, 0.0);
  p.gemm = MachineGemm{2.5e10, 384, 384, 384};
  const json doc = profile_to_json(p);
  EXPECT_EQ(doc["gemm"], json::parse(R"({"flop_s": 2.5e10, "m": 384, "n": 384, "k": 384})"));
  const Profile q = profile_from_json(doc, "p.json");
  EXPECT_EQ(q.gemm.flop_s, 2.5e10);
  EXPECT_EQ(q.gemm.m, 384);
  EXPECT_EQ(q.gemm.n, 384);
  EXPECT_EQ(q.gemm.k, 384);
  const auto with = [&](const std::string& pointer, const json& value) {
    json d = doc;
    d[json::json_pointer(pointer)] = value;
    return error_of(d);
  };
  EXPECT_NE(with("/gemm/flop_s", 0).find("p.json: gemm.flop_s:"), std::string::npos);
  EXPECT_EQ(with("/gemm/flop_s", 1e19), "p.json: gemm.flop_s: implausible (over 10^18 FLOP/s)");
  EXPECT_NE(with("/gemm/m", 0).find("p.json: gemm.m:"), std::string::npos);
  EXPECT_NE(with("/gemm/speed", 1).find("p.json: gemm.speed"), std::string::npos);
  EXPECT_EQ(with("/gemm", 1), "p.json: gemm: expected an object, got number");
}

// How the layers were timed round-trips, and only when recorded; bad figures
// are refused with the field.
TEST(ProfileIo, RoundsOfTheMeasurement) {
  const Scenario sc = testing::uniform_scenario(4, 2, 1000.0, 8, 4, false);
  Profile p = uniform_profile(sc, 2);
  EXPECT_FALSE(profile_to_json(p).contains("rounds"));
  EXPECT_EQ(profile_from_json(profile_to_json(p), "p.json").rounds.measured, 0);
  p.rounds = ProfileRounds{9, 7, 0.05, 0.0125, true};
  const json doc = profile_to_json(p);
  EXPECT_EQ(doc["rounds"], json::parse(R"({"measured": 9, "kept": 7, "discard_above": 0.05,
                                           "other_work": 0.0125, "slowdown_of_stages": true})"));
  const ProfileRounds q = profile_from_json(doc, "p.json").rounds;
  EXPECT_EQ(q.measured, 9);
  EXPECT_EQ(q.kept, 7);
  EXPECT_EQ(q.discard_above, 0.05);
  EXPECT_EQ(q.other_work, 0.0125);
  EXPECT_TRUE(q.slowdown_of_stages);
  const auto with = [&](const std::string& pointer, const json& value) {
    json d = doc;
    d[json::json_pointer(pointer)] = value;
    return error_of(d);
  };
  EXPECT_NE(with("/rounds/kept", 10).find("p.json: rounds.kept:"), std::string::npos);
  EXPECT_NE(with("/rounds/kept", 0).find("p.json: rounds.kept:"), std::string::npos);
  EXPECT_NE(with("/rounds/measured", 0).find("p.json: rounds.measured:"), std::string::npos);
  EXPECT_EQ(with("/rounds/other_work", 1.5),
            "p.json: rounds.other_work: is a share of the wall time: at most 1");
  EXPECT_NE(with("/rounds/discard_above", -0.1).find("p.json: rounds.discard_above:"),
            std::string::npos);
  EXPECT_NE(with("/rounds/slowdown_of_stages", 1).find("p.json: rounds.slowdown_of_stages:"),
            std::string::npos);
}

// A CPU plan's MFU is measured against the profile's GEMM rate, or the
// fastest op's rate when one beat it, so never above 1; a GPU profile's
// devices keep their own peak. The uniform layers do 1000 FLOPs a sample
// forward in 100 ns and 2000 backward in 200 ns: 10 GFLOP/s each.
TEST(ApplyProfile, MfuAgainstTheProfiledGemmRate) {
  const auto mfu_of = [](const Scenario& sc, double peak) {
    const SimResult r = simulate(sc, SimConfig{});
    const double flops = 3000.0 * 4 * 8;  // 4 layers, 8 samples
    EXPECT_DOUBLE_EQ(r.metrics.mfu, flops / (r.metrics.step_time_s() * peak * 2));
    EXPECT_LE(r.metrics.mfu, 1.0);
    return r.metrics.mfu;
  };
  Scenario base = testing::uniform_scenario(4, 2, 1000.0, 8, 4, false);
  Profile p = uniform_profile(base, 2);
  p.gemm.flop_s = 2e10;
  Scenario sc = base;
  apply_profile(sc, std::make_shared<const Profile>(p), "p.json");
  EXPECT_EQ(sc.cluster.device.peak_flops_fp32, 2e10);
  EXPECT_EQ(sc.cluster.device.peak_flops_16bit, 2e10);
  const double at_gemm = mfu_of(sc, 2e10);
  EXPECT_GT(at_gemm, 0.0);
  // A GEMM rate below the ops' (measured while the core was taken): the ops'.
  p.gemm.flop_s = 5e9;
  Scenario fast_ops = base;
  apply_profile(fast_ops, std::make_shared<const Profile>(p), "p.json");
  EXPECT_DOUBLE_EQ(fast_ops.cluster.device.peak_flops_fp32, 1e10);
  EXPECT_DOUBLE_EQ(mfu_of(fast_ops, 1e10), 2.0 * at_gemm);
  // M = 8 micro-batches of one sample: the step is all ops but the bubble.
  Scenario busy = testing::uniform_scenario(4, 2, 1000.0, 8, 8, false);
  apply_profile(busy, std::make_shared<const Profile>(p), "p.json");
  EXPECT_LE(simulate(busy, SimConfig{}).metrics.mfu, 1.0);
  EXPECT_GT(simulate(busy, SimConfig{}).metrics.mfu, 0.8);
  p.backend = "cuda";
  Scenario gpu = base;
  apply_profile(gpu, std::make_shared<const Profile>(p), "p.json");
  EXPECT_EQ(gpu.cluster.device.peak_flops_fp32, base.cluster.device.peak_flops_fp32);
}

TEST(ProfileIoErrors, NameTheFileAndTheField) {
  const Scenario sc = testing::uniform_scenario(4, 2, 1000.0, 8, 4, false);
  const json good = profile_to_json(uniform_profile(sc, 2));
  ASSERT_EQ(error_of(good), "(accepted)");
  const auto with = [&](const std::string& pointer, const json& value) {
    json d = good;
    d[json::json_pointer(pointer)] = value;
    return error_of(d);
  };
  const auto contains = [](const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
  };
  std::string e = with("/format", "pipescope-plan");
  EXPECT_TRUE(contains(e, "p.json: format: not a PipeScope profile")) << e;
  e = with("/version", 2);
  EXPECT_TRUE(contains(e, "p.json: version: profile version 2 is not supported")) << e;
  e = with("/layers/0/forward_s", json::array({1e-6}));
  EXPECT_TRUE(contains(e, "p.json: layers[0].forward_s: has 1 entries but batch_sizes has 2")) << e;
  e = with("/layers/0/batch_sizes", json::array({4, 1}));
  EXPECT_TRUE(contains(e, "p.json: layers[0].batch_sizes[1]: batch sizes must be ascending")) << e;
  e = with("/layers/0/backward_s/1", -1.0);
  EXPECT_TRUE(contains(e, "p.json: layers[0].backward_s[1]:")) << e;
  e = with("/layers/0/recompute_s/0", 7200.0);
  EXPECT_TRUE(contains(e, "p.json: layers[0].recompute_s[0]: a measured time of 7200.0 s")) << e;
  e = with("/transport/bandwidth", 0);
  EXPECT_TRUE(contains(e, "p.json: transport.bandwidth:")) << e;
  e = with("/cores", 0);
  EXPECT_TRUE(contains(e, "p.json: cores:")) << e;
  e = with("/concurrency_slowdown", json::array({1.0, 1.1, 1.2}));
  EXPECT_TRUE(contains(e,
                       "p.json: concurrency_slowdown: needs one factor for each number of "
                       "cores from 1 to at most 'cores' (2)"))
      << e;
  e = with("/concurrency_slowdown", json::array({1.2}));
  EXPECT_TRUE(contains(e, "p.json: concurrency_slowdown[0]: one core alone is the reference")) << e;
  e = with("/concurrency_slowdown", json::array({1.0, 1000.0}));
  EXPECT_TRUE(contains(e,
                       "p.json: concurrency_slowdown[1]: implausible slowdown 1000.0 "
                       "(expected 0.5 to 100.0)"))
      << e;
  e = with("/backend", "tpu");
  EXPECT_TRUE(contains(e, "p.json: backend: unknown backend 'tpu'")) << e;
  e = with("/surprise", 1);
  EXPECT_TRUE(contains(e, "surprise")) << e;
  e = with("/layers", json::array());
  EXPECT_TRUE(contains(e, "p.json: layers: a profile needs at least one measured layer")) << e;
  json twice = good;
  twice["layers"].push_back(good["layers"][0]);
  e = error_of(twice);
  EXPECT_TRUE(contains(e, "p.json: layers[1].signature: measured twice")) << e;
  json missing = good;
  missing["optimizer"].erase("per_param_s");
  e = error_of(missing);
  EXPECT_TRUE(contains(e, "p.json: optimizer.per_param_s: missing required key")) << e;
}

TEST(ProfileIoErrors, MalformedJsonAndMissingFile) {
  const fs::path file = fs::temp_directory_path() / "pipescope_profile_bad.json";
  { std::ofstream(file) << "{\"format\": "; }
  try {
    read_profile_file(file);
    FAIL() << "truncated JSON accepted";
  } catch (const ScenarioError& e) {
    EXPECT_NE(std::string(e.what()).find("malformed JSON"), std::string::npos) << e.what();
  }
  fs::remove(file);
  EXPECT_THROW(read_profile_file(file), ScenarioError);
}

TEST(ApplyProfile, TakesTheTransportAndCoresAndRefusesUnmeasuredLayers) {
  Scenario sc = testing::uniform_scenario(4, 2, 1000.0, 8, 4, false);
  Profile p = uniform_profile(sc, 1);
  p.transport_latency_s = 3e-6;
  p.transport_bandwidth = 7e9;
  apply_profile(sc, std::make_shared<const Profile>(p), "p.json");
  EXPECT_EQ(sc.cluster.interconnect.latency_s, 3e-6);
  EXPECT_EQ(sc.cluster.interconnect.bandwidth, 7e9);
  EXPECT_EQ(sc.cluster.shared_cores, 1);
  EXPECT_EQ(sc.cluster.concurrency_slowdown, (std::vector<double>{1.0}));
  ASSERT_NE(sc.cluster.profile, nullptr);
  EXPECT_EQ(make_cost_model(sc)->name(), "profiled");

  Scenario other = testing::uniform_scenario(4, 2, 2000.0, 8, 4, false);  // other FLOPs
  try {
    apply_profile(other, std::make_shared<const Profile>(p), "p.json");
    FAIL() << "a profile of other layers was applied";
  } catch (const ScenarioError& e) {
    EXPECT_EQ(e.file(), "p.json");
    EXPECT_EQ(e.json_path(), "layers");
    EXPECT_NE(std::string(e.what()).find("no measurement for layer 'l0'"), std::string::npos)
        << e.what();
  }
}

// With measured times GPipe's closed form holds exactly: K=2 stages of two
// layers, M=4 micro-batches of 2 samples, so t_f = 2 x 200 ns and t_b = 2 x 400.
TEST(ProfiledSimulation, GpipeClosedFormFromMeasuredTimes) {
  Scenario sc = testing::uniform_scenario(4, 2, 1000.0, 8, 4, false);
  apply_profile(sc, std::make_shared<const Profile>(uniform_profile(sc, 2)), "p.json");
  const SimResult r = simulate(sc, SimConfig{});
  EXPECT_EQ(r.cost_model, "profiled");
  const SimTime tf = 2 * 200;  // interpolated between 1 (100 ns) and 4 (400 ns)
  const SimTime tb = 2 * 400;
  ASSERT_EQ(r.stage_costs.size(), 2u);
  EXPECT_EQ(r.stage_costs[0].forward, tf);
  EXPECT_EQ(r.stage_costs[1].backward, tb);
  EXPECT_EQ(r.metrics.step_time, (4 + 2 - 1) * (tf + tb));
}

// One core for two devices: every op waits for the core, so the step is the sum
// of all ops, K x M x (t_f + t_b), instead of (M + K - 1)(t_f + t_b).
TEST(ProfiledSimulation, DevicesSharingOneCoreRunOneOpAtATime) {
  Scenario sc = testing::uniform_scenario(4, 2, 1000.0, 8, 4, false);
  apply_profile(sc, std::make_shared<const Profile>(uniform_profile(sc, 1)), "p.json");
  const SimResult r = simulate(sc, SimConfig{});
  const SimTime tf = 400;
  const SimTime tb = 800;
  EXPECT_EQ(r.metrics.step_time, 2 * 4 * (tf + tb));
  // Never two ops at once.
  std::vector<TimelineEvent> ops;
  for (const TimelineEvent& e : r.timeline.events) {
    if (e.lane == Lane::kCompute) ops.push_back(e);
  }
  std::sort(ops.begin(), ops.end(),
            [](const TimelineEvent& a, const TimelineEvent& b) { return a.start < b.start; });
  for (std::size_t i = 1; i < ops.size(); ++i) EXPECT_GE(ops[i].start, ops[i - 1].end);
}

// Four devices on two cores: between the two bounds (the work over two cores,
// and the dedicated-core pipeline), never more than two ops at once.
TEST(ProfiledSimulation, FourDevicesOnTwoCores) {
  Scenario dedicated = testing::uniform_scenario(4, 4, 1000.0, 8, 8, false);
  apply_profile(dedicated, std::make_shared<const Profile>(uniform_profile(dedicated, 4)), "p");
  Scenario shared = dedicated;
  shared.cluster.shared_cores = 2;
  const SimResult a = simulate(dedicated, SimConfig{});
  const SimResult b = simulate(shared, SimConfig{});
  const SimTime tf = 100;  // one layer per stage, one sample per micro-batch
  const SimTime tb = 200;
  EXPECT_EQ(a.metrics.step_time, (8 + 4 - 1) * (tf + tb));
  EXPECT_GE(b.metrics.step_time, 4 * 8 * (tf + tb) / 2);
  EXPECT_GT(b.metrics.step_time, a.metrics.step_time);
  std::vector<std::pair<SimTime, int>> edges;
  for (const TimelineEvent& e : b.timeline.events) {
    if (e.lane != Lane::kCompute) continue;
    edges.emplace_back(e.start, +1);
    edges.emplace_back(e.end, -1);
  }
  std::sort(edges.begin(), edges.end());  // an end (-1) sorts before a start at the same time
  int running = 0;
  int most = 0;
  for (const auto& [t, d] : edges) {
    running += d;
    most = std::max(most, running);
  }
  EXPECT_EQ(most, 2);
}

// The profiler times R as a forward that keeps every stash: a forward without
// remat, which keeps its stash for B, costs that; one under remat, which drops
// it as it goes, costs the forward's figure. K=2 stages of two layers, M=4
// micro-batches of 2: forward 2 x 200 ns, kept 2 x 300, backward 2 x 400.
TEST(ProfiledSimulation, ForwardThatKeepsItsStashCostsTheRecompute) {
  Scenario sc = testing::uniform_scenario(4, 2, 1000.0, 8, 4, false);
  Profile p = uniform_profile(sc, 2);
  p.layers[0].recompute = {150, 600};
  apply_profile(sc, std::make_shared<const Profile>(p), "p.json");
  const SimTime tf = 400, tk = 600, tb = 800;
  SimConfig never;
  never.remat = Remat::kNever;
  const SimResult off = simulate(sc, never);
  EXPECT_EQ(off.stage_costs[0].forward, tf);
  EXPECT_EQ(off.stage_costs[0].forward_kept, tk);
  EXPECT_EQ(off.metrics.step_time, (4 + 2 - 1) * (tk + tb));
  // Remat always: every F drops its stash, every B is preceded by R (= tk).
  SimConfig always;
  always.remat = Remat::kAlways;
  const SimResult on = simulate(sc, always);
  SimTime forwards = 0;
  for (const TimelineEvent& e : on.timeline.events) {
    if (e.lane == Lane::kCompute && e.kind == EventKind::kForward) {
      EXPECT_EQ(e.end - e.start, tf);
      ++forwards;
    }
  }
  EXPECT_EQ(forwards, 2 * 4);
  // Except-last: the last micro-batch keeps its stash.
  SimConfig except_last;
  except_last.remat = Remat::kExceptLast;
  const SimResult el = simulate(sc, except_last);
  for (const TimelineEvent& e : el.timeline.events) {
    if (e.lane == Lane::kCompute && e.kind == EventKind::kForward) {
      EXPECT_EQ(e.end - e.start, e.micro_batch == 3 ? tk : tf) << "F" << e.micro_batch;
    }
  }
}

TEST(ApplyProfile, RefusesMeasurementsThatWouldOverflowTheClock) {
  // An hour a layer at one sample, three million samples a step.
  Scenario sc = testing::uniform_scenario(4, 2, 1000.0, 3'000'000, 1, false);
  Profile p = uniform_profile(sc, 2);
  p.layers[0].batch_sizes = {1};
  p.layers[0].forward = {3'600'000'000'000};
  p.layers[0].backward = {3'600'000'000'000};
  p.layers[0].recompute = {3'600'000'000'000};
  try {
    apply_profile(sc, std::make_shared<const Profile>(p), "p.json");
    FAIL() << "a step of centuries was accepted";
  } catch (const ScenarioError& e) {
    EXPECT_EQ(e.json_path(), "layers");
    EXPECT_NE(std::string(e.what()).find("could take over 30 years"), std::string::npos)
        << e.what();
  }
  // A batch of 30 takes 30 x 3 x 4 hours: fine.
  Scenario small = testing::uniform_scenario(4, 2, 1000.0, 30, 1, false);
  EXPECT_NO_THROW(apply_profile(small, std::make_shared<const Profile>(p), "p.json"));
  // A split backward's halves count where they exceed the whole: a
  // nanosecond's backward, B and W of an hour each.
  Profile split = uniform_profile(sc, 2);
  split.layers[0].batch_sizes = {1};
  split.layers[0].forward = {1};
  split.layers[0].backward = {1};
  split.layers[0].recompute = {1};
  split.layers[0].input = {3'600'000'000'000};
  split.layers[0].weight = {3'600'000'000'000};
  EXPECT_THROW(apply_profile(sc, std::make_shared<const Profile>(split), "p.json"), ScenarioError);
}

TEST(ConcurrencySlowdown, InterpolatesBetweenMeasuredCounts) {
  const std::vector<double> f{1.0, 1.2, 1.6};
  EXPECT_EQ(concurrency_slowdown_at(f, 1.0), 1.0);
  EXPECT_EQ(concurrency_slowdown_at(f, 0.5), 1.0);
  EXPECT_DOUBLE_EQ(concurrency_slowdown_at(f, 1.5), 1.1);
  EXPECT_DOUBLE_EQ(concurrency_slowdown_at(f, 2.0), 1.2);
  EXPECT_DOUBLE_EQ(concurrency_slowdown_at(f, 2.25), 1.3);
  EXPECT_EQ(concurrency_slowdown_at(f, 3.0), 1.6);
  EXPECT_EQ(concurrency_slowdown_at(f, 7.0), 1.6);
  EXPECT_EQ(concurrency_slowdown_at({}, 2.0), 1.0);
}

// K=2, M=1: one device computes at a time, so no slowdown. K=2, M=64: the two
// devices compute together nearly all the step (64 of 65 slots), and every op is
// stretched by the slowdown at that mean.
TEST(ConcurrencySlowdown, StretchesOpsByTheMeanNumberComputing) {
  Scenario one = testing::uniform_scenario(2, 2, 1000.0, 1, 1, false);
  Profile p = uniform_profile(one, 2);
  p.concurrency_slowdown = {1.0, 1.5};
  apply_profile(one, std::make_shared<const Profile>(p), "p.json");
  const SimResult r1 = simulate(one, SimConfig{});
  EXPECT_EQ(r1.stage_costs[0].forward, 100);
  EXPECT_EQ(r1.metrics.step_time, 2 * (100 + 200));

  Scenario many = testing::uniform_scenario(2, 2, 1000.0, 64, 64, false);
  apply_profile(many, std::make_shared<const Profile>(p), "p.json");
  const SimResult r64 = simulate(many, SimConfig{});
  // Mean computing devices 2 * 64 / 65 before the stretch; the stretch keeps it.
  const double factor = concurrency_slowdown_at({1.0, 1.5}, 2.0 * 64 / 65);
  EXPECT_EQ(r64.stage_costs[0].forward, std::llround(100 * factor));
  EXPECT_EQ(r64.stage_costs[1].backward, std::llround(200 * factor));
  EXPECT_EQ(r64.metrics.step_time, 65 * (r64.stage_costs[0].forward + r64.stage_costs[0].backward));
}

// Under a split schedule B and W keep their measured times while the other
// ops stretch: the profile times them with their operands already out of the
// caches, which the other cores' work cannot push out again.
TEST(ConcurrencySlowdown, LeavesASplitBackwardsHalvesAsMeasured) {
  Scenario plain = split_scenario();
  apply_profile(plain, std::make_shared<const Profile>(split_profile(plain)), "p.json");
  Scenario shared = split_scenario();
  Profile p = split_profile(shared);
  p.concurrency_slowdown = {1.0, 1.5};
  apply_profile(shared, std::make_shared<const Profile>(p), "p.json");
  SimConfig config;
  config.schedule = ScheduleKind::kZbH1;
  const StageCost base = simulate(plain, config).stage_costs[0];
  const StageCost stretched = simulate(shared, config).stage_costs[0];
  EXPECT_GT(static_cast<double>(stretched.forward), 1.05 * static_cast<double>(base.forward));
  EXPECT_GT(stretched.backward, base.backward);
  EXPECT_EQ(stretched.input, base.input);
  EXPECT_EQ(stretched.weight, base.weight);
  // A profile that did not time B (written before it was): both stretch.
  Profile old = p;
  for (LayerProfile& l : old.layers) l.input.clear();
  Scenario old_shared = split_scenario();
  apply_profile(old_shared, std::make_shared<const Profile>(old), "p.json");
  old.concurrency_slowdown = {1.0};
  Scenario old_plain = split_scenario();
  apply_profile(old_plain, std::make_shared<const Profile>(old), "p.json");
  const StageCost old_base = simulate(old_plain, config).stage_costs[0];
  const StageCost old_stretched = simulate(old_shared, config).stage_costs[0];
  EXPECT_GT(static_cast<double>(old_stretched.input), 1.05 * static_cast<double>(old_base.input));
  EXPECT_GT(static_cast<double>(old_stretched.weight), 1.05 * static_cast<double>(old_base.weight));
  // A profile whose slowdown was measured on every op as the stages run them,
  // B and W included: they stretch like the rest.
  Profile staged = p;
  staged.rounds = ProfileRounds{3, 3, 0.05, 0.0, true};
  Scenario staged_shared = split_scenario();
  apply_profile(staged_shared, std::make_shared<const Profile>(staged), "p.json");
  const StageCost staged_stretched = simulate(staged_shared, config).stage_costs[0];
  EXPECT_GT(static_cast<double>(staged_stretched.forward),
            1.05 * static_cast<double>(base.forward));
  EXPECT_GT(static_cast<double>(staged_stretched.input), 1.05 * static_cast<double>(base.input));
  EXPECT_GT(static_cast<double>(staged_stretched.weight), 1.05 * static_cast<double>(base.weight));
}

}  // namespace
}  // namespace pipescope
