// The mixture of experts' share of a transformer block
// (costmodels/model_families.h, MoeParams; docs/models.md, "Mixture of
// experts"): its kernels and what it adds to the block's costs in place of
// the dense MLP's.

#include <cstdint>
#include <utility>
#include <vector>

#include "costmodels/transformer_parts.h"

namespace pipescope::family_parts {

namespace {

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

}  // namespace

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

}  // namespace pipescope::family_parts
