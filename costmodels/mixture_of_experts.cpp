// The mixture of experts' share of a transformer block
// (costmodels/model_families.h, MoeParams; docs/models.md, "Mixture of
// experts"): its kernels and what it adds to the block's costs in place of
// the dense MLP's.

#include <cmath>
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
// megatron-core runs it: the router's product over the device's s / c tokens
// and its softmax and top-k in fp32; the permutation that copies each token
// once for each of its experts; each expert's up projection, bias-GeLU and
// down projection over its tokens (grouped GEMMs, the width split by the u
// devices that split an expert); the combination that sums each token's
// top_k outputs with the router's weights; the shared MLP, if any (split by
// t as the dense MLP). Each group of u devices handles s u / t of the
// tokens: all s where the experts split as the dense layers (u = t), the
// device's own s / t where they stay whole (u = 1, under sequence
// parallelism). Under expert parallelism (ep > 1) the device holds
// experts / ep of the experts and computes them over the tokens it
// receives (received_expert_tokens); with more than one expert of its own it
// sorts what it received by expert before them and back after (the
// all-to-alls themselves are the layer's, LayerSpec::ep_alltoalls).
void append_moe_mlp(std::vector<Kernel>& k, const MoeParams& moe, std::int64_t s, std::int64_t h,
                    std::int64_t t, std::int64_t c, std::int64_t ep, std::int64_t u, Bytes e) {
  const std::int64_t E = moe.experts, tokens = s * u / t, routed = tokens * moe.experts_per_token;
  const std::int64_t local = E / ep,
                     received = received_expert_tokens(moe, tokens, static_cast<int>(ep));
  const std::int64_t f = moe.expert_d_ff / u;
  k.push_back(gemm(s / c, E, h));
  k.push_back(memory(s / c * E * (e + 4), s / c * E * (8 + e)));  // softmax, top-k
  k.push_back(memory(tokens * h * e + routed * (h * e + 4), routed * (h * e + 4) + tokens * h * e));
  const bool sorts = ep > 1 && local > 1;
  if (sorts) k.push_back(memory(2 * received * h * e, 2 * received * h * e));
  append_expert_gemms(k, received, local, f, h);
  k.push_back(memory(2 * received * f * e, 3 * received * f * e));  // bias + GeLU
  append_expert_gemms(k, received, local, h, f);
  if (sorts) k.push_back(memory(2 * received * h * e, 2 * received * h * e));
  k.push_back(
      memory(routed * (h * e + 4) + tokens * h * e, tokens * h * e + routed * (2 * h * e + 4)));
  if (moe.shared_d_ff > 0) append_dense_mlp(k, s, h, moe.shared_d_ff, t, e);
}

// The dense block's costs with its MLP's replaced by the mixture's. Per
// device, top_k = k experts a token, E experts of width f_e (E / ep of them
// on the device, each split by u: t, or 1 for whole experts) and a shared
// MLP of width f_s split by t as the dense MLP is, and
// r = received_expert_tokens the routed copies the device's experts compute
// of the s u / t tokens its group of u handles (sk without expert
// parallelism where u = t):
//   FLOPs: the experts' 4skhf_e and the shared MLP's 4shf_s over t, and the
//     router's 2hE over the device's s / c tokens (whole, not split): the
//     mean device's, what the model computes, however the tokens fall;
//   parameters: each of its experts (2hf_e + f_e) / u and its whole down
//     bias h, the shared MLP's (2hf_s + f_s) / t and h, the router's h x E;
//   stash: the experts' inputs e*rh (the group's tokens whole on each of its
//     devices, as megatron-core gathers them before the experts), their
//     GeLU and down-projection inputs 2e*rf_e / u, the shared MLP's
//     2e*sf_s / t, the router's fp32 probabilities 4sE and each token's
//     expert indices and weights 8sk over c.
BlockCosts moe_block_costs(const TransformerParams& p, const TransformerDims& d,
                           const BlockCosts& dense) {
  const MoeParams& moe = p.moe;
  const std::int64_t s = d.s, h = d.h, t = d.t, c = d.c, f = d.f, u = d.etp;
  const std::int64_t E = moe.experts, k = moe.experts_per_token;
  const std::int64_t fe = moe.expert_d_ff, fs = moe.shared_d_ff;
  const std::int64_t r = received_expert_tokens(moe, d.expert_tokens(), static_cast<int>(d.ep));
  const Bytes e = d.e;
  BlockCosts b = dense;
  b.fwd += (4.0 * f64(s) * f64(h) * (f64(k) * f64(fe) + f64(fs) - f64(f))) / f64(t) +
           2.0 * f64(s / c) * f64(h) * f64(E);
  const std::int64_t shared_params = fs > 0 ? (2 * h * fs + fs) / t + h : 0;
  b.expert_params = E / d.ep * ((2 * h * fe + fe) / u + h);
  b.params += b.expert_params + shared_params + h * E - ((2 * h * f + f) / t + h);
  if (d.ep == 1) b.expert_params = 0;
  b.stash +=
      e * r * h + 2 * e * (r * fe * (t / u) + s * (fs - f)) / t + (4 * s * E + 8 * s * k) / c;
  return b;
}

}  // namespace pipescope::family_parts

namespace pipescope {

std::int64_t received_expert_tokens(const MoeParams& moe, std::int64_t tokens,
                                    int expert_parallel) {
  const std::int64_t routed = tokens * moe.experts_per_token;
  if (expert_parallel == 1) return routed;
  return static_cast<std::int64_t>(std::ceil(moe.imbalance * static_cast<double>(routed)));
}

}  // namespace pipescope
