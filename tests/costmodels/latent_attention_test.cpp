// The transformer family's multi-head latent attention
// (costmodels/model_families.h, LatentAttention): parameters, FLOPs and stash
// by hand, under context parallelism too, and DeepSeek-V3's published size.

#include <gtest/gtest.h>

#include <stdexcept>

#include "costmodels/model_families.h"

namespace pipescope {
namespace {

// Latent attention by hand: h = 8, a = 2 heads, q = 6, r = 4, qk_nope 3,
// rope 1, v 5, s = 4, fp32, fused attention, no dropout, dense MLP f = 16.
TransformerParams small_latent() {
  TransformerParams p;
  p.layers = 1;
  p.d_model = 8;
  p.d_ff = 16;
  p.heads = 2;
  p.seq_len = 4;
  p.vocab = 10;
  p.dtype = DType::kFp32;
  p.dropout = false;
  p.mla = {6, 4, 3, 1, 5};
  return p;
}

TEST(LatentAttention, BlockByHand) {
  const LayerSpec l = make_transformer(small_latent()).layers[1];
  // Down projections h(q + r + rope) = 88, norms 2(q + r) = 20, up projections
  // a(q(3 + 1) + r(3 + 5)) = 112, output a v h = 80 and its bias 8; the MLP
  // 2hf + f + h = 280 and two LayerNorms 4h = 32.
  EXPECT_EQ(l.params, 88 + 20 + 112 + 80 + 8 + 280 + 32);
  // 2s x the projections' 280 weights, 4shf = 2048 for the MLP, and the core
  // 2 s^2 a (qk + v) = 576.
  EXPECT_DOUBLE_EQ(l.fwd_flops, 2.0 * 4 * 280 + 2048 + 576);
  EXPECT_DOUBLE_EQ(l.core_fwd_flops, 576);
  // Stash, e = 4: the LayerNorm, QKV and MLP inputs 4esh = 512; the latents'
  // norm and up-projection inputs and the rotary key es(2q + 2r + 1) = 336;
  // Q, K, V and the output projection's input esa(2 * 4 + 2 * 5) = 576; the
  // MLP's 2esf = 512; the log-sum-exp 4as = 32.
  EXPECT_EQ(l.stash_bytes, 512 + 336 + 576 + 512 + 32);
}

TensorSplit context_split(int C, int T = 1, bool by_heads = false) {
  TensorSplit split;
  split.ways = T;
  split.context = C;
  split.heads_over_context = by_heads;
  return split;
}

const Kernel& attention_kernel(const LayerSpec& l) {
  for (const Kernel& k : *l.kernels) {
    if (k.kind == Kernel::Kind::kAttention) return k;
  }
  throw std::logic_error("the block has no attention kernel");
}

// The same block under context parallelism over C = 2: each device holds
// s / C = 2 of the 4 tokens.
TEST(LatentAttention, UnderContextParallelismEachDeviceComputesItsShare) {
  const TransformerParams p = small_latent();
  EXPECT_EQ(tensor_split_problem(p, context_split(2)), "");
  const LayerSpec whole = make_transformer(p).layers[1];
  const LayerSpec share = make_transformer(p, "m", context_split(2)).layers[1];
  // The projections' 2s x 280 and the MLP's 4shf = 1024 over the device's
  // s = 2 tokens, and its 2 queries against all 4 keys: 2 s^2 C a (qk + v)
  // = 2 x 4 x 2 x 2 x 9 = 288, half the whole block's 576.
  EXPECT_DOUBLE_EQ(share.core_fwd_flops, 288);
  EXPECT_DOUBLE_EQ(share.fwd_flops, 2.0 * 2 * 280 + 1024 + 288);
  EXPECT_DOUBLE_EQ(share.fwd_flops * 2, whole.fwd_flops);
  EXPECT_EQ(share.stash_bytes * 2, whole.stash_bytes);
  EXPECT_EQ(share.params, whole.params);
  // The ring passes the up-projected keys (qk = 4 a head) and values (v = 5)
  // of the device's 2 tokens and 2 heads, e = 4: 2 x 2 x 9 x 4 = 144 bytes
  // in its one step; the queries and output are 4 and 5 wide, 72 on average.
  EXPECT_EQ(share.cp_steps, 1);
  EXPECT_EQ(share.cp_bytes, 144);
  EXPECT_EQ(share.cp_q_bytes, 72);
  const Kernel& ring = attention_kernel(share);
  EXPECT_EQ(ring.seq, 4);
  EXPECT_EQ(ring.context_parallel, 2);
  EXPECT_EQ(ring.launches, 2);
  EXPECT_EQ(ring.head_dim, 4);
  EXPECT_EQ(ring.value_dim, 5);
}

TEST(LatentAttention, UnderContextAndTensorParallelismEachDeviceSendsItsHeads) {
  const TransformerParams p = small_latent();
  // T = 2: one head a device, 2 x 1 x 9 x 4 = 72 bytes a step.
  EXPECT_EQ(make_transformer(p, "m", context_split(2, 2)).layers[1].cp_bytes, 72);
  // The all-to-all form trades heads for the sequence: one launch over
  // whole sequences, the same bytes to trade.
  const LayerSpec a2a = make_transformer(p, "m", context_split(2, 1, true)).layers[1];
  EXPECT_EQ(attention_kernel(a2a).launches, 1);
  EXPECT_EQ(a2a.cp_bytes, 144);
  EXPECT_DOUBLE_EQ(a2a.core_fwd_flops, 288);
}

// DeepSeek-V3 (DeepSeek-AI 2024: "671B total parameters with 37B activated
// for each token"): 61 blocks of width 7168, the first 3 dense (18432 wide),
// 256 routed experts of 2048 and one shared, 8 a token, latent attention of
// 128 heads (q 1536, kv 512, qk 128 + 64, v 128), a vocabulary of 129280;
// the multi-token prediction module is not counted.
TEST(LatentAttention, DeepSeekV3HasItsPublishedParameters) {
  TransformerParams p;
  p.layers = 61;
  p.d_model = 7168;
  p.d_ff = 27648;
  p.heads = 128;
  p.seq_len = 4096;
  p.vocab = 129280;
  p.dtype = DType::kBf16;
  p.moe = {256, 8, 3072, 3072, 3};
  p.mla = {1536, 512, 128, 64, 128};
  const ModelSpec m = make_transformer(p);
  EXPECT_NEAR(static_cast<double>(m.total_params()) / 671e9, 1.0, 0.001);
  double matrix_flops = 0.0;
  for (const LayerSpec& l : m.layers) matrix_flops += l.fwd_flops - l.core_fwd_flops;
  const double active = matrix_flops / 2.0 / 4096.0 + 129280.0 * 7168.0;
  EXPECT_NEAR(active / 37e9, 1.0, 0.02);
}

}  // namespace
}  // namespace pipescope
