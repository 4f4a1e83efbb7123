// Context parallelism as make_transformer splits a model: one device's share
// of each sample's sequence, its attention over the whole of it, the ring's
// exchanges of keys and values, each against a hand computation.

#include <gtest/gtest.h>

#include <cstdint>

#include "costmodels/device.h"
#include "costmodels/kernel_cost_model.h"
#include "costmodels/model_families.h"

namespace pipescope {
namespace {

// s = 64, h = 32, a = 4 heads, 2 key/value heads (d_kv = 16), f = 128,
// V = 1000, bf16 (e = 2), fused attention, two blocks.
TransformerParams small() {
  TransformerParams p;
  p.layers = 2;
  p.d_model = 32;
  p.d_ff = 128;
  p.heads = 4;
  p.kv_heads = 2;
  p.seq_len = 64;
  p.vocab = 1000;
  p.dtype = DType::kBf16;
  return p;
}

TensorSplit context(int C, int T = 1, bool sequence = false) {
  TensorSplit split;
  split.ways = T;
  split.sequence = sequence;
  split.context = C;
  return split;
}

const LayerSpec& block(const ModelSpec& m) {
  return m.layers[1];
}

TEST(ContextSplit, EachDeviceComputesAndKeepsItsShareOfTheSequence) {
  // With fused attention every cost of a block is linear in the tokens a
  // device holds but the scores, which pair its s / C queries with all s
  // keys: C (s / C)^2 pairs' worth, 1 / C of the whole's. So the block's
  // FLOPs, stash and output are the whole block's / C exactly.
  const ModelSpec whole = make_transformer(small());
  for (const int C : {2, 4}) {
    const ModelSpec share = make_transformer(small(), "m", context(C));
    EXPECT_EQ(share.context_parallel, C);
    EXPECT_DOUBLE_EQ(block(share).fwd_flops, block(whole).fwd_flops / C) << C;
    EXPECT_DOUBLE_EQ(block(share).core_fwd_flops, block(whole).core_fwd_flops / C) << C;
    EXPECT_EQ(block(share).stash_bytes * C, block(whole).stash_bytes) << C;
    EXPECT_EQ(block(share).out_bytes * C, block(whole).out_bytes) << C;
    EXPECT_EQ(block(share).params, block(whole).params) << C;
    EXPECT_EQ(share.input_bytes * C, whole.input_bytes) << C;
    // A sample is still seq_len tokens; a device does 1 / C of its FLOPs.
    EXPECT_EQ(share.tokens_per_sample, 64);
    EXPECT_DOUBLE_EQ(share.model_flops_per_device_sample(),
                     whole.model_flops_per_device_sample() / C);
  }
}

TEST(ContextSplit, TheRingSendsEachDevicesKeysAndValues) {
  // C - 1 steps, each sending this device's K and V block: 2 (s / C) d_kv e
  // = 2 * 32 * 16 * 2 = 2048 bytes a sample for C = 2; under T = 2 each
  // device sends its key/value heads' half of it.
  const ModelSpec two = make_transformer(small(), "m", context(2));
  EXPECT_EQ(block(two).cp_steps, 1);
  EXPECT_EQ(block(two).cp_bytes, 2048);
  const ModelSpec four = make_transformer(small(), "m", context(4, 2));
  EXPECT_EQ(block(four).cp_steps, 3);
  EXPECT_EQ(block(four).cp_bytes, 2 * 16 * 8 * 2);
  EXPECT_EQ(two.layers.front().cp_steps, 0);  // the embedding has no attention
  EXPECT_EQ(two.layers.back().cp_steps, 0);   // nor has the head
  EXPECT_EQ(block(make_transformer(small())).cp_steps, 0);
}

TEST(ContextSplit, AttentionRunsOneKernelAStepOverAllThePairsShare) {
  const ModelSpec m = make_transformer(small(), "m", context(4));
  const Kernel* attention = nullptr;
  for (const Kernel& k : *block(m).kernels) {
    if (k.kind == Kernel::Kind::kAttention) attention = &k;
  }
  ASSERT_NE(attention, nullptr);
  EXPECT_EQ(attention->seq, 64);
  EXPECT_EQ(attention->context_parallel, 4);
  EXPECT_EQ(attention->launches, 4);
  EXPECT_EQ(attention->bwd_launches, 4);
  // The GEMMs run over the device's 16 tokens.
  EXPECT_EQ((*block(m).kernels)[1].rows, 16);

  // On the kernel model: 1 / C of the causal pairs (64^2 / 2 / 4 = 512),
  // 2 FLOPs a pair per head and width (8 + 8), 4 heads: 65,536 FLOPs at
  // 16 x 0.5 FLOP/s forward, 2.5 times them at 16 x 0.25 backward, and a
  // launch's overhead for each of the C kernels.
  KernelTable t;
  t.present = true;
  t.multiprocessors = 4;
  t.tile_m = t.tile_n = 2;
  t.gemm_efficiency = 0.5;
  t.attention_fwd_efficiency = 0.5;
  t.attention_bwd_efficiency = 0.25;
  t.memory_efficiency = 1.0;
  t.kernel_overhead_s = 1.0;
  const KernelTimes kt = kernel_times(*attention, 1, t, 16.0, 16.0, 1e12, 2);
  EXPECT_DOUBLE_EQ(kt.forward, 4.0 + 65536.0 / 8.0);
  EXPECT_DOUBLE_EQ(kt.backward, 4.0 + 2.5 * 65536.0 / 4.0);
  EXPECT_EQ(kt.forward_launches, 4);
  EXPECT_EQ(kt.backward_launches, 4);
}

// What the ring's backward steps hide behind: the attention core's own
// backward, as the kernel-level model times that kernel.
TEST(ContextSplit, TheCoresBackwardIsItsKernelsBackward) {
  TransformerParams p = small();
  p.layers = 1;
  const ModelSpec m = make_transformer(p, "m", context(2));
  const Device device = find_device_preset("a100-80g")->device;
  const KernelCostModel cost(device, DType::kBf16, false, 16.0);
  const LayerSpec& b = block(m);
  double core_backward = 0.0, core_forward = 0.0;
  for (const Kernel& k : *b.kernels) {
    if (!k.attention_core) continue;
    const KernelTimes kt = kernel_times(k, 2, device.kernels, device.peak_flops(DType::kBf16),
                                        device.peak_flops(DType::kBf16), device.mem_bandwidth, 2);
    core_forward += kt.forward;
    core_backward += kt.backward;
  }
  ASSERT_GT(core_backward, 0.0);
  EXPECT_EQ(cost.core_recompute(b, 2), seconds_to_simtime(core_forward));
  EXPECT_EQ(cost.core_backward(b, 2), seconds_to_simtime(core_backward));
}

TEST(ContextSplit, LearnedPositionsStayWholeOnEveryDevice) {
  TransformerParams p = small();
  p.learned_positions = true;
  EXPECT_EQ(make_transformer(p, "m", context(2)).layers.front().params,
            make_transformer(p).layers.front().params);
}

TEST(ContextSplit, RefusesWhatItDoesNotModel) {
  TransformerParams p = small();
  EXPECT_EQ(tensor_split_problem(p, context(32)), "");  // 64 tokens in 64 chunks
  EXPECT_NE(tensor_split_problem(p, context(64)).find("do not divide"), std::string::npos);
  EXPECT_NE(tensor_split_problem(p, context(32, 2, true)).find("2 C T"), std::string::npos);
  EXPECT_EQ(tensor_split_problem(p, context(0)),
            "context parallelism needs at least 1 device, got 0");
  p.fused_attention = false;
  EXPECT_NE(tensor_split_problem(p, context(2)).find("unfused"), std::string::npos);
  EXPECT_EQ(tensor_split_problem(p, context(1)), "");
  p = small();
  p.sliding_window = 16;
  EXPECT_NE(tensor_split_problem(p, context(2)).find("sliding"), std::string::npos);
}

}  // namespace
}  // namespace pipescope
