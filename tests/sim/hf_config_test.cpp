#include "sim/scenario/hf_config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "costmodels/model_families.h"
#include "sim/scenario/model_json.h"
#include "sim/scenario/scenario_io.h"

namespace pipescope {
namespace {

using nlohmann::json;

const std::string kHf = std::string(PIPESCOPE_TEST_DATA_DIR) + "/hf/";

// GPT-2 small and Llama-2-7B as published on the Hub (openai-community/gpt2,
// meta-llama/Llama-2-7b-hf), shipped in tests/data/hf.
TEST(HfConfig, Gpt2Small) {
  const TransformerParams p = read_hf_config(kHf + "gpt2/config.json");
  EXPECT_EQ(p.d_model, 768);
  EXPECT_EQ(p.layers, 12);
  EXPECT_EQ(p.heads, 12);
  EXPECT_EQ(p.kv_heads, 12);
  EXPECT_EQ(p.d_ff, 3072);  // n_inner absent: 4 * n_embd
  EXPECT_EQ(p.vocab, 50257);
  EXPECT_EQ(p.seq_len, 1024);  // n_positions
  EXPECT_EQ(p.dtype, DType::kFp32);
  EXPECT_TRUE(p.learned_positions);  // wpe
  EXPECT_TRUE(p.tied_embeddings);    // lm_head shares wte
  // 124,439,808: the parameter count of GPT2LMHeadModel, the tied head counted once.
  const std::int64_t params = make_transformer(p).total_params();
  EXPECT_EQ(params, 124'439'808);
  EXPECT_NEAR(static_cast<double>(params) / 124.4e6, 1.0, 0.01);
}

TEST(HfConfig, Llama2_7b) {
  const TransformerParams p = read_hf_config(kHf + "llama-2-7b/config.json");
  EXPECT_EQ(p.d_model, 4096);
  EXPECT_EQ(p.layers, 32);
  EXPECT_EQ(p.heads, 32);
  EXPECT_EQ(p.kv_heads, 32);
  EXPECT_EQ(p.d_ff, 16512);  // SwiGLU: 1.5 * 11008
  EXPECT_EQ(p.vocab, 32000);
  EXPECT_EQ(p.seq_len, 4096);
  EXPECT_EQ(p.dtype, DType::kFp16);
  EXPECT_FALSE(p.learned_positions);  // rotary
  EXPECT_FALSE(p.tied_embeddings);
  // 6,738,415,616 in LlamaForCausalLM; ours has 7h + f more per block in biases
  // and LayerNorm shifts, +0.02 % (the brief allowed 2 %).
  const ModelSpec m = make_transformer(p);
  EXPECT_NEAR(static_cast<double>(m.total_params()) / 6'738'415'616.0, 1.0, 0.001);
  // Gate, up and down projections: 6shi forward FLOPs, as the two-matrix form's 4shf.
  const double s = 4096, h = 4096, i = 11008;
  EXPECT_EQ(m.layers[1].fwd_flops, 8 * s * h * h + 6 * s * h * i + 4 * s * s * h);
}

TEST(HfConfig, SequenceLengthOverridesTheContext) {
  EXPECT_EQ(read_hf_config(kHf + "gpt2/config.json", 256).seq_len, 256);
}

// Mistral-7B-v0.1's sizes: grouped-query attention with 8 key/value heads.
TEST(HfConfig, GroupedQueryAttention) {
  const json doc = json::parse(R"({
    "model_type": "mistral", "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 32768,
    "sliding_window": 4096, "tie_word_embeddings": false, "torch_dtype": "bfloat16" })");
  const TransformerParams p = parse_hf_config(doc, "config.json", 4096);
  EXPECT_EQ(p.kv_heads, 8);
  EXPECT_EQ(p.d_ff, 21504);
  EXPECT_EQ(p.dtype, DType::kBf16);
  // 7,241,732,096 in MistralForCausalLM.
  EXPECT_NEAR(static_cast<double>(make_transformer(p).total_params()) / 7'241'732'096.0, 1.0,
              0.001);
}

TEST(HfConfig, UngatedIntermediateSizeAndNullInner) {
  // GPT-NeoX (Pythia) has an intermediate_size but a plain GeLU MLP.
  const json neox = json::parse(R"({ "model_type": "gpt_neox", "hidden_act": "gelu",
    "hidden_size": 512, "intermediate_size": 2048, "num_hidden_layers": 6,
    "num_attention_heads": 8, "vocab_size": 50304, "max_position_embeddings": 2048 })");
  EXPECT_EQ(parse_hf_config(neox, "config.json").d_ff, 2048);
  const json gpt2 = json::parse(R"({ "model_type": "gpt2", "n_embd": 64, "n_inner": null,
    "n_layer": 2, "n_head": 4, "vocab_size": 100, "n_ctx": 32 })");
  const TransformerParams p = parse_hf_config(gpt2, "config.json");
  EXPECT_EQ(p.d_ff, 256);
  EXPECT_EQ(p.seq_len, 32);
}

