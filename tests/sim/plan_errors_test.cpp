// Plan JSON that the reader refuses, each with the message the user sees:
// malformed JSON, a missing file, the wrong format or version, unknown,
// missing and mistyped keys, stages that do not cut the model, counts that
// disagree, memory splits that do not add up.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "plan_fixtures.h"
#include "sim/formats/plan_io.h"

namespace pipescope {
namespace {

using nlohmann::json;
using testing::error_of;
using testing::sample_plan;
using testing::temp_path;
namespace fs = std::filesystem;

TEST(PlanIoErrors, MalformedJsonHasLineAndColumn) {
  const fs::path path = temp_path("malformed.json");
  std::ofstream(path) << "{\n  \"format\": \"pipescope-plan\",\n  \"version\" 1\n}\n";
  try {
    read_plan_file(path);
    FAIL() << "accepted";
  } catch (const ScenarioError& e) {
    EXPECT_EQ(
        std::string(e.what()).rfind(path.string() + ": malformed JSON at line 3, column 13: ", 0),
        0u)
        << e.what();
  }
  fs::remove(path);
}

TEST(PlanIoErrors, MissingFile) {
  try {
    read_plan_file("/nonexistent/plan.json");
    FAIL() << "accepted";
  } catch (const ScenarioError& e) {
    EXPECT_STREQ(e.what(), "/nonexistent/plan.json: cannot open file");
  }
}

// The message that reading the sample plan after `edit` raises.
template <class Edit>
std::string error_after(Edit edit) {
  json doc = plan_to_json(sample_plan());
  edit(doc);
  return error_of(doc);
}

TEST(PlanIoErrors, WrongFormatOrVersion) {
  const std::string not_a_plan =
      "p.json: format: not a PipeScope plan (expected \"pipescope-plan\")";
  EXPECT_EQ(error_after([](json& d) { d["format"] = "pipescope-trace"; }), not_a_plan);
  EXPECT_EQ(error_after([](json& d) { d.erase("format"); }), not_a_plan);
  // A scenario given where a plan belongs.
  EXPECT_EQ(error_of(json::parse(R"({"model": {}, "cluster": {}, "training": {}})")), not_a_plan);
  EXPECT_EQ(error_after([](json& d) { d["version"] = 7; }),
            "p.json: version: plan version 7 is not supported (this PipeScope reads version 1)");
  EXPECT_EQ(error_after([](json& d) { d["version"] = "1"; }),
            "p.json: version: expected a positive integer, got string");
  EXPECT_EQ(error_of(json::array()), "p.json: expected an object, got array");
}

TEST(PlanIoErrors, UnknownMissingAndMistypedKeys) {
  EXPECT_EQ(error_after([](json& d) { d["stages"][1]["colour"] = "red"; }),
            "p.json: stages[1].colour: unknown key 'colour' (expected one of: first_layer, "
            "last_layer, device, fwd_s, bwd_s, recompute_s, peak_memory_bytes, weights_bytes, "
            "gradients_bytes, optimizer_bytes, activations_bytes)");
  EXPECT_EQ(error_after([](json& d) {
              d["extra"] = 1;
            }).rfind("p.json: extra: unknown key 'extra' (expected one of: format, ", 0),
            0u);
  EXPECT_EQ(error_after([](json& d) { d["predicted"].erase("fits"); }),
            "p.json: predicted.fits: missing required key");
  EXPECT_EQ(error_after([](json& d) { d.erase("schedule"); }),
            "p.json: schedule: missing required key");
  EXPECT_EQ(error_after([](json& d) { d["K"] = "3"; }),
            "p.json: K: expected a positive integer, got string");
  EXPECT_EQ(error_after([](json& d) { d["remat"] = 1; }),
            "p.json: remat: expected true or false, got number");
  EXPECT_EQ(error_after([](json& d) { d["stages"][0]["fwd_s"] = -1.0; }),
            "p.json: stages[0].fwd_s: expected a non-negative number, got -1.0");
  EXPECT_EQ(error_after([](json& d) { d["stages"] = json::object(); }),
            "p.json: stages: expected an array, got object");
  EXPECT_EQ(error_after([](json& d) { d["schedule"] = "zigzag"; }),
            "p.json: schedule: unknown schedule 'zigzag' (expected one of: gpipe, 1f1b, zb-h1, "
            "interleaved-1f1b, looped-bfs, zb-v, interleaved-zb, dualpipe-v)");
  EXPECT_EQ(error_after([](json& d) { d["chunks"] = 2; }),
            "p.json: chunks: gpipe runs one chunk per device; 2 chunks need one of "
            "interleaved-1f1b, looped-bfs, zb-v, interleaved-zb, dualpipe-v");
  EXPECT_EQ(error_after([](json& d) {
              d["schedule"] = "dualpipe-v";
              d["chunks"] = 2;
            }),

            "p.json: chunks: dualpipe-v needs M >= 2K, its stage count (as PyTorch's "
            "ScheduleDualPipeV): M=4, K=3");
  EXPECT_EQ(error_after([](json& d) { d["chunks"] = 0; }),
            "p.json: chunks: expected a positive integer, got 0");
  EXPECT_EQ(error_after([](json& d) { d["model"]["hash"] = "0123456789ABCDEF"; }),
            "p.json: model.hash: expected 16 lowercase hex digits, got \"0123456789ABCDEF\"");
  EXPECT_EQ(error_after([](json& d) { d["model"]["layer_names"].erase(6); }),
            "p.json: model.layer_names: expected 7 names (model.layers), got 6");
  EXPECT_EQ(error_after([](json& d) { d["model"]["layer_names"][2] = 5; }),
            "p.json: model.layer_names[2]: expected a string, got number");
  EXPECT_EQ(error_after([](json& d) { d["predicted"]["bubble_fraction"] = 1.5; }),
            "p.json: predicted.bubble_fraction: expected a number in [0, 1], got 1.5");
}

TEST(PlanIoErrors, StagesMustCutTheModelContiguously) {
  EXPECT_EQ(error_after([](json& d) { d["stages"][1]["first_layer"] = 4; }),
            "p.json: stages[1].first_layer: stages must be contiguous: expected 3 (the layer "
            "after stages[0].last_layer), got 4");
  EXPECT_EQ(error_after([](json& d) { d["stages"][0]["first_layer"] = 1; }),
            "p.json: stages[0].first_layer: the first stage must start at layer 0, got 1");
  EXPECT_EQ(error_after([](json& d) { d["stages"][2]["last_layer"] = 5; }),
            "p.json: stages[2].last_layer: the last stage must end at the model's last layer 6, "
            "got 5");
  EXPECT_EQ(error_after([](json& d) {
              d["stages"][1]["last_layer"] = 2;
              d["stages"][2]["first_layer"] = 3;
            }),
            "p.json: stages[1].last_layer: a stage needs at least one layer: last_layer 2 is "
            "before first_layer 3");
  EXPECT_EQ(error_after([](json& d) { d["stages"][2]["device"] = 3; }),
            "p.json: stages[2].device: expected 2, got 3: PipeScope runs model stage 2 on "
            "device 2 mod K=3, and a plan's stages cannot be moved to other devices");
  // A device that exists, edited by hand, would be read and then ignored.
  EXPECT_EQ(error_after([](json& d) {
              d["stages"][0]["device"] = 1;
              d["stages"][1]["device"] = 0;
            }),
            "p.json: stages[0].device: expected 0, got 1: PipeScope runs model stage 0 on "
            "device 0 mod K=3, and a plan's stages cannot be moved to other devices");
}

TEST(PlanIoErrors, CountsAndBatchesMustAgree) {
  EXPECT_EQ(error_after([](json& d) { d["K"] = 4; }),
            "p.json: stages: expected K = 4 stages, got 3");
  EXPECT_EQ(error_after([](json& d) { d["D"] = 2; }),
            "p.json: cluster.devices: expected K x D x T x C = 6 devices, got 3");
  EXPECT_EQ(error_after([](json& d) { d["M"] = 3; }),
            "p.json: M: 3 does not divide the per-replica batch 8 (global_batch / D)");
  EXPECT_EQ(error_after([](json& d) { d["micro_batch_size"] = 4; }),
            "p.json: micro_batch_size: expected global_batch / (D x M) = 2, got 4");
  EXPECT_EQ(error_after([](json& d) {
              d["global_batch"] = 10;
              d["D"] = 3;
              d["cluster"]["devices"] = 9;
            }),
            "p.json: D: 3 replicas do not divide global_batch 10");
}

TEST(PlanIoErrors, MemorySplitMustAddUpToThePeak) {
  EXPECT_EQ(error_after([](json& d) { d["stages"][1]["activations_bytes"] = 550'000; }),
            "p.json: stages[1]: the memory split does not add up to peak_memory_bytes 900000: "
            "weights_bytes 100000 + gradients_bytes 100000 + optimizer_bytes 200000 + "
            "activations_bytes 550000");
  EXPECT_EQ(error_after([](json& d) { d["stages"][0]["peak_memory_bytes"] = 999'999; }),
            "p.json: stages[0]: the memory split does not add up to peak_memory_bytes 999999: "
            "weights_bytes 200000 + gradients_bytes 200000 + optimizer_bytes 400000 + "
            "activations_bytes 200000");
  // Parts near 2^63 must not wrap around to the peak.
  EXPECT_EQ(error_after([](json& d) {
              d["stages"][2]["weights_bytes"] = json::number_integer_t{1} << 62;
              d["stages"][2]["gradients_bytes"] = json::number_integer_t{1} << 62;
              d["stages"][2]["optimizer_bytes"] = json::number_integer_t{1} << 62;
              d["stages"][2]["activations_bytes"] = (json::number_integer_t{1} << 62) + 1'100'000;
            }),
            "p.json: stages[2]: the memory split does not add up to peak_memory_bytes 1100000: "
            "weights_bytes 4611686018427387904 + gradients_bytes 4611686018427387904 + "
            "optimizer_bytes 4611686018427387904 + activations_bytes 4611686018428487904");
}

TEST(PlanIoErrors, MemorySplitPartsAreNonNegativeAndComplete) {
  EXPECT_EQ(error_after([](json& d) {
              d["stages"][0]["weights_bytes"] = -200'000;
              d["stages"][0]["activations_bytes"] = 600'000;
            }),
            "p.json: stages[0].weights_bytes: expected a non-negative integer, got -200000");
  EXPECT_EQ(error_after([](json& d) { d["stages"][2]["optimizer_bytes"] = 3.5; }),
            "p.json: stages[2].optimizer_bytes: expected a non-negative integer, got 3.5");
  EXPECT_EQ(error_after([](json& d) { d["stages"][1].erase("gradients_bytes"); }),
            "p.json: stages[1].gradients_bytes: missing required key");
  // Known for some devices and not others: a hand edit, not an older plan.
  EXPECT_EQ(error_after([](json& d) {
              for (const char* key :
                   {"weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes"}) {
                d["stages"][2].erase(key);
              }
            }),
            "p.json: stages[2]: lacks the memory split (weights_bytes, gradients_bytes, "
            "optimizer_bytes, activations_bytes) that stages[0] has: a plan gives it for every "
            "stage or for none");
  EXPECT_EQ(error_after([](json& d) {
              for (const char* key :
                   {"weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes"}) {
                d["stages"][0].erase(key);
              }
            }),
            "p.json: stages[1]: has the memory split (weights_bytes, gradients_bytes, "
            "optimizer_bytes, activations_bytes) that stages[0] lacks: a plan gives it for every "
            "stage or for none");
}

}  // namespace
}  // namespace pipescope
