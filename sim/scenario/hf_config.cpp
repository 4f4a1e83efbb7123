#include "sim/scenario/hf_config.h"

#include <algorithm>
#include <array>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/base/input_file.h"
#include "sim/base/json_reader.h"
#include "sim/scenario/model_reader.h"
#include "sim/scenario/scenario_io.h"

namespace pipescope {

using nlohmann::json;
using namespace json_io;

namespace {

// Model types whose MLP is gated (SwiGLU or GeGLU: gate, up and down matrices).
constexpr std::array<std::string_view, 18> kGatedTypes = {
    "llama",   "mistral",   "qwen2",     "qwen3",  "gemma",       "gemma2",
    "olmo",    "olmo2",     "granite",   "cohere", "phi3",        "stablelm",
    "mixtral", "qwen2_moe", "qwen3_moe", "olmoe",  "deepseek_v2", "deepseek_v3"};
// Model types with a learned position table.
constexpr std::array<std::string_view, 6> kLearnedPositionTypes = {"gpt2", "gpt_neo", "gpt_bigcode",
                                                                   "opt",  "bert",    "roberta"};

template <std::size_t N>
bool contains(const std::array<std::string_view, N>& set, std::string_view value) {
  return std::find(set.begin(), set.end(), value) != set.end();
}

struct Found {
  std::string key;
  const json* value = nullptr;
};

// The first of `keys` present with a non-null value.
std::optional<Found> find_any(ObjectReader& r, std::initializer_list<const char*> keys) {
  for (const char* key : keys) {
    const json* v = r.find(key);
    if (v != nullptr && !v->is_null()) return Found{key, v};
  }
  return std::nullopt;
}

[[noreturn]] void fail_missing(ObjectReader& r, std::initializer_list<const char*> keys,
                               const std::string& advice = "") {
  std::vector<std::string> others(keys.begin() + 1, keys.end());
  std::string message = "missing";
  if (!others.empty()) message += " (also looked for " + join(others) + ")";
  r.fail(*keys.begin(), message + advice);
}

std::int64_t integer_of(ObjectReader& r, const Found& f, IntRange range) {
  return as_int(*f.value, r.where(f.key), range);
}

std::int64_t required(ObjectReader& r, std::initializer_list<const char*> keys,
                      IntRange range = kPositiveSmallInt) {
  const std::optional<Found> f = find_any(r, keys);
  if (!f) fail_missing(r, keys);
  return integer_of(r, *f, range);
}

std::optional<std::string> opt_string(ObjectReader& r, std::initializer_list<const char*> keys) {
  const std::optional<Found> f = find_any(r, keys);
  if (!f) return std::nullopt;
  return as_string(*f->value, r.where(f->key));
}

DType read_hf_dtype(ObjectReader& r) {
  const std::optional<Found> f = find_any(r, {"torch_dtype", "dtype"});
  if (!f) return DType::kFp32;
  const std::string name = as_string(*f->value, r.where(f->key));
  if (name == "float32") return DType::kFp32;
  if (name == "bfloat16") return DType::kBf16;
  if (name == "float16") return DType::kFp16;
  r.fail(f->key, "unknown dtype '" + name + "' (expected one of: float32, bfloat16, float16)");
}

// A width the config gives for a gated MLP's three matrices as the family's
// two of width 1.5 i (see the header).
std::int64_t mlp_width(std::int64_t inner, bool gated) {
  return gated ? (3 * inner + 1) / 2 : inner;
}

// Layouts of experts the family cannot express, refused at the key that asks
// for them.
void reject_unsupported_moe(ObjectReader& r) {
  for (const char* key : {"decoder_sparse_step", "moe_layer_freq"}) {
    const std::optional<Found> f = find_any(r, {key});
    if (f && integer_of(r, *f, kPositiveSmallInt) != 1) {
      r.fail(key,
             "experts in every n-th block only are not supported (every block from the "
             "first sparse one has them)");
    }
  }
  if (const json* only = r.find("mlp_only_layers");
      only != nullptr && !only->is_null() && !(only->is_array() && only->empty())) {
    r.fail("mlp_only_layers", "dense blocks between sparse ones are not supported");
  }
}

// DeepSeek's multi-head latent attention, where kv_lora_rank is given:
// q_lora_rank (absent or null: queries projected directly), qk_nope_head_dim,
// qk_rope_head_dim and v_head_dim.
LatentAttention read_hf_latent_attention(ObjectReader& r) {
  LatentAttention mla;
  const std::optional<Found> kv = find_any(r, {"kv_lora_rank"});
  if (!kv) return mla;
  mla.kv_lora_rank = integer_of(r, *kv, kModelWidth);
  if (const std::optional<Found> q = find_any(r, {"q_lora_rank"})) {
    mla.q_lora_rank = integer_of(r, *q, IntRange{0, kModelWidth.max});
  }
  mla.qk_nope_head_dim = required(r, {"qk_nope_head_dim"}, IntRange{0, kModelWidth.max});
  mla.qk_rope_head_dim = required(r, {"qk_rope_head_dim"}, IntRange{0, kModelWidth.max});
  mla.v_head_dim = required(r, {"v_head_dim"}, kModelWidth);
  if (mla.qk_head_dim() == 0) {
    r.fail("qk_nope_head_dim",
           "the queries and keys need a width: qk_nope_head_dim and qk_rope_head_dim are both 0");
  }
  return mla;
}

// The mixture of experts, when the config has one (more than one expert):
// Mixtral's num_local_experts with intermediate_size as each expert's width,
// Qwen-MoE's and OLMoE's num_experts, DeepSeek's n_routed_experts, with
// moe_intermediate_size where given; the shared MLP from Qwen-MoE's
// shared_expert_intermediate_size or DeepSeek's n_shared_experts x
// moe_intermediate_size; DeepSeek's first_k_dense_replace dense blocks.
MoeParams read_moe(ObjectReader& r, bool gated, int layers) {
  MoeParams moe;
  const std::optional<Found> n =
      find_any(r, {"num_local_experts", "num_experts", "n_routed_experts"});
  if (!n || integer_of(r, *n, kNonNegativeInt) <= 1) return moe;
  reject_unsupported_moe(r);
  moe.experts = static_cast<int>(integer_of(r, *n, kExpertCount));
  moe.experts_per_token = static_cast<int>(
      required(r, {"num_experts_per_tok"}, IntRange{1, static_cast<std::int64_t>(moe.experts)}));
  const std::initializer_list<const char*> width_keys = {"moe_intermediate_size",
                                                         "intermediate_size"};
  const std::optional<Found> width = find_any(r, width_keys);
  if (!width) fail_missing(r, width_keys);
  const std::int64_t inner = integer_of(r, *width, kModelWidth);
  moe.expert_d_ff = mlp_width(inner, gated);
  if (const std::optional<Found> shared = find_any(r, {"shared_expert_intermediate_size"})) {
    moe.shared_d_ff = mlp_width(integer_of(r, *shared, IntRange{0, kModelWidth.max}), gated);
  } else if (const std::optional<Found> count = find_any(r, {"n_shared_experts"})) {
    moe.shared_d_ff =
        mlp_width(integer_of(r, *count, IntRange{0, kExpertCount.max}) * inner, gated);
  }
  if (const std::optional<Found> dense = find_any(r, {"first_k_dense_replace"})) {
    moe.dense_layers =
        static_cast<int>(integer_of(r, *dense, IntRange{0, static_cast<std::int64_t>(layers)}));
  }
  for (const std::int64_t w : {moe.expert_d_ff, moe.shared_d_ff}) {
    if (w > kModelWidth.max) {
      r.fail(width->key, "a gated expert's three matrices count as two of width " +
                             std::to_string(w) + ", more than the limit of " +
                             std::to_string(kModelWidth.max));
    }
  }
  return moe;
}

// Sliding-window attention: sliding_window with the blocks that slide from
// layer_types ("sliding_attention" or "full_attention" a block: GPT-OSS,
// recent Gemma and Qwen; another kind is refused), else
// sliding_window_pattern (Gemma 3: every N-th block full), else Gemma 2's
// alternation (block 0 slides), else, unless use_sliding_window is false,
// the blocks from max_window_layers on (Qwen2) or every block; none where
// sliding_window is absent or null (Mistral from v0.2).
void read_hf_sliding_window(ObjectReader& r, const std::string& model_type, TransformerParams& p) {
  const std::optional<Found> window = find_any(r, {"sliding_window"});
  const std::optional<Found> types = find_any(r, {"layer_types"});
  if (types) {
    const json& list = *types->value;
    if (!list.is_array() || list.size() != static_cast<std::size_t>(p.layers)) {
      r.fail("layer_types", "expected one entry per block (" + std::to_string(p.layers) +
                                "), got " + json_io::describe(list));
    }
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string kind = list[i].is_string() ? list[i].get<std::string>() : "";
      if (kind != "sliding_attention" && kind != "full_attention") {
        r.fail("layer_types", "entry " + std::to_string(i + 1) + " is " +
                                  json_io::describe(list[i]) +
                                  "; expected \"sliding_attention\" or \"full_attention\"");
      }
      p.sliding_pattern.push_back(kind == "sliding_attention");
    }
    const bool any = std::find(p.sliding_pattern.begin(), p.sliding_pattern.end(), true) !=
                     p.sliding_pattern.end();
    if (!any) {
      p.sliding_pattern.clear();
      return;
    }
    if (!window) r.fail("sliding_window", "missing, but layer_types has sliding blocks");
  } else {
    if (!window) return;
    const std::optional<Found> use = find_any(r, {"use_sliding_window"});
    if (use && !as_bool(*use->value, r.where(use->key))) return;
    if (const std::optional<Found> every = find_any(r, {"sliding_window_pattern"})) {
      const std::int64_t n = integer_of(r, *every, kLayerCount);
      p.sliding_pattern.assign(static_cast<std::size_t>(n), true);
      p.sliding_pattern.back() = false;
    } else if (model_type == "gemma2") {
      p.sliding_pattern = {true, false};
    } else if (const std::optional<Found> full = find_any(r, {"max_window_layers"})) {
      const std::int64_t first = integer_of(r, *full, {0, kLayerCount.max});
      if (first >= p.layers) return;
      p.sliding_pattern.assign(static_cast<std::size_t>(p.layers), false);
      std::fill(p.sliding_pattern.begin() + first, p.sliding_pattern.end(), true);
    }
  }
  p.sliding_window = integer_of(r, *window, kModelLength);
}

// The model's sizes, which the scenario reader would otherwise find too large for
// 64 bits and blame on the scenario's "model", a field the user never wrote.

void check_sizes_fit(const TransformerParams& p, ObjectReader& r) {
  try {
    (void)make_transformer(p);
  } catch (const std::overflow_error& e) {
    r.fail_here(std::string(e.what()) +
                " (from hidden_size, the heads, the sequence length and "
                "vocab_size together)");
  }
}

}  // namespace

