// Bad scenarios, one test per kind of mistake: each names its file, the
// JSON path of the field and what it expects.

#include "sim/scenario/scenario_io.h"

#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "costmodels/device.h"
#include "scenario_docs.h"

namespace pipescope {
namespace {

using nlohmann::json;
using namespace testing::docs;

TEST(ScenarioErrors, MalformedJson) {
  const std::string file = kScenarios + "malformed.json";
  const ScenarioError e = error_of_file(file);
  EXPECT_EQ(std::string(e.what()),
            file +
                ": malformed JSON at line 4, column 17: syntax error while parsing object key"
                " - unexpected ','; expected string literal");
  EXPECT_EQ(e.file(), file);
  EXPECT_EQ(e.json_path(), "");
}

TEST(ScenarioErrors, MalformedJsonAtEnd) {
  const ScenarioError e = error_of_text("{\n  \"model\": {}\n");
  EXPECT_STREQ(e.what(),
               "bad.json: malformed JSON at line 3, column 1: syntax error while parsing object -"
               " unexpected end of input; expected '}'");
}

TEST(ScenarioErrors, HugeNumberDoesNotParse) {
  const ScenarioError e = error_of_text("{\"training\": {\"global_batch\": 1e400}}");
  EXPECT_STREQ(e.what(),
               "bad.json: malformed JSON at line 1, column 35: number overflow parsing '1e400'");
  EXPECT_EQ(e.json_path(), "");
}

TEST(ScenarioErrors, DuplicateKeyNamesItsPath) {
  // JSON parsers keep one of two equal keys; a hand-edited file that says a key
  // twice is refused, naming where.
  ScenarioError e = error_of_text(R"({"model": {"layers": 4, "d_model": 64, "layers": 8}})");
  EXPECT_STREQ(e.what(), "bad.json: model.layers: the key appears twice in its object");
  EXPECT_EQ(e.json_path(), "model.layers");
  e = error_of_text(R"({"model": {"family": "layers", "layers": [{"name": "a"}, )"
                    R"({"name": "b", "params": 1, "params": 2}]}})");
  EXPECT_STREQ(e.what(), "bad.json: model.layers[1].params: the key appears twice in its object");
}

// Nesting is refused at the limit, before a tree is built, with the path of
// its outermost levels; the limit itself is accepted as far as nesting goes.
TEST(ScenarioErrors, NestingDeeperThanTheLimit) {
  const auto nested = [](std::size_t depth) {
    return "{\"model\": " + std::string(depth - 1, '[') + std::string(depth - 1, ']') + "}";
  };
  ScenarioError e = error_of_text(nested(65));
  EXPECT_STREQ(e.what(),
               "bad.json: model[0][0][0]...: objects and arrays nest deeper than 64 levels, the "
               "limit for JSON inputs");
  e = error_of_text(nested(64));
  EXPECT_STREQ(e.what(), "bad.json: model: expected an object, got array");
  // Unclosed: refused at the limit, not at the end of the text.
  e = error_of_text("{\"a\": " + std::string(1000000, '['));
  EXPECT_EQ(e.json_path(), "a[0][0][0]...");
}

TEST(ScenarioErrors, MissingFile) {
  const std::string file = kScenarios + "no-such-file.json";
  const ScenarioError e = error_of_file(file);
  EXPECT_EQ(std::string(e.what()), file + ": cannot open file");
  EXPECT_EQ(e.json_path(), "");
}

TEST(ScenarioErrors, TopLevelNotAnObject) {
  const ScenarioError e = error_of(json::array());
  EXPECT_STREQ(e.what(), "bad.json: expected an object, got array");
}

TEST(ScenarioErrors, UnknownTopLevelKey) {
  json doc = good_doc();
  doc["modle"] = 1;
  const ScenarioError e = error_of(doc);
  EXPECT_STREQ(e.what(),
               "bad.json: modle: unknown key 'modle' (expected one of: name, notes, model, "
               "cluster, training)");
  EXPECT_EQ(e.json_path(), "modle");
}

TEST(ScenarioErrors, UnknownNestedKey) {
  json doc = good_doc();
  doc["model"]["d_fff"] = 1024;
  const ScenarioError e = error_of(doc);
  EXPECT_STREQ(
      e.what(),
      "bad.json: model.d_fff: unknown key 'd_fff' (expected one of: family, name, "
      "layers, d_model, d_ff, heads, seq_len, vocab, dtype, positions, "
      "tied_embeddings, kv_heads, head_dim, sliding_window, sliding_pattern, dropout, attention, "
      "norm, fp8, fp8_stash, cross_entropy, "
      "experts, experts_per_token, expert_d_ff, shared_d_ff, dense_layers, expert_imbalance, "
      "latent_attention)");
  EXPECT_EQ(e.json_path(), "model.d_fff");
}

TEST(ScenarioErrors, UnknownKeyInLayer) {
  json doc = layer_list_doc();
  doc["model"]["layers"][1]["flops"] = 3;
  EXPECT_EQ(error_of(doc).json_path(), "model.layers[1].flops");
}

TEST(ScenarioErrors, WrongType) {
  json doc = good_doc();
  doc["model"]["family"] = 3;
  const ScenarioError e = error_of(doc);
  EXPECT_STREQ(e.what(), "bad.json: model.family: expected a string, got number");
  EXPECT_EQ(e.json_path(), "model.family");
}

TEST(ScenarioErrors, WrongTypeForInteger) {
  json doc = good_doc();
  doc["model"]["layers"] = "24";
  const ScenarioError e = error_of(doc);
  EXPECT_STREQ(e.what(), "bad.json: model.layers: expected a positive integer, got string");
  EXPECT_EQ(e.json_path(), "model.layers");
}

TEST(ScenarioErrors, WrongTypeBool) {
  json doc = good_doc();
  doc["training"]["remat"] = 1;
  const ScenarioError e = error_of(doc);
  EXPECT_STREQ(e.what(),
               "bad.json: training.remat: expected true, false or one of: always, except-last, "
               "selective, never (or on, off), got number");
  doc["training"]["remat"] = "yes";
  EXPECT_STREQ(error_of(doc).what(),
               "bad.json: training.remat: unknown remat mode 'yes' (expected one of: always, "
               "except-last, selective, never (or on, off))");
}

TEST(ScenarioErrors, WrongTypeSection) {
  json doc = good_doc();
  doc["cluster"] = "a100-80g";
  const ScenarioError e = error_of(doc);
  EXPECT_STREQ(e.what(), "bad.json: cluster: expected an object, got string");
  EXPECT_EQ(e.json_path(), "cluster");
}

TEST(ScenarioErrors, NegativeSize) {
  json doc = good_doc();
  doc["training"]["global_batch"] = -3;
  const ScenarioError e = error_of(doc);
  EXPECT_STREQ(e.what(), "bad.json: training.global_batch: expected a positive integer, got -3");
  EXPECT_EQ(e.json_path(), "training.global_batch");
}

TEST(ScenarioErrors, NegativeLayerFlops) {
  json doc = layer_list_doc();
  doc["model"]["layers"][2]["fwd_flops"] = -1.5;
  const ScenarioError e = error_of(doc);
  EXPECT_STREQ(e.what(),
               "bad.json: model.layers[2].fwd_flops: expected a non-negative number, got -1.5");
  EXPECT_EQ(e.json_path(), "model.layers[2].fwd_flops");
}

TEST(ScenarioErrors, ZeroSize) {
  json doc = explicit_cluster_doc();
  doc["cluster"]["device"]["peak_flops"] = 0;
  const ScenarioError e = error_of(doc);
  EXPECT_STREQ(e.what(),
               "bad.json: cluster.device.peak_flops: expected a rate from 1 to 1e30 per second, "
               "got 0");
  EXPECT_EQ(e.json_path(), "cluster.device.peak_flops");
}

TEST(ScenarioErrors, NonIntegerWhereIntegerRequired) {
  json doc = good_doc();
  doc["model"]["d_model"] = 64.5;
  const ScenarioError e = error_of(doc);
  EXPECT_STREQ(e.what(), "bad.json: model.d_model: expected a positive integer, got 64.5");
  EXPECT_EQ(e.json_path(), "model.d_model");
}

TEST(ScenarioErrors, IntegerTooLarge) {
  json doc = good_doc();
  doc["cluster"]["devices"] = 3e9;
  const ScenarioError e = error_of(doc);
  EXPECT_STREQ(e.what(),
               "bad.json: cluster.devices: expected a positive integer no larger than 1048576, "
               "got 3000000000.0");
  EXPECT_EQ(e.json_path(), "cluster.devices");
}

TEST(ScenarioErrors, EfficiencyOutOfRange) {
  json doc = explicit_cluster_doc();
  doc["cluster"]["device"]["efficiency"] = 1.5;
  const ScenarioError e = error_of(doc);
  EXPECT_STREQ(e.what(),
               "bad.json: cluster.device.efficiency: expected an efficiency from 1e-6 to 1, got "
               "1.5");
}

// A denormal efficiency is positive, but no device runs at it: refused at its own
// field, not later as a step too long for the clock blamed on a layer's FLOPs.
TEST(ScenarioErrors, TinyEfficiencyIsBlamedOnItself) {
  for (const json& efficiency : {json(1e-320), json({{"max", 1e-320}, {"half_flops", 0}})}) {
    json doc = explicit_cluster_doc();
    doc["cluster"]["device"]["efficiency"] = efficiency;
    const ScenarioError e = error_of(doc);
    const std::string path =
        efficiency.is_object() ? "cluster.device.efficiency.max" : "cluster.device.efficiency";
    EXPECT_EQ(e.json_path(), path);
    EXPECT_NE(std::string(e.what()).find("expected an efficiency from 1e-6 to 1"),
              std::string::npos)
        << e.what();
  }
  json doc = explicit_cluster_doc();
  doc["cluster"]["device"]["efficiency"] = 1e-6;  // the bound itself is accepted
  EXPECT_NO_THROW(parse_scenario(doc, "bad.json"));
}

TEST(ScenarioErrors, EfficiencyObjectMissingKey) {
  json doc = explicit_cluster_doc();
  doc["cluster"]["device"]["efficiency"] = {{"max", 0.5}};
  EXPECT_EQ(error_of(doc).json_path(), "cluster.device.efficiency.half_flops");
}

TEST(ScenarioErrors, UnknownFamily) {
  json doc = good_doc();
  doc["model"]["family"] = "cnn";
  const ScenarioError e = error_of(doc);
  EXPECT_STREQ(e.what(),
               "bad.json: model.family: unknown family 'cnn' (expected one of: transformer, mlp, "
               "amoebanet, resnet, layers)");
  EXPECT_EQ(e.json_path(), "model.family");
}

TEST(ScenarioErrors, UnknownPreset) {
  json doc = good_doc();
  doc["cluster"]["preset"] = "a100";
  const ScenarioError e = error_of(doc);
  EXPECT_EQ(e.json_path(), "cluster.preset");
  std::string names;
  for (const DevicePreset& p : device_presets())
    names += (names.empty() ? "" : ", ") + p.device.name;
  EXPECT_EQ(std::string(e.what()),
            "bad.json: cluster.preset: unknown preset 'a100' (expected one of: " + names + ")");
  EXPECT_NE(names.find("a100-80g"), std::string::npos);
}

TEST(ScenarioErrors, UnknownDtype) {
  json doc = good_doc();
  doc["model"]["dtype"] = "fp8";
  const ScenarioError e = error_of(doc);
  EXPECT_STREQ(e.what(),
               "bad.json: model.dtype: unknown dtype 'fp8' (expected one of: fp32, bf16, fp16)");
  EXPECT_EQ(e.json_path(), "model.dtype");
}

TEST(ScenarioErrors, UnknownTopology) {
  json doc = explicit_cluster_doc();
  doc["cluster"]["interconnect"]["topology"] = "mesh";
  EXPECT_EQ(error_of(doc).json_path(), "cluster.interconnect.topology");
  // A torus whose rows do not divide the devices is named at the interconnect.
  doc["cluster"]["interconnect"]["topology"] = "torus";
  doc["cluster"]["interconnect"]["torus_width"] = 3;
  doc["cluster"]["devices"] = 4;
  const ScenarioError e = error_of(doc);
  EXPECT_EQ(e.json_path(), "cluster.interconnect");
  EXPECT_NE(std::string(e.what()).find("torus_width 3 does not divide the 4 devices"),
            std::string::npos)
      << e.what();
}

TEST(ScenarioErrors, UnknownOptimizer) {
  json doc = good_doc();
  doc["training"]["optimizer"] = "adagrad";
  const ScenarioError e = error_of(doc);
  EXPECT_STREQ(e.what(),
               "bad.json: training.optimizer: unknown optimizer 'adagrad' (expected one of: sgd, "
               "momentum, rmsprop, adam)");
  EXPECT_EQ(e.json_path(), "training.optimizer");
}

TEST(ScenarioErrors, UnknownSchedule) {
  json doc = good_doc();
  doc["training"]["schedule"] = "pipedream";
  EXPECT_EQ(error_of(doc).json_path(), "training.schedule");
}

TEST(ScenarioErrors, OptimizerAndBytesPerParam) {
  json doc = good_doc();
  doc["training"]["optimizer"] = "adam";
  doc["training"]["bytes_per_param"] = 16;
  const ScenarioError e = error_of(doc);
  EXPECT_STREQ(e.what(),
               "bad.json: training.bytes_per_param: 'bytes_per_param' cannot be given together "
               "with 'optimizer'");
  EXPECT_EQ(e.json_path(), "training.bytes_per_param");
}

TEST(ScenarioErrors, MicroBatchesDoNotDivideBatch) {
  json doc = good_doc();
  doc["training"]["micro_batches"] = 3;
  const ScenarioError e = error_of(doc);
  EXPECT_STREQ(e.what(), "bad.json: training.micro_batches: 3 does not divide global_batch 32");
  EXPECT_EQ(e.json_path(), "training.micro_batches");
}

TEST(ScenarioErrors, HeadsDoNotDivideDModel) {
  json doc = good_doc();
  doc["model"]["heads"] = 5;
  const ScenarioError e = error_of(doc);
  EXPECT_STREQ(e.what(), "bad.json: model.heads: 5 heads do not divide d_model 64");
  EXPECT_EQ(e.json_path(), "model.heads");
}

TEST(ScenarioErrors, EmptyLayerList) {
  json doc = layer_list_doc();
  doc["model"]["layers"] = json::array();
  const ScenarioError e = error_of(doc);
  EXPECT_STREQ(e.what(), "bad.json: model.layers: expected at least one layer, got an empty array");
  EXPECT_EQ(e.json_path(), "model.layers");
}

TEST(ScenarioErrors, DuplicateLayerName) {
  json doc = layer_list_doc();
  doc["model"]["layers"][2]["name"] = "a";
  const ScenarioError e = error_of(doc);
  EXPECT_STREQ(e.what(),
               "bad.json: model.layers[2].name: duplicate layer name 'a' (also used by "
               "model.layers[0])");
  EXPECT_EQ(e.json_path(), "model.layers[2].name");
}

TEST(ScenarioErrors, MissingRequiredKey) {
  json doc = good_doc();
  doc["training"].erase("global_batch");
  const ScenarioError e = error_of(doc);
  EXPECT_STREQ(e.what(), "bad.json: training.global_batch: missing required key");
  EXPECT_EQ(e.json_path(), "training.global_batch");
}

TEST(ScenarioErrors, MissingLayerKey) {
  json doc = layer_list_doc();
  doc["model"]["layers"][0].erase("stash_bytes");
  EXPECT_EQ(error_of(doc).json_path(), "model.layers[0].stash_bytes");
}

TEST(ScenarioErrors, PresetAndDevice) {
  json doc = explicit_cluster_doc();
  doc["cluster"]["preset"] = "a100-80g";
  const ScenarioError e = error_of(doc);
  EXPECT_STREQ(e.what(),
               "bad.json: cluster.device: 'device' cannot be given together with 'preset'");
  EXPECT_EQ(e.json_path(), "cluster.device");
}

TEST(ScenarioErrors, NeitherPresetNorDevice) {
  json doc = good_doc();
  doc["cluster"].erase("preset");
  const ScenarioError e = error_of(doc);
  EXPECT_STREQ(e.what(),
               "bad.json: cluster: expected a 'preset', or a 'device' and an 'interconnect'");
  EXPECT_EQ(e.json_path(), "cluster");
}

}  // namespace
}  // namespace pipescope
