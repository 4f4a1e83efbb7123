// One transformer block's costs and kernels on one device
// (costmodels/transformer_parts.h), dense or with a mixture of experts.

#include <cstdint>
#include <vector>

#include "costmodels/transformer_parts.h"

namespace pipescope::family_parts {

void append_dense_mlp(std::vector<Kernel>& k, std::int64_t s, std::int64_t h, std::int64_t f,
                      std::int64_t t, Bytes e) {
  Kernel up = gemm(s, f / t, h);
  up.te_gemm = Kernel::TeGemm::kFc1;
  k.push_back(up);
  k.push_back(memory(2 * s * (f / t) * e, 3 * s * (f / t) * e));  // bias + GeLU
  Kernel down = gemm(s, h, f / t);
  down.te_gemm = Kernel::TeGemm::kFc2;
  k.push_back(down);
}

void append_attention_core(std::vector<Kernel>& k, const TransformerParams& p, std::int64_t s,
                           std::int64_t heads, std::int64_t qk, std::int64_t v, Bytes e,
                           std::int64_t window, int ring, bool by_heads) {
  const auto core = [&k](Kernel kernel) {
    kernel.attention_core = true;
    k.push_back(kernel);
  };
  if (p.fused_attention) {
    Kernel att;
    att.kind = Kernel::Kind::kAttention;
    att.seq = s * ring;
    att.context_parallel = ring;
    att.launches = att.bwd_launches = by_heads ? 1 : ring;
    att.head_dim = qk;
    att.value_dim = v == qk ? 0 : v;
    att.batch_count = heads;
    att.causal = true;
    att.window = window;
    core(att);
    return;
  }
  // Scores Q.K^T per head, a fused scale-mask-softmax over the heads x s x s
  // scores (backward: reads probabilities and their gradient, writes one),
  // dropout on the probabilities, then the product with V.
  Kernel scores = gemm(s, s, qk);
  scores.batch_count = heads;
  scores.has_weight = false;
  Kernel context = gemm(s, v, s);
  context.batch_count = heads;
  context.has_weight = false;
  core(scores);
  core(softmax_kernel(p.eager_attention, heads * s * s, e));
  if (p.dropout) core(memory(heads * s * s * (2 * e + 1), heads * s * s * (2 * e + 1)));
  core(context);
}

std::vector<Kernel> block_kernels(const TransformerParams& p, std::int64_t f, std::int64_t d_kv,
                                  TensorSplit split, bool moe, bool sliding) {
  const std::int64_t t = split.ways;
  const std::int64_t s = p.seq_len / split.context, h = p.d_model, a = p.heads / t;
  const std::int64_t d = p.head_dim > 0 ? p.head_dim : h / p.heads;  // a head's width
  const std::int64_t rows = split.sequence ? s / t : s;  // of the layer norms and dropout-adds
  const Bytes e = dtype_bytes(p.dtype);
  const Bytes mask = p.dropout ? 1 : 0;
  const Kernel layer_norm = norm_kernel(p.fused_norm, rows * h, e);
  // Residual add with dropout on the branch: reads branch and residual, writes the
  // sum and the mask; backward reads the gradient and the mask, writes one.
  const Kernel dropout_add = memory(rows * h * (3 * e + mask), rows * h * (2 * e + mask));
  std::vector<Kernel> k;
  k.push_back(layer_norm);
  if (p.mla.enabled()) {
    append_latent_attention(k, p, s, t, split.sequence ? t : 1, e, split.context,
                            split.heads_over_context);
  } else {
    Kernel qkv = gemm(s, (p.heads * d + 2 * d_kv) / t, h);
    qkv.te_gemm = Kernel::TeGemm::kQkv;
    k.push_back(qkv);
    append_attention_core(k, p, s, a, d, d, e, sliding ? p.sliding_window : 0, split.context,
                          split.heads_over_context);
    Kernel output = gemm(s, h, a * d);
    output.te_gemm = Kernel::TeGemm::kProj;
    k.push_back(output);
  }
  k.push_back(dropout_add);
  k.push_back(layer_norm);
  if (moe) {
    append_moe_mlp(k, p.moe, s, h, t, split.sequence ? t : 1, split.experts,
                   split.expert_ways_or_t(), e);
  } else {
    append_dense_mlp(k, s, h, f, t, e);
  }
  k.push_back(dropout_add);
  return k;
}

BlockCosts block_costs(const TransformerParams& p, const TransformerDims& d, bool moe,
                       bool sliding) {
  const std::int64_t s = d.s, h = d.h, a = d.a, f = d.f, d_kv = d.d_kv, q = d.q, t = d.t;
  const std::int64_t c = d.c;
  const Bytes e = d.e;
  // Matmul FLOPs (Narayanan et al. 2021, "Efficient Large-Scale Language Model
  // Training on GPU Clusters Using Megatron-LM"): QKV and output projections 8sh^2,
  // MLP 4shf, scores and attention over V 4s^2h; 24sh^2 + 4s^2h for f = 4h. With
  // grouped-query attention K and V take 4sh*d_kv instead of 4sh^2 (Q and output
  // projection stay 4sh^2); the scores are unchanged. With heads of a width of
  // their own, q = heads x head_dim in place of h: Q and the output projection
  // 4shq, the scores and the product with V 4s^2q.
  // Every product splits over the t devices. Under context parallelism s is
  // one device's share of the sequence, and its queries meet every key of
  // the C shares: C s^2 pairs' worth of the scores (4 C s^2 q).
  // Attention over a sliding window (fused: the unfused form computes every
  // score and masks) computes its share of the causal pairs.
  const double window_share = sliding && p.fused_attention
                                  ? attended_pairs(s, p.sliding_window) / attended_pairs(s, 0)
                                  : 1.0;
  const Flops core_fwd = 4.0 * f64(s) * f64(s) * f64(d.cp) * f64(q) * window_share / f64(t);
  const Flops block_fwd =
      (4.0 * f64(s) * f64(h) * (f64(q) + f64(d_kv)) + 4.0 * f64(s) * f64(h) * f64(f)) / f64(t) +
      core_fwd;
  // Q and output projection weights and Q's bias 2hq + q, K and V 2h*d_kv + 2d_kv
  // (4h^2 + 3h together without GQA, q = h), MLP 2hf + f, the output's and the
  // MLP's down biases 2h, two LayerNorms (gain, bias) 4h. Split over t devices:
  // the column-split QKV and MLP up projections with their biases, the
  // row-split output and MLP down weights; the biases of the last two (added
  // after the all-reduce) and the LayerNorms stay whole.
  const std::int64_t block_params =
      (2 * h * q + q + 2 * h * d_kv + 2 * d_kv + 2 * h * f + f) / t + 2 * h + 4 * h;
  // Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
  // Models", section 4.1, for any element size e and any f, dropout masks 1 byte:
  //   attention: QKV input e*sh, Q and K 2e*sh, softmax output e*as^2, its dropout
  //     mask 1*as^2 and output e*as^2, V e*sh, output projection input e*sh, its
  //     dropout mask 1*sh;
  //   MLP: first linear input e*sh, GeLU input e*sf, second linear input e*sf,
  //     dropout mask 1*sh;
  //   two LayerNorm inputs 2e*sh (the first is the block input).
  // Sum: s*(h*(8e + 2) + 2e*f) + a*s^2*(2e + 1); e = 2, f = 4h gives their
  // sh*(34 + 5as/h). With grouped-query attention K and V are e*s*d_kv each;
  // with heads of their own width Q and the output projection's input e*s*q.
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
  //
  // Under FP8 with Transformer Engine (p.fp8_stash) the GEMMs keep FP8 copies
  // of their inputs, g = 1 byte an element: the QKV and MLP inputs
  // (replicated) take g instead of e. The output projection's input takes g
  // beside unfused attention, but e + g beside fused attention, whose kernel
  // keeps its e-byte output for its own backward while the projection keeps
  // its FP8 copy. The second linear's input (the activation's output) is
  // f wide after a GeLU but 2f/3 after a gated activation, whose two input
  // matrices are written here as two of width f (1.5 times its intermediate
  // width); which one a block has is not known, so its FP8 copy saves
  // (e - g) of 2f/3 columns: exact for a gated MLP, a third less than a
  // GeLU MLP saves, never less than the run keeps. The layer norm inputs,
  // Q, K, V and the activation's input stay at e. Dense blocks only
  // (BlockCosts' MoE and latent attention adjust the e terms).
  const Bytes mask = p.dropout ? 1 : 0;
  const bool fp8_stash = p.fp8 && p.fp8_stash && !moe && !p.mla.enabled();
  const Bytes g = fp8_stash ? 1 : e;
  const Bytes projection_in = !fp8_stash ? e : p.fused_attention ? e + g : g;
  const Bytes replicated_stash = s * h * (2 * e + 2 * g + 2 * mask);
  const Bytes activation_out_saved = s * (e - g) * 2 * f / 3;
  const Bytes split_stash =
      s * ((e + projection_in) * q + 2 * e * d_kv + 2 * e * f) - activation_out_saved;
  // Unfused, the probabilities the product with V reads (e; with dropout
  // also its mask and the dropped copy); eager in 16 bits, the softmax's
  // fp32 output besides, which its backward reads.
  const bool fp32_copy = p.eager_attention && e != 4;
  const Bytes probabilities = fp32_copy ? 4 + e + mask : e + mask * (e + 1);
  const Bytes core_stash = (p.fused_attention ? 4 * a * s : a * s * s * probabilities) / t;
  const Bytes block_stash = replicated_stash / c + split_stash / t + core_stash;
  // What crosses a cut: the s x h output, whole on every device of the group
  // (each sends its copy to its peer of the next stage), or its s / t rows
  // with sequence parallelism.
  const Bytes block_out = s * h * e / c;
  const BlockCosts usual{block_fwd, block_params, block_stash, core_stash, block_out, core_fwd};
  const BlockCosts dense = p.mla.enabled() ? latent_attention_costs(p, d, usual) : usual;
  return moe ? moe_block_costs(p, d, dense) : dense;
}

}  // namespace pipescope::family_parts