// The message parse_hf_config raises for `doc` (labelled "config.json").
std::string error_of(const json& doc, std::optional<std::int64_t> seq_len = std::nullopt) {
  try {
    parse_hf_config(doc, "config.json", seq_len);
  } catch (const ScenarioError& e) {
    return e.what();
  }
  throw std::logic_error("the config was accepted");
}

json llama() {
  return json::parse(R"({ "model_type": "llama", "hidden_act": "silu", "hidden_size": 64,
    "intermediate_size": 172, "num_hidden_layers": 2, "num_attention_heads": 4,
    "vocab_size": 100, "max_position_embeddings": 128 })");
}

TEST(HfConfigErrors, MissingKeysNameTheAlternatives) {
  json doc = llama();
  doc.erase("hidden_size");
  EXPECT_EQ(error_of(doc), "config.json: hidden_size: missing (also looked for n_embd)");
  doc = llama();
  doc["num_hidden_layers"] = nullptr;
  EXPECT_EQ(error_of(doc),
            "config.json: num_hidden_layers: missing (also looked for n_layer, num_layers)");
  doc = llama();
  doc.erase("vocab_size");
  EXPECT_EQ(error_of(doc), "config.json: vocab_size: missing");
  doc = llama();
  doc.erase("max_position_embeddings");
  EXPECT_EQ(error_of(doc),
            "config.json: max_position_embeddings: missing (also looked for n_positions, "
            "n_ctx); give a sequence length");
  EXPECT_EQ(parse_hf_config(doc, "config.json", 64).seq_len, 64);
}

TEST(HfConfigErrors, BadValuesNameTheKeyFound) {
  json doc = llama();
  doc["hidden_size"] = "64";
  EXPECT_EQ(error_of(doc), "config.json: hidden_size: expected a positive integer, got string");
  doc = json::parse(R"({ "n_embd": 768, "n_layer": 2, "n_head": 7, "vocab_size": 10,
    "n_positions": 8 })");
  EXPECT_EQ(error_of(doc), "config.json: n_head: 7 heads do not divide n_embd 768");
  doc = llama();
  doc["num_key_value_heads"] = 3;
  EXPECT_EQ(error_of(doc),
            "config.json: num_key_value_heads: 3 key/value heads do not divide 4 attention heads");
  doc = llama();
  doc["torch_dtype"] = "float64";
  EXPECT_EQ(error_of(doc),
            "config.json: torch_dtype: unknown dtype 'float64' (expected one of: float32, "
            "bfloat16, float16)");
  doc = llama();
  doc["tie_word_embeddings"] = "yes";
  EXPECT_EQ(error_of(doc), "config.json: tie_word_embeddings: expected true or false, got string");
  EXPECT_EQ(error_of(llama(), 0),
            "config.json: the sequence length must be from 1 to 16777216, got 0");
  EXPECT_EQ(error_of(llama(), 1LL << 30),
            "config.json: the sequence length must be from 1 to 16777216, got 1073741824");
}

// Values the scenario's model derives from the config are checked against the
// scenario's limits here, and named at the config's key: the user never wrote
// the scenario's d_ff, and a product too large for 64 bits comes from the config.
TEST(HfConfigErrors, DerivedValuesAreBlamedOnTheConfig) {
  json doc = llama();
  doc["intermediate_size"] = 1000000;
  EXPECT_EQ(error_of(doc),
            "config.json: intermediate_size: a gated MLP's three matrices count as two of width "
            "1.5 x intermediate_size = 1500000, more than the limit of 1048576");
  doc = json::parse(R"({ "n_embd": 1048576, "n_layer": 2, "n_head": 16, "vocab_size": 10,
    "n_positions": 8 })");
  EXPECT_EQ(error_of(doc),
            "config.json: n_embd: without intermediate_size the MLP is 4 x n_embd = 4194304 wide, "
            "more than the limit of 1048576");
  doc = json::parse(R"({ "n_embd": 65536, "n_layer": 2, "n_head": 65536, "vocab_size": 16777216,
    "n_positions": 16777216 })");
  const std::string e = error_of(doc);
  EXPECT_TRUE(e.starts_with("config.json: the bytes one block stashes per sample come to ")) << e;
  EXPECT_NE(e.find("too many for 64-bit sizes"), std::string::npos) << e;
}

