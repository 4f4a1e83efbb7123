// Multi-head latent attention's share of a transformer block
// (costmodels/model_families.h, LatentAttention; docs/models.md, "Latent
// attention"): its kernels and what it adds to the block's costs in place of
// the usual attention's.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "costmodels/transformer_parts.h"

namespace pipescope::family_parts {

// As megatron-core runs it: the down projections to the latents, duplicated
// on every device of the group over its s / c tokens, with their norms; the
// up projections of the gathered latents split by heads; attention's core
// with keys qk_nope + qk_rope and values v_head_dim wide (under context
// parallelism a launch a step of the ring, or one over whole sequences of
// a C-th of the heads `by_heads`); the output projection split by rows.
void append_latent_attention(std::vector<Kernel>& k, const TransformerParams& p, std::int64_t s,
                             std::int64_t t, std::int64_t c, Bytes e, int ring, bool by_heads) {
  const LatentAttention& m = p.mla;
  const std::int64_t h = p.d_model, a = p.heads / t, local = s / c;
  if (m.q_lora_rank > 0) {
    k.push_back(gemm(local, m.q_lora_rank, h));
    k.push_back(norm_kernel(p.fused_norm, local * m.q_lora_rank, e));
    k.push_back(gemm(s, a * m.qk_head_dim(), m.q_lora_rank));
  } else {
    k.push_back(gemm(s, a * m.qk_head_dim(), h));
  }
  k.push_back(gemm(local, m.kv_lora_rank + m.qk_rope_head_dim, h));
  k.push_back(norm_kernel(p.fused_norm, local * m.kv_lora_rank, e));
  k.push_back(gemm(s, a * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank));
  append_attention_core(k, p, s, a, m.qk_head_dim(), m.v_head_dim, e, 0, ring, by_heads);
  k.push_back(gemm(s, h, a * m.v_head_dim));
}

// The usual attention's projections, their FLOPs and what they stash give way
// to latent attention's. Per device, with a heads, q = q_lora_rank (the
// query's input width h where it is 0), r = kv_lora_rank, d_r the rotary
// width, d_qk = qk_nope + d_r and d_v:
//   FLOPs: the down projections 2(s / c)h(q + r + d_r), duplicated; the up
//     projections 2s(q a d_qk + r a (qk_nope + d_v)) and the output
//     projection 2s a d_v h over t; attention's core 2s^2 a (d_qk + d_v) / t,
//     C times that under context parallelism over C (the s queries of the
//     device meet the keys of all C shares);
//   parameters: h(q + r + d_r) and the two norms' gains and shifts 2(q + r),
//     whole; the up and output projections over t (no biases, as DeepSeek's
//     have none; the output projection's bias the family adds stays);
//   stash: the latents' norm and up-projection inputs and the rotary key,
//     e s(2q + 2r + d_r), whole; Q, K, V and the output projection's input,
//     e s a (2 d_qk + 2 d_v), over t.
BlockCosts latent_attention_costs(const TransformerParams& p, const TransformerDims& d,
                                  const BlockCosts& usual) {
  const LatentAttention& m = p.mla;
  const std::int64_t s = d.s, h = d.h, a = d.a, d_kv = d.d_kv, t = d.t, c = d.c;
  const std::int64_t q = m.q_lora_rank, r = m.kv_lora_rank, rope = m.qk_rope_head_dim;
  const std::int64_t qk = m.qk_head_dim(), v = m.v_head_dim, q_in = q > 0 ? q : h;
  const Bytes e = d.e;
  BlockCosts b = usual;
  const double S = f64(s), H = f64(h), A = f64(a);
  b.core_fwd = 2.0 * S * S * f64(d.cp) * A * f64(qk + v) / f64(t);
  b.fwd += -4.0 * S * H * (H + f64(d_kv)) / f64(t) - usual.core_fwd +
           2.0 * f64(s / c) * H * f64(q + r + rope) +
           2.0 * S * A * (f64(q_in) * f64(qk) + f64(r) * f64(m.qk_nope_head_dim + v) + f64(v) * H) /
               f64(t) +
           b.core_fwd;
  b.params += -(2 * h * h + h + 2 * h * d_kv + 2 * d_kv) / t + h * (q + r + rope) + 2 * (q + r) +
              a * (q_in * qk + r * (m.qk_nope_head_dim + v) + v * h) / t;
  b.stash += e * s * (2 * q + 2 * r + rope) + e * s * (a * (2 * qk + 2 * v) - 2 * h - 2 * d_kv) / t;
  return b;
}

}  // namespace pipescope::family_parts
