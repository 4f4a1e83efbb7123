#pragma once
// What one pipeline stage costs for one micro-batch: the durations the engine
// schedules and the sizes the memory tracker accounts.

#include <cstdint>
#include <optional>
#include <vector>

#include "costmodels/cost_model.h"
#include "costmodels/model.h"
#include "sim/engine/partition.h"
#include "sim/engine/schedule.h"

namespace pipescope {

// How the layers of one op gather their weights under ZeRO-3 (sim/engine/zero.h,
// gather_flow): the first layer's all-gather, which the op waits for before
// it computes, and the time the op stalls beyond its compute while the
// others arrive.
struct GatherFlow {
  SimTime lead = 0;
  SimTime stall = 0;
  // From the first gather's start to the last's end: the link's span, which
  // exceeds the gathers' sum where a gather waits for the layer before it
  // to start computing.
  SimTime link = 0;
  friend bool operator==(const GatherFlow&, const GatherFlow&) = default;
};

struct StageCost {
  StageRange layers;
  SimTime forward = 0;  // ns, one micro-batch through every layer, stashes dropped (remat)
  // ns, the same keeping every stash for the backward (no remat); unset: forward
  std::optional<SimTime> forward_kept;
  SimTime backward = 0;  // ns, the whole backward: input and weight gradients
  // ns, W and B of a split backward: the weight gradients and the input
  // gradients (input_grad), which together may exceed the fused backward
  SimTime weight = 0;
  SimTime input = 0;
  // What a micro-batch's backward costs the stage: B and W when the schedule
  // splits it, the fused backward otherwise.
  SimTime backward_time(bool split) const { return split ? input + weight : backward; }
  // ns; charged only when the schedule rematerializes (under selective
  // recomputation, the part of `backward` that reruns attention's core)
  SimTime recompute = 0;
  SimTime optimizer = 0;  // ns, the stage's optimizer step
  // ns, the stage's gradient all-reduce across data-parallel replicas, once per
  // step after its last backward; 0 without replicas.
  SimTime allreduce = 0;
  Bytes grad_bytes = 0;  // what the all-reduce sums: the stage's gradients
  // The all-reduce (ZeRO-1's reduce-scatter) starts with the stage's last
  // backward (W when split) instead of after it: the framework reduces the
  // gradients bucket by bucket as they are produced
  // (Framework::overlap_grad_reduce). The optimizer step still waits for it.
  bool allreduce_with_backward = false;
  // The all-reduce is the stage's own work, done at its optimizer step, as
  // the CPU executor's ranks sum their gradients on their threads
  // (DataParallel::sums_on_threads): the step takes it as its collective
  // (op_collectives), the device computes nothing else meanwhile, and where
  // devices share cores it holds one. Not on the link to the replicas.
  bool allreduce_in_step = false;
  // ZeRO stages 2 and 3 over the replicas (sim/engine/zero.h), in place of
  // `allreduce`: ns, the reduce-scatter of the stage's gradients after each
  // backward (W when split); stage 2's all-gather of the updated weights after
  // the optimizer step; stage 3's all-gathers of its layers' weights, one
  // layer after another, for each forward, recompute and backward (B when
  // split), summed. Each moves grad_bytes (the weights are as many, in the
  // same dtype) and runs on the device's link to the replicas. 0 otherwise.
  SimTime zero_reduce_scatter = 0;
  SimTime zero_step_gather = 0;
  // ZeRO-1 whose `allreduce` is a full all-reduce before the step's gather
  // (Framework::zero1_allreduce), not a reduce-scatter.
  bool zero1_allreduce = false;
  SimTime zero_op_gather = 0;
  // Stage 3: how a forward (one that drops its stash, and one that keeps it),
  // a recompute and a backward (B when split) wait for those gathers; and
  // the bytes of the layers whose weights the stage holds whole at once (at
  // most two adjacent), within static_bytes.
  GatherFlow zero_forward_flow;
  GatherFlow zero_forward_kept_flow;
  GatherFlow zero_recompute_flow;
  GatherFlow zero_backward_flow;
  Bytes gathered_bytes = 0;
  // ns, the tensor-parallel group's all-reduces in a forward (and a
  // recompute) and in a backward's B (the whole backward when not split),
  // which the op runs after its compute; the bytes they sum. 0 without tensor
  // parallelism (sim/engine/tensor_parallel.h).
  SimTime tp_forward = 0;
  SimTime tp_backward = 0;
  Bytes tp_forward_bytes = 0;
  Bytes tp_backward_bytes = 0;
  // ns, where each device sends 1 / T of a cut (cut_split in
  // sim/engine/tensor_parallel.h): the group's all-gather of the stage's input
  // before a forward (not a recompute: the stage keeps the gathered input)
  // and of its output gradient before a backward's B; the whole tensor's
  // bytes. 0 otherwise.
  SimTime tp_input_gather = 0;
  SimTime tp_grad_gather = 0;
  Bytes tp_input_gather_bytes = 0;
  Bytes tp_grad_gather_bytes = 0;
  // ns, the expert-parallel all-to-alls (sim/engine/expert_parallel.h) of a
  // forward (and a recompute) and of a backward's B (the whole backward when
  // not split), which the op runs after its compute as it does tp_forward;
  // the bytes each device sends in them. 0 without expert parallelism.
  SimTime ep_forward = 0;
  SimTime ep_backward = 0;
  Bytes ep_bytes = 0;
  // The framework overlaps a pair's all-to-alls with the other half's compute
  // (Framework::pair_alltoall_overlap): the engine then waits only for what
  // outlasts it.
  bool ep_pair_overlap = false;
  // ns, what the context-parallel exchanges of keys and values
  // (sim/engine/context_parallel.h) add: the ring's beyond the attention they
  // overlap, the all-gather form's whole; in a forward (and a recompute) and in a backward's B (the
  // whole backward when not split), after the op's compute and its other collectives; the bytes
  // each device sends in a forward and in a backward. 0 without context parallelism.
  SimTime cp_forward = 0;
  SimTime cp_backward = 0;
  Bytes cp_bytes = 0;
  Bytes cp_backward_bytes = 0;
  // ns, within the op times above: the device's wait for the host to issue
  // the op's kernels (sim/engine/host_dispatch.h), for a forward, a recompute, a
  // whole backward, a split backward's B and its W. 0 where the host keeps
  // ahead.
  SimTime host_wait_forward = 0;
  SimTime host_wait_recompute = 0;
  SimTime host_wait_backward = 0;
  SimTime host_wait_input = 0;
  SimTime host_wait_weight = 0;
  std::int64_t params = 0;
  // Of params, the copy of the token table the stage keeps for a tied head
  // on another device than the embedding (ModelSpec::tied_table_params).
  std::int64_t tied_copy_params = 0;
  // On the first stage and the tied head's: the all-reduce of the copy's
  // gradient with the table's, which the optimizer op runs as its
  // collective (op_collectives), whatever the replicas' reduction.
  SimTime tied_allreduce = 0;
  Bytes tied_allreduce_bytes = 0;
  // Of params, the routed experts' under expert parallelism
  // (LayerSpec::expert_params): D x C / E devices hold the same ones.
  std::int64_t expert_params = 0;
  Bytes static_bytes = 0;  // weights + gradients + optimizer state
  // static_bytes' parts (sim/engine/zero.h, split_static_bytes); 0 until split
  Bytes weight_bytes = 0;
  Bytes gradient_bytes = 0;
  Bytes optimizer_bytes = 0;
  Bytes input_bytes = 0;  // the stage's input for one micro-batch
  // What each device of the stage sends to the next stage for one micro-batch
  // (1 / cut_split of the tensor, sim/engine/tensor_parallel.h).
  Bytes output_bytes = 0;
  Bytes stash_bytes = 0;  // every layer's stash for one micro-batch
  // Of a micro-batch that remat recomputes (Checkpoint): what its forward
  // keeps until its backward ends (the stage's input, or every layer's), and
  // what its recompute rebuilds and holds until then (the whole stash, or the
  // largest layer's; the whole stash under a split backward, whose W reads
  // every layer's).
  Bytes checkpoint_bytes = 0;
  Bytes rebuilt_bytes = 0;
};

// A layer's times and its stash per sample as `remat` leaves them. Selective
// recomputation keeps the stash but its attention core (LayerSpec::
// core_stash_bytes) and reruns the core's forward before the backward, ahead
// of B when it is split (`recompute` is then that rerun, for reports); its
// forwards keep their stash. The other modes
// change nothing here: their R ops and dropped stashes are the schedule's.
OpTimes under_remat(Remat remat, OpTimes times);
Bytes stash_under_remat(Remat remat, const LayerSpec& layer);

// A stage's time is the sum of its layers' times (each layer one op with its own
// overhead), under `remat`; its memory as `checkpoint` keeps it. Where the
// schedule splits the backward (`backward_split`), W reads every layer's
// stash after B, so a recompute's rebuilt stash is the whole stage's under
// either unit.
std::vector<StageCost> compute_stage_costs(const ModelSpec& model,
                                           const std::vector<StageRange>& stages,
                                           const CostModel& cost, std::int64_t micro_batch_size,
                                           double bytes_per_param, Remat remat,
                                           Checkpoint checkpoint = Checkpoint::kStage,
                                           bool backward_split = false);

// The collectives an op of kind `kind` of stage `c` runs after its compute,
// in this order, and their bytes: the tensor-parallel ones (with the
// all-gathers of a split cut), the expert-parallel all-to-alls, the
// context-parallel exchanges (the backward's twice the bytes). None for W;
// for the optimizer, the stage's all-reduce as `tensor` where the step does
// it (allreduce_in_step), none otherwise.
struct OpCollectives {
  SimTime tensor = 0;
  Bytes tensor_bytes = 0;
  SimTime expert = 0;
  Bytes expert_bytes = 0;
  SimTime context = 0;
  Bytes context_bytes = 0;
};
OpCollectives op_collectives(const StageCost& c, OpKind kind);

}  // namespace pipescope