// The error parse_scenario_with_hf_model raises for `scenario` ("s.json", its
// model from "config.json").
ScenarioError hf_scenario_error(const json& scenario, const std::vector<std::string>& overrides) {
  try {
    (void)parse_scenario_with_hf_model(scenario, "s.json", "config.json", overrides);
  } catch (const ScenarioError& e) {
    return e;
  }
  throw std::logic_error("the scenario was accepted");
}

// What only the whole scenario can check (the model's sizes with its batch and
// optimizer) names the config when the model came from it, unless a --set
// wrote the model's field.
TEST(HfConfigErrors, ScenarioChecksOfTheModelNameTheConfig) {
  json scenario = json::parse(R"({
    "model": {}, "cluster": {"preset": "cpu", "devices": 2},
    "training": {"global_batch": 16, "optimizer": "adam"} })");
  TransformerParams p;
  p.layers = 16384;
  p.d_model = 1 << 20;
  p.d_ff = 1 << 20;
  p.heads = 16;
  p.seq_len = 1;
  p.vocab = 1 << 24;
  scenario["model"] = transformer_model_json(p, "huge");
  ScenarioError e = hf_scenario_error(scenario, {});
  EXPECT_EQ(e.file(), "config.json");
  EXPECT_TRUE(std::string(e.what()).starts_with(
      "config.json: with the training and cluster of s.json: the parameters with their "
      "gradients and optimizer state ("))
      << e.what();
  e = hf_scenario_error(scenario, {"model.layers=16384"});
  EXPECT_EQ(e.file(), "s.json");
  EXPECT_EQ(e.json_path(), "model");
  scenario["training"]["global_batch"] = 0;  // not the model's: the scenario's
  e = hf_scenario_error(scenario, {});
  EXPECT_EQ(e.file(), "s.json");
  EXPECT_EQ(e.json_path(), "training.global_batch");
}

// Mixtral 8x7B and Qwen1.5-MoE-A2.7B as published on the Hub
// (mistralai/Mixtral-8x7B-v0.1, Qwen/Qwen1.5-MoE-A2.7B), in tests/data/hf.
TEST(HfConfig, Mixtral8x7b) {
  const TransformerParams p = read_hf_config(kHf + "mixtral-8x7b/config.json", 4096);
  EXPECT_EQ(p.d_model, 4096);
  EXPECT_EQ(p.kv_heads, 8);
  EXPECT_EQ(p.moe.experts, 8);
  EXPECT_EQ(p.moe.experts_per_token, 2);
  EXPECT_EQ(p.moe.expert_d_ff, 21504);  // SwiGLU: 1.5 * 14336
  EXPECT_EQ(p.moe.shared_d_ff, 0);
  EXPECT_EQ(p.moe.dense_layers, 0);
  // 46.7B (46,702,792,704 in MixtralForCausalLM); the family's biases +0.02 %.
  EXPECT_NEAR(static_cast<double>(make_transformer(p).total_params()) / 46.7e9, 1.0, 0.001);
}

TEST(HfConfig, Qwen15MoeA27b) {
  const TransformerParams p = read_hf_config(kHf + "qwen1.5-moe-a2.7b/config.json");
  EXPECT_EQ(p.seq_len, 8192);
  EXPECT_EQ(p.moe.experts, 60);
  EXPECT_EQ(p.moe.experts_per_token, 4);
  EXPECT_EQ(p.moe.expert_d_ff, 2112);  // 1.5 * moe_intermediate_size 1408
  EXPECT_EQ(p.moe.shared_d_ff, 8448);  // 1.5 * shared_expert_intermediate_size 5632
  // "14.3B" parameters in its model card (the shared expert's gate, 2048 a
  // block, is not in the family).
  EXPECT_NEAR(static_cast<double>(make_transformer(p).total_params()) / 14.3e9, 1.0, 0.005);
}

