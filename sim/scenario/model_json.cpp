#include "sim/scenario/model_json.h"

#include <nlohmann/json.hpp>

namespace pipescope {

nlohmann::json transformer_model_json(const TransformerParams& p, const std::string& name) {
  nlohmann::json m = {{"family", "transformer"},
                      {"name", name},
                      {"layers", p.layers},
                      {"d_model", p.d_model},
                      {"heads", p.heads},
                      {"seq_len", p.seq_len},
                      {"vocab", p.vocab},
                      {"dtype", std::string(to_string(p.dtype))},
                      {"positions", p.learned_positions ? "learned" : "sinusoidal"},
                      {"tied_embeddings", p.tied_embeddings}};
  if (p.d_ff != 0) m["d_ff"] = p.d_ff;
  if (p.kv_heads != 0) m["kv_heads"] = p.kv_heads;
  if (p.head_dim != 0) m["head_dim"] = p.head_dim;
  if (p.sliding_window != 0) m["sliding_window"] = p.sliding_window;
  if (!p.sliding_pattern.empty()) m["sliding_pattern"] = p.sliding_pattern;
  if (!p.dropout) m["dropout"] = false;
  if (!p.fused_attention) m["attention"] = p.eager_attention ? "eager" : "unfused";
  if (!p.fused_norm) m["norm"] = "unfused";
  if (p.fp8) {
    m["fp8"] = true;
    m["fp8_stash"] = p.fp8_stash ? "fp8" : "dtype";
  }
  if (p.cross_entropy != CrossEntropy::kFp32) {
    m["cross_entropy"] = std::string(to_string(p.cross_entropy));
  }
  if (p.mla.enabled()) {
    m["latent_attention"] = {{"q_lora_rank", p.mla.q_lora_rank},
                             {"kv_lora_rank", p.mla.kv_lora_rank},
                             {"qk_nope_head_dim", p.mla.qk_nope_head_dim},
                             {"qk_rope_head_dim", p.mla.qk_rope_head_dim},
                             {"v_head_dim", p.mla.v_head_dim}};
  }
  if (p.moe.enabled()) {
    m["experts"] = p.moe.experts;
    m["experts_per_token"] = p.moe.experts_per_token;
    m["expert_d_ff"] = p.moe.expert_d_ff;
    if (p.moe.shared_d_ff > 0) m["shared_d_ff"] = p.moe.shared_d_ff;
    if (p.moe.dense_layers > 0) m["dense_layers"] = p.moe.dense_layers;
    if (p.moe.imbalance != 1.0) m["expert_imbalance"] = p.moe.imbalance;
  }
  return m;
}

nlohmann::json mlp_model_json(const MlpParams& p, const std::string& name) {
  nlohmann::json m = {{"family", "mlp"},
                      {"name", name},
                      {"layers", p.layers},
                      {"d_model", p.d_model},
                      {"dtype", std::string(to_string(p.dtype))}};
  if (p.d_hidden != 0) m["d_hidden"] = p.d_hidden;
  if (p.classes != 0) m["classes"] = p.classes;
  return m;
}

nlohmann::json model_spec_json(const ModelSpec& model) {
  if (model.transformer) return transformer_model_json(*model.transformer, model.name);
  if (model.mlp) return mlp_model_json(*model.mlp, model.name);
  return nullptr;
}

}  // namespace pipescope
