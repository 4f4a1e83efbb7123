// Scenario keys for model structure: layer graphs (inputs), the amoebanet and
// resnet families, and the transformer's tied embeddings, key/value heads and
// mixture of experts.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "costmodels/model_families.h"
#include "scenario_docs.h"
#include "sim/scenario/model_json.h"
#include "sim/scenario/scenario_io.h"

namespace pipescope {
namespace {

using nlohmann::json;
using namespace testing::docs;

// --- Layer graphs (inputs), amoebanet, transformer options ---

std::vector<std::string> layer_names(const Scenario& s) {
  std::vector<std::string> names;
  for (const LayerSpec& l : s.model.layers) names.push_back(l.name);
  return names;
}

TEST(ScenarioLayerGraph, InputsMakeCutsCarrySeveralTensors) {
  json doc = layer_list_doc();
  doc["model"]["input_bytes"] = 100;
  doc["model"]["layers"][1]["out_bytes"] = 8;
  doc["model"]["layers"][2]["inputs"] = {"a", "b"};  // a skips over b
  const Scenario s = parse_scenario(doc, "g.json");
  EXPECT_EQ(s.model.layers[2].inputs, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(s.model.layers[1].inputs.empty());
  EXPECT_EQ(s.model.cut_bytes, (std::vector<Bytes>{100, 4, 12, 4}));
  EXPECT_EQ(s.model.input_bytes_of(2), 12);
}

TEST(ScenarioLayerGraph, LaterLayersAreMovedUp) {
  json doc = layer_list_doc();
  doc["model"]["layers"][1]["inputs"] = {"c"};
  doc["model"]["layers"][2]["inputs"] = {"a", "input"};
  const Scenario s = parse_scenario(doc, "g.json");
  EXPECT_EQ(layer_names(s), (std::vector<std::string>{"a", "c", "b"}));
  EXPECT_EQ(s.model.layers[0].inputs, std::vector<std::string>{"input"});
}

TEST(ScenarioLayerGraph, UnknownLayer) {
  json doc = layer_list_doc();
  doc["model"]["layers"][2]["inputs"] = {"a", "x"};
  const ScenarioError e = error_of(doc);
  EXPECT_STREQ(e.what(), "bad.json: model.layers[2].inputs[1]: unknown layer 'x'");
  EXPECT_EQ(e.json_path(), "model.layers[2].inputs[1]");
}

TEST(ScenarioLayerGraph, Cycle) {
  json doc = layer_list_doc();
  doc["model"]["layers"][1]["inputs"] = {"c"};
  doc["model"]["layers"][2]["inputs"] = {"b"};
  const ScenarioError e = error_of(doc);
  EXPECT_STREQ(e.what(), "bad.json: model.layers[1].inputs[0]: layers form a cycle: b -> c -> b");
  EXPECT_EQ(e.json_path(), "model.layers[1].inputs[0]");
}

TEST(ScenarioLayerGraph, WrongTypes) {
  json doc = layer_list_doc();
  doc["model"]["layers"][1]["inputs"] = "a";
  EXPECT_STREQ(error_of(doc).what(),
               "bad.json: model.layers[1].inputs: expected an array, got string");
  doc["model"]["layers"][1]["inputs"] = {1};
  EXPECT_STREQ(error_of(doc).what(),
               "bad.json: model.layers[1].inputs[0]: expected a string, got number");
  doc["model"]["layers"][1]["inputs"] = json::array();
  EXPECT_STREQ(error_of(doc).what(),
               "bad.json: model.layers[1].inputs: expected at least one layer name (leave "
               "'inputs' out for the previous layer)");
}

TEST(ScenarioAmoebaNet, FamilyWithDefaults) {
  json doc = good_doc();
  doc["model"] = {{"family", "amoebanet"}, {"cells", 6}, {"filters", 64}};
  const Scenario s = parse_scenario(doc, "a.json");
  EXPECT_EQ(s.model.family, "amoebanet");
  EXPECT_EQ(s.model.name, "amoebanet");
  AmoebaNetParams p;
  p.cells = 6;
  p.filters = 64;
  const ModelSpec expected = make_amoebanet(p);  // image_size 224, 1000 classes, fp32
  EXPECT_EQ(s.model.total_params(), expected.total_params());
  EXPECT_EQ(s.model.cut_bytes, expected.cut_bytes);
  EXPECT_EQ(s.model.layers.size(), 3u + 6u + 2u + 1u);
}

TEST(ScenarioAmoebaNet, Errors) {
  json doc = good_doc();
  doc["model"] = {{"family", "amoebanet"}, {"cells", 6}, {"filters", 4}};
  EXPECT_STREQ(error_of(doc).what(),
               "bad.json: model.filters: expected at least 8 (the stem has filters / 4 channels "
               "and its first reduction cell's bottlenecks filters / 8), got 4");
  doc["model"] = {{"family", "amoebanet"}, {"cells", 6}, {"filters", 64}, {"d_model", 3}};
  EXPECT_STREQ(error_of(doc).what(),
               "bad.json: model.d_model: unknown key 'd_model' (expected one of: family, name, "
               "cells, filters, image_size, classes, dtype)");
}

TEST(ScenarioResNet, FamilyWithDefaults) {
  json doc = good_doc();
  doc["model"] = {{"family", "resnet"}, {"depth", 50}};
  const Scenario s = parse_scenario(doc, "r.json");
  EXPECT_EQ(s.model.family, "resnet");
  EXPECT_EQ(s.model.name, "resnet");
  EXPECT_EQ(s.model.total_params(), 25'557'032);  // 224 x 224 images, 1000 classes
  EXPECT_EQ(s.model.layers.size(), 4u + 16u * 11u + 3u);
}

TEST(ScenarioResNet, Errors) {
  json doc = good_doc();
  doc["model"] = {{"family", "resnet"}, {"depth", 34}};
  EXPECT_STREQ(error_of(doc).what(), "bad.json: model.depth: expected 50, 101 or 152, got 34");
  doc["model"] = {{"family", "resnet"}, {"depth", 101}, {"image_size", 16}};
  EXPECT_STREQ(error_of(doc).what(),
               "bad.json: model.image_size: expected at least 32 (five halvings leave a 1 x 1 "
               "map), got 16");
  doc["model"] = {{"family", "resnet"}, {"depth", 101}, {"cells", 3}};
  EXPECT_STREQ(error_of(doc).what(),
               "bad.json: model.cells: unknown key 'cells' (expected one of: family, name, depth, "
               "image_size, classes, dtype)");
}

TEST(ScenarioTransformer, TiedEmbeddingsAndKeyValueHeads) {
  json doc = good_doc();
  doc["model"]["tied_embeddings"] = true;
  doc["model"]["kv_heads"] = 2;
  const Scenario s = parse_scenario(doc, "t.json");
  EXPECT_EQ(s.model.layers.back().params, 2 * 64);  // the final LayerNorm alone
  TransformerParams p;
  p.layers = 4;
  p.d_model = 64;
  p.heads = 4;
  p.seq_len = 32;
  p.vocab = 100;
  p.tied_embeddings = true;
  p.kv_heads = 2;
  EXPECT_EQ(s.model.total_params(), make_transformer(p).total_params());
  doc["model"]["kv_heads"] = 3;
  const ScenarioError e = error_of(doc);
  EXPECT_STREQ(e.what(), "bad.json: model.kv_heads: 3 key/value heads do not divide heads 4");
}

TEST(ScenarioTransformer, HeadsOfTheirOwnWidth) {
  json doc = good_doc();
  doc["model"]["heads"] = 6;  // 64 / 6 is no width: head_dim gives it
  doc["model"]["kv_heads"] = 2;
  doc["model"]["head_dim"] = 32;
  const Scenario s = parse_scenario(doc, "t.json");
  ASSERT_TRUE(s.model.transformer);
  EXPECT_EQ(s.model.transformer->head_dim, 32);
  TransformerParams p = *s.model.transformer;
  p.heads = 3;  // the same widths: Q 3 x 64 = 6 x 32, K and V 1 x 64 = 2 x 32
  p.kv_heads = 1;
  p.head_dim = 64;
  EXPECT_EQ(s.model.total_params(), make_transformer(p).total_params());
  json again = good_doc();
  again["model"] = transformer_model_json(*s.model.transformer, s.model.name);
  EXPECT_EQ(again["model"]["head_dim"], 32);
  EXPECT_EQ(parse_scenario(again, "t.json").model.total_params(), s.model.total_params());

  doc["model"]["head_dim"] = 0;
  EXPECT_STREQ(error_of(doc).what(),
               "bad.json: model.head_dim: expected a positive integer, got 0");
  doc["model"].erase("head_dim");
  EXPECT_STREQ(error_of(doc).what(), "bad.json: model.heads: 6 heads do not divide d_model 64");
  doc["model"]["heads"] = 4;
  doc["model"]["head_dim"] = 16;
  doc["model"]["latent_attention"] = {{"q_lora_rank", 48},
                                      {"kv_lora_rank", 32},
                                      {"qk_nope_head_dim", 16},
                                      {"qk_rope_head_dim", 8},
                                      {"v_head_dim", 16}};
  EXPECT_STREQ(error_of(doc).what(),
               "bad.json: model.head_dim: latent attention sets its own head widths "
               "(latent_attention's qk_nope_head_dim, qk_rope_head_dim and v_head_dim): leave "
               "head_dim out");
}

TEST(ScenarioTransformer, SlidingWindow) {
  json doc = good_doc();
  doc["model"]["sliding_window"] = 8;
  doc["model"]["sliding_pattern"] = {true, false};
  const Scenario s = parse_scenario(doc, "t.json");
  ASSERT_TRUE(s.model.transformer);
  EXPECT_EQ(s.model.transformer->sliding_window, 8);
  EXPECT_EQ(s.model.transformer->sliding_pattern, (std::vector<bool>{true, false}));
  // Blocks 0 and 2 slide (less attention), 1 and 3 do not.
  EXPECT_LT(s.model.layers[1].fwd_flops, s.model.layers[2].fwd_flops);
  EXPECT_EQ(s.model.layers[1].fwd_flops, s.model.layers[3].fwd_flops);
  json again = good_doc();
  again["model"] = transformer_model_json(*s.model.transformer, s.model.name);
  EXPECT_EQ(again["model"]["sliding_pattern"], json({true, false}));
  const Scenario back = parse_scenario(again, "t.json");
  for (std::size_t i = 0; i < s.model.layers.size(); ++i) {
    EXPECT_EQ(back.model.layers[i].fwd_flops, s.model.layers[i].fwd_flops) << i;
  }

  doc["model"]["sliding_pattern"] = {true, 1};
  EXPECT_STREQ(error_of(doc).what(),
               "bad.json: model.sliding_pattern: entry 2 is 1; expected true (the block "
               "slides) or false");
  doc["model"].erase("sliding_window");
  EXPECT_STREQ(error_of(doc).what(),
               "bad.json: model.sliding_pattern: says which blocks slide: give "
               "model.sliding_window too");
}

TEST(ScenarioTransformer, MixtureOfExperts) {
  json doc = good_doc();
  doc["model"]["experts"] = 8;
  doc["model"]["experts_per_token"] = 2;
  doc["model"]["expert_d_ff"] = 128;
  doc["model"]["shared_d_ff"] = 64;
  doc["model"]["dense_layers"] = 1;
  const Scenario s = parse_scenario(doc, "t.json");
  ASSERT_TRUE(s.model.transformer);
  const MoeParams& moe = s.model.transformer->moe;
  EXPECT_EQ(moe.experts, 8);
  EXPECT_EQ(moe.experts_per_token, 2);
  EXPECT_EQ(moe.expert_d_ff, 128);
  EXPECT_EQ(moe.shared_d_ff, 64);
  EXPECT_EQ(moe.dense_layers, 1);
  // Written back (a plan's model) and read again: the same model.
  json again = good_doc();
  again["model"] = transformer_model_json(*s.model.transformer, s.model.name);
  EXPECT_EQ(parse_scenario(again, "t.json").model.total_params(), s.model.total_params());
  EXPECT_EQ(again["model"]["dense_layers"], 1);
  // Defaults: each expert as wide as d_ff, no shared MLP, no dense blocks.
  doc["model"].erase("expert_d_ff");
  doc["model"].erase("shared_d_ff");
  doc["model"].erase("dense_layers");
  const MoeParams plain = parse_scenario(doc, "t.json").model.transformer->moe;
  EXPECT_EQ(plain.expert_d_ff, 4 * 64);
  EXPECT_EQ(plain.shared_d_ff, 0);
  EXPECT_EQ(plain.dense_layers, 0);
}

TEST(ScenarioTransformer, LatentAttention) {
  json doc = good_doc();
  doc["model"]["latent_attention"] = {{"q_lora_rank", 48},
                                      {"kv_lora_rank", 32},
                                      {"qk_nope_head_dim", 16},
                                      {"qk_rope_head_dim", 8},
                                      {"v_head_dim", 16}};
  const Scenario s = parse_scenario(doc, "t.json");
  ASSERT_TRUE(s.model.transformer);
  const LatentAttention& mla = s.model.transformer->mla;
  EXPECT_EQ(mla.q_lora_rank, 48);
  EXPECT_EQ(mla.kv_lora_rank, 32);
  EXPECT_EQ(mla.qk_head_dim(), 24);
  EXPECT_EQ(mla.v_head_dim, 16);
  json again = good_doc();
  again["model"] = transformer_model_json(*s.model.transformer, s.model.name);
  EXPECT_EQ(parse_scenario(again, "t.json").model.total_params(), s.model.total_params());

  doc["model"]["latent_attention"]["v_head_dim"] = 0;
  EXPECT_STREQ(error_of(doc).what(),
               "bad.json: model.latent_attention.v_head_dim: expected a positive integer, got 0");
  doc["model"]["latent_attention"]["v_head_dim"] = 16;
  doc["model"]["latent_attention"]["rank"] = 16;
  EXPECT_NE(std::string(error_of(doc).what())
                .find("bad.json: model.latent_attention.rank: unknown key 'rank'"),
            std::string::npos)
      << error_of(doc).what();
}

TEST(ScenarioTransformer, MixtureOfExpertsErrors) {
  json doc = good_doc();
  doc["model"]["experts_per_token"] = 2;
  EXPECT_STREQ(error_of(doc).what(),
               "bad.json: model.experts_per_token: shapes a mixture of experts: give "
               "model.experts too");
  doc["model"]["experts"] = 8;
  doc["model"]["experts_per_token"] = 9;
  EXPECT_STREQ(error_of(doc).what(),
               "bad.json: model.experts_per_token: expected a positive integer no larger than 8, "
               "got 9");
  doc["model"].erase("experts_per_token");
  EXPECT_STREQ(error_of(doc).what(), "bad.json: model.experts_per_token: missing required key");
  doc["model"]["experts_per_token"] = 2;
  doc["model"]["dense_layers"] = 5;
  EXPECT_STREQ(error_of(doc).what(),
               "bad.json: model.dense_layers: expected a non-negative integer no larger than 4, "
               "got 5");
  doc["model"]["dense_layers"] = 0;
  doc["model"]["experts"] = 0;
  EXPECT_STREQ(error_of(doc).what(), "bad.json: model.experts: expected a positive integer, got 0");
}

}  // namespace
}  // namespace pipescope