// Qwen3-235B-A22B as published on the Hub (Qwen/Qwen3-235B-A22B): 64 query
// heads of head_dim 128, twice hidden_size / heads, and 4 key/value heads.
// Its count by hand, without biases: a block's attention 2 x 4096 x 8192 +
// 2 x 4096 x 512, experts 128 x 3 x 4096 x 1536, router 4096 x 128, norms
// 2 x 4096 + 2 x 128; 94 blocks, two untied 151,936 x 4096 tables and the
// final norm: 235,094,634,560, the "235B" of its model card.
TEST(HfConfig, Qwen3MoeHeadsOfTheirOwnWidth) {
  const TransformerParams p = read_hf_config(kHf + "qwen3-235b-a22b/config.json", 4096);
  EXPECT_EQ(p.heads, 64);
  EXPECT_EQ(p.kv_heads, 4);
  EXPECT_EQ(p.head_dim, 128);
  EXPECT_EQ(p.moe.experts, 128);
  EXPECT_EQ(p.moe.expert_d_ff, 2304);  // SwiGLU: 1.5 * 1536
  EXPECT_NEAR(static_cast<double>(make_transformer(p).total_params()) / 235094634560.0, 1.0,
              0.0005);
  // Read as hidden_size / heads wide, the attention would lose 3.3B.
  TransformerParams narrow = p;
  narrow.head_dim = 0;
  EXPECT_NEAR(static_cast<double>(make_transformer(p).total_params() -
                                  make_transformer(narrow).total_params()),
              94.0 * (2 * 4096 * 4096 + 2 * 4096 * 256), 94.0 * 8192);
  // A head_dim equal to hidden_size / heads is the default; one that is not
  // needs no heads dividing hidden_size.
  json doc = llama();
  doc["head_dim"] = 16;  // 64 / 4
  EXPECT_EQ(parse_hf_config(doc, "c.json", 128).head_dim, 0);
  doc["num_attention_heads"] = 6;
  doc["num_key_value_heads"] = 2;
  doc["head_dim"] = 32;
  EXPECT_EQ(parse_hf_config(doc, "c.json", 128).head_dim, 32);
}

// GPT-OSS-120b's shape (openai/gpt-oss-120b): 36 blocks of 2,880, 64 heads
// of 64 and 8 key/value heads, 128 experts of 2,880, top 4, vocabulary
// 201,088, and its blocks alternating a 128-position sliding window and full
// attention (layer_types): 116.8B parameters, its card's 117B.
TEST(HfConfig, SlidingWindowFromLayerTypes) {
  json doc = {{"model_type", "gpt_oss"},      {"hidden_size", 2880},
              {"num_hidden_layers", 36},      {"num_attention_heads", 64},
              {"num_key_value_heads", 8},     {"head_dim", 64},
              {"intermediate_size", 2880},    {"hidden_act", "silu"},
              {"num_local_experts", 128},     {"num_experts_per_tok", 4},
              {"vocab_size", 201088},         {"max_position_embeddings", 131072},
              {"tie_word_embeddings", false}, {"sliding_window", 128}};
  json types = json::array();
  for (int i = 0; i < 36; ++i) types.push_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
  doc["layer_types"] = types;
  const TransformerParams p = parse_hf_config(doc, "config.json", 4096);
  EXPECT_EQ(p.sliding_window, 128);
  ASSERT_EQ(p.sliding_pattern.size(), 36u);
  EXPECT_TRUE(p.slides(0));
  EXPECT_FALSE(p.slides(1));
  EXPECT_TRUE(p.slides(34));
  EXPECT_NEAR(static_cast<double>(make_transformer(p).total_params()) / 116.8e9, 1.0, 0.005);

  doc["layer_types"][3] = "chunked_attention";
  EXPECT_THROW(parse_hf_config(doc, "config.json", 4096), ScenarioError);
  doc["layer_types"] = types;
  doc.erase("sliding_window");
  EXPECT_THROW(parse_hf_config(doc, "config.json", 4096), ScenarioError);
}

