#pragma once
// A scenario: the model, the cluster and how it is trained. Loaded from JSON by
// scenario_io; the simulation core only sees this plain struct.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "costmodels/cluster.h"
#include "costmodels/framework.h"
#include "costmodels/model.h"
#include "costmodels/model_families.h"
#include "costmodels/optimizer.h"
#include "sim/scenario/stated_cut.h"

namespace pipescope {

// gpipe: fill-drain (Huang et al. 2019); 1f1b: PipeDream-Flush (Narayanan et al.
// 2021), one forward one backward in the steady state; zb-h1: Zero Bubble H1 (Qi
// et al. 2024), 1F1B with the backward split into B (input gradient) and W
// (weight gradient), the W deferred into what would be bubbles;
// interleaved-1f1b: Megatron-LM's 1F1B over v model chunks per device (Narayanan
// et al. 2021); looped-bfs: GPipe's order over v model chunks per device, chunk by
// chunk (Lamy-Poirier 2023, PyTorch's ScheduleLoopedBFS); zb-v: ZB-V (Qi et al.
// 2024, PyTorch's ScheduleZBVZeroBubble), two chunks per device placed in a V
// with the backward split as zb-h1's; interleaved-zb: zero bubble over v chunks
// per device placed as interleaved-1f1b's (PyTorch's ScheduleInterleavedZeroBubble);
// dualpipe-v: DualPipeV (DeepSeek-AI 2024 and Sea AI Lab's cut-in-half, PyTorch's
// ScheduleDualPipeV), zb-v's V run as DualPipe pairs one micro-batch's forward
// with another's backward; custom: per-device action lists read from a file
// (sim/engine/custom_schedule.h), which the planner does not search.
enum class ScheduleKind {
  kGpipe,
  k1F1B,
  kZbH1,
  kInterleaved1F1B,
  kLoopedBfs,
  kZbV,
  kInterleavedZb,
  kDualPipeV,
  kCustom
};

std::string_view to_string(ScheduleKind k);
// "gpipe", "1f1b", "zb-h1", "interleaved-1f1b", "looped-bfs", "zb-v",
// "interleaved-zb", "dualpipe-v", "custom"
std::optional<ScheduleKind> parse_schedule(std::string_view name);
// The built-in schedules (kAllSchedules); custom comes with its file.
inline constexpr const char* kScheduleNames =
    "gpipe, 1f1b, zb-h1, interleaved-1f1b, looped-bfs, zb-v, interleaved-zb, dualpipe-v";
inline constexpr ScheduleKind kAllSchedules[] = {
    ScheduleKind::kGpipe,           ScheduleKind::k1F1B,      ScheduleKind::kZbH1,
    ScheduleKind::kInterleaved1F1B, ScheduleKind::kLoopedBfs, ScheduleKind::kZbV,
    ScheduleKind::kInterleavedZb,   ScheduleKind::kDualPipeV};

// Whether the schedule runs a backward as two ops, B (input gradient) and W
// (weight gradient). dualpipe-v runs some backwards whole: as B and W back to
// back.
constexpr bool splits_backward(ScheduleKind k) {
  return k == ScheduleKind::kZbH1 || k == ScheduleKind::kZbV || k == ScheduleKind::kInterleavedZb ||
         k == ScheduleKind::kDualPipeV;
}

// v when interleaving is asked for without saying how many chunks.
inline constexpr int kDefaultChunks = 2;

// Whether the schedule places two chunks per device in a V: stages d and
// 2K - 1 - d on device d (zb-v, dualpipe-v; exactly kDefaultChunks chunks).
constexpr bool v_shaped(ScheduleKind k) {
  return k == ScheduleKind::kZbV || k == ScheduleKind::kDualPipeV;
}

// Whether the schedule runs several model chunks per device (v = chunks > 1;
// the V-shaped ones exactly 2, kDefaultChunks).
constexpr bool takes_chunks(ScheduleKind k) {
  return k == ScheduleKind::kInterleaved1F1B || k == ScheduleKind::kLoopedBfs ||
         k == ScheduleKind::kInterleavedZb || v_shaped(k);
}

// The built-in schedules that take a chunk count, for messages: "interleaved-1f1b,
// looped-bfs, zb-v, ..." in kAllSchedules' order.
std::string chunked_schedule_names();

// Rematerialization (activation checkpointing): which micro-batches keep only
// their stage input after F and recompute the rest (R) before B.
//   always:      every micro-batch (GPipe's remat);
//   except-last: every one but the last, M - 1, whose backward comes first or
//                soonest, so recomputing it saves little (torchgpipe's default);
//   never:       every micro-batch keeps its whole stash from F to B;
//   selective:   every micro-batch keeps its stash but the part inside
//                attention's core (scores, softmax, dropout), which its
//                backward rebuilds first (Korthikanti et al. 2022): no R op,
//                a longer B (sim/engine/stage_costs.h, under_remat).
enum class Remat : std::uint8_t { kNever, kAlways, kExceptLast, kSelective };

// "always", "never", "except-last", "selective": the name in JSON files ("remat_mode").
std::string_view to_string(Remat r);
// "on", "off", "except-last", "selective": the form summaries and labels use.
std::string_view remat_label(Remat r);
// The names above, and "on" (always) and "off" (never) as the command line takes them.
std::optional<Remat> parse_remat(std::string_view name);
inline constexpr const char* kRematNames = "always, except-last, selective, never (or on, off)";
// From the least recomputation to the most.
inline constexpr Remat kAllRemats[] = {Remat::kNever, Remat::kSelective, Remat::kExceptLast,
                                       Remat::kAlways};
// The modes a schedule tells apart: selective recomputation runs as never,
// its costs are the layers' (under_remat).
inline constexpr Remat kScheduleRemats[] = {Remat::kNever, Remat::kExceptLast, Remat::kAlways};
// Whether the mode reruns whole forwards as R ops before backwards.
constexpr bool reruns_forwards(Remat r) {
  return r == Remat::kAlways || r == Remat::kExceptLast;
}
constexpr Remat remat_from_bool(bool on) {
  return on ? Remat::kAlways : Remat::kNever;
}

// Whether micro-batch m of M is recomputed before its backward.
constexpr bool recomputes(Remat r, int micro_batch, int micro_batches) {
  return r == Remat::kAlways || (r == Remat::kExceptLast && micro_batch != micro_batches - 1);
}
// What a recomputed micro-batch keeps between its F and its R, and what its R
// rebuilds (docs/models.md, Memory):
//   stage: the stage's input; R rebuilds the whole stage's stash, held until
//          B ends (GPipe's and torchgpipe's checkpoint around a partition);
//   layer: every layer's input; the backward reruns one layer at a time, so
//          at most the largest layer's stash is rebuilt at once (Megatron-LM's
//          --recompute-num-layers 1, DeepSpeed's activation_checkpoint_interval
//          1). The rerun costs the same forward either way.
enum class Checkpoint : std::uint8_t { kStage, kLayer };
std::string_view to_string(Checkpoint c);
std::optional<Checkpoint> parse_checkpoint(std::string_view name);
// Whether `remat` reruns forwards from every layer's input (Checkpoint::kLayer).
constexpr bool rebuilds_layer_by_layer(Remat r, Checkpoint c) {
  return reruns_forwards(r) && c == Checkpoint::kLayer;
}
// " (layer by layer)" where it does, for the labels after remat_label; else "".
std::string_view checkpoint_label(Remat r, Checkpoint c);
inline constexpr const char* kCheckpointNames = "stage, layer";

// How context parallelism's devices exchange keys and values
// (training.cp_comm_type, megatron-core's --cp-comm-type, as Transformer
// Engine runs it; sim/engine/context_parallel.h):
//   p2p:        round a ring, each step's block sent while the attention
//               computes on the one held (Liu et al. 2023);
//   all_gather: all of them gathered before the attention and their
//               gradients reduce-scattered after the backward's, exposed
//               (Llama 3's, Dubey et al. 2024, section 3.3.2);
//   a2a:        the queries, keys and values traded by all-to-alls for whole
//               sequences of heads / C heads before the attention and its
//               output traded back after it, exposed (DeepSpeed-Ulysses,
//               Jacobs et al. 2023); C must divide each device's heads and
//               key-value heads.
enum class ContextExchange : std::uint8_t { kP2p, kAllGather, kAllToAll };
std::string_view to_string(ContextExchange c);
std::optional<ContextExchange> parse_context_exchange(std::string_view name);
inline constexpr const char* kContextExchangeNames = "p2p, all_gather, a2a";

// How a mixture's expert ranks exchange their tokens (training.moe_dispatcher,
// sim/engine/expert_parallel.h): by NCCL's all-to-all, each token's k copies
// (megatron-core's alltoall dispatcher), or by DeepEP's kernels, each token
// once to each node and GPU that holds any of its experts (megatron-core's
// flex dispatcher with --moe-enable-deepep).
enum class MoeDispatcher : std::uint8_t { kAllToAll, kDeepEp };
std::string_view to_string(MoeDispatcher d);
std::optional<MoeDispatcher> parse_moe_dispatcher(std::string_view name);
inline constexpr const char* kMoeDispatcherNames = "alltoall, deepep";

// How a model's layers split over the devices: T (with sequence parallelism
// or not), E and the devices that split each expert, C, and whether the C
// trade heads (the a2a form). The one home of a scenario's and a plan's split.
inline TensorSplit split_of(int tensor_parallel, bool sequence_parallel, int expert_parallel,
                            int expert_tensor_parallel, int context_parallel,
                            ContextExchange form) {
  TensorSplit s;
  s.ways = tensor_parallel;
  s.sequence = sequence_parallel;
  s.experts = expert_parallel;
  s.expert_ways = expert_tensor_parallel;
  s.context = context_parallel;
  s.heads_over_context = form == ContextExchange::kAllToAll;
  return s;
}

// What a stage holds of its micro-batches at one moment: whole stashes kept by
// their forward, stashes a recompute rebuilt, and inputs alone (kept by a
// forward whose micro-batch remat recomputes). Under Checkpoint::kStage a
// rebuilt stash is a whole one; under kLayer the largest layer's.
struct StashCount {
  int stashes = 0;
  int inputs = 0;
  int rebuilt = 0;
  // Every stash, kept or rebuilt: the stage-checkpointing count.
  int all_stashes() const { return stashes + rebuilt; }
  friend bool operator==(const StashCount&, const StashCount&) = default;
};
// Of each kind, the more (the less) of the two.
constexpr StashCount most_of(StashCount a, StashCount b) {
  return {std::max(a.stashes, b.stashes), std::max(a.inputs, b.inputs),
          std::max(a.rebuilt, b.rebuilt)};
}
constexpr StashCount least_of(StashCount a, StashCount b) {
  return {std::min(a.stashes, b.stashes), std::min(a.inputs, b.inputs),
          std::min(a.rebuilt, b.rebuilt)};
}

// How many of M micro-batches are recomputed.
constexpr int recomputed_count(Remat r, int micro_batches) {
  return r == Remat::kAlways ? micro_batches : r == Remat::kExceptLast ? micro_batches - 1 : 0;
}

// The highest ZeRO stage modelled.
inline constexpr int kMaxZeroStage = 3;

struct TrainingConfig {
  std::int64_t global_batch = 1;       // samples per optimizer step
  int micro_batches = 1;               // M; divides global_batch
  std::optional<Optimizer> optimizer;  // empty when bytes_per_param was given
  double bytes_per_param = 0.0;        // weights + gradients + optimizer state
  // Bytes of one gradient element as the replicas keep it: the dtype's, or 4
  // where a bf16 run keeps fp32 gradients (Framework::fp32_grads), which
  // bytes_per_param then counts.
  Bytes gradient_bytes = 0;
  ScheduleKind schedule = ScheduleKind::kGpipe;
  int chunks = 1;  // v, model chunks per device (schedules that take_chunks; kDefaultChunks)
  Remat remat = Remat::kAlways;
  Checkpoint checkpoint = Checkpoint::kStage;  // what remat keeps (training.checkpoint)
  // T, the devices that split every layer of a transformer (Megatron-LM's
  // tensor parallelism); the model is then one device's share and the
  // cluster's devices are groups of T (ModelSpec::tensor_parallel,
  // Cluster::tensor_parallel).
  int tensor_parallel = 1;
  bool tensor_parallel_given = false;    // the scenario (or -T) says T; the planner keeps it
  bool sequence_parallel = false;        // Korthikanti et al. 2022; needs T > 1
  bool sequence_parallel_given = false;  // the scenario says; the planner keeps it
  // E, the data-parallel replicas (with context parallelism the D x C
  // devices) among which the routed experts of a mixture spread (expert
  // parallelism; ModelSpec::expert_parallel): each holds experts / E of
  // them. Divides the experts and D x C.
  int expert_parallel = 1;
  bool expert_parallel_given = false;  // the scenario (or -E) says E; the planner keeps it
  // The devices that split each routed expert (Megatron-LM's
  // --expert-tensor-parallel-size; TensorSplit::expert_ways): 0 for T, as
  // the dense layers split; 1 for whole experts beside T > 1 ("parallel
  // folding": the E then spread over E of the T x D x C devices, each of a
  // tensor group's T routing its own tokens), which needs sequence
  // parallelism. The planner keeps it as it varies T.
  int expert_tensor_parallel = 0;
  // How the expert ranks exchange tokens (MoeDispatcher); DeepEP needs GPUs.
  MoeDispatcher moe_dispatcher = MoeDispatcher::kAllToAll;
  // C, the devices that split each sample's sequence (context parallelism;
  // ModelSpec::context_parallel): the model is then one device's share and
  // each of the cluster's groups C sets of T devices (Cluster::
  // context_parallel). The gradients reduce, and ZeRO shards, over the D x C
  // devices that hold the same weights.
  int context_parallel = 1;
  bool context_parallel_given = false;  // the scenario (or -C) says C; the planner keeps it
  // How the C devices exchange keys and values (ContextExchange).
  ContextExchange cp_comm_type = ContextExchange::kP2p;
  // ZeRO stage (sim/engine/zero.h): what the data-parallel replicas shard; 0 to
  // kMaxZeroStage.
  int zero = 0;
  bool zero_given = false;  // the scenario says the stage; the planner keeps it
  // The replicas the shards spread over: D x C in a replica's scenario
  // (replica_scenario), 1 in the whole one.
  int zero_replicas = 1;
  // How the framework that runs the job pays for it (training.framework):
  // the host, the gradients' precision and reductions, the overlaps.
  Framework framework = *find_framework(kIdealFramework);
  // The cut the run uses, when the scenario states it (training.balance,
  // training.megatron); empty: the partitioner cuts.
  std::optional<StatedCut> cut;

  std::int64_t micro_batch_size() const { return global_batch / micro_batches; }
  // How the model's layers split over the devices: T (with sequence
  // parallelism or not), E, C.
  TensorSplit split() const {
    return split_of(tensor_parallel, sequence_parallel, expert_parallel, expert_tensor_parallel,
                    context_parallel, cp_comm_type);
  }
};

struct Scenario {
  std::string name;
  std::string notes;
  ModelSpec model;
  Cluster cluster;
  TrainingConfig training;
};

// The split the scenario's model has been made under: the training's T
// (with sequence parallelism or not) and E, and the C its cluster's groups
// hold (Cluster::context_parallel: a C read but not yet applied, as while a
// scenario is read, is left out until with_context_parallel applies it).
inline TensorSplit applied_split(const Scenario& sc) {
  TensorSplit s = sc.training.split();
  s.context = sc.cluster.context_parallel;
  return s;
}

}  // namespace pipescope
