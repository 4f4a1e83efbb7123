#pragma once
// The pipeline runtime: runs a Schedule's per-device op lists (the same lists the
// simulator runs) with real layers, one worker thread per device. Activations go
// forward and gradients back through in-process channels; with remat a stage
// keeps only its input per micro-batch and recomputes before backward; gradients
// accumulate over the micro-batches; the optimizer op applies them.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "exec/compute/layer.h"
#include "exec/compute/optimizer.h"
#include "sim/engine/schedule.h"
#include "sim/engine/timeline.h"

namespace pipescope::exec {

class Transport;     // exec/transport.h
struct RuntimeCore;  // what a runtime and its steps share (runtime_core.h)

// One micro-batch's input to stage 0 and what the loss needs.
struct MicroBatch {
  Matrix input;                       // (b*s, 1) token ids as floats, or (b, d) features
  std::vector<std::int32_t> targets;  // b*s entries
  int batch = 1;
  int seq = 1;
};

// A stage failed: which one, in which op, and why. The runtime stops every
// worker and rethrows this from step(). what() is the whole sentence, e.g.
// "stage 1 failed in B(1,3): NaN or inf in loss", or for the watchdog
// "pipeline stalled (watchdog 200 ms): device 0 waits in B(0,3) for the gradient
// of micro-batch 3 from stage 1; device 1 waits in F(1,2) for ..." (stage and op
// are then those of the receiver that timed out).
class StageError : public std::runtime_error {
 public:
  StageError(int stage, Op op, const std::string& what);
  int stage() const { return stage_; }
  const Op& op() const { return op_; }

