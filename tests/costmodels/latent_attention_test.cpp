// The transformer family's multi-head latent attention
// (costmodels/model_families.h, LatentAttention): parameters, FLOPs and stash
// by hand, and DeepSeek-V3's published size.

#include <gtest/gtest.h>

#include "costmodels/model_families.h"

namespace pipescope {
namespace {

// Latent attention by hand: h = 8, a = 2 heads, q = 6, r = 4, qk_nope 3,
// rope 1, v 5, s = 4, fp32, fused attention, no dropout, dense MLP f = 16.
TEST(LatentAttention, BlockByHand) {
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
  const LayerSpec l = make_transformer(p).layers[1];
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
