#pragma once
// Model families: a few parameters expanded into a layer list with FLOPs,
// parameters and activation sizes derived from published formulas.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "costmodels/model.h"

namespace pipescope {

// Decoder-style Transformer language model: an embedding layer (token + learned
// position tables), `layers` blocks (self-attention + MLP, pre-LayerNorm,
// residuals), and a head layer (final LayerNorm + LM projection + softmax
// cross-entropy). Embedding and head are not tied, as in the GPipe paper's
// Transformer (its parameter counts need both tables).
// How a language model's loss is computed over the s x V logits, which for a
// small model and a large vocabulary is much of the head's time and memory.
enum class CrossEntropy {
  // The logits cast to fp32, then one kernel per step (maximum, subtraction,
  // exponential, sum, normalisation), the fp32 probabilities kept for the
  // backward: Megatron-LM's and Megatron-DeepSpeed's vocab-parallel
  // cross-entropy by default (the GPT models' logits .float() before it).
  kFp32,
  // The same in three kernels fused by a JIT compiler, the fp32 probabilities
  // kept: megatron-core's cross_entropy_loss_fusion, on in NeMo 2's GPTConfig.
  kFp32Fused,
  // One pass in the activations' type that reads the logits and writes their
  // gradient, which it keeps: an XLA fusion (the GPipe paper's TPU runs).
  kFused,
};
std::string_view to_string(CrossEntropy c);  // "fp32", "fp32-fused", "fused"
std::optional<CrossEntropy> parse_cross_entropy(std::string_view name);

// A mixture of experts in place of a block's MLP (Shazeer et al. 2017; Fedus
// et al. 2022; Mixtral, Qwen-MoE, DeepSeek-V3): `experts` expert MLPs of width
// `expert_d_ff`, of which a learned router (a d_model x experts product and a
// softmax over its scores) picks `experts_per_token` for each token, their
// outputs summed with the router's weights; and, where `shared_d_ff` > 0, a
// shared MLP of that width that every token passes through (DeepSeek's shared
// experts side by side, Qwen's shared expert). A gated MLP's three matrices
// count as two of width 1.5 i, as TransformerParams::d_ff does. The first
// `dense_layers` blocks keep the dense MLP of width d_ff (DeepSeek-V3's first
// three). experts = 0: every block is dense.
//
// Under expert parallelism (TensorSplit::experts, E > 1) each device holds
// experts / E of the routed experts and computes them over the tokens the E
// devices route to them; `imbalance` is how many times the mean share of
// routed tokens the busiest device receives (>= 1; 1: a balanced router),
// which sets the time and the memory of its experts.
struct MoeParams {
  int experts = 0;
  int experts_per_token = 0;
  std::int64_t expert_d_ff = 0;
  std::int64_t shared_d_ff = 0;
  int dense_layers = 0;
  double imbalance = 1.0;

  bool enabled() const { return experts > 0; }
  // Whether block i (from 0) has the mixture.
  bool in_block(int i) const { return enabled() && i >= dense_layers; }
};
// The routed token copies a device's experts compute, of the tokens x
// experts_per_token a device routes: all of them without expert parallelism,
// else `imbalance` times their mean share (the busiest device's), rounded up.
std::int64_t received_expert_tokens(const MoeParams& moe, std::int64_t tokens, int expert_parallel);

// Multi-head latent attention (DeepSeek-V2 and V3, DeepSeek-AI 2024): the
// queries through a rank-q_lora_rank bottleneck (0: one d_model x heads x
// (qk_nope_head_dim + qk_rope_head_dim) projection), the keys and values
// expanded per head from one rank-kv_lora_rank latent, each head's keys also
// carrying a qk_rope_head_dim-wide rotary part shared by the heads; queries and
// keys are qk_nope_head_dim + qk_rope_head_dim wide a head, values
// v_head_dim, and the output projection takes heads x v_head_dim back to
// d_model. Each bottleneck has a norm of its width. kv_lora_rank = 0: the
// family's usual attention.
struct LatentAttention {
  std::int64_t q_lora_rank = 0;
  std::int64_t kv_lora_rank = 0;
  std::int64_t qk_nope_head_dim = 0;
  std::int64_t qk_rope_head_dim = 0;
  std::int64_t v_head_dim = 0;

