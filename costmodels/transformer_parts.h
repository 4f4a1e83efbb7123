#pragma once
// The pieces the families are built from (internal to costmodels): a layer's
// fields and the kernels' constructors; for the transformer family, its sizes
// under a tensor split and what one block costs. model_families.cpp builds
// the layers, transformer_block.cpp gives a block's costs and kernels, and
// latent_attention.cpp and mixture_of_experts.cpp latent attention's and the
// mixture's share of them.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "costmodels/model.h"
#include "costmodels/model_families.h"
#include "costmodels/size_checks.h"

namespace pipescope::family_parts {

inline LayerSpec layer(std::string name, Flops fwd, std::int64_t params, Bytes out, Bytes stash) {
  LayerSpec l;
  l.name = std::move(name);
  l.fwd_flops = fwd;
  l.bwd_flops = 2.0 * fwd;
  l.params = params;
  l.out_bytes = out;
  l.stash_bytes = stash;
  return l;
}

inline Kernel gemm(std::int64_t rows, std::int64_t n, std::int64_t k) {
  Kernel g;
  g.kind = Kernel::Kind::kGemm;
  g.rows = rows;
  g.n = n;
  g.k = k;
  return g;
}

// A memory-bound kernel moving `fwd` bytes forward and `bwd` backward.
inline Kernel memory(Bytes fwd, Bytes bwd) {
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
inline Kernel norm_kernel(bool fused, std::int64_t elements, Bytes e) {
  if (fused) return memory(2 * elements * e, 3 * elements * e);
  const bool cast = e != 4;
  const Bytes casts = cast ? 2 * e + 8 : 0;
  Kernel k = memory(elements * (casts + 20 + 2 * e), elements * (casts + 44 + 4 * e));
  k.launches = cast ? 8 : 6;
  k.bwd_launches = cast ? 12 : 10;
  return k;
}

// Attention's softmax over `elements` scores of e bytes, between the two
// batched products. Megatron-LM's fused scale-mask-softmax: one kernel that
// reads and writes them, and a backward that reads the probabilities and
// their gradient and writes one (2e and 3e bytes an element). PyTorch's
// eager attention (`eager`; Hugging Face's, `softmax(x, dtype=float32)
// .to(dtype)`): the scale (2e), the mask's addition (2e), the softmax,
// which writes fp32 (e + 4), and the cast down (4 + e), 6e + 8 bytes in 4
// kernels; backward the cast's (e + 4), the softmax's, which reads the
// fp32 probabilities and their gradient and writes the input's type
// (8 + e), and the scale's (2e; the mask's addition passes its gradient
// on), 4e + 12 in 3 kernels. fp32 scores need no cast: 6e in 3 kernels,
// 5e in 2.
inline Kernel softmax_kernel(bool eager, std::int64_t elements, Bytes e) {
  if (!eager) return memory(2 * elements * e, 3 * elements * e);
  const bool cast = e != 4;
  Kernel k = cast ? memory(elements * (6 * e + 8), elements * (4 * e + 12))
                  : memory(elements * 6 * e, elements * 5 * e);
  k.launches = cast ? 4 : 3;
  k.bwd_launches = cast ? 3 : 2;
  return k;
}

// The sizes make_transformer builds from: s = seq_len, h = d_model, a = heads,
// v = vocab, f = d_ff, d_kv the width of the K and V projections, e bytes per
// activation element; t devices share each layer, c of them its replicated
// activations, v_t vocabulary rows per device; ep devices share the routed
// experts (expert parallelism), cp devices the sequence (context
// parallelism: s is seq_len / cp).
struct TransformerDims {
  // q: the queries' and the attention output's width (heads x head width),
  // d_kv: the keys' and values' (kv_heads x head width).
  std::int64_t s = 0, h = 0, a = 0, v = 0, f = 0, d_kv = 0, q = 0;
  Bytes e = 0;
  std::int64_t t = 1, c = 1, v_t = 0, ep = 1;
  std::int64_t cp = 1;  // C, the devices that share the sequence (s is one's share)
  // u, the devices that split each routed expert (t, or 1 under sequence
  // parallelism: TensorSplit::expert_ways); t / u groups of u share the s tokens.
  std::int64_t etp = 1;
  std::int64_t expert_tokens() const { return s * etp / t; }
};

// What one Transformer block costs on one device: its forward FLOPs, its
// parameters, the bytes it stashes (and of those, attention's core) and its
// output.
struct BlockCosts {
  Flops fwd = 0.0;
  std::int64_t params = 0;
  Bytes stash = 0;
  Bytes core_stash = 0;
  Bytes out = 0;
  Flops core_fwd = 0.0;            // attention's core: the scores and the product with the values
  std::int64_t expert_params = 0;  // of params, the routed experts' under expert parallelism
};

// The FLOPs, parameters, stash and output of one block under the split of
// `d`; with `moe`, of a block whose MLP is the mixture of experts; with
// `sliding`, of one whose attention slides over p.sliding_window positions.
BlockCosts block_costs(const TransformerParams& p, const TransformerDims& d, bool moe,
                       bool sliding);

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
std::vector<Kernel> block_kernels(const TransformerParams& p, std::int64_t f, std::int64_t d_kv,
                                  TensorSplit split, bool moe, bool sliding);

// The dense MLP's kernels: up projection, bias-GeLU, down projection; f
// wide, split by t.
void append_dense_mlp(std::vector<Kernel>& k, std::int64_t s, std::int64_t h, std::int64_t f,
                      std::int64_t t, Bytes e);

// Attention's core for `heads` heads of s tokens: one fused kernel, or the
// unfused scores, softmax, dropout and product with the values; queries and
// keys `qk` wide a head, values `v`; the fused kernel over each query's last
// `window` keys (0: all before it). Under context parallelism over
// `ring` devices (fused only) s is one device's share and the kernel
// attends over the whole sequence, one launch a step of the ring; one launch
// in all with `by_heads` (the all-to-all form, whole sequences of a C-th of
// the heads: the same work).
void append_attention_core(std::vector<Kernel>& k, const TransformerParams& p, std::int64_t s,
                           std::int64_t heads, std::int64_t qk, std::int64_t v, Bytes e,
                           std::int64_t window = 0, int ring = 1, bool by_heads = false);

// latent_attention.cpp: latent attention's kernels from the block's layer norm
// to its output projection, and its share of a block's costs in place of the
// usual attention's.
void append_latent_attention(std::vector<Kernel>& k, const TransformerParams& p, std::int64_t s,
                             std::int64_t t, std::int64_t c, Bytes e, int ring = 1,
                             bool by_heads = false);
BlockCosts latent_attention_costs(const TransformerParams& p, const TransformerDims& d,
                                  const BlockCosts& usual);

// mixture_of_experts.cpp: the mixture's kernels and its share of a block's
// costs, in place of the dense MLP's, on one of t devices of a tensor split,
// of ep of an expert split and of u that split each expert (t or 1).
void append_moe_mlp(std::vector<Kernel>& k, const MoeParams& moe, std::int64_t s, std::int64_t h,
                    std::int64_t t, std::int64_t c, std::int64_t ep, std::int64_t u, Bytes e);
BlockCosts moe_block_costs(const TransformerParams& p, const TransformerDims& d,
                           const BlockCosts& dense);

}  // namespace pipescope::family_parts