 private:
  int stage_;
  Op op_;
};

struct RuntimeOptions {
  OptimizerConfig optimizer;
  // A device that waits this long for an activation or a gradient stops the step
  // with an error naming every waiting op.
  std::chrono::milliseconds watchdog{30000};
  // Called (on the worker's thread, so from several threads at once) before each
  // op; tests inject faults with it.
  std::function<void(int device, const Op& op)> before_op;
  // How payloads travel and which devices this process runs; null: every device
  // a thread of this process, in-process channels (InProcessTransport).
  std::shared_ptr<Transport> transport;
  // Each device's thread on a core of its own (exec/affinity.h) when this
  // process runs two or more devices and has a core for each; otherwise, or
  // false, the OS places them.
  bool pin_threads = true;
};

// What one worker of a device (a tensor rank of a share or an expert rank:
// rank r of the device's group, as StepTimer numbers them) spent a step on:
// its ops' compute, and their collectives (all-reduces, all-to-alls and
// the ring's passes, each with its waits for the group's other ranks), ns.
struct RankBusy {
  int device = 0;
  int rank = 0;
  SimTime compute = 0;
  SimTime collectives = 0;
};

struct StepResult {
  double loss = 0.0;  // the mini-batch's mean loss (sum over micro-batches)
  // Measured; times in ns from the start of the step. Under tensor parallelism
  // tensor rank 0's ops, each op's all-reduces drawn after its compute on the
  // tensor lane (an op's compute event is its wall time less theirs).
  Timeline timeline;
  SimTime step_time = 0;  // ns, from the first op's start to the last op's end
  // Every worker of this process that ran an op, by device, then rank (under
  // MPI this process's alone): the timeline holds rank 0's ops alone.
  std::vector<RankBusy> ranks;
};

class PipelineRuntime {
 public:
  // stages[s] holds the layers of stage s, in order; stage s runs on
  // schedule.stage_device[s]. The last stage's last layer is the loss. Throws
  // std::invalid_argument when the lists do not fit the stages (an op of a stage
  // on another device, an index out of range, an empty stage); a list that never
  // completes is left to the watchdog.
  PipelineRuntime(std::vector<LayerList> stages, Schedule schedule, RuntimeOptions options);
  // Tensor parallelism (exec/compute/tensor_layers.h): ranks[r][s] holds tensor rank
  // r's shards of stage s's layers, for T = ranks.size() ranks. Each rank of
  // each device is a thread of its own running the device's op list; rank r
  // of a stage sends its activations and gradients to rank r of the next.
  // Every rank's loss is the same (rank 0's is the step's) and the timeline
  // is rank 0's, one device of each group as the simulator draws them. Throws
  // std::invalid_argument as above, when the ranks' stages differ in number,
  // and for T > 1 on device stages or another transport than the in-process
  // one (the CPU backend alone runs tensor parallelism).
  PipelineRuntime(std::vector<std::vector<LayerList>> ranks, Schedule schedule,
                  RuntimeOptions options);
  // Context parallelism besides (exec/tensor_shard.h, build_context_ranks):
  // ranks[c T + t] holds share c's tensor rank t, for C = `context_parallel`
  // shares of each sequence. Each micro-batch's sequences are cut into the C
  // shares (chunks c and 2C - 1 - c of 2C, its seq a multiple of 2C), every
  // rank a thread as above (or, with a transport that links them, a process
  // of its own: exec/transport.h); the step's loss is the sum of the shares', and
  // before each optimizer step the C ranks of a tensor rank sum their
  // gradients. Throws std::invalid_argument as above and unless C divides the
  // ranks.
  //
  // Expert parallelism (exec/expert_shard.h, build_expert_ranks): ranks[e]
  // holds expert rank e's layers (T = C = 1), for E = `expert_parallel`
  // ranks, each taking samples e b / E .. (e + 1) b / E of each micro-batch of
  // b samples (b a multiple of E), as E data-parallel replicas would; the
  // step's loss is the sum of the ranks', and before each optimizer step the
  // E ranks sum the gradients of every parameter but their experts'
  // (Param::expert). Throws std::invalid_argument as above and unless E
  // divides the ranks.
  //
  // Both (build_expert_ranks with C > 1): ranks[e C + c] holds share c of
  // expert rank e's samples (T = 1); the experts' gradients are summed over
  // the C shares of their rank, every other over all E C ranks; as
  // processes, over the transport's link of the E C and its split
  // (exec/expert_shard.h, sub_links).
  PipelineRuntime(std::vector<std::vector<LayerList>> ranks, Schedule schedule,
                  RuntimeOptions options, int context_parallel, int expert_parallel = 1);
  ~PipelineRuntime();
  PipelineRuntime(const PipelineRuntime&) = delete;
  PipelineRuntime& operator=(const PipelineRuntime&) = delete;

  // One training step over schedule.micro_batches micro-batches, one worker
  // thread per device, all joined before it returns or throws. Throws
  // StageError when a stage fails or the watchdog fires; the gradients are then
  // zeroed (stages whose optimizer op already ran keep their update), so the
  // runtime can step again. A stop request (sim/base/cancel.h) ends the step the same
  // way, each worker after its current op, with Cancelled. Throws
  // std::invalid_argument for malformed micro-batches.
  //
  // After an error or a stop, a worker still in its op once the watchdog's time
  // has passed again is stuck (an op that never ends): the step throws without
  // it, naming it, and leaves it running on the layers, which it co-owns, so
  // nothing it uses is freed under it. The runtime then refuses to step again
  // (std::logic_error); the program should end.
  StepResult step(const std::vector<MicroBatch>& micro_batches);

  // Rank `rank`'s stages (rank 0's: without tensor or context parallelism,
  // the stages).
  const std::vector<LayerList>& stages(int rank = 0) const;
  std::vector<LayerList>& stages(int rank = 0);
  int tensor_parallel() const;
  int context_parallel() const;
  int expert_parallel() const;

 private:
  std::shared_ptr<RuntimeCore> core_;
  std::string abandoned_;  // workers an earlier step left running, e.g. "device 1 (in F(1,2))"
};

}  // namespace pipescope::exec
