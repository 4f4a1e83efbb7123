#include "costmodels/kernel_cost_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "costmodels/cluster.h"
#include "costmodels/device.h"
#include "costmodels/model_families.h"

namespace pipescope {
namespace {

// A toy device: 4 SMs, 2 x 2 tiles, a peak of 16 FLOP/s at half efficiency
// (2 FLOP/s per SM), 1000 B/s of memory fully achieved, no fixed costs.
KernelTable toy_table() {
  KernelTable t;
  t.present = true;
  t.multiprocessors = 4;
  t.tile_m = 2;
  t.tile_n = 2;
  t.gemm_efficiency = 0.5;
  t.gemm_k_overhead = 0.0;
  t.attention_fwd_efficiency = 0.5;
  t.attention_bwd_efficiency = 0.25;
  t.memory_efficiency = 1.0;
  t.kernel_overhead_s = 0.0;
  t.link_efficiency = 0.5;
  return t;
}

TEST(KernelCostModel, GemmRunsWholeTilesInWavesOfOnePerSm) {
  const KernelTable t = toy_table();
  // 4 x 4 output: 4 tiles, one wave; a tile is 2*2*2*k FLOPs at 2 FLOP/s.
  EXPECT_DOUBLE_EQ(gemm_seconds(t, 16.0, 1e12, 2, 4, 4, 3, 1), 2.0 * 2 * 2 * 3 / 2.0);
  // 5 x 4: the fifth row needs a third tile row (tile quantisation), 6 tiles
  // need two waves (wave quantisation): twice the time for 25 % more work.
  EXPECT_DOUBLE_EQ(gemm_seconds(t, 16.0, 1e12, 2, 5, 4, 3, 1), 2 * 12.0);
  // Two products of 4 x 4: 8 tiles, two waves.
  EXPECT_DOUBLE_EQ(gemm_seconds(t, 16.0, 1e12, 2, 4, 4, 3, 2), 24.0);
}

TEST(KernelCostModel, GemmDepthPaysTheTileOverhead) {
  KernelTable t = toy_table();
  t.gemm_k_overhead = 1.0;
  // Depth 3 costs as depth 4.
  EXPECT_DOUBLE_EQ(gemm_seconds(t, 16.0, 1e12, 2, 4, 4, 3, 1), 2.0 * 2 * 2 * 4 / 2.0);
}

TEST(KernelCostModel, ShallowGemmIsBoundByMemory) {
  const KernelTable t = toy_table();
  // Operands 4x3 and 3x4 and the 4x4 result, 2 bytes each: 80 bytes at 10 B/s
  // is 8 s; the arithmetic takes 12 s. At 1 B/s memory wins: 80 s.
  EXPECT_DOUBLE_EQ(gemm_seconds(t, 16.0, 10.0, 2, 4, 4, 3, 1), 12.0);
  EXPECT_DOUBLE_EQ(gemm_seconds(t, 16.0, 1.0, 2, 4, 4, 3, 1), 80.0);
}

TEST(KernelCostModel, AFewTilesSplitTheirReductionOverIdleSms) {
  const KernelTable t = toy_table();
  // 2 x 2 output, depth 64: one tile, 3 SMs idle. Unsplit: 2*2*2*64/2 = 256 s.
  // Split in 4: depth 16 each, one wave of 64 s, plus writing and reading back
  // 4 fp32 partials of the 2 x 2 result (2 * 4 * 16 = 128 bytes) at 1000 B/s,
  // 0.128 s, and one more kernel (0 s here); split in 2 would take 128 s.
  EXPECT_DOUBLE_EQ(gemm_seconds(t, 16.0, 1000.0, 2, 2, 2, 64, 1), 64.0 + 0.128);
  // A full wave of tiles is never split.
  EXPECT_DOUBLE_EQ(gemm_seconds(t, 16.0, 1e12, 2, 4, 4, 64, 1), 256.0);
}

TEST(KernelCostModel, MemoryKernelMovesBytesAtAchievedBandwidth) {
  KernelTable t = toy_table();
  t.memory_efficiency = 0.8;
  EXPECT_DOUBLE_EQ(memory_seconds(t, 50.0, 100.0), 2.5);
}

TEST(KernelCostModel, GemmBackwardIsInputAndWeightGradient) {
  KernelTable t = toy_table();
  t.kernel_overhead_s = 1.0;
  Kernel g;
  g.kind = Kernel::Kind::kGemm;
  g.rows = 2;  // per sample; a batch of 2 makes m = 4
  g.n = 6;
  g.k = 4;
  const KernelTimes kt = kernel_times(g, 2, t, 16.0, 16.0, 1e12, 2);
  // Forward 4x6 (k 4): 6 tiles, 2 waves of 2*2*2*4/2 = 16 s, plus 1 s.
  EXPECT_DOUBLE_EQ(kt.forward, 1 + 32.0);
  // dX 4x4 (k 6): 4 tiles, 1 wave of 24 s; dW 4x6 (k 4): as the forward.
  EXPECT_DOUBLE_EQ(kt.backward, (1 + 24.0) + (1 + 32.0));
  EXPECT_DOUBLE_EQ(kt.weight, 1 + 32.0);
  g.has_weight = false;  // both operands are activations: no W
  EXPECT_DOUBLE_EQ(kernel_times(g, 2, t, 16.0, 16.0, 1e12, 2).weight, 0.0);
}

TEST(KernelCostModel, BatchedGemmKeepsOneProductPerHeadAndSample) {
  const KernelTable t = toy_table();
  Kernel g;
  g.kind = Kernel::Kind::kGemm;
  g.rows = 4;
  g.n = 4;
  g.k = 3;
  g.batch_count = 2;  // two heads per sample
  // 3 samples: 6 products of 4 x 4, 24 tiles, 6 waves of 12 s.
  EXPECT_DOUBLE_EQ(kernel_times(g, 3, t, 16.0, 16.0, 1e12, 2).forward, 6 * 12.0);
}

TEST(KernelCostModel, PerHeadProductsStayPerSampleAndInTheModelsDtype) {
  const KernelTable t = toy_table();
  Kernel g;
  g.kind = Kernel::Kind::kGemm;
  g.rows = 4;
  g.n = 4;
  g.k = 3;
  g.batch_count = 1;  // one head
  g.has_weight = false;
  // 2 samples: 2 products of 4 x 4 (not one of 8 x 4), 8 tiles, 2 waves of 12 s,
  // at the attention peak (16) even though the GEMM peak (1600) is higher.
  EXPECT_DOUBLE_EQ(kernel_times(g, 2, t, 1600.0, 16.0, 1e12, 2).forward, 2 * 12.0);
}

TEST(KernelCostModel, AnEmbeddingsScatterIsItsWeightGradient) {
  TransformerParams p;
  p.layers = 1;
  p.d_model = 64;
  p.heads = 4;
  p.seq_len = 32;
  p.vocab = 100;
  const ModelSpec m = make_transformer(p);
  const KernelCostModel cost(find_device_preset("a100-80g")->device, DType::kFp32, false, 16.0);
  const OpTimes t = cost.op_times(m.layers.front(), 2);
  EXPECT_GT(t.backward, 0);
  EXPECT_EQ(t.weight, t.backward);
}

// Fused causal attention over 8 positions, 3 heads of 2.
Kernel causal_attention() {
  Kernel a;
  a.kind = Kernel::Kind::kAttention;
  a.seq = 8;
  a.head_dim = 2;
  a.batch_count = 3;
  a.causal = true;
  return a;
}

TEST(KernelCostModel, FusedAttentionCountsHalfTheScoresWhenCausal) {
  const KernelTable t = toy_table();
  const Kernel a = causal_attention();
  // 4 s^2 d per head and sample, halved: 4*64*2*3*2 / 2 = 1536 FLOPs for 2
  // samples; forward at 16 * 0.5, backward 2.5x the FLOPs at 16 * 0.25.
  const KernelTimes kt = kernel_times(a, 2, t, 16.0, 16.0, 1e12, 2);
  EXPECT_DOUBLE_EQ(kt.forward, 1536.0 / 8.0);
  EXPECT_DOUBLE_EQ(kt.backward, 2.5 * 1536.0 / 4.0);
  EXPECT_DOUBLE_EQ(kt.weight, 0.0);
}

TEST(KernelCostModel, FusedAttentionWithinAWindowCountsItsPairs) {
  const KernelTable t = toy_table();
  Kernel a = causal_attention();
  a.window = 4;
  // 4 x 8 - 4^2 / 2 = 24 pairs of the causal 32: 1536 x 24 / 32 = 1152 FLOPs.
  const KernelTimes kt = kernel_times(a, 2, t, 16.0, 16.0, 1e12, 2);
  EXPECT_DOUBLE_EQ(kt.forward, 1152.0 / 8.0);
  EXPECT_DOUBLE_EQ(kt.backward, 2.5 * 1152.0 / 4.0);
}

double kernel_flops(const std::vector<Kernel>& kernels) {
  double flops = 0.0;
  for (const Kernel& k : kernels) {
    const auto d = [](std::int64_t x) { return static_cast<double>(x); };
    if (k.kind == Kernel::Kind::kGemm)
      flops += 2.0 * d(k.rows) * d(k.n) * d(k.k) * d(k.batch_count);
    if (k.kind == Kernel::Kind::kAttention) {
      const std::int64_t v = k.value_dim > 0 ? k.value_dim : k.head_dim;
      // Under context parallelism the device's queries meet all seq keys.
      flops += 2.0 * d(k.seq) * d(k.seq) * d(k.head_dim + v) * d(k.batch_count) /
               d(std::max(1, k.context_parallel));
    }
  }
  return flops;
}

TEST(KernelCostModel, BlockKernelsCarryTheBlocksFlops) {
  TransformerParams p;
  p.layers = 2;
  p.d_model = 256;
  p.heads = 4;
  p.kv_heads = 2;
  p.seq_len = 128;
  p.vocab = 1000;
  p.dtype = DType::kBf16;
  for (bool fused : {true, false}) {
    p.fused_attention = fused;
    const ModelSpec m = make_transformer(p);
    const LayerSpec& block = m.layers[1];
    EXPECT_DOUBLE_EQ(kernel_flops(*block.kernels), block.fwd_flops) << "fused " << fused;
    // The head's projection is its 2shV; the softmax's 5sV is memory-bound here.
    EXPECT_DOUBLE_EQ(kernel_flops(*m.layers.back().kernels), 2.0 * 128 * 256 * 1000);
  }
}

// A mixture of experts' kernels carry its block's FLOPs too, whether or not
// the routed tokens split evenly over the experts (s k = 256 over 8 and 5).
TEST(KernelCostModel, MixtureKernelsCarryTheBlocksFlops) {
  TransformerParams p;
  p.layers = 1;
  p.d_model = 256;
  p.d_ff = 1024;
  p.heads = 4;
  p.seq_len = 128;
  p.vocab = 1000;
  p.dtype = DType::kBf16;
  for (const int experts : {8, 5}) {
    p.moe = {experts, 2, 512, 256, 0};
    for (const TensorSplit split :
         {TensorSplit{1, false}, TensorSplit{2, false}, TensorSplit{2, true},
          TensorSplit{1, false, experts == 8 ? 4 : 5},
          TensorSplit{2, true, experts == 8 ? 2 : 5}}) {
      const LayerSpec block = make_transformer(p, "m", split).layers[1];
      EXPECT_DOUBLE_EQ(kernel_flops(*block.kernels), block.fwd_flops)
          << experts << " experts, T=" << split.ways << " sequence " << split.sequence
          << " E=" << split.experts;
    }
  }
}

// A grouped GEMM (one product per expert) runs over the micro-batch's tokens:
// b samples multiply its rows, not its products.
// So do latent attention's, with and without a query bottleneck, fused or
// not, split or not.
TEST(KernelCostModel, LatentAttentionKernelsCarryTheBlocksFlops) {
  TransformerParams p;
  p.layers = 1;
  p.d_model = 256;
  p.heads = 4;
  p.seq_len = 128;
  p.vocab = 1000;
  p.dtype = DType::kBf16;
  for (const std::int64_t q : {0, 96}) {
    p.mla = {q, 32, 48, 16, 40};
    for (const bool fused : {true, false}) {
      p.fused_attention = fused;
      TensorSplit context{2, true};
      context.context = 2;             // context parallelism needs fused attention
      TensorSplit by_heads = context;  // its all-to-all form
      by_heads.heads_over_context = true;
      for (const TensorSplit split :
           {TensorSplit{1, false}, TensorSplit{2, false}, TensorSplit{2, true},
            fused ? context : TensorSplit{}, fused ? by_heads : TensorSplit{}}) {
        const LayerSpec block = make_transformer(p, "m", split).layers[1];
        EXPECT_DOUBLE_EQ(kernel_flops(*block.kernels), block.fwd_flops)
            << "q " << q << " fused " << fused << " T=" << split.ways << " sequence "
            << split.sequence << " C=" << split.context;
        double core = 0.0;
        for (const Kernel& k : *block.kernels) {
          if (k.attention_core) core += kernel_flops({k});
        }
        EXPECT_DOUBLE_EQ(core, block.core_fwd_flops);
      }
    }
  }
}

TEST(KernelCostModel, GroupedGemmRowsGrowWithTheMicroBatch) {
  const Device d = find_device_preset("a100-80g")->device;
  Kernel g;
  g.rows = 96;
  g.n = 512;
  g.k = 1024;
  g.batch_count = 8;
  g.grouped = true;
  Kernel twice = g;
  twice.rows = 4 * 96;
  const KernelTimes four = kernel_times(g, 4, d.kernels, 312e12, 312e12, 2039e9, 2);
  const KernelTimes one = kernel_times(twice, 1, d.kernels, 312e12, 312e12, 2039e9, 2);
  EXPECT_DOUBLE_EQ(four.forward, one.forward);
  EXPECT_DOUBLE_EQ(four.backward, one.backward);
  EXPECT_DOUBLE_EQ(four.weight, one.weight);
  // Per-sample products (attention's heads) would be 32 products of 96 rows.
  Kernel per_sample = g;
  per_sample.grouped = false;
  EXPECT_NE(kernel_times(per_sample, 4, d.kernels, 312e12, 312e12, 2039e9, 2).forward,
            four.forward);
}

TEST(KernelCostModel, LayerTimeIsTheSumOfItsKernels) {
  Device d = find_device_preset("a100-80g")->device;
  TransformerParams p;
  p.layers = 1;
  p.d_model = 1024;
  p.heads = 16;
  p.seq_len = 512;
  p.vocab = 5000;
  p.dtype = DType::kBf16;
  const ModelSpec m = make_transformer(p);
  const KernelCostModel cost(d, DType::kBf16, false, 16.0);
  double fwd = 0.0, bwd = 0.0, w = 0.0;
  for (const Kernel& k : *m.layers[1].kernels) {
    const KernelTimes kt = kernel_times(k, 4, d.kernels, 312e12, 312e12, 2039e9, 2);
    fwd += kt.forward;
    bwd += kt.backward;
    w += kt.weight;
  }
  EXPECT_EQ(cost.forward(m.layers[1], 4), seconds_to_simtime(fwd));
  EXPECT_EQ(cost.recompute(m.layers[1], 4), seconds_to_simtime(fwd));
  EXPECT_EQ(cost.backward(m.layers[1], 4), seconds_to_simtime(bwd));
  EXPECT_EQ(cost.weight_grad(m.layers[1], 4), seconds_to_simtime(w));
  EXPECT_GT(w, 0.0);
  EXPECT_LT(w, bwd);
}

TEST(KernelCostModel, OpTimesAgreeWithTheSingleCalls) {
  Device d = find_device_preset("a100-80g")->device;
  const KernelCostModel cost(d, DType::kBf16, false, 16.0);
  TransformerParams p;
  p.layers = 2;
  p.d_model = 512;
  p.heads = 8;
  p.seq_len = 256;
  p.vocab = 3000;
  p.dtype = DType::kBf16;
  const ModelSpec m = make_transformer(p);
  for (const LayerSpec& layer : m.layers) {
    const OpTimes t = cost.op_times(layer, 3);
    EXPECT_EQ(t.forward, cost.forward(layer, 3)) << layer.name;
    EXPECT_EQ(t.forward_kept, cost.forward_keeping_stash(layer, 3)) << layer.name;
    EXPECT_EQ(t.backward, cost.backward(layer, 3)) << layer.name;
    EXPECT_EQ(t.weight, cost.weight_grad(layer, 3)) << layer.name;
    EXPECT_EQ(t.recompute, cost.recompute(layer, 3)) << layer.name;
    EXPECT_EQ(t.input, cost.input_grad(layer, 3)) << layer.name;
    EXPECT_EQ(t.input, t.backward - t.weight) << layer.name;
  }
  // The two blocks are equal: one answer for both, at any batch.
  EXPECT_EQ(cost.op_times(m.layers[1], 5).backward, cost.op_times(m.layers[2], 5).backward);
}

TEST(KernelCostModel, EachKernelListIsCostedOnItsOwn) {
  Device d = find_device_preset("a100-80g")->device;
  const KernelCostModel cost(d, DType::kBf16, false, 16.0);
  Kernel g;
  g.rows = 1024;
  g.n = 4096;
  g.k = 4096;
  LayerSpec narrow, wide;
  narrow.kernels = make_kernel_list({g});
  g.n = 8192;  // twice the work
  wide.kernels = make_kernel_list({g});
  const SimTime first = cost.forward(narrow, 1);
  const SimTime second = cost.forward(wide, 1);
  EXPECT_GT(second, first + first / 4);  // 3 waves of tiles instead of 2
  EXPECT_EQ(cost.forward(narrow, 1), first);
  EXPECT_EQ(
      cost.forward(narrow, 2),
      seconds_to_simtime(
          kernel_times((*narrow.kernels)[0], 2, d.kernels, 312e12, 312e12, 2039e9, 2).forward));
}

// A 3 x 3 stride-1 convolution over a 4 x 4 map, 2 channels in and out: its
// implicit GEMM is (16 x 18) . (18 x 2).
Kernel conv3x3_over_4x4() {
  Kernel g;
  g.kind = Kernel::Kind::kGemm;
  g.rows = 16;
  g.n = 2;
  g.k = 18;
  g.winograd_tiles = 4;  // 2 x 2 output tiles
  return g;
}

TEST(KernelCostModel, Fp32ThreeByThreeConvolutionsRunAsWinogradWhereFaster) {
  const KernelTable t = toy_table();
  const Kernel g = conv3x3_over_4x4();
  // Implicit forward: 8 tiles, 2 waves of 2*2*2*18/2 = 72 s. Winograd: 16
  // products of (4 x 2) . (2 x 2), 32 tiles, 8 waves of 2*2*2*2/2 = 8 s.
  EXPECT_DOUBLE_EQ(winograd_seconds(t, 16.0, 1e12, 4, 4, 2, 2), 64.0);
  const KernelTimes fp32 = kernel_times(g, 1, t, 16.0, 16.0, 1e12, 4);
  EXPECT_DOUBLE_EQ(fp32.forward, 64.0);
  // dX: implicit (16 x 18), depth 2: 72 tiles, 18 waves of 8 s = 144 s;
  // Winograd as the forward, 64 s. dW (18 x 2, depth 16) stays an implicit
  // GEMM: 9 tiles, 3 waves of 64 s.
  EXPECT_DOUBLE_EQ(fp32.backward, 64.0 + 192.0);
  EXPECT_DOUBLE_EQ(fp32.weight, 192.0);
  // In 16 bits the convolution runs on tensor cores as its implicit GEMM.
  const KernelTimes fp16 = kernel_times(g, 1, t, 16.0, 16.0, 1e12, 2);
  EXPECT_DOUBLE_EQ(fp16.forward, 144.0);
  EXPECT_DOUBLE_EQ(fp16.backward, 144.0 + 192.0);
}

TEST(KernelCostModel, ShallowWinogradProductsLoseToTheImplicitGemm) {
  KernelTable t = toy_table();
  t.gemm_k_overhead = 100.0;  // a tile's fixed cost dwarfs a depth of 2
  const Kernel g = conv3x3_over_4x4();
  // Winograd: 8 waves of 2*2*2*(2 + 100)/2 = 3264 s; implicit: 2 waves of
  // 2*2*2*(18 + 100)/2 = 944 s, which cuDNN's heuristics would take.
  EXPECT_DOUBLE_EQ(kernel_times(g, 1, t, 16.0, 16.0, 1e12, 4).forward, 944.0);
}

TEST(KernelCostModel, OnlyThreeByThreeStrideOneConvolutionsAreWinogradEligible) {
  // ResNet-101's GEMMs of depth 9 x channels are its 33 bottlenecks' 3 x 3
  // convolutions (its 1 x 1 ones reduce over 64 to 2048 channels, the stem over
  // 7 x 7 x 3); the first of stages 2 to 4 has stride 2.
  const ModelSpec m = make_resnet(ResNetParams{});
  int eligible = 0, three_by_three = 0;
  for (const LayerSpec& l : m.layers) {
    if (!l.kernels) continue;
    for (const Kernel& k : *l.kernels) {
      if (k.kind != Kernel::Kind::kGemm || k.k % 9 != 0) {
        EXPECT_EQ(k.winograd_tiles, 0) << l.name;
        continue;
      }
      ++three_by_three;
      if (k.winograd_tiles == 0) continue;
      ++eligible;
      // Stride 1 keeps the square map: rows = side^2, tiles = ceil(side / 2)^2.
      const auto side = static_cast<std::int64_t>(std::lround(std::sqrt(k.rows)));
      EXPECT_EQ(k.winograd_tiles, ((side + 1) / 2) * ((side + 1) / 2)) << l.name;
    }
  }
  EXPECT_EQ(three_by_three, 33);
  EXPECT_EQ(eligible, 30);
}

TEST(KernelCostModel, Fp8GemmsRunAtTheFp8Peak) {
  Device d = find_device_preset("h100-sxm")->device;
  LayerSpec layer;
  Kernel g;
  g.rows = 8192;
  g.n = 8192;
  g.k = 8192;
  layer.kernels = make_kernel_list({g});
  const KernelCostModel bf16(d, DType::kBf16, false, 16.0);
  const KernelCostModel fp8(d, DType::kBf16, true, 16.0);
  const KernelTable& t = d.kernels;
  const double launch = t.kernel_overhead_s;
  const double bw = d.mem_bandwidth;
  EXPECT_NEAR(simtime_to_seconds(bf16.forward(layer, 1)),
              launch + gemm_seconds(t, 989e12, bw, 2, 8192, 8192, 8192, 1), 1e-9);
  // At the FP8 peak and the FP8 efficiency (0.75 x 70.9 / 80.3), and the
  // cast of the 8192 x 8192 input with its transpose: read 2, write 2 bytes
  // an element, a kernel of its own.
  KernelTable t8 = t;
  t8.gemm_efficiency = 0.75 * 70.9 / 80.3;
  EXPECT_DOUBLE_EQ(t.fp8_gemm_efficiency, t8.gemm_efficiency);
  const double cast = launch + memory_seconds(t, bw, 8192.0 * 8192.0 * 4.0);
  EXPECT_NEAR(simtime_to_seconds(fp8.forward(layer, 1)),
              launch + gemm_seconds(t8, 1979e12, bw, 2, 8192, 8192, 8192, 1) + cast, 1e-9);
  // Backward: the output gradient's cast too, before the two GEMMs.
  EXPECT_NEAR(simtime_to_seconds(fp8.backward(layer, 1)),
              2 * (launch + gemm_seconds(t8, 1979e12, bw, 2, 8192, 8192, 8192, 1)) + cast, 1e-9);
}

TEST(KernelCostModel, LayersWithoutKernelsFallBackToTheRoofline) {
  Device d = find_device_preset("a100-80g")->device;
  const KernelCostModel kernels(d, DType::kBf16, false, 16.0);
  const AnalyticCostModel analytic(d, DType::kBf16, 16.0);
  LayerSpec conv;
  conv.fwd_flops = 1e9;
  conv.bwd_flops = 2e9;
  conv.params = 1000;
  conv.out_bytes = 1000;
  conv.stash_bytes = 2000;
  EXPECT_EQ(kernels.forward(conv, 8), analytic.forward(conv, 8));
  EXPECT_EQ(kernels.backward(conv, 8), analytic.backward(conv, 8));
}

TEST(KernelCostModel, OptimizerStepIsOneMemoryBoundPass) {
  Device d = find_device_preset("a100-80g")->device;
  const KernelCostModel cost(d, DType::kBf16, false, 16.0);
  const double expected = 4e-6 + 2.0 * 1e9 * 16.0 / (2039e9 * 0.85);
  EXPECT_EQ(cost.optimizer_step(1'000'000'000), seconds_to_simtime(expected));
}

TEST(KernelCostModel, LinksRunAtTheirAchievableShareUnderTheKernelsModel) {
  Cluster c;
  c.devices = 2;
  c.device = find_device_preset("a100-80g")->device;
  c.interconnect = find_device_preset("a100-80g")->interconnect;
  c.cost_model = CostModelKind::kAnalytic;
  EXPECT_DOUBLE_EQ(c.route(0, 1).at(0).bandwidth, 300e9);
  c.cost_model = CostModelKind::kKernels;
  EXPECT_DOUBLE_EQ(c.route(0, 1).at(0).bandwidth, 300e9 * 0.8);
}

TEST(KernelCostModel, EveryGpuPresetHasATableAndTheCpuNone) {
  for (const DevicePreset& p : device_presets()) {
    const bool gpu = p.device.name.rfind("tpu", 0) != 0 && p.device.name != "cpu";
    EXPECT_EQ(p.device.kernels.present, gpu) << p.device.name;
  }
  EXPECT_GT(find_device_preset("h100-sxm")->device.kernels.peak_flops_fp8, 0.0);
  EXPECT_EQ(find_device_preset("a100-80g")->device.kernels.peak_flops_fp8, 0.0);
}

}  // namespace
}  // namespace pipescope

namespace pipescope {
namespace {

TransformerParams norm_block(bool fused, DType dtype) {
  TransformerParams p;
  p.layers = 1;
  p.d_model = 64;
  p.heads = 4;
  p.seq_len = 32;
  p.vocab = 100;
  p.dtype = dtype;
  p.fused_norm = fused;
  return p;
}

// Hugging Face's RMSNorm as PyTorch runs it: 8 ops forward, 36 bytes an
// element in bf16, and 12 backward, 64 bytes; one kernel each way fused.
TEST(KernelCostModel, AnUnfusedNormIsItsSeparateOps) {
  const ModelSpec fused = make_transformer(norm_block(true, DType::kBf16));
  const ModelSpec unfused = make_transformer(norm_block(false, DType::kBf16));
  const Kernel& f = fused.layers[1].kernels->front();  // the block's first layer norm
  const Kernel& u = unfused.layers[1].kernels->front();
  EXPECT_EQ(f.bytes, 2 * 32 * 64 * 2);
  EXPECT_EQ(f.launches, 1);
  EXPECT_EQ(u.bytes, 36 * 32 * 64);
  EXPECT_EQ(u.bwd_bytes, 64 * 32 * 64);
  EXPECT_EQ(u.launches, 8);
  EXPECT_EQ(u.bwd_launches, 12);
  const ModelSpec unfused32 = make_transformer(norm_block(false, DType::kFp32));
  const Kernel& u32 = unfused32.layers[1].kernels->front();
  EXPECT_EQ(u32.bytes, 28 * 32 * 64);  // no casts
  EXPECT_EQ(u32.launches, 6);
  EXPECT_EQ(u32.bwd_launches, 10);
  const Device d = find_device_preset("a100-80g")->device;
  const KernelTimes t = kernel_times(u, 1, d.kernels, 312e12, 312e12, d.mem_bandwidth, 2);
  EXPECT_EQ(t.forward_launches, 8);
  EXPECT_EQ(t.backward_launches, 12);
  EXPECT_NEAR(
      t.forward,
      8 * d.kernels.kernel_overhead_s + memory_seconds(d.kernels, d.mem_bandwidth, 36 * 2048.0),
      1e-15);
}

// Without fused accumulation every backward adds its weight gradients into
// the step's, in W: DeepSpeed's bf16 optimizer casts each bf16 gradient to an
// fp32 temporary and adds it (18 bytes a parameter, a cast and an add for
// each weight and bias); Megatron-LM v2.x adds bf16 into fp32 in one kernel
// (10 bytes); fp16 gradients are added in place (3 x 2 bytes).
TEST(KernelCostModel, GradientsAccumulateInAPassOfTheirOwn) {
  const Device d = find_device_preset("a100-80g")->device;
  const double over = d.kernels.kernel_overhead_s;
  const ModelSpec m = make_transformer(norm_block(true, DType::kBf16));
  const LayerSpec& block = m.layers[1];
  const double params = static_cast<double>(block.params);
  const auto extra = [&](DType dtype, const char* framework) {
    const KernelCostModel plain(d, dtype, false, 18.0);
    const KernelCostModel with(d, dtype, false, 18.0, *find_framework(framework));
    return simtime_to_seconds(with.weight_grad(block, 1)) -
           simtime_to_seconds(plain.weight_grad(block, 1));
  };
  // Four weighted GEMMs (QKV, projection, the MLP's two): eight tensors.
  const auto pass = [&](double bytes) {
    return memory_seconds(d.kernels, d.mem_bandwidth, bytes * params);
  };
  EXPECT_NEAR(extra(DType::kBf16, "deepspeed"), pass(18.0) + 16 * over, 2e-9);
  EXPECT_NEAR(extra(DType::kBf16, "megatron-lm-2021"), pass(10.0) + 8 * over, 2e-9);
  EXPECT_NEAR(extra(DType::kFp16, "deepspeed"), pass(6.0) + 8 * over, 2e-9);
  EXPECT_NEAR(extra(DType::kFp16, "megatron-lm-2021"), pass(6.0) + 8 * over, 2e-9);
  EXPECT_NEAR(extra(DType::kFp32, "torchgpipe"), pass(12.0) + 8 * over, 2e-9);
  // The GEMM accumulates itself: nothing more.
  EXPECT_EQ(extra(DType::kBf16, "megatron-lm-2022"), 0.0);
  EXPECT_EQ(extra(DType::kBf16, "megatron-core"), 0.0);
  // The host launches the four weight gradients and the sixteen casts and adds.
  const KernelCostModel ds(d, DType::kBf16, false, 18.0, *find_framework("deepspeed"));
  EXPECT_EQ(ds.op_times(block, 1).host_weight, seconds_to_simtime(20 * 8e-6));
  // An embedding's table, which no GEMM reads, is one tensor.
  const LayerSpec& embedding = m.layers[0];
  ASSERT_GT(embedding.params, 0);
  const KernelCostModel fp16(d, DType::kFp16, false, 20.0, *find_framework("deepspeed"));
  const KernelCostModel fp16_plain(d, DType::kFp16, false, 20.0);
  EXPECT_NEAR(
      simtime_to_seconds(fp16.weight_grad(embedding, 1)) -
          simtime_to_seconds(fp16_plain.weight_grad(embedding, 1)),
      memory_seconds(d.kernels, d.mem_bandwidth, 6.0 * static_cast<double>(embedding.params)) +
          over,
      2e-9);
}

// The optimizer step passes over the gradients beyond its own pass:
// megatron-core's 20 bytes of fp32 gradients, half for 16-bit ones.
TEST(KernelCostModel, TheStepPassesOverTheGradients) {
  const Device d = find_device_preset("a100-80g")->device;
  const double over = d.kernels.kernel_overhead_s;
  const auto pass = [&](double bytes) { return memory_seconds(d.kernels, d.mem_bandwidth, bytes); };
  const KernelCostModel mc(d, DType::kBf16, false, 18.0, *find_framework("megatron-core"));
  EXPECT_NEAR(simtime_to_seconds(mc.optimizer_step(1000000)), over + pass((2 * 18.0 + 20) * 1e6),
              1e-9);
  const KernelCostModel nemo(d, DType::kBf16, false, 16.0, *find_framework("nemo"));
  EXPECT_NEAR(simtime_to_seconds(nemo.optimizer_step(1000000)), over + pass((2 * 16.0 + 10) * 1e6),
              1e-9);
  const KernelCostModel ideal(d, DType::kBf16, false, 16.0);
  EXPECT_NEAR(simtime_to_seconds(ideal.optimizer_step(1000000)), over + pass(2 * 16.0 * 1e6), 1e-9);
}

}  // namespace
}  // namespace pipescope
