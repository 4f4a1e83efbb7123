#include "costmodels/model_families.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace pipescope {
namespace {

// h = 4, f = 16, s = 3, a = 2, V = 10, fp32 (e = 4), two blocks, unfused
// attention (its a x s x s probabilities stashed); numbers by hand.
TransformerParams tiny() {
  TransformerParams p;
  p.fused_attention = false;
  p.layers = 2;
  p.d_model = 4;
  p.d_ff = 16;
  p.heads = 2;
  p.seq_len = 3;
  p.vocab = 10;
  p.dtype = DType::kFp32;
  return p;
}

TEST(Transformer, LayerListAndModelFields) {
  const ModelSpec m = make_transformer(tiny(), "tiny");
  EXPECT_EQ(m.name, "tiny");
  EXPECT_EQ(m.family, "transformer");
  EXPECT_EQ(m.dtype, DType::kFp32);
  EXPECT_EQ(m.input_bytes, 12);  // 3 int32 token ids
  EXPECT_EQ(m.tokens_per_sample, 3);
  ASSERT_EQ(m.layers.size(), 4u);
  EXPECT_EQ(m.layers[0].name, "embed");
  EXPECT_EQ(m.layers[1].name, "block0");
  EXPECT_EQ(m.layers[2].name, "block1");
  EXPECT_EQ(m.layers[3].name, "head");
}

TEST(Transformer, EmbeddingByHand) {
  const LayerSpec l = make_transformer(tiny()).layers[0];
  EXPECT_EQ(l.fwd_flops, 12.0);  // s*h
  EXPECT_EQ(l.bwd_flops, 24.0);
  EXPECT_EQ(l.params, 40);       // V*h, sinusoidal positions
  EXPECT_EQ(l.out_bytes, 48);    // s*h*4
  EXPECT_EQ(l.stash_bytes, 12);  // token ids
}

TEST(Transformer, LearnedPositionsAddATable) {
  TransformerParams p = tiny();
  p.learned_positions = true;
  EXPECT_EQ(make_transformer(p).layers[0].params, 52);  // V*h + s*h = 40 + 12
}

TEST(Transformer, BlockByHand) {
  const LayerSpec l = make_transformer(tiny()).layers[1];
  EXPECT_EQ(l.fwd_flops, 1296.0);  // 8*3*16 + 4*3*4*16 + 4*9*4 = 384 + 768 + 144
  EXPECT_EQ(l.bwd_flops, 2592.0);
  EXPECT_EQ(l.params, 244);  // 64+16 + 128+16+4 + 16
  EXPECT_EQ(l.out_bytes, 48);
  // 4-byte tensors of s*h: QKV in, Q, K, V, out-proj in, MLP in, 2 LN in = 8 * 48;
  // masks 2 * 12; s*f tensors 2 * 4 * 48; a*s^2 = 18: (4 + 1 + 4) * 18.
  EXPECT_EQ(l.stash_bytes, 384 + 24 + 384 + 162);
}

// Without dropout: no masks (2 * 12 bytes of s*h, 18 of a*s^2) and no dropped copy
// of the probabilities (4 * 18); parameters and FLOPs do not change.
TEST(Transformer, BlockWithoutDropout) {
  TransformerParams p = tiny();
  p.dropout = false;
  const LayerSpec l = make_transformer(p).layers[1];
  EXPECT_EQ(l.stash_bytes, 384 + 384 + 4 * 18);
  EXPECT_EQ(l.params, 244);
  EXPECT_EQ(l.fwd_flops, 1296.0);
  EXPECT_EQ(make_transformer(p).layers[3].stash_bytes, 228);  // the head has no dropout
}

// The stash's attention core, which selective recomputation drops: the a*s^2
// tensors unfused (18 * (4 + 1 + 4) bytes); fused, the fp32 log-sum-exp of
// each row of each head (4 * a*s = 24 bytes) instead of them. The core's
// forward is the scores and the product with V, 4 * s^2 * h FLOPs.
TEST(Transformer, AttentionCoreByHand) {
  const LayerSpec unfused = make_transformer(tiny()).layers[1];
  EXPECT_EQ(unfused.core_stash_bytes, 162);
  EXPECT_EQ(unfused.core_fwd_flops, 144.0);
  TransformerParams p = tiny();
  p.fused_attention = true;
  const LayerSpec fused = make_transformer(p).layers[1];
  EXPECT_EQ(fused.core_stash_bytes, 24);
  EXPECT_EQ(fused.stash_bytes, 384 + 24 + 384 + 24);
  EXPECT_EQ(fused.core_fwd_flops, 144.0);
  EXPECT_TRUE(make_transformer(p).has_attention_core());
  // The embedding and the head have no attention core.
  EXPECT_EQ(make_transformer(p).layers[0].core_stash_bytes, 0);
  EXPECT_EQ(make_transformer(p).layers[3].core_stash_bytes, 0);
  int core_kernels = 0;
  for (const Kernel& k : *unfused.kernels) core_kernels += k.attention_core ? 1 : 0;
  EXPECT_EQ(core_kernels, 4);  // scores, softmax, dropout, product with V
  core_kernels = 0;
  for (const Kernel& k : *fused.kernels) core_kernels += k.attention_core ? 1 : 0;
  EXPECT_EQ(core_kernels, 1);
}

// PyTorch's eager attention in bf16 (tiny's 18 scores, two bytes each, no
// dropout): the scale, the mask, the softmax into fp32 and the cast back,
// 6e + 8 = 20 bytes a score in 4 kernels, backward 4e + 12 = 20 in 3,
// against Megatron's fused softmax's 2e and 3e in one each; it stashes the
// fp32 probabilities beside the bf16 ones the product with V reads (6
// bytes a score, against 2). In fp32 no cast: 6e in 3, 5e in 2, and the
// same stash as Megatron's.
TEST(Transformer, EagerAttentionByHand) {
  TransformerParams p = tiny();
  p.dtype = DType::kBf16;
  p.dropout = false;
  const auto softmax_of = [](const LayerSpec& l) {
    int cores = 0;
    const Kernel* softmax = nullptr;
    for (const Kernel& k : *l.kernels) {
      if (!k.attention_core) continue;
      if (++cores == 2) softmax = &k;
    }
    return *softmax;
  };
  const LayerSpec megatron = make_transformer(p).layers[1];
  p.eager_attention = true;
  const LayerSpec eager = make_transformer(p).layers[1];
  EXPECT_EQ(softmax_of(megatron).bytes, 18 * 4);
  EXPECT_EQ(softmax_of(megatron).bwd_bytes, 18 * 6);
  const Kernel k = softmax_of(eager);
  EXPECT_EQ(k.bytes, 18 * 20);
  EXPECT_EQ(k.bwd_bytes, 18 * 20);
  EXPECT_EQ(k.launches, 4);
  EXPECT_EQ(k.bwd_launches, 3);
  EXPECT_EQ(megatron.core_stash_bytes, 18 * 2);
  EXPECT_EQ(eager.core_stash_bytes, 18 * 6);
  EXPECT_EQ(eager.stash_bytes - megatron.stash_bytes, 18 * 4);
  p.dtype = DType::kFp32;
  const LayerSpec fp32 = make_transformer(p).layers[1];
  EXPECT_EQ(softmax_of(fp32).bytes, 18 * 24);
  EXPECT_EQ(softmax_of(fp32).bwd_bytes, 18 * 20);
  EXPECT_EQ(softmax_of(fp32).launches, 3);
  EXPECT_EQ(fp32.core_stash_bytes, 18 * 4);
}

TEST(Transformer, HeadByHand) {
  const LayerSpec l = make_transformer(tiny()).layers[3];
  EXPECT_EQ(l.fwd_flops, 390.0);  // 2*3*4*10 + 5*3*10
  EXPECT_EQ(l.bwd_flops, 780.0);
  EXPECT_EQ(l.params, 48);  // V*h + 2h
  EXPECT_EQ(l.out_bytes, 4);
  EXPECT_EQ(l.stash_bytes, 228);  // 2*3*4*4 + 3*10*4 + 3*4
}

TEST(Transformer, ModelTotals) {
  const ModelSpec m = make_transformer(tiny());
  EXPECT_EQ(m.total_params(), 40 + 2 * 244 + 48);
  EXPECT_EQ(m.fwd_flops_per_sample(), 12.0 + 2 * 1296.0 + 390.0);
  EXPECT_EQ(m.bwd_flops_per_sample(), 2 * (12.0 + 2 * 1296.0 + 390.0));
  EXPECT_EQ(m.input_bytes_of(0), 12);
  EXPECT_EQ(m.input_bytes_of(1), 48);
  EXPECT_EQ(m.input_bytes_of(3), 48);
  EXPECT_EQ(m.input_bytes_of(4), 4);
}

TEST(Transformer, DefaultFeedForwardIsFourTimesModel) {
  TransformerParams p = tiny();
  p.d_ff = 0;
  EXPECT_EQ(make_transformer(p).layers[1].params, 244);
}

// Korthikanti et al. 2022: 16-bit activations, f = 4h: s*h*34 + 5*a*s^2 bytes.
TEST(Transformer, StashMatchesKorthikantiForSixteenBit) {
  TransformerParams p = tiny();
  p.d_model = 8;
  p.d_ff = 0;
  p.seq_len = 4;
  p.heads = 2;
  p.dtype = DType::kBf16;
  EXPECT_EQ(make_transformer(p).layers[1].stash_bytes, 4 * 8 * 34 + 5 * 2 * 4 * 4);
}

// GPipe (Huang et al. 2019), Transformer-L with h = 2048, f = 8192, a = 32,
// s = 1024, V = 32000: 282.2M parameters for 3 blocks, 785.8M for 13, 5.3B for 103.
// Its Transformer uses sinusoidal positions (no position table), our default.
TEST(Transformer, GpipeParameterCounts) {
  TransformerParams p;
  p.d_model = 2048;
  p.d_ff = 8192;
  p.heads = 32;
  p.seq_len = 1024;
  p.vocab = 32000;
  const struct {
    int layers;
    double paper;
  } rows[] = {{3, 282.2e6}, {13, 785.8e6}, {103, 5.3e9}};
  for (const auto& row : rows) {
    SCOPED_TRACE(row.layers);
    p.layers = row.layers;
    const double ours = static_cast<double>(make_transformer(p).total_params());
    EXPECT_NEAR(ours / row.paper, 1.0, 0.005);
  }
  p.layers = 3;
  EXPECT_EQ(make_transformer(p).total_params(), 284'248'064 - 1024 * 2048);
  EXPECT_EQ(make_transformer(p).layers[1].params, 50'358'272);
}

TEST(Transformer, TiedEmbeddingsDropHeadWeightsKeepFlops) {
  TransformerParams p = tiny();
  p.tied_embeddings = true;
  const LayerSpec head = make_transformer(p).layers[3];
  EXPECT_EQ(head.params, 8);  // the final LayerNorm's 2h; V*h is the embedding's table
  EXPECT_EQ(head.fwd_flops, 390.0);
}

TEST(Transformer, GroupedQueryAttentionByHand) {
  TransformerParams p = tiny();
  p.kv_heads = 1;  // K and V are h * 1 / 2 = 2 wide
  const LayerSpec l = make_transformer(p).layers[1];
  // Q, out 2h^2 + 2h = 40; K, V 2*h*2 + 2*2 = 20; MLP 128 + 16 + 4; LNs 16.
  EXPECT_EQ(l.params, 40 + 20 + 148 + 16);
  EXPECT_EQ(l.fwd_flops, 4.0 * 3 * 4 * (4 + 2) + 768 + 144);
  // K and V stash 2 * e*s*(h - 2) = 48 bytes less than multi-head attention.
  EXPECT_EQ(l.stash_bytes, 954 - 48);
  p.kv_heads = 2;  // as many as heads: multi-head attention
  EXPECT_EQ(make_transformer(p).layers[1].params, 244);
}

TEST(Transformer, HeadsOfTheirOwnWidthByHand) {
  TransformerParams p = tiny();
  p.head_dim = 4;  // 2 heads: Q, K, V and the output 8 wide, twice h
  const LayerSpec l = make_transformer(p).layers[1];
  // Q, out 2*h*8 + 8 = 72; K, V 2*h*8 + 2*8 = 80; MLP 128 + 16; the output's
  // and the MLP's down biases 8; LNs 16.
  EXPECT_EQ(l.params, 72 + 80 + 144 + 8 + 16);
  // 4sh(q + d_kv) + 4shf + 4s^2 q.
  EXPECT_EQ(l.fwd_flops, 4.0 * 3 * 4 * (8 + 8) + 768 + 4.0 * 9 * 8);
  // Q, the output projection's input, K and V: 4 x e*s*(8 - 4) more.
  EXPECT_EQ(l.stash_bytes, 954 + 4 * 4 * 3 * 4);
  // The kernels: the QKV product 8 + 2 x 8 wide, the output projection's
  // depth 8, and the attention heads 4 wide.
  std::vector<const Kernel*> weighted;
  const Kernel* attention = nullptr;
  for (const Kernel& k : *l.kernels) {
    if (k.kind == Kernel::Kind::kGemm && k.has_weight) weighted.push_back(&k);
    if (k.attention_core && attention == nullptr) attention = &k;
  }
  ASSERT_EQ(weighted.size(), 4u);  // QKV, output, MLP up and down
  EXPECT_EQ(weighted[0]->n, 24);
  EXPECT_EQ(weighted[0]->k, 4);
  EXPECT_EQ(weighted[1]->n, 4);
  EXPECT_EQ(weighted[1]->k, 8);
  ASSERT_NE(attention, nullptr);
  EXPECT_EQ(attention->kind == Kernel::Kind::kAttention ? attention->head_dim : attention->k, 4);
  p.head_dim = 0;  // h / heads
  EXPECT_EQ(make_transformer(p).layers[1].params, 244);
}

TEST(Transformer, SlidingWindowByHand) {
  TransformerParams p = tiny();
  p.fused_attention = true;
  p.sliding_window = 2;
  p.sliding_pattern = {true, false};  // block 0 slides, block 1 does not
  const ModelSpec m = make_transformer(p);
  // Within a window of 2 of 3 positions 2 x 3 - 2^2 / 2 = 4 (query, key)
  // pairs against the causal 3^2 / 2: the core's 4s^2h = 144 FLOPs x 8 / 9.
  EXPECT_EQ(m.layers[1].core_fwd_flops, 128.0);
  EXPECT_EQ(m.layers[1].fwd_flops, 4.0 * 3 * 4 * (4 + 4) + 768 + 128);
  EXPECT_EQ(m.layers[2].core_fwd_flops, 144.0);
  EXPECT_EQ(m.layers[2].fwd_flops, 4.0 * 3 * 4 * (4 + 4) + 768 + 144);
  const auto window = [](const LayerSpec& l) {
    for (const Kernel& k : *l.kernels) {
      if (k.kind == Kernel::Kind::kAttention) return k.window;
    }
    return std::int64_t{-1};
  };
  EXPECT_EQ(window(m.layers[1]), 2);
  EXPECT_EQ(window(m.layers[2]), 0);
  // The unfused form computes every score and masks: no saving.
  p.fused_attention = false;
  EXPECT_EQ(make_transformer(p).layers[1].core_fwd_flops, 144.0);
  // A window as long as the sequence is no window.
  p.fused_attention = true;
  p.sliding_window = 3;
  EXPECT_EQ(make_transformer(p).layers[1].core_fwd_flops, 144.0);
}

// d = 4, f = 16 (default), c = 3, fp32, two blocks.
TEST(Mlp, ByHand) {
  MlpParams p;
  p.layers = 2;
  p.d_model = 4;
  p.classes = 3;
  const ModelSpec m = make_mlp(p, "tiny-mlp");
  EXPECT_EQ(m.name, "tiny-mlp");
  EXPECT_EQ(m.family, "mlp");
  EXPECT_EQ(m.input_bytes, 16);
  EXPECT_EQ(m.tokens_per_sample, 1);
  ASSERT_EQ(m.layers.size(), 3u);

  const LayerSpec& b = m.layers[1];
  EXPECT_EQ(b.name, "block1");
  EXPECT_EQ(b.fwd_flops, 276.0);  // 4*4*16 + 5*4
  EXPECT_EQ(b.bwd_flops, 552.0);
  EXPECT_EQ(b.params, 156);  // 2*64 + 16 + 4 + 8
  EXPECT_EQ(b.out_bytes, 16);
  EXPECT_EQ(b.stash_bytes, 160);  // 4 * (2*4 + 2*16)

  const LayerSpec& h = m.layers[2];
  EXPECT_EQ(h.name, "head");
  EXPECT_EQ(h.fwd_flops, 39.0);  // 2*4*3 + 5*3
  EXPECT_EQ(h.params, 15);
  EXPECT_EQ(h.out_bytes, 4);
  EXPECT_EQ(h.stash_bytes, 32);  // 16 + 12 + 4
  EXPECT_EQ(m.total_params(), 2 * 156 + 15);
}

TEST(Mlp, ClassesDefaultToModelWidth) {
  MlpParams p;
  p.layers = 1;
  p.d_model = 4;
  p.d_hidden = 8;
  p.dtype = DType::kBf16;
  const ModelSpec m = make_mlp(p);
  EXPECT_EQ(m.layers[1].params, 4 * 4 + 4);
  EXPECT_EQ(m.layers[0].stash_bytes, 2 * (8 + 16));
  EXPECT_EQ(m.input_bytes, 8);
}

// --- ResNet ---

ResNetParams resnet(int depth) {
  ResNetParams p;
  p.depth = depth;
  return p;  // 224 x 224, 1000 classes, fp32
}

// torchvision's parameter counts (sum of p.numel() over resnet50/101/152()).
TEST(ResNet, ParametersMatchTorchvision) {
  EXPECT_EQ(make_resnet(resnet(50)).total_params(), 25'557'032);
  EXPECT_EQ(make_resnet(resnet(101)).total_params(), 44'549'160);
  EXPECT_EQ(make_resnet(resnet(152)).total_params(), 60'192'808);
}

// torchgpipe's flattening: 4 stem modules, 11 per bottleneck, 3 in the head; 370
// for ResNet-101, whose published balances sum to it.
TEST(ResNet, OneLayerPerModuleInTorchgpipesOrder) {
  const ModelSpec m = make_resnet(resnet(101));
  ASSERT_EQ(m.layers.size(), 370u);
  EXPECT_EQ(m.family, "resnet");
  EXPECT_EQ(m.layers[0].name, "conv1");
  EXPECT_EQ(m.layers[3].name, "maxpool");
  const char* block[] = {"identity", "conv1", "bn1", "relu1",    "conv2", "bn2",
                         "relu2",    "conv3", "bn3", "residual", "relu3"};
  for (int i = 0; i < 11; ++i) {
    EXPECT_EQ(m.layers[static_cast<std::size_t>(4 + i)].name, std::string("layer1_0_") + block[i]);
  }
  EXPECT_EQ(m.layers[4 + 3 * 11].name, "layer2_0_identity");
  EXPECT_EQ(m.layers[4 + 33 * 11 - 1].name, "layer4_2_relu3");
  EXPECT_EQ(m.layers[367].name, "avgpool");
  EXPECT_EQ(m.layers[368].name, "flat");
  EXPECT_EQ(m.layers[369].name, "fc");
}

// Forward FLOPs by hand for ResNet-50: 2 x 4,089,184,256 multiply-adds of the
// convolutions and the classifier (the published 4.09 GMAC), the 3 x 3 max pool
// (9 x 64 x 56 x 56), one addition per element of each block's output (3 blocks
// of 256 x 56^2, 4 of 512 x 28^2, 6 of 1024 x 14^2, 3 of 2048 x 7^2), the average
// pool (2048 x 7^2) and softmax cross-entropy (5 x 1000).
TEST(ResNet, ForwardFlopsByHand) {
  const ModelSpec m = make_resnet(resnet(50));
  double flops = 0.0;
  for (const LayerSpec& l : m.layers) flops += l.fwd_flops;
  const double sums = 3.0 * 802'816 + 4.0 * 401'408 + 6.0 * 200'704 + 3.0 * 100'352;
  EXPECT_DOUBLE_EQ(flops, 2.0 * 4'089'184'256 + 9.0 * 64 * 56 * 56 + sums + 100'352 + 5'000);
}

// A cut inside a block carries the chain's tensor and the block's input (the
// identity); a cut between blocks only the last ReLU's output.
TEST(ResNet, CutsInsideABlockCarryTheIdentity) {
  const ModelSpec m = make_resnet(resnet(50));
  const Bytes map64 = 64 * 56 * 56 * 4;  // fp32
  EXPECT_EQ(m.layers[8].name, "layer1_0_conv2");
  EXPECT_EQ(m.cut_bytes[8], map64 + map64);       // relu1's output + maxpool's
  EXPECT_EQ(m.cut_bytes[15], 256 * 56 * 56 * 4);  // before layer1_1_identity
  EXPECT_EQ(m.layers[13].inputs, (std::vector<std::string>{"layer1_0_bn3", "layer1_0_identity"}));
}

// What each module keeps for its backward (fp32): the stem's convolution the
// image, a BatchNorm its input, a ReLU its output, the max pool its int64
// indices, a convolution after a ReLU nothing.
TEST(ResNet, StashKeepsEachTensorOnce) {
  const ModelSpec m = make_resnet(resnet(50));
  EXPECT_EQ(m.layers[0].stash_bytes, 3 * 224 * 224 * 4);   // conv1: the image
  EXPECT_EQ(m.layers[1].stash_bytes, 64 * 112 * 112 * 4);  // bn1
  EXPECT_EQ(m.layers[2].stash_bytes, 64 * 112 * 112 * 4);  // relu
  EXPECT_EQ(m.layers[3].stash_bytes, 64 * 56 * 56 * 8);    // maxpool's indices
  EXPECT_EQ(m.layers[5].stash_bytes, 64 * 56 * 56 * 4);    // first conv1: the pool's output
  EXPECT_EQ(m.layers[8].stash_bytes, 0);                   // conv2 after relu1
  EXPECT_EQ(m.layers[4].stash_bytes, 0);                   // identity
  EXPECT_EQ(m.layers[13].stash_bytes, 256 * 56 * 56 * 4);  // residual: downsample's BN
  EXPECT_EQ(m.layers[15 + 9].stash_bytes, 0);              // a residual without one
}

// The kernels of a 3 x 3 convolution and of a strided residual: implicit GEMMs
// (output pixels x output channels x taps) and memory passes.
TEST(ResNet, ConvolutionsAreImplicitGemms) {
  const ModelSpec m = make_resnet(resnet(50));
  const std::vector<Kernel>& conv2 = *m.layers[8].kernels;
  ASSERT_EQ(conv2.size(), 1u);
  EXPECT_EQ(conv2[0].kind, Kernel::Kind::kGemm);
  EXPECT_EQ(conv2[0].rows, 56 * 56);
  EXPECT_EQ(conv2[0].n, 64);
  EXPECT_EQ(conv2[0].k, 9 * 64);
  const LayerSpec& residual = m.layers[4 + 3 * 11 + 9];  // layer2_0: 256 x 56^2 -> 512 x 28^2
  EXPECT_EQ(residual.name, "layer2_0_residual");
  const std::vector<Kernel>& k = *residual.kernels;
  ASSERT_EQ(k.size(), 3u);  // downsample GEMM, its BatchNorm, the sum
  EXPECT_EQ(k[0].rows, 28 * 28);
  EXPECT_EQ(k[0].n, 512);
  EXPECT_EQ(k[0].k, 256);
  EXPECT_EQ(k[1].bytes, 3 * 512 * 28 * 28 * 4);
  EXPECT_EQ(k[2].bytes, 3 * 512 * 28 * 28 * 4);
  EXPECT_EQ(residual.params, 256 * 512 + 2 * 512);
}

}  // namespace
}  // namespace pipescope
