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
constexpr std::array<std::string_view, 12> kGatedTypes = {
    "llama", "mistral", "qwen2",   "qwen3",  "gemma", "gemma2",
    "olmo",  "olmo2",   "granite", "cohere", "phi3",  "stablelm"};
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

DType read_dtype(ObjectReader& r) {
  const std::optional<Found> f = find_any(r, {"torch_dtype", "dtype"});
  if (!f) return DType::kFp32;
  const std::string name = as_string(*f->value, r.where(f->key));
  if (name == "float32") return DType::kFp32;
  if (name == "bfloat16") return DType::kBf16;
  if (name == "float16") return DType::kFp16;
  r.fail(f->key, "unknown dtype '" + name + "' (expected one of: float32, bfloat16, float16)");
}

// Every key is read through the scenario's typed accessors, so that a value
// means the same however it is written (8 and 8.0 are both eight experts) and a
// value of the wrong type is refused rather than passed over.
void reject_mixture_of_experts(ObjectReader& r) {
  for (const char* key : {"num_local_experts", "num_experts", "n_routed_experts"}) {
    const std::optional<Found> f = find_any(r, {key});
    if (f && integer_of(r, *f, kNonNegativeInt) > 1) {
      r.fail(key,
             "mixture-of-experts models are not supported (the transformer family has "
             "one MLP per block)");
    }
  }
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
  reject_mixture_of_experts(r);
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
  if (p.d_model % p.heads != 0) {
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
  p.d_ff = gated ? (3 * inner + 1) / 2 : inner;
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

  p.dtype = read_dtype(r);
  const std::optional<std::string> positions = opt_string(r, {"position_embedding_type"});
  p.learned_positions =
      contains(kLearnedPositionTypes, model_type) || positions.value_or("") == "absolute";
  const std::optional<Found> tied = find_any(r, {"tie_word_embeddings"});
  p.tied_embeddings = !tied || as_bool(*tied->value, r.where(tied->key));
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
