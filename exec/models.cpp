#include "exec/models.h"

#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>

#include "costmodels/check.h"
#include "exec/compute/layers.h"
#include "exec/compute/moe_layers.h"
#include "exec/expert_shard.h"
#include "exec/tensor_shard.h"

namespace pipescope::exec {

namespace {

// The generator of layer `index`: its own stream, a function of (seed, index)
// only (splitmix64 of the pair, Steele et al. 2014), so cutting the list into
// stages does not change any layer's initial values.
std::mt19937_64 layer_rng(std::uint64_t seed, std::size_t index) {
  std::uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (static_cast<std::uint64_t>(index) + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return std::mt19937_64(z ^ (z >> 31));
}

void require(bool ok, const std::string& message) {
  if (!ok) throw std::invalid_argument(message);
}

// Throws std::invalid_argument unless the built layers have the spec's names and
// parameter counts (a spec edited after make_* would not).
void require_same(const LayerList& layers, const ModelSpec& spec) {
  bool same = layers.size() == spec.layers.size();
  for (std::size_t i = 0; same && i < layers.size(); ++i) {
    same = layers[i]->name() == spec.layers[i].name &&
           layers[i]->param_count() == spec.layers[i].params;
  }
  require(same, "the " + spec.family + " model '" + spec.name +
                    "' does not have the layers its family parameters make: was it edited?");
}

}  // namespace

LayerList build_transformer(const TransformerParams& p, std::uint64_t seed) {
  require(!p.tied_embeddings, "tied embeddings are not supported by the executor yet");
  require(p.layers >= 0 && p.d_model > 0 && p.d_ff >= 0 && p.heads > 0 && p.seq_len > 0 &&
              p.vocab > 0 && p.kv_heads >= 0,
          "transformer parameters must be positive");
  const Index f = p.d_ff == 0 ? 4 * p.d_model : p.d_ff;
  LayerList layers;
  std::size_t index = 0;
  auto rng = layer_rng(seed, index++);
  layers.push_back(std::make_unique<Embedding>(
      "embed", EmbeddingMath(p.vocab, p.seq_len, p.d_model, p.learned_positions), rng));
  for (int i = 0; i < p.layers; ++i) {
    rng = layer_rng(seed, index++);
    const std::string name = "block" + std::to_string(i);
    if (p.moe.in_block(i)) {
      const MoeShape moe{p.moe.experts, p.moe.experts_per_token, p.moe.expert_d_ff,
                         p.moe.shared_d_ff};
      layers.push_back(std::make_unique<MoeBlock>(
          name,
          MoeBlockMath(p.d_model, p.heads, p.kv_heads, moe,
                       TensorRank(std::make_shared<TensorGroup>(1), 0, 1)),
          rng));
    } else {
      layers.push_back(std::make_unique<TransformerBlock>(
          name, TransformerBlockMath(p.d_model, p.heads, p.kv_heads, f), rng));
    }
  }
  rng = layer_rng(seed, index);
  layers.push_back(std::make_unique<LmHead>("head", LmHeadMath(p.d_model, p.vocab), rng));
  return layers;
}

LayerList build_mlp(const MlpParams& p, std::uint64_t seed) {
  require(p.layers >= 0 && p.d_model > 0 && p.d_hidden >= 0 && p.classes >= 0,
          "mlp parameters must be positive");
  const Index f = p.d_hidden == 0 ? 4 * p.d_model : p.d_hidden;
  const Index c = p.classes == 0 ? p.d_model : p.classes;
  LayerList layers;
  std::size_t index = 0;
  for (int i = 0; i < p.layers; ++i) {
    auto rng = layer_rng(seed, index++);
    layers.push_back(
        std::make_unique<MlpBlock>("block" + std::to_string(i), MlpBlockMath(p.d_model, f), rng));
  }
  auto rng = layer_rng(seed, index);
  layers.push_back(std::make_unique<ClassifierHead>("head", ClassifierHeadMath(p.d_model, c), rng));
  return layers;
}

void check_runnable(const ModelSpec& spec) {
  const TransformerParams* t = spec.transformer.get();
  if (t == nullptr) return;
  const std::string cannot = "the executor cannot run model '" + spec.name + "': ";
  if (t->mla.enabled()) {
    throw std::invalid_argument(cannot +
                                "its latent attention is not implemented (it runs multi-head "
                                "and grouped-query attention)");
  }
  if (t->moe.enabled() && spec.tensor_parallel > 1) {
    throw std::invalid_argument(cannot +
                                "it runs mixtures of experts without tensor parallelism (T=1)");
  }
  if (t->head_dim != 0 && t->head_dim * t->heads != t->d_model) {
    throw std::invalid_argument(cannot + "its attention heads are " + std::to_string(t->head_dim) +
                                " wide, not d_model / heads (it runs heads of that width)");
  }
  if (t->sliding_window > 0 && t->sliding_window < t->seq_len) {
    throw std::invalid_argument(cannot + "its attention slides over " +
                                std::to_string(t->sliding_window) +
                                " positions (it attends over the whole sequence)");
  }
}

LayerList build_layers(const ModelSpec& spec, std::uint64_t seed) {
  check_runnable(spec);
  if (spec.family == "transformer" || spec.family == "mlp") {
    require(spec.transformer != nullptr || spec.mlp != nullptr,
            "the " + spec.family + " model '" + spec.name +
                "' carries no family parameters to build it from");
    if (spec.tensor_parallel > 1) {
      require(spec.transformer != nullptr && !spec.sequence_parallel,
              "the executor splits transformers over tensor ranks, without sequence "
              "parallelism; model '" +
                  spec.name + "' cannot run at T=" + std::to_string(spec.tensor_parallel));
    }
    if (spec.context_parallel > 1) {
      require(spec.transformer != nullptr && !spec.sequence_parallel,
              "the executor splits the sequences of transformers, without sequence "
              "parallelism; model '" +
                  spec.name + "' cannot run at C=" + std::to_string(spec.context_parallel));
    }
    const bool split = spec.tensor_parallel > 1 || spec.context_parallel > 1;
    const bool experts = spec.transformer != nullptr && spec.transformer->moe.enabled() &&
                         (split || spec.expert_parallel > 1);
    LayerList layers =
        experts ? build_expert_rank_alone(*spec.transformer, seed, spec.expert_parallel,
                                          spec.context_parallel, spec.context_by_heads)
        : split ? build_tensor_rank_alone(*spec.transformer, seed, spec.tensor_parallel,
                                          spec.context_parallel, spec.context_by_heads)
        : spec.transformer != nullptr ? build_transformer(*spec.transformer, seed)
                                      : build_mlp(*spec.mlp, seed);
    require_same(layers, spec);
    return layers;
  }
  if (spec.family == "layers") {
    throw std::invalid_argument(
        "the executor cannot run model '" + spec.name +
        "': an explicit layer list (family 'layers') gives each layer's costs, not its "
        "math; use the transformer or mlp family");
  }
  if (spec.family == "amoebanet") {
    throw std::invalid_argument("the executor cannot run model '" + spec.name +
                                "': the amoebanet family's convolutional cells are not "
                                "implemented (it runs the transformer and mlp families)");
  }
  throw std::invalid_argument("the executor cannot run model '" + spec.name +
                              "' of unknown family '" + spec.family + "'");
}

namespace {

Context make_context(const std::vector<std::int32_t>& targets, int batch, int seq,
                     double loss_scale) {
  Context ctx;
  ctx.batch = batch;
  ctx.seq = seq;
  ctx.targets = &targets;
  ctx.loss_scale = loss_scale;
  return ctx;
}

double mean_scale(int batch, int seq) {
  require(batch > 0 && seq > 0, "batch and seq must be positive");
  return 1.0 / (static_cast<double>(batch) * static_cast<double>(seq));
}

}  // namespace

double model_loss(const LayerList& layers, const Matrix& input,
                  const std::vector<std::int32_t>& targets, int batch, int seq) {
  require(!layers.empty(), "the model has no layers");
  const Context ctx = make_context(targets, batch, seq, mean_scale(batch, seq));
  Tensor x = input;
  Stash stash;
  for (const auto& layer : layers) x = layer->forward(x, ctx, stash);
  return static_cast<double>(x.host()(0, 0));
}

double forward_backward(LayerList& layers, const Matrix& input,
                        const std::vector<std::int32_t>& targets, int batch, int seq) {
  return forward_backward(layers, input, targets, batch, seq, mean_scale(batch, seq));
}

double forward_backward(LayerList& layers, const Matrix& input,
                        const std::vector<std::int32_t>& targets, int batch, int seq,
                        double loss_scale) {
  require(!layers.empty(), "the model has no layers");
  require(batch > 0 && seq > 0, "batch and seq must be positive");
  const Context ctx = make_context(targets, batch, seq, loss_scale);
  std::vector<Stash> stashes(layers.size());
  Tensor x = input;
  for (std::size_t i = 0; i < layers.size(); ++i) x = layers[i]->forward(x, ctx, stashes[i]);
  const double loss = static_cast<double>(x.host()(0, 0));
  Tensor dy = Matrix(Matrix::Ones(1, 1));
  for (std::size_t i = layers.size(); i-- > 0;) {
    dy = layers[i]->backward(dy, ctx, stashes[i]);
    stashes[i].clear();
  }
  return loss;
}

void zero_grads(LayerList& layers) {
  for (Param* p : params_of(layers)) zero_grad(*p);
}

std::vector<Param*> params_of(LayerList& layers) {
  std::vector<Param*> out;
  for (auto& layer : layers) {
    for (Param* p : layer->params()) out.push_back(p);
  }
  return out;
}

std::vector<LayerList> cut_into_stages(LayerList all, const std::vector<StageRange>& ranges) {
  std::vector<LayerList> stages;
  stages.reserve(ranges.size());
  for (const StageRange& r : ranges) {
    PS_CHECK(r.first_layer >= 0 && r.first_layer <= r.last_layer &&
                 r.last_layer < static_cast<int>(all.size()),
             "stage cut outside the model");
    LayerList& stage = stages.emplace_back();
    for (int l = r.first_layer; l <= r.last_layer; ++l) {
      PS_CHECK(all[static_cast<std::size_t>(l)] != nullptr, "a layer in two stages");
      stage.push_back(std::move(all[static_cast<std::size_t>(l)]));
    }
  }
  return stages;
}

std::vector<double> train_reference(LayerList& layers, const OptimizerConfig& optimizer, int steps,
                                    const std::function<MicroBatch(int step)>& mini_batch,
                                    const std::function<void(int step)>& after_step) {
  ParamOptimizer opt(optimizer);
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    const MicroBatch mb = mini_batch(step);
    losses.push_back(forward_backward(layers, mb.input, mb.targets, mb.batch, mb.seq));
    opt.step(params_of(layers));
    if (after_step) after_step(step);
  }
  return losses;
}

}  // namespace pipescope::exec
