#pragma once
// A model as a sequence of layers with per-sample costs. Families (transformer,
// mlp, amoebanet) expand a few parameters into such a list; "layers" gives it
// explicitly. Layers may also form a graph (skip connections): each names the
// earlier layers it consumes, and costmodels/layer_graph.h orders them and works
// out what crosses each cut.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "costmodels/dtype.h"
#include "costmodels/units.h"

namespace pipescope {

// The (query, key) pairs causal attention over `seq` positions computes,
// each query over at most its last `window` keys (0: all before it): s^2 / 2,
// the causal half, or w s - w^2 / 2 within a window w shorter than the
// sequence (the same count taken as continuous, so that the two meet at w = s).
inline double attended_pairs(std::int64_t seq, std::int64_t window) {
  const double s = static_cast<double>(seq);
  if (window <= 0 || window >= seq) return s * s / 2.0;
  const double w = static_cast<double>(window);
  return w * s - w * w / 2.0;
}

// One kernel of a layer's forward pass, per sample: the kernel-level cost model
// derives its time and its backward's from the shape. A micro-batch of b samples
// multiplies `rows` (GEMM), `batch_count` (attention) and `bytes` (memory) by b.
struct Kernel {
  enum class Kind : std::uint8_t {
    kGemm,       // (rows x k) . (k x n), batch_count independent products
    kMemory,     // memory-bound: bytes read and written, forward and backward
    kAttention,  // fused attention over batch_count heads of length seq, width head_dim
  };
  Kind kind = Kind::kGemm;
  std::int64_t rows = 0;         // kGemm: rows of the product per sample (tokens)
  std::int64_t n = 0;            // kGemm: columns of the output
  std::int64_t k = 0;            // kGemm: reduction depth
  std::int64_t batch_count = 1;  // kGemm, kAttention: independent products per sample
  Bytes bytes = 0;               // kMemory: bytes the forward moves per sample
  Bytes bwd_bytes = 0;           // kMemory: bytes its backward moves per sample
  std::int64_t seq = 0;          // kAttention: sequence length
  std::int64_t head_dim = 0;     // kAttention: the queries' and keys' width per head
  std::int64_t value_dim = 0;    // kAttention: the values' width per head (0: head_dim)
  bool causal = false;           // kAttention: a causal mask (half the score matrix)
  std::int64_t window = 0;       // kAttention, causal: each query's last `window` keys (0: all)
  // kAttention: the devices of context parallelism that share the sequence
  // (ring attention, Megatron-LM's --context-parallel-size): this device
  // computes 1 / context_parallel of the pairs over `seq` (its seq / C
  // queries against every key, the causal work balanced), one kernel per
  // step of the ring, forward and backward.
  int context_parallel = 1;
  bool has_weight = true;  // kGemm: the right operand is a weight (its gradient is W)
  // kGemm: the batch_count products each have a weight of their own and share
  // the micro-batch's tokens (a mixture of experts' grouped GEMM, one product
  // per expert over the tokens routed to it): a micro-batch of b samples
  // multiplies their rows by b, not their count.
  bool grouped = false;
  // kGemm: a 3 x 3 stride-1 convolution (k = 9 x input channels), which cuDNN
  // can also run as Winograd's F(2 x 2, 3 x 3) over this many 2 x 2 output
  // tiles per sample; 0 for every other product.
  std::int64_t winograd_tiles = 0;
  // kMemory: the backward computes a weight gradient (an embedding's scatter
  // into its table), so a split backward runs it as W.
  bool backward_is_weight_grad = false;
  // Part of attention's core (the scores, softmax, dropout and product with V,
  // or the fused kernel): what selective recomputation reruns before the
  // backward (LayerSpec::core_stash_bytes).
  bool attention_core = false;
  // kGemm: which of a block's tensor-parallel projections it is, by
  // Transformer Engine's names: the column-split QKV (qkv) and MLP up (fc1)
  // projections, whose input the group gathers, and the row-split output
  // (proj) and MLP down (fc2) projections, whose output it reduces. Under
  // TE's userbuffers (Framework::tp_forward_overlap) those collectives run
  // beside these GEMMs on SMs of their own (costmodels/userbuffers.h).
  enum class TeGemm : std::uint8_t { kNone, kQkv, kProj, kFc1, kFc2 };
  TeGemm te_gemm = TeGemm::kNone;
  // The kernels the host launches for it, forward and backward: 1 and 1 (2
  // for a GEMM: input and weight gradients) unless it stands for several
  // (an unfused layer norm's separate ops). Each costs the device
  // kernel_overhead_s and the host Framework::host_launch_s.
  int launches = 1;
  int bwd_launches = 0;  // 0: the kind's default

