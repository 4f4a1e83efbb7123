#include "costmodels/model_families.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "costmodels/check.h"
#include "costmodels/size_checks.h"

namespace pipescope {

namespace {

double f64(std::int64_t x) {
  return static_cast<double>(x);
}

LayerSpec layer(std::string name, Flops fwd, std::int64_t params, Bytes out, Bytes stash) {
  LayerSpec l;
  l.name = std::move(name);
  l.fwd_flops = fwd;
  l.bwd_flops = 2.0 * fwd;
  l.params = params;
  l.out_bytes = out;
  l.stash_bytes = stash;
  return l;
}

Kernel gemm(std::int64_t rows, std::int64_t n, std::int64_t k) {
  Kernel g;
  g.kind = Kernel::Kind::kGemm;
  g.rows = rows;
  g.n = n;
  g.k = k;
  return g;
}

// A memory-bound kernel moving `fwd` bytes forward and `bwd` backward.
Kernel memory(Bytes fwd, Bytes bwd) {
  Kernel m;
  m.kind = Kernel::Kind::kMemory;
  m.bytes = fwd;
  m.bwd_bytes = bwd;
  return m;
}

// A layer norm over `elements` activations of e bytes. Fused (Megatron-LM's
// LayerNorm, Transformer Engine's): one kernel that reads and writes them,
// and a backward that reads the gradient and the input and writes one. Not
// fused: the ops of Hugging Face's LlamaRMSNorm as PyTorch runs them one by
// one, bytes per element: the cast up (e + 4), the square (8), the mean (4),
// eps and rsqrt per row (nothing per element), the product (8), the cast
// down (4 + e), the product with the weight (2e): 36 for e = 2 in 8
// kernels; autograd's backward of each (the weight's product 4e, the cast
// e + 4, the product 16, the square 12, the mean 4, the sum of the two
// paths 12, the cast 4 + e): 64 in 12 kernels. fp32 activations need no
// casts (28 in 6, 60 in 10).
Kernel norm_kernel(bool fused, std::int64_t elements, Bytes e) {
  if (fused) return memory(2 * elements * e, 3 * elements * e);
  const bool cast = e != 4;
  const Bytes casts = cast ? 2 * e + 8 : 0;
  Kernel k = memory(elements * (casts + 20 + 2 * e), elements * (casts + 44 + 4 * e));
  k.launches = cast ? 8 : 6;
  k.bwd_launches = cast ? 12 : 10;
  return k;
}

// The kernels of one Transformer block per sample on one of t devices, as
// Megatron-LM runs it: layer norm, QKV projection, attention, output
// projection, bias-dropout-add, layer norm, MLP up projection, bias-GeLU, down
// projection (or, with `moe`, the mixture of experts), bias-dropout-add. A memory-bound kernel
// reads its inputs and writes its outputs once forward; its backward reads the output gradient and
// what it saved and writes the input gradient. e: bytes per element; dropout
// masks are 1 byte per element. Under tensor parallelism the projections
// split by columns (QKV, MLP up: n / t) or rows (output, MLP down: k / t) and
// attention by heads; the layer norms and dropout-adds run on the whole s x h
// on every device, or on s / t rows of it with sequence parallelism.
// The dense MLP's kernels: up projection, bias-GeLU, down projection; f
// wide, split by t.
void append_dense_mlp(std::vector<Kernel>& k, std::int64_t s, std::int64_t h, std::int64_t f,
                      std::int64_t t, Bytes e) {
  k.push_back(gemm(s, f / t, h));
  k.push_back(memory(2 * s * (f / t) * e, 3 * s * (f / t) * e));  // bias + GeLU
  k.push_back(gemm(s, h, f / t));
}

// `count` products of `rows` x `depth` by depth x `n`, one per expert, as one
// grouped kernel; the s x top_k routed tokens split over them as evenly as
// they go (the first s * top_k mod experts take one more), so the products'
// FLOPs sum to the tokens' exactly.
void append_expert_gemms(std::vector<Kernel>& k, std::int64_t routed, std::int64_t experts,
                         std::int64_t n, std::int64_t depth) {
  const std::int64_t rows = routed / experts, more = routed % experts;
  for (const auto& [r, count] : {std::pair{rows + 1, more}, std::pair{rows, experts - more}}) {
    if (count == 0 || r == 0) continue;
    Kernel g = gemm(r, n, depth);
    g.batch_count = count;
    g.grouped = true;
    k.push_back(g);
  }
}

// The mixture of experts' kernels for s tokens on one of t devices, as
// megatron-core runs it without expert parallelism: the router's product
// over the device's s / c tokens and its softmax and top-k in fp32; the
// permutation that copies each token once for each of its experts; each
// expert's up projection, bias-GeLU and down projection over its tokens
// (grouped GEMMs, the width split by t); the combination that sums each
// token's top_k outputs with the router's weights; the shared MLP, if any.
void append_moe_mlp(std::vector<Kernel>& k, const MoeParams& moe, std::int64_t s, std::int64_t h,
                    std::int64_t t, std::int64_t c, Bytes e) {
  const std::int64_t E = moe.experts, routed = s * moe.experts_per_token;
  const std::int64_t f = moe.expert_d_ff / t;
  k.push_back(gemm(s / c, E, h));
  k.push_back(memory(s / c * E * (e + 4), s / c * E * (8 + e)));  // softmax, top-k
  k.push_back(memory(s * h * e + routed * (h * e + 4), routed * (h * e + 4) + s * h * e));
  append_expert_gemms(k, routed, E, f, h);
  k.push_back(memory(2 * routed * f * e, 3 * routed * f * e));  // bias + GeLU
  append_expert_gemms(k, routed, E, h, f);
  k.push_back(memory(routed * (h * e + 4) + s * h * e, s * h * e + routed * (2 * h * e + 4)));
  if (moe.shared_d_ff > 0) append_dense_mlp(k, s, h, moe.shared_d_ff, t, e);
}

std::vector<Kernel> block_kernels(const TransformerParams& p, std::int64_t f, std::int64_t d_kv,
                                  TensorSplit split, bool moe) {
  const std::int64_t t = split.ways;
  const std::int64_t s = p.seq_len, h = p.d_model, a = p.heads / t, d = h / p.heads;
  const std::int64_t rows = split.sequence ? s / t : s;  // of the layer norms and dropout-adds
  const Bytes e = dtype_bytes(p.dtype);
  const Bytes mask = p.dropout ? 1 : 0;
  const Kernel layer_norm = norm_kernel(p.fused_norm, rows * h, e);
  // Residual add with dropout on the branch: reads branch and residual, writes the
  // sum and the mask; backward reads the gradient and the mask, writes one.
  const Kernel dropout_add = memory(rows * h * (3 * e + mask), rows * h * (2 * e + mask));
  std::vector<Kernel> k;
  k.push_back(layer_norm);
  k.push_back(gemm(s, (h + 2 * d_kv) / t, h));
  const auto core = [&k](Kernel kernel) {
    kernel.attention_core = true;
    k.push_back(kernel);
  };
  if (p.fused_attention) {
    Kernel att;
    att.kind = Kernel::Kind::kAttention;
    att.seq = s;
    att.head_dim = d;
    att.batch_count = a;
    att.causal = true;
    core(att);
  } else {
    // Scores Q.K^T per head, a fused scale-mask-softmax over the a x s x s
    // scores (backward: reads probabilities and their gradient, writes one),
    // dropout on the probabilities, then the product with V.
    Kernel scores = gemm(s, s, d);
    scores.batch_count = a;
    scores.has_weight = false;
    Kernel context = gemm(s, d, s);
    context.batch_count = a;
    context.has_weight = false;
    core(scores);
    core(memory(2 * a * s * s * e, 3 * a * s * s * e));
    if (p.dropout) core(memory(a * s * s * (2 * e + 1), a * s * s * (2 * e + 1)));
    core(context);
  }
  k.push_back(gemm(s, h, h / t));
  k.push_back(dropout_add);
  k.push_back(layer_norm);
  if (moe) {
    append_moe_mlp(k, p.moe, s, h, t, split.sequence ? t : 1, e);
  } else {
    append_dense_mlp(k, s, h, f, t, e);
  }
  k.push_back(dropout_add);
  return k;
}

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
  return "";
}

namespace {

// The sizes make_transformer builds from: s = seq_len, h = d_model, a = heads,
// v = vocab, f = d_ff, d_kv the width of the K and V projections, e bytes per
// activation element; t devices share each layer, c of them its replicated
// activations, v_t vocabulary rows per device.
struct TransformerDims {
  std::int64_t s = 0, h = 0, a = 0, v = 0, f = 0, d_kv = 0;
  Bytes e = 0;
  std::int64_t t = 1, c = 1, v_t = 0;
};

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
  const std::int64_t s = p.seq_len, h = p.d_model, a = p.heads, v = p.vocab;
  const std::int64_t f = p.d_ff == 0 ? 4 * h : p.d_ff;
  // Width of the K and V projections: h for multi-head attention, h * kv / a with
  // grouped-query attention (kv key/value heads shared by a / kv query heads each).
  const std::int64_t kv = p.kv_heads == 0 ? a : p.kv_heads;
  PS_CHECK(kv == a || h % a == 0, "grouped-query attention needs heads to divide d_model");
  const std::int64_t d_kv = kv == a ? h : h / a * kv;
  const Bytes e = dtype_bytes(p.dtype);
  const std::string split_problem = tensor_split_problem(p, split);
  PS_CHECK(split_problem.empty(), split_problem);
  // t devices share each layer; c of them its replicated activations (those of
  // the layer norms, dropouts and residuals: t with sequence parallelism).
  const std::int64_t t = split.ways, c = split.sequence ? t : 1;
  const std::int64_t v_t = (v + t - 1) / t;  // vocabulary rows per device, padded
  return {s, h, a, v, f, d_kv, e, t, c, v_t};
}

// Throws std::overflow_error when a block's or the head's stash per sample, or
// the parameters, do not fit in 64-bit integers.
void require_transformer_fits(const TransformerParams& p, const TransformerDims& d) {
  const double S = f64(d.s), H = f64(d.h), F = f64(d.f), A = f64(d.a), V = f64(d.v), E = f64(d.e);
  require_fits(S * (H * (8 * E + 2) + 2 * E * F) + A * S * S * (2 * E + 1),
               "the bytes one block stashes per sample");
  require_fits(2 * S * H * E + S * V * std::max(E, 4.0) + 4 * S,
               "the bytes the head stashes per sample");
  require_fits(f64(p.layers) * (4 * H * H + 2 * H * F + F + 9 * H) + 2 * V * H + S * H,
               "the parameters");
  const MoeParams& moe = p.moe;
  if (moe.enabled()) {
    const double Ex = moe.experts, K = moe.experts_per_token;
    const double Fe = f64(moe.expert_d_ff), Fs = f64(moe.shared_d_ff);
    require_fits(f64(p.layers) * (Ex * (2 * H * Fe + Fe + 2 * H) + 2 * H * Fs + Fs),
                 "the experts' parameters");
    require_fits(S * K * (H * E + 2 * E * Fe + 8) + S * (2 * E * Fs + 4 * Ex),
                 "the bytes a mixture-of-experts block stashes per sample");
  }
}

// The embedding layer: the token lookup, the positions and their kernels.
LayerSpec embedding_layer(const TransformerParams& p, const TransformerDims& d) {
  const std::int64_t s = d.s, h = d.h, t = d.t, c = d.c, v_t = d.v_t;
  const Bytes e = d.e;
  // Token lookup is a gather (no FLOPs); adding the positions costs s*h. The stash
  // is the int32 token ids, needed to scatter the table gradient.
  // Under tensor parallelism each device holds v / t rows of the token table
  // (and the whole position table), writes zeros for the tokens outside them,
  // and the group all-reduces the s x h result.
  const std::int64_t position_params = p.learned_positions ? s * h : 0;
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

// What one Transformer block costs on one device: its forward FLOPs, its
// parameters, the bytes it stashes (and of those, attention's core) and its
// output.
struct BlockCosts {
  Flops fwd = 0.0;
  std::int64_t params = 0;
  Bytes stash = 0;
  Bytes core_stash = 0;
  Bytes out = 0;
};

BlockCosts moe_block_costs(const TransformerParams& p, const TransformerDims& d,
                           const BlockCosts& dense);

// The FLOPs, parameters, stash and output of one block under the split of `d`;
// with `moe`, of a block whose MLP is the mixture of experts.
BlockCosts block_costs(const TransformerParams& p, const TransformerDims& d, bool moe) {
  const std::int64_t s = d.s, h = d.h, a = d.a, f = d.f, d_kv = d.d_kv, t = d.t, c = d.c;
  const Bytes e = d.e;
  // Matmul FLOPs (Narayanan et al. 2021, "Efficient Large-Scale Language Model
  // Training on GPU Clusters Using Megatron-LM"): QKV and output projections 8sh^2,
  // MLP 4shf, scores and attention over V 4s^2h; 24sh^2 + 4s^2h for f = 4h. With
  // grouped-query attention K and V take 4sh*d_kv instead of 4sh^2 (Q and output
  // projection stay 4sh^2); the scores are unchanged.
  // Every product splits over the t devices.
  const Flops block_fwd = (4.0 * f64(s) * f64(h) * (f64(h) + f64(d_kv)) +
                           4.0 * f64(s) * f64(h) * f64(f) + 4.0 * f64(s) * f64(s) * f64(h)) /
                          f64(t);
  // Q and output projection weights and biases 2h^2 + 2h, K and V 2h*d_kv + 2d_kv
  // (4h^2 + 4h together without GQA), MLP 2hf + f + h, two LayerNorms (gain, bias)
  // 4h. Split over t devices: the column-split QKV and MLP up projections with
  // their biases, the row-split output and MLP down weights; the biases of the
  // last two (added after the all-reduce) and the LayerNorms stay whole.
  const std::int64_t block_params =
      (2 * h * h + h + 2 * h * d_kv + 2 * d_kv + 2 * h * f + f) / t + 2 * h + 4 * h;
  // Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
  // Models", section 4.1, for any element size e and any f, dropout masks 1 byte:
  //   attention: QKV input e*sh, Q and K 2e*sh, softmax output e*as^2, its dropout
  //     mask 1*as^2 and output e*as^2, V e*sh, output projection input e*sh, its
  //     dropout mask 1*sh;
  //   MLP: first linear input e*sh, GeLU input e*sf, second linear input e*sf,
  //     dropout mask 1*sh;
  //   two LayerNorm inputs 2e*sh (the first is the block input).
  // Sum: s*(h*(8e + 2) + 2e*f) + a*s^2*(2e + 1); e = 2, f = 4h gives their
  // sh*(34 + 5as/h). With grouped-query attention K and V are e*s*d_kv each.
  // Without dropout the masks and the dropped probabilities go: s*(8e*h + 2e*f) +
  // e*a*s^2.
  // Under tensor parallelism (their section 4.2.2) the two LayerNorm inputs,
  // the QKV and MLP inputs and the two dropout masks, s*h*(4e + 2), are whole
  // on every device (split by t with sequence parallelism, 4.2.3), the rest
  // split by t: their sh*(10 + 24/t + 5as/(ht)) and sh*(34/t + 5as/(ht)).
  // The a*s^2 terms are attention's core, which selective recomputation drops
  // (their section 4.3: sh*34/t with sequence parallelism). Fused attention
  // (FlashAttention) never writes them: its backward rebuilds the scores from
  // Q, K, V and the log-sum-exp of each row of each head it kept, 4as bytes
  // (fp32), so its stash is that core instead (Dao et al. 2022, section 3.1).
  const Bytes mask = p.dropout ? 1 : 0;
  const Bytes replicated_stash = s * h * (4 * e + 2 * mask);
  const Bytes split_stash = s * (2 * e * h + 2 * e * d_kv + 2 * e * f);
  const Bytes core_stash = (p.fused_attention ? 4 * a * s : a * s * s * (e + mask * (e + 1))) / t;
  const Bytes block_stash = replicated_stash / c + split_stash / t + core_stash;
  // What crosses a cut: the s x h output, whole on every device of the group
  // (each sends its copy to its peer of the next stage), or its s / t rows
  // with sequence parallelism.
  const Bytes block_out = s * h * e / c;
  const BlockCosts dense{block_fwd, block_params, block_stash, core_stash, block_out};
  return moe ? moe_block_costs(p, d, dense) : dense;
}

// The dense block's costs with its MLP's replaced by the mixture's. Per
// device, top_k = k experts a token, E experts of width f_e and a shared MLP
// of width f_s, each split by t as the dense MLP is:
//   FLOPs: the experts' 4skhf_e and the shared MLP's 4shf_s over t, and the
//     router's 2hE over the device's s / c tokens (whole, not split);
//   parameters: each expert (2hf_e + f_e) / t and its whole down bias h, the
//     shared MLP likewise, the router's h x E;
//   stash: each token's copy for each of its experts (e*skh, whole on every
//     device, as megatron-core gathers the tokens before the experts), the
//     experts' GeLU and down-projection inputs 2e*skf_e and the shared MLP's
//     2e*sf_s over t, the router's fp32 probabilities 4sE and each token's
//     expert indices and weights 8sk over c.
BlockCosts moe_block_costs(const TransformerParams& p, const TransformerDims& d,
                           const BlockCosts& dense) {
  const MoeParams& moe = p.moe;
  const std::int64_t s = d.s, h = d.h, t = d.t, c = d.c, f = d.f;
  const std::int64_t E = moe.experts, k = moe.experts_per_token;
  const std::int64_t fe = moe.expert_d_ff, fs = moe.shared_d_ff;
  const Bytes e = d.e;
  BlockCosts b = dense;
  b.fwd += (4.0 * f64(s) * f64(h) * (f64(k) * f64(fe) + f64(fs) - f64(f))) / f64(t) +
           2.0 * f64(s / c) * f64(h) * f64(E);
  const std::int64_t shared_params = fs > 0 ? (2 * h * fs + fs) / t + h : 0;
  b.params += E * ((2 * h * fe + fe) / t + h) + shared_params + h * E - ((2 * h * f + f) / t + h);
  b.stash += e * s * k * h + 2 * e * s * (k * fe + fs - f) / t + (4 * s * E + 8 * s * k) / c;
  return b;
}

// Appends the p.layers Transformer blocks, block0 on, with their kernels and
// tensor-parallel all-reduces.
void append_blocks(ModelSpec& m, const TransformerParams& p, const TransformerDims& d,
                   TensorSplit split) {
  const std::int64_t s = d.s, h = d.h, t = d.t;
  const Bytes e = d.e;
  const BlockCosts dense_costs = block_costs(p, d, false);
  const KernelList dense_kernels = make_kernel_list(block_kernels(p, d.f, d.d_kv, split, false));
  const bool moe = p.moe.enabled();
  const BlockCosts moe_costs = moe ? block_costs(p, d, true) : dense_costs;
  const KernelList moe_kernels =
      moe ? make_kernel_list(block_kernels(p, d.f, d.d_kv, split, true)) : dense_kernels;
  for (int i = 0; i < p.layers; ++i) {
    const bool mixture = p.moe.in_block(i);
    const BlockCosts& costs = mixture ? moe_costs : dense_costs;
    m.layers.push_back(
        layer("block" + std::to_string(i), costs.fwd, costs.params, costs.out, costs.stash));
    LayerSpec& block = m.layers.back();
    block.kernels = mixture ? moe_kernels : dense_kernels;
    block.core_stash_bytes = costs.core_stash;
    block.core_fwd_flops = 4.0 * f64(s) * f64(s) * f64(h) / f64(t);
    if (t > 1) {  // after the output and the MLP down projections; in the backward before
      block.tp_fwd_allreduces = block.tp_bwd_allreduces = 2;
      block.tp_fwd_bytes = block.tp_bwd_bytes = 2 * s * h * e;
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
  if (t > 1) {
    const ModelSpec whole = make_transformer(p, name);
    m.whole_flops_per_sample = whole.fwd_flops_per_sample() + whole.bwd_flops_per_sample();
  }
  m.transformer = std::make_shared<const TransformerParams>(p);
  m.dtype = p.dtype;
  m.input_bytes = d.s * 4;  // int32 token ids
  m.tokens_per_sample = d.s;

  require_transformer_fits(p, d);
  m.layers.push_back(embedding_layer(p, d));
  append_blocks(m, p, d, split);
  m.layers.push_back(head_layer(p, d));
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
