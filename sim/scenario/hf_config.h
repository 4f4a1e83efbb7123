#pragma once
// Hugging Face `config.json` -> the transformer family's parameters, so that a
// published model can be simulated without retyping its sizes.
//
// Keys read (the first present, non-null one of each row; other keys are ignored,
// as HF configs carry many that do not matter here):
//   d_model   hidden_size, n_embd
//   layers    num_hidden_layers, n_layer, num_layers
//   heads     num_attention_heads, n_head
//   kv_heads  num_key_value_heads (absent or null: heads; "multi_query": true -> 1)
//   d_ff      intermediate_size, n_inner, ffn_dim (absent or null: 4 * d_model)
//   vocab     vocab_size
//   seq_len   the `seq_len` argument, else max_position_embeddings, n_positions,
//             n_ctx
//   dtype     torch_dtype or dtype: float32, bfloat16, float16 (absent: fp32)
//   tied      tie_word_embeddings (absent: true, transformers' PretrainedConfig
//             default; GPT-2 ties, Llama-2 does not)
//
// Gated MLPs (SwiGLU/GeGLU: Llama, Mistral, Qwen2, Gemma, ...; recognised by
// model_type, or by hidden_act "silu"/"swish" with an intermediate_size) have
// three h x i matrices (gate, up, down): 3hi weights and 6shi forward FLOPs. The
// family's two-matrix MLP has 2hf and 4shf, so they map to d_ff = 1.5 * i (rounded
// up for odd i), which matches both. The family's biases and LayerNorm shifts
// (which Llama's bias-free projections and RMSNorm lack) add 7h + f per block,
// under 0.03 % of Llama-2-7B; its stash counts the MLP as two matrices of width
// 1.5i rather than three of width i.
//
// Positions: learned tables (wpe) for model types gpt2, gpt_neo, gpt_bigcode, opt,
// bert, roberta, or position_embedding_type "absolute"; otherwise (rotary, ALiBi)
// no parameters, the family's "sinusoidal".
//
// Mixture of experts (costmodels/model_families.h, MoeParams), where one of
// num_local_experts (Mixtral), num_experts (Qwen-MoE, OLMoE) or n_routed_experts
// (DeepSeek) is above 1:
//   experts            that key
//   experts_per_token  num_experts_per_tok
//   expert_d_ff        moe_intermediate_size, else intermediate_size (gated as above)
//   shared_d_ff        shared_expert_intermediate_size, or n_shared_experts x
//                      moe_intermediate_size (absent: none)
//   dense_layers       first_k_dense_replace (absent: 0)
// Refused at their keys: experts in every n-th block only
// (decoder_sparse_step, moe_layer_freq other than 1) and dense blocks between
// sparse ones (mlp_only_layers).
//
// Multi-head latent attention (DeepSeek-V2/V3; LatentAttention), where
// kv_lora_rank is given: q_lora_rank (absent or null: 0), qk_nope_head_dim,
// qk_rope_head_dim, v_head_dim. DeepSeek-V3's multi-token prediction module
// (num_nextn_predict_layers) is not modelled: its 671B parameters are the
// main model's.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "costmodels/model_families.h"
#include "sim/scenario/scenario.h"

namespace pipescope {

// Reads `file`; seq_len, when given, overrides the config's context length.
// Errors are ScenarioErrors (sim/scenario/scenario_io.h) naming the file and the key:
// "config.json: hidden_size: missing (also looked for n_embd)".
TransformerParams read_hf_config(const std::filesystem::path& file,
                                 std::optional<std::int64_t> seq_len = std::nullopt);

// The same from a parsed document; `file` only labels errors.
TransformerParams parse_hf_config(const nlohmann::json& doc, const std::string& file,
                                  std::optional<std::int64_t> seq_len = std::nullopt);

// Validates a scenario document whose "model" was built from the config `hf_file`
// (transformer_model_json), with the --set `overrides` applied after it. What
// parse_hf_config cannot check alone (the model's sizes with the scenario's batch
// and optimizer) is found here; an error about the model names the config, where
// the user wrote its sizes, unless an override wrote the model's field.
Scenario parse_scenario_with_hf_model(const nlohmann::json& doc, const std::string& scenario_file,
                                      const std::string& hf_file,
                                      const std::vector<std::string>& overrides);

}  // namespace pipescope