// Without layer_types: Qwen2's use_sliding_window false leaves it off (and
// true slides the blocks from max_window_layers on),
// Gemma 3's sliding_window_pattern makes every N-th block full, Gemma 2
// alternates from block 0, and Mistral v0.1 slides every block.
TEST(HfConfig, SlidingWindowWithoutLayerTypes) {
  json doc = llama();
  doc["sliding_window"] = 32;
  doc["use_sliding_window"] = false;
  EXPECT_EQ(parse_hf_config(doc, "c.json", 128).sliding_window, 0);
  doc.erase("use_sliding_window");
  TransformerParams every = parse_hf_config(doc, "c.json", 128);
  EXPECT_EQ(every.sliding_window, 32);
  EXPECT_TRUE(every.sliding_pattern.empty());
  EXPECT_TRUE(every.slides(1));
  doc["sliding_window_pattern"] = 3;
  EXPECT_EQ(parse_hf_config(doc, "c.json", 128).sliding_pattern,
            (std::vector<bool>{true, true, false}));
  doc.erase("sliding_window_pattern");
  doc["model_type"] = "gemma2";
  EXPECT_EQ(parse_hf_config(doc, "c.json", 128).sliding_pattern, (std::vector<bool>{true, false}));
  doc["sliding_window"] = nullptr;
  EXPECT_EQ(parse_hf_config(doc, "c.json", 128).sliding_window, 0);
  // Qwen2 with use_sliding_window: the blocks from max_window_layers on.
  doc["model_type"] = "qwen2";
  doc["sliding_window"] = 32;
  doc["use_sliding_window"] = true;
  doc["max_window_layers"] = 1;
  EXPECT_EQ(parse_hf_config(doc, "c.json", 128).sliding_pattern, (std::vector<bool>{false, true}));
  doc["max_window_layers"] = 2;  // all 2 blocks full
  EXPECT_EQ(parse_hf_config(doc, "c.json", 128).sliding_window, 0);
}

// DeepSeek-V3 as published on the Hub (deepseek-ai/DeepSeek-V3): latent
// attention, 256 routed experts and one shared, the first 3 blocks dense;
// 671B parameters in its report, the multi-token prediction module aside.
TEST(HfConfig, DeepSeekV3) {
  const TransformerParams p = read_hf_config(kHf + "deepseek-v3/config.json", 4096);
  EXPECT_EQ(p.layers, 61);
  EXPECT_EQ(p.heads, 128);
  EXPECT_EQ(p.d_ff, 27648);  // 1.5 * 18432, the dense blocks'
  EXPECT_EQ(p.moe.experts, 256);
  EXPECT_EQ(p.moe.experts_per_token, 8);
  EXPECT_EQ(p.moe.expert_d_ff, 3072);  // 1.5 * 2048
  EXPECT_EQ(p.moe.shared_d_ff, 3072);
  EXPECT_EQ(p.moe.dense_layers, 3);
  EXPECT_EQ(p.mla.q_lora_rank, 1536);
  EXPECT_EQ(p.mla.kv_lora_rank, 512);
  EXPECT_EQ(p.mla.qk_nope_head_dim, 128);
  EXPECT_EQ(p.mla.qk_rope_head_dim, 64);
  EXPECT_EQ(p.mla.v_head_dim, 128);
  EXPECT_NEAR(static_cast<double>(make_transformer(p).total_params()) / 671e9, 1.0, 0.001);
}

// DeepSeek's form: routed and shared experts of moe_intermediate_size and
// dense first blocks of intermediate_size.
TEST(HfConfig, SharedExpertsAndDenseFirstBlocks) {
  json doc = llama();
  doc["model_type"] = "deepseek_v3";
  doc["n_routed_experts"] = 16;
  doc["num_experts_per_tok"] = 4;
  doc["moe_intermediate_size"] = 32;
  doc["n_shared_experts"] = 2;
  doc["first_k_dense_replace"] = 1;
  const TransformerParams p = parse_hf_config(doc, "config.json");
  EXPECT_EQ(p.d_ff, 258);  // 1.5 * 172, the dense blocks'
  EXPECT_EQ(p.moe.experts, 16);
  EXPECT_EQ(p.moe.expert_d_ff, 48);
  EXPECT_EQ(p.moe.shared_d_ff, 96);  // 2 x 32, gated
  EXPECT_EQ(p.moe.dense_layers, 1);
}