  bool operator==(const Kernel&) const = default;
};

// A layer's kernels, shared by the equal layers of a model (a Transformer's
// blocks) so that a cost model can key what it derived by the list's address.
using KernelList = std::shared_ptr<const std::vector<Kernel>>;
inline KernelList make_kernel_list(std::vector<Kernel> kernels) {
  return std::make_shared<const std::vector<Kernel>>(std::move(kernels));
}

// Costs of one layer for one sample; a micro-batch of b samples costs b times as
// much (parameters excepted).
struct LayerSpec {
  std::string name;
  Flops fwd_flops = 0.0;    // forward FLOPs per sample
  Flops bwd_flops = 0.0;    // backward FLOPs per sample (input + weight gradient)
  std::int64_t params = 0;  // parameter count
  Bytes out_bytes = 0;      // output activation per sample: what crosses a cut after it
  Bytes stash_bytes = 0;  // activations kept for its own backward, per sample (its input included)
  // The part of stash_bytes inside attention's core, per sample, and the
  // core's forward FLOPs: selective recomputation (Korthikanti et al. 2022)
  // drops that part after the forward and reruns the core to rebuild it at
  // the start of the backward. 0 for layers without attention.
  Bytes core_stash_bytes = 0;
  Flops core_fwd_flops = 0.0;
  // Names of the layers whose outputs this layer consumes ("input": the model's
  // input). Empty: the previous layer's output (for the first layer, the model's
  // input), as in a plain sequence.
  std::vector<std::string> inputs{};
  // What the layer runs on an accelerator, for the kernel-level cost model
  // (costmodels/kernel_cost_model.h); null: the layer is costed from its FLOPs
  // and bytes alone.
  KernelList kernels{};
  // Under tensor parallelism (ModelSpec::tensor_parallel > 1) the layer is one
  // device's share of it, and its group of devices sums partial results:
  // `tp_fwd_allreduces` all-reduces in the forward (and again in a recompute)
  // of `tp_fwd_bytes` per sample in all, `tp_bwd_allreduces` of `tp_bwd_bytes`
  // in the backward's input-gradient part. With sequence parallelism each
  // all-reduce is an all-gather and a reduce-scatter, whose ring moves the same
  // bytes. 0 without tensor parallelism.
  int tp_fwd_allreduces = 0;
  int tp_bwd_allreduces = 0;
  Bytes tp_fwd_bytes = 0;
  Bytes tp_bwd_bytes = 0;
  // Under expert parallelism (ModelSpec::expert_parallel > 1), of `params`
  // the routed experts' this device holds: the replicas that hold the same
  // experts are D / E of the D (D x C / E of the D x C under context
  // parallelism), so their gradients reduce, and ZeRO shards them, over
  // those. The layer's forward (and a recompute) runs
  // `ep_alltoalls` all-to-alls among the E devices, each device sending
  // `ep_bytes` per sample in each (its tokens' copies, the share for itself
  // included): the dispatch to the experts and the combination back; its
  // backward runs as many of the gradients. 0 otherwise.
  std::int64_t expert_params = 0;
  int ep_alltoalls = 0;
  Bytes ep_bytes = 0;
  // Under context parallelism (ModelSpec::context_parallel > 1), the steps of
  // the ring that exchanges keys and values among the C devices: in each,
  // every device sends `cp_bytes` per sample (its block of K and V) to the
  // next while it computes attention over the block it holds; a backward
  // sends twice as much in as many steps (the blocks and their gradients).
  // 0 otherwise.
  int cp_steps = 0;
  Bytes cp_bytes = 0;
  // The device's queries (and as many bytes of the attention's output) per
  // sample, which the all-to-all form (training.cp_comm_type a2a) trades
  // besides the keys and values.
  Bytes cp_q_bytes = 0;
};

struct TransformerParams;  // costmodels/model_families.h
struct MlpParams;

struct ModelSpec {
  std::string name;
  std::string family;  // "transformer", "mlp" or "layers"
  DType dtype = DType::kFp32;
  std::vector<LayerSpec> layers;
  Bytes input_bytes = 0;               // the first layer's input per sample (token ids, features)
  std::int64_t tokens_per_sample = 1;  // seq_len for language models, 1 otherwise
  // For layer graphs: cut_bytes[i] is what crosses a cut placed before layer i, per
  // sample: every live tensor, all sent together (L + 1 entries; [0] the model
  // input, [L] the last layer's output). Filled by resolve_layer_graph
  // (costmodels/layer_graph.h); empty for plain sequences, where a cut carries the
  // previous layer's output alone.
  std::vector<Bytes> cut_bytes;
  // The family parameters the layers were expanded from, for tools that rebuild
  // the model (the executor, plan files); null for explicit layer lists.
  std::shared_ptr<const TransformerParams> transformer;
  std::shared_ptr<const MlpParams> mlp;
  // Tensor parallelism (Megatron-LM's, Shoeybi et al. 2019): each layer is the
  // share of one of `tensor_parallel` devices that split it (its FLOPs,
  // parameters, stash and kernels are that device's), and
  // `sequence_parallel` (Korthikanti et al. 2022) splits the rest of the
  // block's activations along the sequence too. 1 and false: whole layers.
  int tensor_parallel = 1;
  bool sequence_parallel = false;
  // Expert parallelism: each mixture layer holds experts / expert_parallel of
  // the routed experts (LayerSpec::expert_params, ep_alltoalls). 1: all.
  int expert_parallel = 1;
  // Context parallelism: each layer is one of `context_parallel` devices'
  // share of a sample's sequence (seq_len / C tokens; LayerSpec::cp_steps).
  // 1: the whole sequence.
  int context_parallel = 1;
  // The C devices trade sequence for heads around the attention (all-to-alls;
  // TensorSplit::heads_over_context) instead of passing keys and values round
  // a ring.
  bool context_by_heads = false;
  // Forward + backward FLOPs per sample of the whole model when split (the
  // shares add up to more: the padded vocabulary, the replicated position
  // add); 0 when whole. model_flops_per_device_sample() uses it.
  Flops whole_flops_per_sample = 0.0;
  // Under tied embeddings (the head's projection reads the token table), the
  // table's parameters a device holds (its 1 / T of the vocabulary): a
  // pipeline that places the head on another device than the embedding keeps
  // a copy there (sim/engine/simulator.h, tied_copy_params). 0: untied.
  std::int64_t tied_table_params = 0;

  std::int64_t total_params() const;
  // Whether a layer has an attention core that selective recomputation drops.
  bool has_attention_core() const;
  Flops fwd_flops_per_sample() const;
  Flops bwd_flops_per_sample() const;
  // The model FLOPs (forward + backward) one device does per sample: all of
  // them, or its 1 / (T C) of the whole model's under tensor and context
  // parallelism.
  Flops model_flops_per_device_sample() const;
  // Bytes that cross a cut placed before layer `first` (the input of layer first),
  // per sample; first == L gives the last layer's output. O(1).
  Bytes input_bytes_of(int first) const;
};

}  // namespace pipescope
