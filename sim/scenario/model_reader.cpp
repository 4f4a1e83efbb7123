// Reading a scenario's "model" object: each family's parameters, with the
// defaults the family and the framework's profile give, and explicit layer
// lists, whose named inputs form a graph.

#include "sim/scenario/model_reader.h"

#include <cstddef>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "costmodels/layer_graph.h"
#include "costmodels/model_families.h"

namespace pipescope {

using nlohmann::json;

namespace {

using namespace json_io;

DType read_dtype(ObjectReader& m) {
  return opt_choice(m, "dtype", "dtype", parse_dtype, "fp32, bf16, fp16").value_or(DType::kFp32);
}

// model.attention: fused, unfused (Megatron-LM's fused softmax) or eager
// (PyTorch's passes one by one).
enum class AttentionKind { kFused, kUnfused, kEager };
std::optional<AttentionKind> parse_attention(std::string_view v) {
  if (v == "fused") return AttentionKind::kFused;
  if (v == "unfused") return AttentionKind::kUnfused;
  if (v == "eager") return AttentionKind::kEager;
  return std::nullopt;
}

// "fused" or "unfused" as true or false: model.norm.
std::optional<bool> parse_fused(std::string_view v) {
  if (v == "fused") return true;
  if (v == "unfused") return false;
  return std::nullopt;
}

// "fp8" or "dtype" as true or false: model.fp8_stash.
std::optional<bool> parse_fp8_stash(std::string_view v) {
  if (v == "fp8") return true;
  if (v == "dtype") return false;
  return std::nullopt;
}

// model.fp8_stash, the framework's unless given; refused without model.fp8.
bool read_fp8_stash(ObjectReader& m, const TransformerParams& p, const Framework& fw) {
  const std::optional<bool> given =
      opt_choice(m, "fp8_stash", "fp8_stash", parse_fp8_stash, "fp8, dtype");
  if (given && !p.fp8) {
    m.fail("fp8_stash", "says how FP8 GEMMs keep their inputs: give model.fp8 true too");
  }
  return given.value_or(fw.fp8_stash);
}

// model.experts and the fields that shape the mixture, each refused without
// it (docs/file-formats.md).
MoeParams read_moe(ObjectReader& m, const TransformerParams& p) {
  MoeParams moe;
  const std::optional<std::int64_t> experts = m.opt_integer("experts", kExpertCount);
  if (!experts) {
    for (const char* key :
         {"experts_per_token", "expert_d_ff", "shared_d_ff", "dense_layers", "expert_imbalance"}) {
      if (m.find(key) != nullptr)
        m.fail(key, "shapes a mixture of experts: give model.experts too");
    }
    return moe;
  }
  moe.experts = static_cast<int>(*experts);
  moe.experts_per_token =
      static_cast<int>(m.integer("experts_per_token", IntRange{1, moe.experts}));
  moe.expert_d_ff = m.opt_integer("expert_d_ff", kModelWidth).value_or(p.d_ff);
  moe.shared_d_ff = m.opt_integer("shared_d_ff", IntRange{0, kModelWidth.max}).value_or(0);
  moe.dense_layers = static_cast<int>(
      m.opt_integer("dense_layers", IntRange{0, static_cast<std::int64_t>(p.layers)}).value_or(0));
  moe.imbalance = m.opt_number("expert_imbalance", NumberRange::kPositive).value_or(1.0);
  if (moe.imbalance < 1.0) {
    m.fail("expert_imbalance",
           "expected at least 1 (the busiest expert-parallel device's routed tokens over the "
           "mean share), got " +
               describe(nlohmann::json(moe.imbalance)));
  }
  return moe;
}

// model.latent_attention: its ranks and head widths (docs/file-formats.md).
LatentAttention read_latent_attention(ObjectReader& m) {
  LatentAttention mla;
  std::optional<ObjectReader> o = m.opt_object("latent_attention");
  if (!o) return mla;
  mla.q_lora_rank = o->opt_integer("q_lora_rank", IntRange{0, kModelWidth.max}).value_or(0);
  mla.kv_lora_rank = o->integer("kv_lora_rank", kModelWidth);
  mla.qk_nope_head_dim = o->integer("qk_nope_head_dim", IntRange{0, kModelWidth.max});
  mla.qk_rope_head_dim = o->integer("qk_rope_head_dim", IntRange{0, kModelWidth.max});
  mla.v_head_dim = o->integer("v_head_dim", kModelWidth);
  if (mla.qk_head_dim() == 0) {
    o->fail("qk_nope_head_dim",
            "the queries and keys need a width: qk_nope_head_dim and "
            "qk_rope_head_dim are both 0");
  }
  o->finish();
  return mla;
}

// model.sliding_window (positions, at least 1) and model.sliding_pattern
// (booleans: which blocks slide, repeated over the blocks; every block
// without it).
void read_sliding_window(ObjectReader& m, TransformerParams& p) {
  p.sliding_window = m.opt_integer("sliding_window", kModelLength).value_or(0);
  if (m.find("sliding_pattern") == nullptr) return;
  if (p.sliding_window == 0) {
    m.fail("sliding_pattern", "says which blocks slide: give model.sliding_window too");
  }
  const nlohmann::json& list = m.array("sliding_pattern");
  if (list.empty() || list.size() > static_cast<std::size_t>(kLayerCount.max)) {
    m.fail("sliding_pattern", "expected 1 to " + std::to_string(kLayerCount.max) +
                                  " booleans (true: the block slides), got " +
                                  std::to_string(list.size()));
  }
  for (std::size_t i = 0; i < list.size(); ++i) {
    if (!list[i].is_boolean()) {
      m.fail("sliding_pattern", "entry " + std::to_string(i + 1) + " is " +
                                    json_io::describe(list[i]) +
                                    "; expected true (the block slides) or false");
    }
    p.sliding_pattern.push_back(list[i].get<bool>());
  }
}

// The fields the framework's profile gives a transformer unless the model
// says otherwise: how attention, the layer norms and the loss run.
ModelSpec read_transformer(ObjectReader& m, const Framework& fw) {
  const std::string name = m.opt_string("name").value_or("transformer");
  TransformerParams p;
  p.layers = static_cast<int>(m.integer("layers", kLayerCount));
  p.d_model = m.integer("d_model", kModelWidth);
  p.d_ff = m.opt_integer("d_ff", kModelWidth).value_or(4 * p.d_model);
  p.heads = m.integer("heads", kModelWidth);
  p.seq_len = m.integer("seq_len", kModelLength);
  p.vocab = m.integer("vocab", kModelLength);
  p.dtype = read_dtype(m);
  const auto parse_positions = [](std::string_view v) -> std::optional<bool> {
    if (v == "sinusoidal") return false;
    if (v == "learned") return true;
    return std::nullopt;
  };
  p.learned_positions =
      opt_choice(m, "positions", "positions", parse_positions, "sinusoidal, learned")
          .value_or(false);
  p.tied_embeddings = m.opt_bool("tied_embeddings").value_or(false);
  p.kv_heads = m.opt_integer("kv_heads", kModelWidth).value_or(p.heads);
  p.head_dim = m.opt_integer("head_dim", kModelWidth).value_or(0);
  read_sliding_window(m, p);
  p.dropout = m.opt_bool("dropout").value_or(true);
  const AttentionKind attention =
      opt_choice(m, "attention", "attention", parse_attention, "fused, unfused, eager")
          .value_or(fw.fused_attention ? AttentionKind::kFused : AttentionKind::kUnfused);
  p.fused_attention = attention == AttentionKind::kFused;
  p.eager_attention = attention == AttentionKind::kEager;
  p.fused_norm =
      opt_choice(m, "norm", "norm", parse_fused, "fused, unfused").value_or(fw.fused_norm);
  p.fp8 = m.opt_bool("fp8").value_or(false);
  p.fp8_stash = read_fp8_stash(m, p, fw);
  p.cross_entropy = opt_choice(m, "cross_entropy", "cross_entropy", parse_cross_entropy,
                               "fp32, fp32-fused, fused")
                        .value_or(fw.cross_entropy);
  if (p.head_dim == 0 && p.d_model % p.heads != 0) {
    m.fail("heads",
           std::to_string(p.heads) + " heads do not divide d_model " + std::to_string(p.d_model));
  }
  if (p.kv_heads > p.heads || p.heads % p.kv_heads != 0) {
    m.fail("kv_heads", std::to_string(p.kv_heads) + " key/value heads do not divide heads " +
                           std::to_string(p.heads));
  }
  p.moe = read_moe(m, p);
  p.mla = read_latent_attention(m);
  if (p.sliding_window != 0 && p.mla.enabled()) {
    m.fail("sliding_window", "latent attention does not slide here: leave sliding_window out");
  }
  if (p.head_dim != 0 && p.mla.enabled()) {
    m.fail("head_dim",
           "latent attention sets its own head widths (latent_attention's "
           "qk_nope_head_dim, qk_rope_head_dim and v_head_dim): leave head_dim out");
  }
  return make_transformer(p, name);
}

ModelSpec read_mlp(ObjectReader& m) {
  const std::string name = m.opt_string("name").value_or("mlp");
  MlpParams p;
  p.layers = static_cast<int>(m.integer("layers", kLayerCount));
  p.d_model = m.integer("d_model", kModelWidth);
  p.d_hidden = m.opt_integer("d_hidden", kModelWidth).value_or(4 * p.d_model);
  p.classes = m.opt_integer("classes", kModelLength).value_or(p.d_model);
  p.dtype = read_dtype(m);
  return make_mlp(p, name);
}

ModelSpec read_amoebanet(ObjectReader& m) {
  const std::string name = m.opt_string("name").value_or("amoebanet");
  AmoebaNetParams p;
  p.cells = static_cast<int>(m.integer("cells", kLayerCount));
  p.filters = m.integer("filters", kModelWidth);
  if (p.filters < 8) {
    m.fail("filters",
           "expected at least 8 (the stem has filters / 4 channels and its first "
           "reduction cell's bottlenecks filters / 8), got " +
               std::to_string(p.filters));
  }
  p.image_size = m.opt_integer("image_size", kPositiveSmallInt).value_or(224);
  p.classes = m.opt_integer("classes", kModelLength).value_or(1000);
  p.dtype = read_dtype(m);
  return make_amoebanet(p, name);
}

ModelSpec read_resnet(ObjectReader& m) {
  const std::string name = m.opt_string("name").value_or("resnet");
  ResNetParams p;
  p.depth = static_cast<int>(m.integer("depth", kPositiveSmallInt));
  if (p.depth != 50 && p.depth != 101 && p.depth != 152) {
    m.fail("depth", "expected 50, 101 or 152, got " + std::to_string(p.depth));
  }
  p.image_size = m.opt_integer("image_size", kPositiveSmallInt).value_or(224);
  if (p.image_size < 32) {
    m.fail("image_size", "expected at least 32 (five halvings leave a 1 x 1 map), got " +
                             std::to_string(p.image_size));
  }
  p.classes = m.opt_integer("classes", kModelLength).value_or(1000);
  p.dtype = read_dtype(m);
  return make_resnet(p, name);
}

LayerSpec read_layer(ObjectReader l) {
  LayerSpec layer;
  layer.name = l.string("name");
  layer.fwd_flops = l.number("fwd_flops", NumberRange::kNonNegative);
  layer.bwd_flops =
      l.opt_number("bwd_flops", NumberRange::kNonNegative).value_or(2.0 * layer.fwd_flops);
  layer.params = l.integer("params", kNonNegativeInt);
  layer.out_bytes = l.integer("out_bytes", kNonNegativeInt);
  layer.stash_bytes = l.integer("stash_bytes", kNonNegativeInt);
  if (l.find("inputs") != nullptr) {
    const json& names = l.array("inputs");
    if (names.empty()) {
      l.fail("inputs",
             "expected at least one layer name (leave 'inputs' out for the previous layer)");
    }
    for (std::size_t j = 0; j < names.size(); ++j) {
      layer.inputs.push_back(as_string(names[j], l.where("inputs").index(j)));
    }
  }
  l.finish();
  return layer;
}

ModelSpec read_layer_list(ObjectReader& m) {
  ModelSpec spec;
  spec.name = m.opt_string("name").value_or("layers");
  const Where list_at = m.where("layers");
  const json& list = m.at("layers");
  if (!list.is_array()) list_at.fail("expected an array of layers, got " + type_of(list));
  if (list.empty()) list_at.fail("expected at least one layer, got an empty array");
  if (list.size() > static_cast<std::size_t>(kLayerCount.max)) {
    list_at.fail("expected at most " + std::to_string(kLayerCount.max) + " layers, got " +
                 std::to_string(list.size()));
  }
  std::map<std::string, std::size_t> index_of_name;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const Where at = list_at.index(i);
    LayerSpec layer = read_layer(ObjectReader(list[i], at));
    const auto [it, inserted] = index_of_name.emplace(layer.name, i);
    if (!inserted) {
      at.key("name").fail("duplicate layer name '" + layer.name + "' (also used by " +
                          list_at.index(it->second).path + ")");
    }
    spec.layers.push_back(std::move(layer));
  }
  spec.dtype = read_dtype(m);
  spec.input_bytes = m.opt_integer("input_bytes", kNonNegativeInt).value_or(0);
  spec.tokens_per_sample = m.opt_integer("tokens_per_sample", kPositiveInt).value_or(1);
  // Layers that name their inputs form a graph: check it, order it, size its cuts.
  try {
    resolve_layer_graph(spec);
  } catch (const LayerGraphError& e) {
    const Where layer_at = list_at.index(static_cast<std::size_t>(e.layer()));
    const Where at =
        e.input() ? layer_at.key("inputs").index(static_cast<std::size_t>(*e.input())) : layer_at;
    at.fail(e.reason());
  }
  return spec;
}

}  // namespace

ModelSpec read_model(ObjectReader m, const Framework& fw) {
  const std::string family = m.string("family");
  ModelSpec spec;
  if (family == "transformer" || family == "mlp" || family == "amoebanet" || family == "resnet") {
    try {
      spec = family == "transformer" ? read_transformer(m, fw)
             : family == "mlp"       ? read_mlp(m)
             : family == "amoebanet" ? read_amoebanet(m)
                                     : read_resnet(m);
    } catch (const std::overflow_error& e) {
      m.fail_here(e.what());
    }
  } else if (family == "layers") {
    spec = read_layer_list(m);
  } else {
    m.fail("family", "unknown family '" + family +
                         "' (expected one of: transformer, mlp, amoebanet, resnet, layers)");
  }
  spec.family = family;
  m.finish();
  return spec;
}

}  // namespace pipescope