TEST(HfConfigErrors, MixtureOfExperts) {
  json doc = llama();
  doc["num_local_experts"] = 8;
  EXPECT_EQ(error_of(doc), "config.json: num_experts_per_tok: missing");
  doc["num_experts_per_tok"] = 9;
  EXPECT_EQ(
      error_of(doc),
      "config.json: num_experts_per_tok: expected a positive integer no larger than 8, got 9");
  doc["num_experts_per_tok"] = 2;
  EXPECT_EQ(parse_hf_config(doc, "config.json").moe.expert_d_ff, 258);
  // Latent attention: its widths are required with kv_lora_rank; a null
  // q_lora_rank (DeepSeek-V2-Lite) projects the queries directly.
  doc["kv_lora_rank"] = 32;
  EXPECT_EQ(error_of(doc), "config.json: qk_nope_head_dim: missing");
  doc["qk_nope_head_dim"] = 16;
  doc["qk_rope_head_dim"] = 8;
  EXPECT_EQ(error_of(doc), "config.json: v_head_dim: missing");
  doc["v_head_dim"] = 16;
  doc["q_lora_rank"] = nullptr;
  EXPECT_EQ(parse_hf_config(doc, "config.json").mla.q_lora_rank, 0);
  EXPECT_EQ(parse_hf_config(doc, "config.json").mla.kv_lora_rank, 32);
  doc["qk_nope_head_dim"] = 0;
  doc["qk_rope_head_dim"] = 0;
  EXPECT_EQ(error_of(doc),
            "config.json: qk_nope_head_dim: the queries and keys need a width: qk_nope_head_dim "
            "and qk_rope_head_dim are both 0");
  for (const char* key :
       {"kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"}) {
    doc.erase(key);
  }
  doc["decoder_sparse_step"] = 2;
  EXPECT_EQ(error_of(doc),
            "config.json: decoder_sparse_step: experts in every n-th block only are not supported "
            "(every block from the first sparse one has them)");
  doc["decoder_sparse_step"] = 1;
  doc["mlp_only_layers"] = json::array({1});
  EXPECT_EQ(error_of(doc),
            "config.json: mlp_only_layers: dense blocks between sparse ones are not supported");
  doc["mlp_only_layers"] = json::array();
  doc["first_k_dense_replace"] = 3;
  EXPECT_EQ(error_of(doc),
            "config.json: first_k_dense_replace: expected a non-negative integer no larger than 2, "
            "got 3");
}

// A count written as a float that is a whole number (8.0, as some exporters write
// every number) means the same as the integer: 8.0 experts are 8 rather than
// a dense model, and 1.0 expert is a dense model.
TEST(HfConfigErrors, WholeFloatsReadAsIntegers) {
  for (const char* key : {"num_local_experts", "num_experts", "n_routed_experts"}) {
    json doc = llama();
    doc[key] = 8.0;
    doc["num_experts_per_tok"] = 2.0;
    EXPECT_EQ(parse_hf_config(doc, "config.json").moe.experts, 8) << key;
    doc.erase("num_experts_per_tok");
    doc[key] = 1.0;
    EXPECT_EQ(parse_hf_config(doc, "config.json").d_model, 64);
    doc[key] = 8.5;
    EXPECT_EQ(error_of(doc),
              std::string("config.json: ") + key + ": expected a non-negative integer, got 8.5");
    doc[key] = "8";
    EXPECT_EQ(error_of(doc),
              std::string("config.json: ") + key + ": expected a non-negative integer, got string");
  }
  json doc = llama();
  doc["hidden_size"] = 64.0;
  doc["num_attention_heads"] = 4.0;
  doc["num_key_value_heads"] = 2.0;
  const TransformerParams p = parse_hf_config(doc, "config.json");
  EXPECT_EQ(p.d_model, 64);
  EXPECT_EQ(p.heads, 4);
  EXPECT_EQ(p.kv_heads, 2);
}

// multi_query is read, not passed over when it is not a JSON boolean.
TEST(HfConfigErrors, MultiQueryMustBeABoolean) {
  json doc = llama();
  doc["multi_query"] = true;
  EXPECT_EQ(parse_hf_config(doc, "config.json").kv_heads, 1);
  doc["multi_query"] = "true";
  EXPECT_EQ(error_of(doc), "config.json: multi_query: expected true or false, got string");
}

TEST(HfConfigErrors, NotAnObjectAndMissingFile) {
  EXPECT_EQ(error_of(json::array({1})), "config.json: expected an object, got array");
  const std::string missing = kHf + "absent/config.json";
  try {
    read_hf_config(missing);
    FAIL() << "expected ScenarioError";
  } catch (const ScenarioError& e) {
    EXPECT_EQ(std::string(e.what()), missing + ": cannot open file");
  }
}

}  // namespace
}  // namespace pipescope
