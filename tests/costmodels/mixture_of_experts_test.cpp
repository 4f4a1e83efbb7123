// The transformer family's mixture of experts (costmodels/model_families.h,
// MoeParams): parameters, FLOPs, stash and tensor splits, by hand and against
// published models.

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "costmodels/model_families.h"

namespace pipescope {
namespace {

// h = 4, f = 16, s = 4, a = 2, V = 10, fp32 (e = 4), fused attention, no
// dropout; 4 experts of width 8, 2 a token, a shared MLP of width 4.
TransformerParams tiny_moe() {
  TransformerParams p;
  p.layers = 2;
  p.d_model = 4;
  p.d_ff = 16;
  p.heads = 2;
  p.seq_len = 4;
  p.vocab = 10;
  p.dtype = DType::kFp32;
  p.dropout = false;
  p.moe = {4, 2, 8, 4, 0};
  return p;
}

TEST(MixtureOfExperts, BlockByHand) {
  const TransformerParams p = tiny_moe();
  TransformerParams dense = p;
  dense.moe = {};
  const LayerSpec d = make_transformer(dense).layers[1];
  const LayerSpec l = make_transformer(p).layers[1];
  // The dense MLP's 4shf = 1024 FLOPs give way to the experts' 4skhf_e =
  // 1024, the shared MLP's 4shf_s = 256 and the router's 2shE = 128.
  EXPECT_EQ(l.fwd_flops, d.fwd_flops - 1024 + 1024 + 256 + 128);
  EXPECT_EQ(l.bwd_flops, 2 * l.fwd_flops);
  // The dense MLP's 2hf + f + h = 148 give way to 4 experts of 2hf_e + f_e +
  // h = 76, the shared MLP's 2hf_s + f_s + h = 40 and the router's hE = 16.
  EXPECT_EQ(l.params, d.params - 148 + 4 * 76 + 40 + 16);
  // Stash: each token's copy for each of its 2 experts e*skh = 128, the
  // experts' GeLU and down-projection inputs 2e*skf_e = 512 and the shared
  // MLP's 2e*sf_s = 128 for the dense MLP's 2e*sf = 512, the router's fp32
  // probabilities 4sE = 64 and indices and weights 8sk = 64.
  EXPECT_EQ(l.stash_bytes, d.stash_bytes + 128 + 512 + 128 - 512 + 64 + 64);
  EXPECT_EQ(l.out_bytes, d.out_bytes);
  EXPECT_EQ(l.core_fwd_flops, d.core_fwd_flops);
}

// Under FP8 the mixture's block keeps its stash in dtype (its experts' inputs
// are not modelled as Transformer Engine's FP8 copies); a dense block under
// the same flags keeps its GEMM inputs in one byte.
TEST(MixtureOfExperts, Fp8KeepsTheMixtureStashInDtype) {
  TransformerParams p = tiny_moe();
  const Bytes plain = make_transformer(p).layers[1].stash_bytes;
  p.fp8 = true;
  p.fp8_stash = true;
  EXPECT_EQ(make_transformer(p).layers[1].stash_bytes, plain);
  p.moe = {};
  TransformerParams in_dtype = p;
  in_dtype.fp8_stash = false;
  EXPECT_LT(make_transformer(p).layers[1].stash_bytes,
            make_transformer(in_dtype).layers[1].stash_bytes);
}
TEST(MixtureOfExperts, TheFirstDenseLayersKeepTheDenseMlp) {
  TransformerParams p = tiny_moe();
  p.layers = 3;
  p.moe.dense_layers = 2;
  TransformerParams dense = p;
  dense.moe = {};
  const ModelSpec m = make_transformer(p);
  const ModelSpec d = make_transformer(dense);
  EXPECT_EQ(m.layers[1].params, d.layers[1].params);
  EXPECT_EQ(m.layers[2].params, d.layers[2].params);
  EXPECT_EQ(*m.layers[2].kernels, *d.layers[2].kernels);
  EXPECT_NE(m.layers[3].params, d.layers[3].params);
  EXPECT_NE(*m.layers[3].kernels, *m.layers[1].kernels);
  EXPECT_TRUE(p.moe.in_block(2));
  EXPECT_FALSE(p.moe.in_block(1));
}

// Each expert splits over the tensor-parallel devices as the dense MLP does;
// the router and each expert's down bias are whole on every device.
TEST(MixtureOfExperts, TensorParallelismSplitsTheExperts) {
  TransformerParams p = tiny_moe();
  const LayerSpec whole = make_transformer(p).layers[1];
  const LayerSpec half = make_transformer(p, "t", {2, false}).layers[1];
  // Attention (2hh + h + 2hh + 2h) / 2 + h + 4h = 58; experts 4 * ((2hf_e +
  // f_e) / 2 + h) = 4 * 40; shared (2hf_s + f_s) / 2 + h = 22; router 16.
  EXPECT_EQ(half.params, 58 + 4 * 40 + 22 + 16);
  EXPECT_EQ(whole.params, 96 + 4 * 76 + 40 + 16);
  // Every product splits but the router's 2shE = 128, which each device runs
  // on its s rows (s / 2 with sequence parallelism).
  EXPECT_DOUBLE_EQ(half.fwd_flops, (whole.fwd_flops - 128) / 2 + 128);
  const LayerSpec sequence = make_transformer(p, "t", {2, true}).layers[1];
  EXPECT_DOUBLE_EQ(sequence.fwd_flops, whole.fwd_flops / 2);

  EXPECT_EQ(tensor_split_problem(p, {2, false}), "");
  p.moe.expert_d_ff = 9;
  EXPECT_EQ(tensor_split_problem(p, {2, false}),
            "2 tensor-parallel devices do not divide expert_d_ff 9");
  p.moe.expert_d_ff = 8;
  p.moe.shared_d_ff = 3;
  EXPECT_EQ(tensor_split_problem(p, {2, false}),
            "2 tensor-parallel devices do not divide shared_d_ff 3");
}

// Whole experts beside T = 2 under sequence parallelism (megatron-core's
// expert tensor parallelism 1): each device routes its own s / 2 tokens to
// experts it holds whole, where split experts see the group's s tokens at
// half their width. The same FLOPs; each expert's parameters whole; half
// the routed tokens' stash; no tensor-parallel sum after the routed
// experts, and half the all-to-all's bytes.
TEST(MixtureOfExperts, WholeExpertsBesideTensorParallelism) {
  TransformerParams p = tiny_moe();
  const TensorSplit split{2, true};
  TensorSplit whole = split;
  whole.expert_ways = 1;
  EXPECT_EQ(whole.expert_fold(), 2);
  EXPECT_EQ(split.expert_fold(), 1);
  const LayerSpec s = make_transformer(p, "t", split).layers[1];
  const LayerSpec w = make_transformer(p, "t", whole).layers[1];
  EXPECT_DOUBLE_EQ(w.fwd_flops, s.fwd_flops);
  // Attention 58, 4 experts of 2hf_e + f_e + h = 76 (not (2hf_e + f_e) / 2
  // + h = 40), the shared MLP's 22, the router's 16.
  EXPECT_EQ(w.params, 58 + 4 * 76 + 22 + 16);
  EXPECT_EQ(s.params, 58 + 4 * 40 + 22 + 16);
  // The experts' inputs e*rh: r = s / 2 x k = 4 copies instead of 8 (-64
  // bytes); their GeLU and down-projection inputs 2e*r*f_e: 4 x 8 wide
  // instead of 8 x 4, the same.
  EXPECT_EQ(w.stash_bytes, s.stash_bytes - 64);
  // The shared MLP still sums over the T (with the attention's, 2 x s x h x
  // e = 128 bytes); without it only the attention's does.
  EXPECT_EQ(w.tp_fwd_allreduces, 2);
  EXPECT_EQ(w.tp_fwd_bytes, s.tp_fwd_bytes);
  p.moe.shared_d_ff = 0;
  const LayerSpec alone = make_transformer(p, "t", whole).layers[1];
  EXPECT_EQ(alone.tp_fwd_allreduces, 1);
  EXPECT_EQ(alone.tp_bwd_allreduces, 1);
  EXPECT_EQ(alone.tp_fwd_bytes, 64);
  // The expert GEMMs: 4 copies over the 4 experts, one row each, f_e = 8
  // wide (up, h = 4 deep) and back (down, 8 deep).
  int expert_gemms = 0;
  for (const Kernel& k : *alone.kernels) {
    if (!k.grouped) continue;
    ++expert_gemms;
    EXPECT_EQ(k.rows, 1);
    EXPECT_EQ(k.batch_count, 4);
    EXPECT_EQ(k.n * k.k, 8 * 4);
    EXPECT_TRUE((k.n == 8 && k.k == 4) || (k.n == 4 && k.k == 8)) << k.n << " x " << k.k;
  }
  EXPECT_EQ(expert_gemms, 2);
  // E = 2 of them: 2 experts whole a device, the device's own 2 tokens' 4
  // copies of h = 4 fp32 elements to trade, 64 bytes against 128.
  TensorSplit spread = whole;
  spread.experts = 2;
  TensorSplit spread_split = split;
  spread_split.experts = 2;
  const LayerSpec e = make_transformer(tiny_moe(), "t", spread).layers[1];
  EXPECT_EQ(e.expert_params, 2 * 76);
  EXPECT_EQ(e.ep_bytes, 64);
  EXPECT_EQ(make_transformer(tiny_moe(), "t", spread_split).layers[1].ep_bytes, 128);
}

TEST(MixtureOfExperts, WholeExpertsNeedSequenceParallelism) {
  const TransformerParams p = tiny_moe();
  TensorSplit whole{2, false};
  whole.expert_ways = 1;
  EXPECT_EQ(tensor_split_problem(p, whole),
            "whole experts (expert tensor parallelism 1) beside tensor parallelism 2 take each "
            "device's own tokens: they need sequence parallelism");
  whole.sequence = true;
  EXPECT_EQ(tensor_split_problem(p, whole), "");
  whole.expert_ways = 3;
  EXPECT_EQ(tensor_split_problem(p, whole),
            "expert tensor parallelism 3 is modelled as 1 or the tensor parallelism (2)");
  whole.expert_ways = 2;  // T: the experts split as the dense layers do
  EXPECT_EQ(tensor_split_problem(p, whole), "");
}

// Under expert parallelism a device holds experts / E of the experts and
// computes them over the tokens the E devices route to them: the same FLOPs
// as a whole device's on a balanced router, and two all-to-alls of each
// token's copies.
TEST(MixtureOfExperts, ExpertParallelismHoldsAShareOfTheExperts) {
  const TransformerParams p = tiny_moe();
  const LayerSpec whole = make_transformer(p).layers[1];
  const ModelSpec m = make_transformer(p, "e", {1, false, 2});
  const LayerSpec& l = m.layers[1];
  EXPECT_EQ(m.expert_parallel, 2);
  // 2 of the 4 experts of 2hf_e + f_e + h = 76 parameters each.
  EXPECT_EQ(l.expert_params, 2 * 76);
  EXPECT_EQ(l.params, whole.params - 2 * 76);
  EXPECT_DOUBLE_EQ(l.fwd_flops, whole.fwd_flops);
  EXPECT_EQ(l.stash_bytes, whole.stash_bytes);
  // The dispatch and the combination, each of the s x k = 8 token copies of
  // h = 4 fp32 elements: 128 bytes a sample.
  EXPECT_EQ(l.ep_alltoalls, 2);
  EXPECT_EQ(l.ep_bytes, 128);
  EXPECT_EQ(whole.ep_alltoalls, 0);
  EXPECT_EQ(whole.expert_params, 0);
  // With more than one expert a device sorts what it received by expert
  // and back: two kernels more than the whole block's.
  EXPECT_EQ(l.kernels->size(), whole.kernels->size() + 2);
  // E = 4: one expert each, nothing to sort.
  const LayerSpec one = make_transformer(p, "e", {1, false, 4}).layers[1];
  EXPECT_EQ(one.kernels->size(), whole.kernels->size());
  EXPECT_EQ(one.expert_params, 76);
}

// The busiest device computes `imbalance` times the mean share of the routed
// tokens: its experts' GEMMs and their stash grow by it, the model's FLOPs
// do not.
TEST(MixtureOfExperts, TheBusiestDeviceComputesTheImbalance) {
  TransformerParams p = tiny_moe();
  p.moe.imbalance = 1.5;
  const LayerSpec balanced = make_transformer(tiny_moe(), "e", {1, false, 2}).layers[1];
  const LayerSpec busiest = make_transformer(p, "e", {1, false, 2}).layers[1];
  EXPECT_DOUBLE_EQ(busiest.fwd_flops, balanced.fwd_flops);
  // r = 1.5 x 8 = 12 copies instead of 8: their inputs e*rh (+64) and the
  // GeLU and down-projection inputs 2e*rf_e (+256).
  EXPECT_EQ(busiest.stash_bytes, balanced.stash_bytes + 64 + 256);
  EXPECT_EQ(received_expert_tokens(p.moe, 4, 2), 12);
  EXPECT_EQ(received_expert_tokens(p.moe, 4, 1), 8);  // a whole device computes them all
  // The expert GEMMs: 12 rows over 2 experts, 6 each.
  int expert_gemms = 0;
  for (const Kernel& k : *busiest.kernels) {
    if (!k.grouped) continue;
    ++expert_gemms;
    EXPECT_EQ(k.rows, 6);
    EXPECT_EQ(k.batch_count, 2);
  }
  EXPECT_EQ(expert_gemms, 2);
}

TEST(MixtureOfExperts, ExpertSplitProblems) {
  TransformerParams p = tiny_moe();
  EXPECT_EQ(tensor_split_problem(p, {1, false, 4}), "");
  EXPECT_EQ(tensor_split_problem(p, {1, false, 3}),
            "3 expert-parallel devices do not divide the 4 experts");
  p.moe.imbalance = 2.5;
  EXPECT_EQ(tensor_split_problem(p, {1, false, 2}),
            "an imbalance of 2.5 is more than the busiest of 2 expert-parallel devices can "
            "receive (at most 2)");
  EXPECT_EQ(tensor_split_problem(p, {1, false, 4}), "");
  p.moe = {};
  EXPECT_EQ(tensor_split_problem(p, {1, false, 2}),
            "expert parallelism spreads a mixture's experts; the model has none");
}

// Mixtral 8x7B (Jiang et al. 2024: "46.7B total parameters", "12.9B active
// parameters per token"): 32 blocks of width 4096, 32 heads with 8 key/value
// heads, 8 SwiGLU experts of 14336 (21504 as two matrices), 2 a token, a
// vocabulary of 32000, untied.
TEST(MixtureOfExperts, MixtralHasItsPublishedParameters) {
  TransformerParams p;
  p.layers = 32;
  p.d_model = 4096;
  p.d_ff = 21504;
  p.heads = 32;
  p.kv_heads = 8;
  p.seq_len = 4096;
  p.vocab = 32000;
  p.dtype = DType::kBf16;
  p.moe = {8, 2, 21504, 0, 0};
  const ModelSpec m = make_transformer(p);
  // 46,702,792,704 in MixtralForCausalLM; the family's biases and LayerNorm
  // shifts add 0.02 %.
  EXPECT_NEAR(static_cast<double>(m.total_params()) / 46'702'792'704.0, 1.0, 0.0005);
  // Active parameters: a token's matrix FLOPs are twice the weights it
  // passes through; with the token table's h a token, 12.9B.
  double matrix_flops = 0.0;
  for (const LayerSpec& l : m.layers) matrix_flops += l.fwd_flops - l.core_fwd_flops;
  const double active = matrix_flops / 2.0 / 4096.0 + 32000.0 * 4096.0;
  EXPECT_NEAR(active / 12.9e9, 1.0, 0.005);
}

}  // namespace
}  // namespace pipescope
