#include "costmodels/model_families.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

#include "costmodels/check.h"
#include "costmodels/size_checks.h"
#include "costmodels/transformer_parts.h"

namespace pipescope {

using namespace family_parts;

namespace {

// Bytes a cross-entropy moves per logit forward and backward, and keeps per
// logit for the backward; e: bytes of an activation. kFp32 as megatron-core's
// VocabParallelCrossEntropy runs: the cast up (e + 4), the maximum (4), the
// subtraction and the exponential in place (8 each), the sum (4) and the
// normalisation into probabilities in place (8), e + 36; backward, the
// probabilities times the loss gradient in place (8) and autograd's cast down
// to the logits' type (4 + e), 12 + e. kFp32Fused as its fused form
// (torch.compile of the same steps): the cast with the maximum (e + 4), the
// subtraction, exponential and sum (8), the normalisation (8), e + 20;
// backward, one kernel that reads the probabilities, writes back the ones it
// changed in place (8) and writes the gradient (e), 8 + e. Both keep the fp32
// probabilities. With fp32 activations there is no cast either way. kFused:
// read the logits, write their gradient (2e) and keep it (e); backward, read
// it and write the scaled gradient (2e).
struct LossPasses {
  Bytes forward = 0;
  Bytes backward = 0;
  Bytes kept = 0;
};
LossPasses loss_passes(CrossEntropy c, Bytes e) {
  const bool cast = e != 4;
  switch (c) {
    case CrossEntropy::kFp32:
      return {(cast ? e + 4 : 0) + 32, 8 + (cast ? 4 + e : 0), 4};
    case CrossEntropy::kFp32Fused:
      return {(cast ? e : 0) + 4 + 16, 8 + e, 4};
    case CrossEntropy::kFused:
      break;
  }
  return {2 * e, 2 * e, e};
}

}  // namespace

std::string_view to_string(CrossEntropy c) {
  switch (c) {
    case CrossEntropy::kFp32:
      return "fp32";
    case CrossEntropy::kFp32Fused:
      return "fp32-fused";
    case CrossEntropy::kFused:
      break;
  }
  return "fused";
}

std::optional<CrossEntropy> parse_cross_entropy(std::string_view name) {
  for (const CrossEntropy c :
       {CrossEntropy::kFp32, CrossEntropy::kFp32Fused, CrossEntropy::kFused}) {
    if (name == to_string(c)) return c;
  }
  return std::nullopt;
}

// Per sample (b = 1): s = seq_len, h = d_model, f = d_ff, a = heads, V = vocab,
// e = bytes per activation element. Backward FLOPs are 2x forward throughout
// (input gradient + weight gradient; Narayanan et al. 2021).
namespace {

std::string expert_split_problem(const MoeParams& moe, int E) {
  if (E == 1) return "";
  if (E < 1) return "expert parallelism needs at least 1 device, got " + std::to_string(E);
  if (!moe.enabled()) return "expert parallelism spreads a mixture's experts; the model has none";
  if (moe.experts % E != 0) {
    return std::to_string(E) + " expert-parallel devices do not divide the " +
           std::to_string(moe.experts) + " experts";
  }
  if (moe.imbalance > E) {
    std::ostringstream imbalance;
    imbalance << moe.imbalance;
    return "an imbalance of " + imbalance.str() + " is more than the busiest of " +
           std::to_string(E) + " expert-parallel devices can receive (at most " +
           std::to_string(E) + ")";
  }
  return "";
}

// Expert tensor parallelism other than T: whole experts (1) beside T > 1,
// whose tokens arrive split over the T devices (sequence parallelism).
std::string expert_ways_problem(const MoeParams& moe, TensorSplit split) {
  const int u = split.expert_ways;
  if (u == 0 || u == split.ways) return "";
  if (u != 1) {
    return "expert tensor parallelism " + std::to_string(u) +
           " is modelled as 1 or the tensor parallelism (" + std::to_string(split.ways) + ")";
  }
  if (!moe.enabled()) return "";  // no experts to split: the same model either way
  if (!split.sequence) {
    return "whole experts (expert tensor parallelism 1) beside tensor parallelism " +
           std::to_string(split.ways) +
           " take each device's own tokens: they need sequence parallelism";
  }
  return "";
}

// Context parallelism: each of C devices holds two of 2C chunks of the
// sequence (and 1 / T of its share under sequence parallelism).
std::string context_split_problem(const TransformerParams& p, TensorSplit split) {
  const int C = split.context;
  if (C == 1) return "";
  if (C < 1) return "context parallelism needs at least 1 device, got " + std::to_string(C);
  const std::int64_t chunks = 2 * std::int64_t{C} * (split.sequence ? split.ways : 1);
  if (p.seq_len % chunks != 0) {
    return "context parallelism over " + std::to_string(C) + " devices cuts seq_len " +
           std::to_string(p.seq_len) + " into " + std::to_string(chunks) + " equal chunks (2 C" +
           (split.sequence ? std::string(" T") : std::string()) + "), which do not divide it";
  }
  if (!p.fused_attention) {
    return "context parallelism runs attention as fused kernels over the ring's blocks; "
           "the model's attention is unfused (expected model.attention fused)";
  }
  const std::int64_t kv = p.kv_heads == 0 ? p.heads : p.kv_heads;
  for (const auto& [n, what] : {std::pair{p.heads, "heads"}, std::pair{kv, "kv_heads"}}) {
    if (split.heads_over_context && (n / split.ways) % C != 0) {
      return "context parallelism by all-to-alls (a2a) gives each of " + std::to_string(C) +
             " devices a share of every device's " + what + ", and " + std::to_string(C) +
             " does not divide " + std::to_string(n / split.ways) +
             (split.ways > 1 ? " (" + std::string(what) + " / T)" : std::string());
    }
  }
  if (p.sliding_window > 0 && p.sliding_window < p.seq_len) {
    return "context parallelism with sliding-window attention is not modelled";
  }
  return "";
}

}  // namespace

std::string tensor_split_problem(const TransformerParams& p, TensorSplit split) {
  const std::int64_t t = split.ways;
  if (t < 1) return "tensor parallelism needs at least 1 device, got " + std::to_string(t);
  const std::int64_t f = p.d_ff == 0 ? 4 * p.d_model : p.d_ff;
  const std::int64_t kv = p.kv_heads == 0 ? p.heads : p.kv_heads;
  const auto divides = [&](std::int64_t n, const char* what) -> std::string {
    if (n % t == 0) return "";
    return std::to_string(t) + " tensor-parallel devices do not divide " + what + " " +
           std::to_string(n);
  };
  const bool moe = p.moe.enabled();
  for (std::string problem :
       {divides(p.heads, "heads"), divides(kv, "kv_heads"), divides(f, "d_ff"),
        moe ? divides(p.moe.expert_d_ff, "expert_d_ff") : std::string(),
        moe ? divides(p.moe.shared_d_ff, "shared_d_ff") : std::string(),
        split.sequence ? divides(p.seq_len, "seq_len") : std::string()}) {
    if (!problem.empty()) return problem;
  }
  if (std::string problem = context_split_problem(p, split); !problem.empty()) return problem;
  if (std::string problem = expert_ways_problem(p.moe, split); !problem.empty()) return problem;
  return expert_split_problem(p.moe, split.experts);
}

namespace {

// Checks the parameters and `split`, and derives the sizes from them.
TransformerDims transformer_dims(const TransformerParams& p, TensorSplit split) {
  PS_CHECK(
      p.layers >= 0 && p.d_model > 0 && p.d_ff >= 0 && p.heads > 0 && p.seq_len > 0 && p.vocab > 0,
      "transformer parameters must be positive");
  PS_CHECK(
      p.kv_heads >= 0 && p.kv_heads <= p.heads && (p.kv_heads == 0 || p.heads % p.kv_heads == 0),
      "kv_heads must divide heads");
  const MoeParams& moe = p.moe;
  PS_CHECK(
      moe.experts >= 0 &&
          (!moe.enabled() || (moe.experts_per_token >= 1 && moe.experts_per_token <= moe.experts &&
                              moe.expert_d_ff > 0 && moe.shared_d_ff >= 0 &&
                              moe.dense_layers >= 0 && moe.dense_layers <= p.layers)),
      "a mixture of experts needs experts >= experts_per_token >= 1, a positive "
      "expert_d_ff and dense_layers within the blocks");
  const LatentAttention& mla = p.mla;
  PS_CHECK(mla.kv_lora_rank >= 0 &&
               (!mla.enabled() ||
                (mla.q_lora_rank >= 0 && mla.qk_nope_head_dim >= 0 && mla.qk_rope_head_dim >= 0 &&
                 mla.qk_head_dim() > 0 && mla.v_head_dim > 0)),
           "latent attention needs positive ranks and head widths");
  PS_CHECK(p.head_dim >= 0 && (p.head_dim == 0 || !mla.enabled()),
           "a head width of its own needs attention that is not latent");
  PS_CHECK(p.sliding_window >= 0 && (p.sliding_window == 0 || !mla.enabled()),
           "a sliding window needs attention that is not latent");
  // s: the tokens of a sample one device holds, 1 / C of them under context
  // parallelism.
  const std::int64_t s = p.seq_len / std::max(1, split.context), h = p.d_model, a = p.heads,
                     v = p.vocab;
  const std::int64_t f = p.d_ff == 0 ? 4 * h : p.d_ff;
  // Width of the Q and output projections: h, or a heads of head_dim each.
  // Of the K and V projections: the same for multi-head attention, kv / a of
  // it with grouped-query attention (kv key/value heads shared by a / kv
  // query heads each).
  const std::int64_t kv = p.kv_heads == 0 ? a : p.kv_heads;
  PS_CHECK(p.head_dim > 0 || kv == a || h % a == 0,
           "grouped-query attention needs heads to divide d_model");
  const std::int64_t q = p.head_dim > 0 ? a * p.head_dim : h;
  const std::int64_t d_kv = p.head_dim > 0 ? kv * p.head_dim : kv == a ? h : h / a * kv;
  const Bytes e = dtype_bytes(p.dtype);
  const std::string split_problem = tensor_split_problem(p, split);
  PS_CHECK(split_problem.empty(), split_problem);
  // t devices share each layer; c of them its replicated activations (those of
  // the layer norms, dropouts and residuals: t with sequence parallelism).
  const std::int64_t t = split.ways, c = split.sequence ? t : 1;
  const std::int64_t v_t = (v + t - 1) / t;  // vocabulary rows per device, padded
  return {
      s, h, a, v, f, d_kv, q, e, t, c, v_t, split.experts, split.context, split.expert_ways_or_t()};
}

// Throws std::overflow_error when a block's or the head's stash per sample, or
// the parameters, do not fit in 64-bit integers.
void require_transformer_fits(const TransformerParams& p, const TransformerDims& d) {
  const double S = f64(d.s), H = f64(d.h), F = f64(d.f), A = f64(d.a), V = f64(d.v), E = f64(d.e);
  const double W = std::max(H, f64(d.q));  // the wider of the model and attention
  require_fits(S * (W * (8 * E + 2) + 2 * E * F) + A * S * S * (2 * E + 1),
               "the bytes one block stashes per sample");
  require_fits(2 * S * H * E + S * V * std::max(E, 4.0) + 4 * S,
               "the bytes the head stashes per sample");
  require_fits(f64(p.layers) * (4 * H * W + 2 * H * F + F + 9 * W) + 2 * V * H + S * H,
               "the parameters");
  const LatentAttention& mla = p.mla;
  if (mla.enabled()) {
    const double widest = std::max({H, f64(mla.q_lora_rank), f64(mla.kv_lora_rank)});
    require_fits(f64(p.layers) * A * 3 * f64(mla.qk_head_dim() + mla.v_head_dim) * widest,
                 "latent attention's parameters");
    require_fits(S * A * 4 * E * f64(mla.qk_head_dim() + mla.v_head_dim),
                 "the bytes latent attention stashes per sample");
  }
  const MoeParams& moe = p.moe;
  if (moe.enabled()) {
    const double Ex = moe.experts, K = moe.experts_per_token;
    const double Fe = f64(moe.expert_d_ff), Fs = f64(moe.shared_d_ff);
    require_fits(f64(p.layers) * (Ex * (2 * H * Fe + Fe + 2 * H) + 2 * H * Fs + Fs),
                 "the experts' parameters");
    // The busiest device's share of the tokens (MoeParams::imbalance) at most.
    const double busiest = std::max(1.0, moe.imbalance);
    require_fits(S * K * busiest * (H * E + 2 * E * Fe + 8) + S * (2 * E * Fs + 4 * Ex),
                 "the bytes a mixture-of-experts block stashes per sample");
  }
}

// The embedding layer: the token lookup, the positions and their kernels.
LayerSpec embedding_layer(const TransformerParams& p, const TransformerDims& d) {
  const std::int64_t s = d.s, h = d.h, t = d.t, c = d.c, v_t = d.v_t;
  const Bytes e = d.e;
  // Token lookup is a gather (no FLOPs); adding the positions costs s*h. The stash
  // is the int32 token ids, needed to scatter the table gradient. The
  // position table is whole on every device, whatever share of the sequence
  // it holds.
  // Under tensor parallelism each device holds v / t rows of the token table
  // (and the whole position table), writes zeros for the tokens outside them,
  // and the group all-reduces the s x h result.
  const std::int64_t position_params = p.learned_positions ? p.seq_len * h : 0;
  LayerSpec embed = layer("embed", f64(s * h), v_t * h + position_params, s * h * e / c, s * 4);
  if (t > 1) {
    embed.tp_fwd_allreduces = 1;
    embed.tp_fwd_bytes = s * h * e;
  }
  // Kernels: a gather of s table rows plus the positions, written once; its
  // backward scatters s rows of gradient into the table: the weight gradient.
  Kernel gather = memory(3 * s * h * e + s * 4, 2 * s * h * e + s * 4);
  gather.backward_is_weight_grad = true;
  embed.kernels = make_kernel_list({gather});
  return embed;
}

// Appends the p.layers Transformer blocks, block0 on, with their kernels and
// tensor-parallel all-reduces.
void append_blocks(ModelSpec& m, const TransformerParams& p, const TransformerDims& d,
                   TensorSplit split) {
  const std::int64_t s = d.s, h = d.h, t = d.t;
  const Bytes e = d.e;
  // The blocks of each kind (dense or a mixture, full or sliding attention),
  // costed once a kind and shared.
  struct Kind {
    BlockCosts costs;
    KernelList kernels;
  };
  std::optional<Kind> kinds[2][2];
  const auto kind_of = [&](bool mixture, bool sliding) -> const Kind& {
    std::optional<Kind>& k = kinds[mixture][sliding];
    if (!k) {
      k = Kind{block_costs(p, d, mixture, sliding),
               make_kernel_list(block_kernels(p, d.f, d.d_kv, split, mixture, sliding))};
    }
    return *k;
  };
  for (int i = 0; i < p.layers; ++i) {
    const bool mixture = p.moe.in_block(i);
    const Kind& kind = kind_of(mixture, p.slides(i));
    const BlockCosts& costs = kind.costs;
    m.layers.push_back(
        layer("block" + std::to_string(i), costs.fwd, costs.params, costs.out, costs.stash));
    LayerSpec& block = m.layers.back();
    block.kernels = kind.kernels;
    block.core_stash_bytes = costs.core_stash;
    block.core_fwd_flops = costs.core_fwd;
    if (t > 1) {  // after the output and the MLP down projections; in the backward before
      // Whole experts (d.etp 1) take their tokens from the all-to-alls, not
      // from the group: only a shared MLP's output sums over the T.
      const int mlp = mixture && d.etp < t ? (p.moe.shared_d_ff > 0 ? 1 : 0) : 1;
      block.tp_fwd_allreduces = block.tp_bwd_allreduces = 1 + mlp;
      block.tp_fwd_bytes = block.tp_bwd_bytes = (1 + mlp) * s * h * e;
    }
    if (mixture && d.ep > 1) {  // the dispatch and the combination: each token's k copies
      block.expert_params = costs.expert_params;
      block.ep_alltoalls = 2;
      block.ep_bytes = d.expert_tokens() * p.moe.experts_per_token * h * e;
    }
    if (d.cp > 1) {  // the ring's other C - 1 blocks of K and V, this device's heads of them
      block.cp_steps = static_cast<int>(d.cp - 1);
      if (p.mla.enabled()) {
        // Latent attention's up-projected keys (d_qk a head) and values
        // (d_v); the queries are d_qk wide and the output d_v, so the mean
        // of the two stands for each.
        const std::int64_t widths = (d.a / t) * (p.mla.qk_head_dim() + p.mla.v_head_dim);
        block.cp_bytes = s * widths * e;
        block.cp_q_bytes = s * widths * e / 2;
      } else {
        block.cp_bytes = 2 * s * (d.d_kv / t) * e;
        block.cp_q_bytes = s * (d.q / t) * e;
      }
    }
  }
}

// The head: the final layer norm, the LM projection and the cross-entropy loss.
LayerSpec head_layer(const TransformerParams& p, const TransformerDims& d) {
  const std::int64_t s = d.s, h = d.h, t = d.t, c = d.c, v_t = d.v_t;
  const Bytes e = d.e;
  // Final LayerNorm + LM projection (2shV; V*h weights unless tied to the token
  // table) + softmax cross-entropy, counted as 5sV (max, exp, sum, normalise,
  // log-likelihood); the LayerNorm's O(sh) is neglected like the blocks'
  // elementwise work. Output: the fp32 loss. Stash: LN and projection inputs
  // 2e*sh, what the loss keeps of each logit for the backward (loss_passes),
  // int32 targets 4s. Under tensor parallelism
  // the projection splits the vocabulary (v_t rows each) and so do the
  // logits; the cross-entropy all-reduces three fp32 values per token (the
  // maximum, the sum of exponentials, the target's logit), and the backward
  // all-reduces the s x h input gradient.
  const std::int64_t head_params = (p.tied_embeddings ? 0 : v_t * h) + 2 * h;
  const LossPasses loss = loss_passes(p.cross_entropy, e);
  LayerSpec head = layer("head", 2.0 * f64(s) * f64(h) * f64(v_t) + 5.0 * f64(s) * f64(v_t),
                         head_params, 4, s * h * e / c + s * h * e + s * v_t * loss.kept + s * 4);
  // Kernels: the layer norm, the projection, and the cross-entropy's passes
  // over the s x V logits (loss_passes).
  head.kernels =
      make_kernel_list({norm_kernel(p.fused_norm, s * h / c, e), gemm(s, v_t, h),
                        memory(s * v_t * loss.forward + s * 4, s * v_t * loss.backward + s * 4)});
  if (t > 1) {
    head.tp_fwd_allreduces = 3;
    head.tp_fwd_bytes = 3 * s * 4;
    head.tp_bwd_allreduces = 1;
    head.tp_bwd_bytes = s * h * e;
  }
  return head;
}

}  // namespace

ModelSpec make_transformer(const TransformerParams& p, const std::string& name, TensorSplit split) {
  const TransformerDims d = transformer_dims(p, split);
  const std::int64_t t = d.t;

  ModelSpec m;
  m.name = name;
  m.family = "transformer";
  m.tensor_parallel = split.ways;
  m.sequence_parallel = split.sequence && t > 1;
  m.expert_parallel = split.experts;
  m.context_parallel = split.context;
  m.context_by_heads = split.context > 1 && split.heads_over_context;
  if (t > 1 || split.context > 1) {
    const ModelSpec whole = make_transformer(p, name);
    m.whole_flops_per_sample = whole.fwd_flops_per_sample() + whole.bwd_flops_per_sample();
  }
  m.transformer = std::make_shared<const TransformerParams>(p);
  m.dtype = p.dtype;
  m.input_bytes = d.s * 4;          // int32 token ids
  m.tokens_per_sample = p.seq_len;  // a sample's, whichever share a device holds

  require_transformer_fits(p, d);
  m.layers.push_back(embedding_layer(p, d));
  append_blocks(m, p, d, split);
  m.layers.push_back(head_layer(p, d));
  if (p.tied_embeddings) m.tied_table_params = d.v_t * d.h;
  return m;
}

// Block x + W2 relu(W1 LN(x)) on d features, hidden size f, per sample.
ModelSpec make_mlp(const MlpParams& p, const std::string& name) {
  PS_CHECK(p.layers >= 0 && p.d_model > 0 && p.d_hidden >= 0 && p.classes >= 0,
           "mlp parameters must be positive");
  const std::int64_t d = p.d_model;
  const std::int64_t f = p.d_hidden == 0 ? 4 * d : p.d_hidden;
  const std::int64_t c = p.classes == 0 ? d : p.classes;
  const Bytes e = dtype_bytes(p.dtype);
  require_fits(
      f64(p.layers) * (2 * f64(d) * f64(f) + f64(f) + 3 * f64(d)) + f64(d) * f64(c) + f64(c),
      "the parameters");
  require_fits(f64(e) * (2 * f64(d) + 2 * f64(f) + f64(c)) + 4,
               "the bytes a layer stashes per sample");

  ModelSpec m;
  m.name = name;
  m.family = "mlp";
  m.mlp = std::make_shared<const MlpParams>(p);
  m.dtype = p.dtype;
  m.input_bytes = d * e;
  m.tokens_per_sample = 1;

  // Two matmuls 4df; LayerNorm about 4d (mean, variance, normalise, scale and
  // shift) and the residual add d; relu is comparisons, not counted.
  // Params: W1, b1, W2, b2, LN gain and bias. Stash: LN input, W1 input, relu
  // input, W2 input.
  const Flops block_fwd = 4.0 * f64(d) * f64(f) + 5.0 * f64(d);
  // Kernels per sample: layer norm, W1, bias + relu, W2 with the residual add.
  const KernelList kernels =
      make_kernel_list({memory(2 * d * e, 3 * d * e), gemm(1, f, d), memory(2 * f * e, 3 * f * e),
                        gemm(1, d, f), memory(3 * d * e, 2 * d * e)});
  for (int i = 0; i < p.layers; ++i) {
    m.layers.push_back(layer("block" + std::to_string(i), block_fwd, 2 * d * f + f + d + 2 * d,
                             d * e, e * (2 * d + 2 * f)));
    m.layers.back().kernels = kernels;
  }
  // Classifier 2dc plus softmax cross-entropy 5c; stash: its input, the softmax
  // output and the int32 target.
  m.layers.push_back(
      layer("head", 2.0 * f64(d) * f64(c) + 5.0 * f64(c), d * c + c, 4, e * d + e * c + 4));
  m.layers.back().kernels = make_kernel_list({gemm(1, c, d), memory(2 * c * e + 4, 2 * c * e + 4)});
  return m;
}

}  // namespace pipescope