TransformerParams parse_hf_config(const json& doc, const std::string& file,
                                  std::optional<std::int64_t> seq_len) {
  ObjectReader r(doc, Where{file, ""});
  const std::string model_type = opt_string(r, {"model_type"}).value_or("");
  const std::string act = opt_string(r, {"hidden_act", "hidden_activation"}).value_or("");

  TransformerParams p;
  const std::optional<Found> hidden_key = find_any(r, {"hidden_size", "n_embd"});
  if (!hidden_key) fail_missing(r, {"hidden_size", "n_embd"});
  p.d_model = integer_of(r, *hidden_key, kModelWidth);
  p.layers =
      static_cast<int>(required(r, {"num_hidden_layers", "n_layer", "num_layers"}, kLayerCount));
  const std::optional<Found> heads_key = find_any(r, {"num_attention_heads", "n_head"});
  if (!heads_key) fail_missing(r, {"num_attention_heads", "n_head"});
  p.heads = integer_of(r, *heads_key, kModelWidth);
  p.mla = read_hf_latent_attention(r);
  // A head's width where the config gives one other than hidden_size / heads
  // (Qwen3, Gemma, GPT-OSS); latent attention's keys give its own widths.
  if (const std::optional<Found> hd = find_any(r, {"head_dim"}); hd && !p.mla.enabled()) {
    const std::int64_t width = integer_of(r, *hd, kModelWidth);
    if (p.d_model % p.heads != 0 || width != p.d_model / p.heads) p.head_dim = width;
  }
  if (p.head_dim == 0 && p.d_model % p.heads != 0) {
    r.fail(heads_key->key, std::to_string(p.heads) + " heads do not divide " + hidden_key->key +
                               " " + std::to_string(p.d_model));
  }

  p.kv_heads = p.heads;
  if (const std::optional<Found> kv = find_any(r, {"num_key_value_heads"})) {
    p.kv_heads = integer_of(r, *kv, kModelWidth);
    if (p.kv_heads > p.heads || p.heads % p.kv_heads != 0) {
      r.fail(kv->key, std::to_string(p.kv_heads) + " key/value heads do not divide " +
                          std::to_string(p.heads) + " attention heads");
    }
  } else if (const std::optional<Found> mq = find_any(r, {"multi_query"});
             mq && as_bool(*mq->value, r.where(mq->key))) {
    p.kv_heads = 1;
  }

  const std::optional<Found> ff = find_any(r, {"intermediate_size", "n_inner", "ffn_dim"});
  const std::int64_t inner = ff ? integer_of(r, *ff, kModelWidth) : 4 * p.d_model;
  const bool gated = contains(kGatedTypes, model_type) ||
                     (ff && ff->key == "intermediate_size" && (act == "silu" || act == "swish"));
  // Three h x i matrices as two of width 1.5i: same weights and FLOPs (see header).
  p.d_ff = mlp_width(inner, gated);
  // The width the scenario's model gets must be within its limit; named here, at
  // the key it comes from, since the user never wrote a d_ff.
  if (p.d_ff > kModelWidth.max) {
    const std::string why = ff ? "a gated MLP's three matrices count as two of width 1.5 x " +
                                     ff->key + " = " + std::to_string(p.d_ff)
                               : "without intermediate_size the MLP is 4 x " + hidden_key->key +
                                     " = " + std::to_string(p.d_ff) + " wide";
    r.fail(ff ? ff->key : hidden_key->key,
           why + ", more than the limit of " + std::to_string(kModelWidth.max));
  }

  p.vocab = required(r, {"vocab_size"}, kModelLength);
  if (seq_len) {
    if (*seq_len < kModelLength.min || *seq_len > kModelLength.max) {
      throw ScenarioError(file, "",
                          "the sequence length must be from 1 to " +
                              std::to_string(kModelLength.max) + ", got " +
                              std::to_string(*seq_len));
    }
    p.seq_len = *seq_len;
  } else {
    const std::initializer_list<const char*> keys = {"max_position_embeddings", "n_positions",
                                                     "n_ctx"};
    const std::optional<Found> f = find_any(r, keys);
    if (!f) fail_missing(r, keys, "; give a sequence length");
    p.seq_len = integer_of(r, *f, kModelLength);
  }

  p.dtype = read_hf_dtype(r);
  const std::optional<std::string> positions = opt_string(r, {"position_embedding_type"});
  p.learned_positions =
      contains(kLearnedPositionTypes, model_type) || positions.value_or("") == "absolute";
  const std::optional<Found> tied = find_any(r, {"tie_word_embeddings"});
  p.tied_embeddings = !tied || as_bool(*tied->value, r.where(tied->key));
  p.moe = read_moe(r, gated, p.layers);
  if (!p.mla.enabled()) read_hf_sliding_window(r, model_type, p);
  check_sizes_fit(p, r);
  return p;
}

Scenario parse_scenario_with_hf_model(const json& doc, const std::string& scenario_file,
                                      const std::string& hf_file,
                                      const std::vector<std::string>& overrides) {
  try {
    return parse_scenario(doc, scenario_file);
  } catch (const ScenarioError& e) {
    const auto in_model = [](std::string_view path) {
      return path == "model" || path.starts_with("model.") || path.starts_with("model[");
    };
    const bool overridden = std::any_of(overrides.begin(), overrides.end(), [&](const auto& o) {
      return in_model(std::string_view(o).substr(0, o.find('=')));
    });
    if (!in_model(e.json_path()) || overridden) throw;
    throw ScenarioError(hf_file, "",
                        "with the training and cluster of " + scenario_file + ": " + e.message());
  }
}

TransformerParams read_hf_config(const std::filesystem::path& file,
                                 std::optional<std::int64_t> seq_len) {
  const std::string label = file.string();
  const std::string text = read_input_file(file, label, kMaxDocumentBytes, "a Hugging Face config");
  return parse_hf_config(parse_json(text, label), label, seq_len);
}

}  // namespace pipescope
