// Profile JSON: round trips, and every kind of bad profile with the message the
// user sees (tests/sim/profiled_simulation_test.cpp has profiles as the
// simulator's cost model).

#include "sim/formats/profile_io.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <tuple>

#include <nlohmann/json.hpp>

#include "profile_fixtures.h"
#include "sim/engine/simulator.h"
#include "sim/formats/result_json.h"
#include "sim/scenario/scenario_io.h"
#include "sim_fixtures.h"

namespace pipescope {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

using testing::split_profile;
using testing::split_scenario;
using testing::uniform_profile;

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

// error_of `doc` with the value at a JSON pointer replaced: with(pointer,
// value).
auto errors_of(const json& doc) {
  return [doc](const std::string& pointer, const json& value) {
    json d = doc;
    d[json::json_pointer(pointer)] = value;
    return error_of(d);
  };
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
  const auto with = errors_of(doc);
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
  EXPECT_EQ(q.speed_spread, -1.0);  // not checked: not written, read as such
  p.rounds.speed_spread = 0.04;
  const json checked = profile_to_json(p);
  EXPECT_EQ(checked["rounds"]["speed_spread"], 0.04);
  EXPECT_EQ(profile_from_json(checked, "p.json").rounds.speed_spread, 0.04);
  EXPECT_NE(errors_of(checked)("/rounds/speed_spread", -0.1).find("p.json: rounds.speed_spread:"),
            std::string::npos);
  const auto with = errors_of(doc);
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

// A context group's all-to-all round-trips, only when measured, and so does
// an expert group's; one without its group is a context group's (profiles
// before the expert ranks'); bad figures are refused with the field.
TEST(ProfileIo, GroupAllToAll) {
  const Scenario sc = testing::uniform_scenario(4, 2, 1000.0, 8, 4, false);
  Profile p = uniform_profile(sc, 2);
  EXPECT_FALSE(profile_to_json(p).contains("alltoall_group"));
  EXPECT_EQ(profile_from_json(profile_to_json(p), "p.json").alltoall_group.ranks, 0);
  p.alltoall_group = GroupAllToAllFigures{false, 2, 6.5e-6, 9.25e9, 4};
  const json doc = profile_to_json(p);
  EXPECT_EQ(doc["alltoall_group"],
            json::parse(R"({"group": "context", "ranks": 2, "latency_s": 6.5e-6,
                            "bandwidth": 9.25e9, "micro_batch": 4})"));
  const GroupAllToAllFigures q = profile_from_json(doc, "p.json").alltoall_group;
  EXPECT_FALSE(q.experts);
  EXPECT_EQ(q.ranks, 2);
  EXPECT_EQ(q.latency_s, 6.5e-6);
  EXPECT_EQ(q.bandwidth, 9.25e9);
  EXPECT_EQ(q.micro_batch, 4);
  const auto with = errors_of(doc);
  EXPECT_NE(with("/alltoall_group/ranks", 1).find("p.json: alltoall_group.ranks:"),
            std::string::npos);
  EXPECT_EQ(with("/alltoall_group/latency_s", 7200.0),
            "p.json: alltoall_group.latency_s: implausible (over an hour)");
  EXPECT_NE(with("/alltoall_group/bandwidth", 0).find("p.json: alltoall_group.bandwidth:"),
            std::string::npos);
  EXPECT_NE(with("/alltoall_group/optimizer_slowdown", 1).find("optimizer_slowdown"),
            std::string::npos);
  EXPECT_NE(with("/alltoall_group/micro_batch", 0).find("p.json: alltoall_group.micro_batch:"),
            std::string::npos);
  EXPECT_EQ(with("/alltoall_group/group", "tensor"),
            "p.json: alltoall_group.group: unknown group 'tensor' (expected one of: context, "
            "experts)");
  json old = doc;
  old["alltoall_group"].erase("group");
  EXPECT_FALSE(profile_from_json(old, "p.json").alltoall_group.experts);
  p.alltoall_group.experts = true;
  const json experts = profile_to_json(p);
  EXPECT_EQ(experts["alltoall_group"]["group"], "experts");
  EXPECT_TRUE(profile_from_json(experts, "p.json").alltoall_group.experts);
}

// The ranks' gradient sum round-trips, only when measured; bad figures are
// refused with the field.
TEST(ProfileIo, GradientSum) {
  const Scenario sc = testing::uniform_scenario(4, 2, 1000.0, 8, 4, false);
  Profile p = uniform_profile(sc, 2);
  EXPECT_FALSE(profile_to_json(p).contains("gradient_sum"));
  p.gradient_sum = GradientSumFigures{2, 1.5e-5, 3.25e9};
  const json doc = profile_to_json(p);
  EXPECT_EQ(doc["gradient_sum"],
            json::parse(R"({"ranks": 2, "latency_s": 1.5e-5, "bandwidth": 3.25e9})"));
  const GradientSumFigures q = profile_from_json(doc, "p.json").gradient_sum;
  EXPECT_EQ(q.ranks, 2);
  EXPECT_EQ(q.latency_s, 1.5e-5);
  EXPECT_EQ(q.bandwidth, 3.25e9);
  const auto with = errors_of(doc);
  EXPECT_NE(with("/gradient_sum/ranks", 1).find("p.json: gradient_sum.ranks:"), std::string::npos);
  EXPECT_EQ(with("/gradient_sum/latency_s", 7200.0),
            "p.json: gradient_sum.latency_s: implausible (over an hour)");
  EXPECT_NE(with("/gradient_sum/bandwidth", 0).find("p.json: gradient_sum.bandwidth:"),
            std::string::npos);
  EXPECT_NE(with("/gradient_sum/micro_batch", 4).find("micro_batch"), std::string::npos);
}

// The shares' compute slowdown round-trips, only when measured; bad figures
// are refused with the field.
TEST(ProfileIo, GroupSlowdown) {
  const Scenario sc = testing::uniform_scenario(4, 2, 1000.0, 8, 4, false);
  Profile p = uniform_profile(sc, 2);
  EXPECT_FALSE(profile_to_json(p).contains("group_slowdown"));
  p.group_slowdown = GroupSlowdownFigures{2, 1.25, 1.5, 4};
  const json doc = profile_to_json(p);
  EXPECT_EQ(doc["group_slowdown"], json::parse(R"({"group": "context", "ranks": 2, "forward": 1.25,
                                                   "backward": 1.5, "micro_batch": 4,
                                                   "measured": "passes"})"));
  const GroupSlowdownFigures q = profile_from_json(doc, "p.json").group_slowdown;
  EXPECT_EQ(q.ranks, 2);
  EXPECT_EQ(q.forward, 1.25);
  EXPECT_EQ(q.backward, 1.5);
  EXPECT_EQ(q.micro_batch, 4);
  EXPECT_FALSE(q.experts);
  // The expert ranks' say so, as do figures from a plan's op lists; a file
  // without the field is the shares', measured by passes.
  for (const auto& [key, value, flag] :
       {std::tuple{"group", "experts", &GroupSlowdownFigures::experts},
        std::tuple{"measured", "op lists", &GroupSlowdownFigures::op_lists}}) {
    Profile flagged = p;
    flagged.group_slowdown.*flag = true;
    json doc_of = profile_to_json(flagged);
    EXPECT_EQ(doc_of["group_slowdown"][key], value);
    EXPECT_TRUE(profile_from_json(doc_of, "p.json").group_slowdown.*flag) << key;
    doc_of["group_slowdown"].erase(key);
    EXPECT_FALSE(profile_from_json(doc_of, "p.json").group_slowdown.*flag) << key;
  }
  const auto with = errors_of(doc);
  EXPECT_NE(with("/group_slowdown/group", "tensor").find("p.json: group_slowdown.group:"),
            std::string::npos);
  EXPECT_NE(with("/group_slowdown/ranks", 1).find("p.json: group_slowdown.ranks:"),
            std::string::npos);
  EXPECT_EQ(with("/group_slowdown/measured", "steps"),
            "p.json: group_slowdown.measured: unknown measurement 'steps' (expected one of: "
            "passes, op lists)");
  EXPECT_EQ(with("/group_slowdown/forward", 0.25),
            "p.json: group_slowdown.forward: implausible slowdown 0.25 (expected 0.5 to 100.0)");
  EXPECT_NE(with("/group_slowdown/backward", 0).find("p.json: group_slowdown.backward:"),
            std::string::npos);
  EXPECT_NE(with("/group_slowdown/micro_batch", 0).find("p.json: group_slowdown.micro_batch:"),
            std::string::npos);
  // E = 2 expert ranks of C = 2 shares: their shares, only then; a context
  // group's shares, or shares that do not divide the ranks into expert
  // ranks, are refused.
  Profile both = p;
  both.group_slowdown.ranks = 4;
  both.group_slowdown.experts = true;
  both.group_slowdown.shares = 2;
  json doc_both = profile_to_json(both);
  EXPECT_EQ(doc_both["group_slowdown"]["shares"], 2);
  EXPECT_EQ(profile_from_json(doc_both, "p.json").group_slowdown.shares, 2);
  EXPECT_EQ(q.shares, 1);
  const std::string refused =
      "p.json: group_slowdown.shares: expert ranks' shares need \"group\": \"experts\" and "
      "divide its 4 ranks into 2 or more expert ranks";
  EXPECT_EQ(errors_of(doc_both)("/group_slowdown/shares", 4), refused);
  EXPECT_EQ(errors_of(doc_both)("/group_slowdown/shares", 3), refused);
  EXPECT_EQ(errors_of(doc_both)("/group_slowdown/group", "context"), refused);
  EXPECT_NE(errors_of(doc_both)("/group_slowdown/shares", 1).find("p.json: group_slowdown.shares:"),
            std::string::npos);
  // Measured time-sliced over op lists: said so, only then.
  both.group_slowdown.op_lists = true;
  both.group_slowdown.time_sliced = true;
  doc_both = profile_to_json(both);
  EXPECT_EQ(doc_both["group_slowdown"]["time_sliced"], true);
  EXPECT_TRUE(profile_from_json(doc_both, "p.json").group_slowdown.time_sliced);
  EXPECT_FALSE(q.time_sliced);
  EXPECT_FALSE(doc.at("group_slowdown").contains("time_sliced"));
  const std::string sliced_refused =
      "p.json: group_slowdown.time_sliced: a time-sliced group is expert ranks' shares "
      "(\"shares\") measured over \"op lists\"";
  EXPECT_EQ(errors_of(doc_both)("/group_slowdown/measured", "passes"), sliced_refused);
  json sliced_context = doc;
  sliced_context["group_slowdown"]["measured"] = "op lists";
  sliced_context["group_slowdown"]["time_sliced"] = true;
  EXPECT_EQ(error_of(sliced_context), sliced_refused);
}

// The shares' ring takes round-trip, only when measured; bad figures are
// refused with the field.
TEST(ProfileIo, ContextRing) {
  const Scenario sc = testing::uniform_scenario(4, 2, 1000.0, 8, 4, false);
  Profile p = uniform_profile(sc, 2);
  EXPECT_FALSE(profile_to_json(p).contains("context_ring"));
  p.context_ring = ContextRingFigures{2, 2.5e-5, 4.5e-5, 4};
  const json doc = profile_to_json(p);
  EXPECT_EQ(doc["context_ring"], json::parse(R"({"ranks": 2, "forward_take_s": 2.5e-5,
                                                 "backward_take_s": 4.5e-5, "micro_batch": 4})"));
  const ContextRingFigures q = profile_from_json(doc, "p.json").context_ring;
  EXPECT_EQ(q.ranks, 2);
  EXPECT_EQ(q.forward_take_s, 2.5e-5);
  EXPECT_EQ(q.backward_take_s, 4.5e-5);
  EXPECT_EQ(q.micro_batch, 4);
  const auto with = errors_of(doc);
  EXPECT_NE(with("/context_ring/ranks", 0).find("p.json: context_ring.ranks:"), std::string::npos);
  EXPECT_NE(with("/context_ring/forward_take_s", -1.0).find("p.json: context_ring.forward_take_s:"),
            std::string::npos);
  EXPECT_EQ(with("/context_ring/backward_take_s", 7200.0),
            "p.json: context_ring.backward_take_s: implausible (over an hour)");
  EXPECT_NE(with("/context_ring/latency_s", 1.0).find("latency_s"), std::string::npos);
  json missing = doc;
  missing["context_ring"].erase("micro_batch");
  EXPECT_NE(error_of(missing).find("p.json: context_ring.micro_batch: missing required key"),
            std::string::npos)
      << error_of(missing);
}

// The expert ranks' load round-trips, only when measured; bad figures are
// refused with the field and the valid range.
TEST(ProfileIo, ExpertLoad) {
  const Scenario sc = testing::uniform_scenario(4, 2, 1000.0, 8, 4, false);
  Profile p = uniform_profile(sc, 2);
  EXPECT_FALSE(profile_to_json(p).contains("expert_load"));
  p.expert_load = ExpertLoadFigures{2, 1.25, 3e-4, 5e-4, 4};
  const json doc = profile_to_json(p);
  EXPECT_EQ(doc["expert_load"], json::parse(R"({"ranks": 2, "imbalance": 1.25, "forward_s": 3e-4,
                                                "backward_s": 5e-4, "micro_batch": 4})"));
  const ExpertLoadFigures q = profile_from_json(doc, "p.json").expert_load;
  EXPECT_EQ(q.ranks, 2);
  EXPECT_EQ(q.imbalance, 1.25);
  EXPECT_EQ(q.forward_s, 3e-4);
  EXPECT_EQ(q.backward_s, 5e-4);
  EXPECT_EQ(q.micro_batch, 4);
  const auto with = errors_of(doc);
  EXPECT_NE(with("/expert_load/ranks", 1).find("p.json: expert_load.ranks:"), std::string::npos);
  for (const double bad : {0.5, 2.5}) {
    EXPECT_NE(with("/expert_load/imbalance", bad)
                  .find("p.json: expert_load.imbalance: must be in [1, ranks]"),
              std::string::npos)
        << bad;
  }
  EXPECT_NE(with("/expert_load/forward_s", -1.0).find("p.json: expert_load.forward_s:"),
            std::string::npos);
  EXPECT_EQ(with("/expert_load/backward_s", 7200.0),
            "p.json: expert_load.backward_s: implausible (over an hour)");
  EXPECT_NE(with("/expert_load/latency_s", 1.0).find("latency_s"), std::string::npos);
  json missing = doc;
  missing["expert_load"].erase("micro_batch");
  EXPECT_NE(error_of(missing).find("p.json: expert_load.micro_batch: missing required key"),
            std::string::npos)
      << error_of(missing);
}

TEST(ProfileIoErrors, NameTheFileAndTheField) {
  const Scenario sc = testing::uniform_scenario(4, 2, 1000.0, 8, 4, false);
  const json good = profile_to_json(uniform_profile(sc, 2));
  ASSERT_EQ(error_of(good), "(accepted)");
  const auto with = errors_of(good);
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

}  // namespace
}  // namespace pipescope
