// Megatron-LM's tensor parallelism as make_transformer splits a model: one
// device's FLOPs, parameters, stash, kernels and all-reduces, each against a
// hand computation or the published activation formulas.

#include <gtest/gtest.h>

#include <cstdint>

#include "costmodels/check.h"
#include "costmodels/model_families.h"

namespace pipescope {
namespace {

// s = 16, h = 32, a = 4, f = 128, V = 1001, fp16 (e = 2), dropout, one block;
// unfused attention, as Korthikanti et al. measured.
TransformerParams small() {
  TransformerParams p;
  p.fused_attention = false;
  p.layers = 1;
  p.d_model = 32;
  p.d_ff = 128;
  p.heads = 4;
  p.seq_len = 16;
  p.vocab = 1001;
  p.dtype = DType::kFp16;
  return p;
}

const LayerSpec& block(const ModelSpec& m) {
  return m.layers[1];
}

TEST(TensorSplit, BlockStashFollowsKorthikanti) {
  // Korthikanti et al. 2022, per layer with f = 4h, fp16 and dropout:
  // sh(10 + 24/t + 5as/(ht)) bytes under tensor parallelism, sh(34/t +
  // 5as/(ht)) with sequence parallelism; sh = 512, as/h = 2.
  const std::int64_t sh = 16 * 32;
  EXPECT_EQ(block(make_transformer(small())).stash_bytes, sh * (34 + 5 * 2));
  EXPECT_EQ(block(make_transformer(small(), "m", {4, false})).stash_bytes,
            sh * (10 + 24 / 4) + sh * 5 * 2 / 4);
  EXPECT_EQ(block(make_transformer(small(), "m", {4, true})).stash_bytes,
            sh * 34 / 4 + sh * 5 * 2 / 4);
  EXPECT_EQ(block(make_transformer(small(), "m", {2, false})).stash_bytes,
            sh * (10 + 24 / 2) + sh * 5 * 2 / 2);
}

// Under FP8 with Transformer Engine the GEMMs keep FP8 copies of their
// inputs, one byte an element where fp16 takes two: the QKV and MLP inputs
// (replicated), beside unfused attention the output projection's, and the
// MLP's second input over 2f/3 of its columns (split). With f = 96 (3h),
// Korthikanti's s(h(8e + 2) + 2ef) = 30sh becomes the replicated
// sh(2e + 2 + 2) = 8sh and the split s(eh + h + 2eh + 2ef - 2f/3) = 17sh.
TEST(TensorSplit, Fp8StashKeepsTheGemmInputsInOneByte) {
  const std::int64_t sh = 16 * 32;
  TransformerParams p = small();
  p.d_ff = 96;
  const TransformerParams in_dtype = p;
  p.fp8 = true;
  p.fp8_stash = true;
  EXPECT_EQ(block(make_transformer(in_dtype)).stash_bytes, sh * (30 + 5 * 2));
  EXPECT_EQ(block(make_transformer(p)).stash_bytes, sh * (25 + 5 * 2));
  EXPECT_EQ(block(make_transformer(p, "m", {4, false})).stash_bytes,
            sh * 8 + sh * 17 / 4 + sh * 5 * 2 / 4);
  EXPECT_EQ(block(make_transformer(p, "m", {4, true})).stash_bytes, sh * 25 / 4 + sh * 5 * 2 / 4);
  // The core (attention's a x s^2 terms) is untouched.
  EXPECT_EQ(block(make_transformer(p)).core_stash_bytes,
            block(make_transformer(in_dtype)).core_stash_bytes);
  // Beside unfused attention 5sh are saved: 2sh on the QKV and MLP inputs,
  // sh on the projection's, 2sh on the MLP's second input. Fused attention
  // keeps its own e-byte output beside the projection's FP8 copy, so the
  // projection's input costs sh more instead of sh less: 3sh saved.
  p.fused_attention = true;
  TransformerParams fused_dtype = in_dtype;
  fused_dtype.fused_attention = true;
  EXPECT_EQ(block(make_transformer(p)).stash_bytes,
            block(make_transformer(fused_dtype)).stash_bytes - 3 * sh);
  // Kept in dtype (torchao's Float8Linear), or without FP8: Korthikanti's.
  p.fused_attention = false;
  p.fp8_stash = false;
  EXPECT_EQ(block(make_transformer(p)).stash_bytes, sh * (30 + 5 * 2));
  p.fp8 = false;
  p.fp8_stash = true;
  EXPECT_EQ(block(make_transformer(p)).stash_bytes, sh * (30 + 5 * 2));
}

// Selective recomputation drops the 5as/(ht) part: their sh(10 + 24/t) and,
// with sequence parallelism, sh * 34/t (section 4.3).
TEST(TensorSplit, SelectiveStashFollowsKorthikanti) {
  const std::int64_t sh = 16 * 32;
  const auto kept = [](const ModelSpec& m) {
    return block(m).stash_bytes - block(m).core_stash_bytes;
  };
  EXPECT_EQ(kept(make_transformer(small())), sh * 34);
  EXPECT_EQ(kept(make_transformer(small(), "m", {4, false})), sh * (10 + 24 / 4));
  EXPECT_EQ(kept(make_transformer(small(), "m", {4, true})), sh * 34 / 4);
  EXPECT_DOUBLE_EQ(block(make_transformer(small(), "m", {4, false})).core_fwd_flops,
                   4.0 * 16 * 16 * 32 / 4);
}

TEST(TensorSplit, BlockParametersAndFlopsByHand) {
  const ModelSpec whole = make_transformer(small());
  const ModelSpec four = make_transformer(small(), "m", {4, false});
  // Whole: 4h^2 + 4h (QKV, output) + 2hf + f + h (MLP) + 4h (norms) = 12,704.
  EXPECT_EQ(block(whole).params, 4 * 32 * 32 + 4 * 32 + 2 * 32 * 128 + 128 + 32 + 4 * 32);
  // Split by 4: QKV weights and biases 3h^2 + 3h, output weight h^2, MLP
  // weights 2hf and up bias f, over 4; output and down biases, norms whole.
  EXPECT_EQ(block(four).params,
            (3 * 32 * 32 + 3 * 32 + 32 * 32 + 2 * 32 * 128 + 128) / 4 + 2 * 32 + 4 * 32);
  EXPECT_DOUBLE_EQ(block(four).fwd_flops, block(whole).fwd_flops / 4);
  EXPECT_DOUBLE_EQ(block(four).bwd_flops, block(whole).bwd_flops / 4);
  // Model FLOPs per device are the whole model's quarter, not the shares'
  // sum (which counts the padded vocabulary).
  EXPECT_DOUBLE_EQ(four.model_flops_per_device_sample(),
                   (whole.fwd_flops_per_sample() + whole.bwd_flops_per_sample()) / 4);
  EXPECT_EQ(four.tensor_parallel, 4);
  EXPECT_FALSE(four.sequence_parallel);
}

TEST(TensorSplit, VocabularyIsPaddedAndSplit) {
  const ModelSpec four = make_transformer(small(), "m", {4, false});
  // 1001 rows pad to 1004, 251 a device.
  EXPECT_EQ(four.layers.front().params, 251 * 32);
  EXPECT_EQ(four.layers.back().params, 251 * 32 + 2 * 32);
  EXPECT_DOUBLE_EQ(four.layers.back().fwd_flops, 2.0 * 16 * 32 * 251 + 5.0 * 16 * 251);
  // Stash: norm input and projection input e*sh each, the loss's fp32
  // probabilities 4*s*251 (cross_entropy fp32, the default), targets 4s.
  EXPECT_EQ(four.layers.back().stash_bytes, 2 * 2 * 16 * 32 + 4 * 16 * 251 + 4 * 16);
}

// The loss's passes over the logits, bytes per logit. In fp16 (e = 2): fp32,
// the cast up and five unfused steps forward (e + 36), the scaling and the
// cast down backward (12 + e); fp32-fused, e + 20 forward and, writing back
// the probabilities it scales, 8 + e backward; fused, 2e each way. Each keeps
// its probabilities or gradient: 4, 4 and e bytes a logit. In fp32 nothing is
// cast. Under T = 4 each device has 251 of the 1004 padded vocabulary rows.
TEST(TensorSplit, CrossEntropyPassesOverTheLogits) {
  struct Loss {
    Bytes forward, backward, stash;
    bool operator==(const Loss&) const = default;
  };
  const auto head_loss = [](CrossEntropy c, DType dtype, int ways) {
    TransformerParams p = small();
    p.cross_entropy = c;
    p.dtype = dtype;
    const LayerSpec head = make_transformer(p, "m", {ways, false}).layers.back();
    if (!head.kernels || head.kernels->empty()) {
      ADD_FAILURE() << "the head has no kernels";
      return Loss{};
    }
    const Kernel& loss = head.kernels->back();
    EXPECT_EQ(loss.kind, Kernel::Kind::kMemory);
    return Loss{loss.bytes, loss.bwd_bytes, head.stash_bytes};
  };
  const TransformerParams p = small();
  const Bytes s = p.seq_len, h = p.d_model;
  for (const int ways : {1, 4}) {
    SCOPED_TRACE(ways);
    const Bytes logits = s * (ways == 1 ? p.vocab : 251);
    const Bytes inputs = 2 * 2 * s * h + 4 * s;  // norm and projection inputs, targets
    EXPECT_EQ(head_loss(CrossEntropy::kFp32, DType::kFp16, ways),
              (Loss{logits * 38 + 4 * s, logits * 14 + 4 * s, inputs + 4 * logits}));
    EXPECT_EQ(head_loss(CrossEntropy::kFp32Fused, DType::kFp16, ways),
              (Loss{logits * 22 + 4 * s, logits * 10 + 4 * s, inputs + 4 * logits}));
    EXPECT_EQ(head_loss(CrossEntropy::kFused, DType::kFp16, ways),
              (Loss{logits * 4 + 4 * s, logits * 4 + 4 * s, inputs + 2 * logits}));
    // fp32 activations: max, subtract, exp, sum, normalise (32); scale (8).
    const Bytes inputs32 = 2 * 4 * s * h + 4 * s;
    EXPECT_EQ(head_loss(CrossEntropy::kFp32, DType::kFp32, ways),
              (Loss{logits * 32 + 4 * s, logits * 8 + 4 * s, inputs32 + 4 * logits}));
  }
  for (const CrossEntropy c :
       {CrossEntropy::kFp32, CrossEntropy::kFp32Fused, CrossEntropy::kFused}) {
    EXPECT_EQ(parse_cross_entropy(to_string(c)), c);
  }
  EXPECT_EQ(parse_cross_entropy("bf16"), std::nullopt);
}

TEST(TensorSplit, AllReducesPerLayer) {
  const ModelSpec whole = make_transformer(small());
  for (const LayerSpec& l : whole.layers) {
    EXPECT_EQ(l.tp_fwd_allreduces + l.tp_bwd_allreduces, 0) << l.name;
  }
  const ModelSpec two = make_transformer(small(), "m", {2, true});
  const std::int64_t she = 16 * 32 * 2;
  // A block: after the output and the MLP down projections, and their
  // mirrors in the backward, each of the s x h output.
  EXPECT_EQ(block(two).tp_fwd_allreduces, 2);
  EXPECT_EQ(block(two).tp_bwd_allreduces, 2);
  EXPECT_EQ(block(two).tp_fwd_bytes, 2 * she);
  EXPECT_EQ(block(two).tp_bwd_bytes, 2 * she);
  // The embedding's vocabulary-parallel lookup; the head's cross-entropy
  // (three fp32 values per token) and its input gradient.
  EXPECT_EQ(two.layers.front().tp_fwd_allreduces, 1);
  EXPECT_EQ(two.layers.front().tp_fwd_bytes, she);
  EXPECT_EQ(two.layers.front().tp_bwd_allreduces, 0);
  EXPECT_EQ(two.layers.back().tp_fwd_allreduces, 3);
  EXPECT_EQ(two.layers.back().tp_fwd_bytes, 3 * 4 * 16);
  EXPECT_EQ(two.layers.back().tp_bwd_bytes, she);
}

TEST(TensorSplit, CutBytesSplitOnlyWithSequenceParallelism) {
  const std::int64_t she = 16 * 32 * 2;
  EXPECT_EQ(block(make_transformer(small(), "m", {4, false})).out_bytes, she);
  EXPECT_EQ(block(make_transformer(small(), "m", {4, true})).out_bytes, she / 4);
  // The embedding's reduce-scatter leaves each device its s / t rows too.
  EXPECT_EQ(make_transformer(small(), "m", {4, false}).layers.front().out_bytes, she);
  EXPECT_EQ(make_transformer(small(), "m", {4, true}).layers.front().out_bytes, she / 4);
}

TEST(TensorSplit, KernelsSplitByColumnsRowsAndHeads) {
  TransformerParams fused = small();
  fused.fused_attention = true;
  const ModelSpec four = make_transformer(fused, "m", {4, false});
  const auto& k = *block(four).kernels;
  ASSERT_EQ(k.size(), 10u);  // norm, QKV, attention, out, add, norm, up, GeLU, down, add
  EXPECT_EQ(k[0].bytes, 2 * 16 * 32 * 2);  // the whole s x h on every device
  EXPECT_EQ(k[1].n, 3 * 32 / 4);           // QKV by columns
  EXPECT_EQ(k[1].k, 32);
  EXPECT_EQ(k[2].batch_count, 1);  // 4 heads over 4 devices
  EXPECT_EQ(k[3].n, 32);           // output projection by rows
  EXPECT_EQ(k[3].k, 32 / 4);
  EXPECT_EQ(k[6].n, 128 / 4);  // MLP up by columns
  EXPECT_EQ(k[7].bytes, 2 * 16 * (128 / 4) * 2);
  EXPECT_EQ(k[8].k, 128 / 4);  // MLP down by rows
  const ModelSpec four_sp = make_transformer(fused, "m", {4, true});
  const auto& sp = *block(four_sp).kernels;
  EXPECT_EQ(sp[0].bytes, 2 * (16 / 4) * 32 * 2);  // s / t rows with sequence parallelism
  EXPECT_EQ(sp[1].rows, 16);                      // the GEMM sees the gathered sequence
}

TEST(TensorSplit, ProblemsNameWhatDoesNotDivide) {
  TransformerParams p = small();
  EXPECT_EQ(tensor_split_problem(p, {4, false}), "");
  EXPECT_EQ(tensor_split_problem(p, {3, false}), "3 tensor-parallel devices do not divide heads 4");
  p.kv_heads = 2;
  EXPECT_EQ(tensor_split_problem(p, {4, false}),
            "4 tensor-parallel devices do not divide kv_heads 2");
  p = small();
  p.seq_len = 18;
  EXPECT_EQ(tensor_split_problem(p, {4, false}), "");
  EXPECT_EQ(tensor_split_problem(p, {4, true}),
            "4 tensor-parallel devices do not divide seq_len 18");
  EXPECT_THROW(make_transformer(p, "m", {4, true}), InternalError);
}

}  // namespace
}  // namespace pipescope