  bool enabled() const { return kv_lora_rank > 0; }
  std::int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
};

struct TransformerParams {
  int layers = 0;
  std::int64_t d_model = 0;
  std::int64_t d_ff = 0;  // 0 means 4 * d_model
  std::int64_t heads = 0;
  std::int64_t seq_len = 0;
  std::int64_t vocab = 0;
  DType dtype = DType::kFp32;
  // A learned position table (seq_len x d_model parameters) instead of the
  // original Transformer's sinusoidal positions, which GPipe's Transformer uses
  // (its parameter counts carry no such table). Rotary positions (Llama) have no
  // parameters either and count as sinusoidal.
  bool learned_positions = false;
  // The LM projection reuses the token table (GPT-2, T5; Press & Wolf 2017): the
  // head keeps its 2shV FLOPs but has no V x h weights of its own. The table is
  // counted once, on the embedding's stage. When embedding and head sit on
  // different stages, real pipelines (Megatron-LM) keep a copy on both and
  // all-reduce its gradient; that copy (V*h weights with their gradients and
  // optimizer state on the last stage) is not modelled.
  bool tied_embeddings = false;
  // Key/value heads for grouped-query attention (Ainslie et al. 2023; Llama-2-70B,
  // Mistral): K and V projections are h x (h * kv_heads / heads). 0 means heads
  // (multi-head attention).
  std::int64_t kv_heads = 0;
  // The width of one attention head (Qwen3, Gemma, GPT-OSS): the queries and
  // the attention output are heads x head_dim wide, keys and values
  // kv_heads x head_dim, whatever d_model. 0 means d_model / heads. Not with
  // latent attention, whose head widths are its own (LatentAttention).
  std::int64_t head_dim = 0;
  // Sliding-window attention (Mistral, Gemma, GPT-OSS): a query of the blocks
  // that slide attends to the last sliding_window positions, itself included,
  // instead of all before it; 0: no block slides. Block i slides where
  // sliding_pattern[i % its size] is set (GPT-OSS: sliding, full, ...; empty:
  // every block). Only fused attention computes less for it; the unfused
  // form computes the whole score matrix and masks it.
  std::int64_t sliding_window = 0;
  std::vector<bool> sliding_pattern;
  // Whether block i attends over a window shorter than the sequence.
  bool slides(int i) const {
    if (sliding_window <= 0 || sliding_window >= seq_len) return false;
    return sliding_pattern.empty() ||
           sliding_pattern[static_cast<std::size_t>(i) % sliding_pattern.size()];
  }
  // Dropout on the attention probabilities, the attention output and the MLP
  // output (Megatron-LM, GPT-2). Without it the masks and the dropped copy of the
  // probabilities are not stashed: Lingvo's Transformer layers, which GPipe's
  // experiments ran, default every dropout probability to 0.
  bool dropout = true;
  // Attention as one fused kernel per pass (FlashAttention, Dao et al. 2022):
  // the s x s scores never reach memory. false: the unfused form of Megatron-LM
  // before 2022, batched GEMMs around a softmax (and dropout) that reads and
  // writes the a x s x s probabilities. Only the kernel-level cost model
  // (costmodels/kernel_cost_model.h) tells their times apart; the stash holds
  // the a x s x s probabilities only when unfused (the fused kernel keeps a
  // log-sum-exp per row and head instead).
  bool fused_attention = true;
  // Unfused attention as PyTorch's eager code runs it (Hugging Face's
  // `eager` attention): the scale, the mask, a softmax that writes fp32 and
  // the cast back down, each a pass of its own over the a x s x s scores,
  // where Megatron-LM fuses them into one (transformer_parts.h,
  // eager_softmax_kernel). Only with fused_attention false.
  bool eager_attention = false;
  // Each layer norm as one kernel forward and one backward (Megatron-LM's
  // fused LayerNorm, Transformer Engine's). false: as the separate ops of an
  // unfused implementation (Hugging Face's RMSNorm, PyTorch's nn.RMSNorm
  // before 2.8): casts, square, mean, rsqrt, products, each a pass over the
  // activations (docs/models.md).
  bool fused_norm = true;
  // The block and head GEMMs run in FP8 on tensor cores (NVIDIA Transformer
  // Engine); weights and activations stay in dtype. Needs a device with an FP8
  // peak.
  bool fp8 = false;
  // Under fp8, a dense block's backward keeps the FP8 copies of its GEMMs'
  // inputs (one byte an element: the QKV and MLP inputs, the output
  // projection's), as Transformer Engine does; false: in dtype
  // (Framework::fp8_stash). Mixture-of-experts and latent-attention blocks
  // keep theirs in dtype either way (costmodels/transformer_block.cpp).
  bool fp8_stash = false;
  // How the head's cross-entropy runs over its s x V logits.
  CrossEntropy cross_entropy = CrossEntropy::kFp32;
  // The blocks' mixture of experts, if any.
  MoeParams moe;
  // The blocks' attention as latent attention, if kv_lora_rank is set.
  LatentAttention mla;
};
// Megatron-LM's tensor parallelism over `ways` devices (Shoeybi et al. 2019):
// each block's QKV and MLP up projections split by columns, its output and MLP
// down projections by rows, attention by heads, so a block's forward ends in
// two all-reduces of its s x h output and its backward in two of its input
// gradient; the embedding and the LM projection split the vocabulary (padded
// to a multiple of `ways`). `sequence`: sequence parallelism (Korthikanti et
// al. 2022), the layer norms, dropouts and residual adds split along the
// sequence, each all-reduce an all-gather and a reduce-scatter. ways = 1: the
// whole model.
struct TensorSplit {
  int ways = 1;
  bool sequence = false;
  // E, the devices the routed experts spread over (expert parallelism,
  // Megatron-LM's --expert-model-parallel-size): each holds experts / E of
  // them whole (or split by `ways`), the tokens dispatched to them and
  // combined back by all-to-alls among the E devices.
  int experts = 1;
  // The devices that split each routed expert (expert tensor parallelism,
  // Megatron-LM's --expert-tensor-parallel-size): 0 for `ways` (each expert
  // split as the dense MLP is), or 1 with `ways` above 1 and `sequence`
  // ("parallel folding"): each of a tensor group's devices routes its own
  // s / T tokens to whole experts, so a group holds T of the E expert ranks.
  int expert_ways = 0;
  // The devices that split each expert, and how many expert ranks a tensor
  // group holds (T / expert_ways_or_t()).
  int expert_ways_or_t() const { return expert_ways > 0 ? expert_ways : ways; }
  int expert_fold() const { return ways / expert_ways_or_t(); }
  // C, the devices that split each sample's sequence (context parallelism,
  // Megatron-LM's --context-parallel-size; Liu et al. 2023's ring attention
  // as Transformer Engine runs it): each holds seq_len / C tokens of every
  // sample, in two chunks (i and 2C - 1 - i of 2C) so that the causal
  // attention's work is even, and computes attention of its queries against
  // every key as the keys' and values' blocks go round the ring of the C.
  int context = 1;
  // The C devices trade sequence for heads around the attention instead
  // (all-to-alls, DeepSpeed-Ulysses): C must divide each device's heads and
  // key-value heads.
  bool heads_over_context = false;
};
// Why `split` cannot split `p` (ways must divide heads, kv_heads and d_ff, the
// experts' and the shared MLP's widths, and seq_len under sequence
// parallelism; experts, above 1, needs a mixture whose experts it divides and
// an imbalance of at most E; context, above 1, needs 2 C (2 C T under
// sequence parallelism) to divide seq_len and fused attention that is
// neither latent nor sliding, the forms whose ring exchange is modelled);
// empty when it can. Each expert splits over the
// ways as a dense MLP does (Megatron-LM's expert tensor parallelism equal to
// its tensor parallelism), or stays whole (expert_ways 1, which needs
// sequence parallelism); the router runs whole on every device.
std::string tensor_split_problem(const TransformerParams& p, TensorSplit split);
// One device's share of the model under `split`. Throws std::overflow_error
// when the sizes do not fit in 64-bit integers, InternalError when
// tensor_split_problem is not empty.
ModelSpec make_transformer(const TransformerParams& p, const std::string& name = "transformer",
                           TensorSplit split = {});

// A stack of residual MLP blocks x + W2·relu(W1·LN(x)) over feature vectors,
// followed by a classifier head (linear d_model -> classes + softmax
// cross-entropy).
struct MlpParams {
  int layers = 0;
  std::int64_t d_model = 0;
  std::int64_t d_hidden = 0;  // 0 means 4 * d_model
  std::int64_t classes = 0;   // 0 means d_model
  DType dtype = DType::kFp32;
};
// Throws std::overflow_error when the sizes do not fit in 64-bit integers.
ModelSpec make_mlp(const MlpParams& p, const std::string& name = "mlp");

// An AmoebaNet-D image classifier as GPipe scales it: AmoebaNet-D (L, D) has L
// normal cells with D filters (Huang et al. 2019, Table 1), in three groups split
// by two reduction cells, after an ImageNet stem of a 3x3 stride-2 convolution and
// two reduction cells; then global average pooling, a linear classifier and
// softmax cross-entropy. Cells follow the TensorFlow TPU reference AmoebaNet-D as
// torchgpipe reimplements it (benchmarks/models/amoebanet), which reproduces the
// paper's parameter counts. Every cell consumes the outputs of the two cells before
// it (h[i-1], h[i-2]; Real et al. 2019), so cuts between cells carry two tensors;
// the layers name their inputs and the model comes back with cut_bytes filled.
struct AmoebaNetParams {
  int cells = 0;                  // L, normal cells; group g of three holds L/3 (+1 for g < L % 3)
  std::int64_t filters = 0;       // D, at least 8: normal cells of the groups have D, 2D, 4D
  std::int64_t image_size = 224;  // square input, 3 channels
  std::int64_t classes = 1000;
  DType dtype = DType::kFp32;
};
// Throws std::overflow_error when the sizes do not fit in 64-bit integers.
ModelSpec make_amoebanet(const AmoebaNetParams& p, const std::string& name = "amoebanet");

// A ResNet image classifier of bottleneck blocks (He et al. 2016) as torchvision
// builds it and torchgpipe flattens it into one layer per module (370 for
// ResNet-101; costmodels/resnet.cpp lists them). Each block's residual layer
// consumes its identity layer, so cuts inside a block carry two tensors.
struct ResNetParams {
  int depth = 101;                // 50, 101 or 152
  std::int64_t image_size = 224;  // square input, 3 channels, at least 32
  std::int64_t classes = 1000;
  DType dtype = DType::kFp32;
};
// Throws std::overflow_error when the sizes do not fit in 64-bit integers.
ModelSpec make_resnet(const ResNetParams& p, const std::string& name = "resnet");

}  // namespace pipescope
