#pragma once
// One pipeline device's worker in a step (step_run.h), on a thread of its own:
// runs the device's op list in order, each op on its stage (stage_work.h), and
// moves the tensors: it receives an F's activation or a B's gradient through the
// transport before the op (onto the stage's device) and sends the op's output
// after it (after the whole pair for the ops of an overlapped pair, Op::paired).
// An error in an op fails the step (watchdog.h) naming the stage and
// the op; once the step stops the worker ends after its current op. Under
// tensor parallelism each tensor rank of a device has a worker of its own, and
// its ops' all-reduces (exec/compute/tensor_group.h) wait on the step's watchdog too.

#include <utility>
#include <vector>

#include "exec/runtime_core.h"
#include "exec/stage_work.h"
#include "exec/step_timer.h"
#include "exec/transport.h"
#include "exec/watchdog.h"
#include "sim/engine/pair_hold.h"

namespace pipescope::exec {

class DeviceWorker {
 public:
  // `stages`: every stage's work in the step for every tensor rank (rank r's
  // stage s at r K + s), of which the worker runs tensor rank `rank`'s of the
  // stages on `device`.
  DeviceWorker(int device, int rank, const RuntimeCore& core, std::vector<StageWork>& stages,
               Transport& transport, StepTimer& timer, Watchdog& watchdog);

  // Runs the device's ops; never throws (an error fails the step).
  void run();
  int device() const { return device_; }
  int rank() const { return rank_; }

 private:
  void run_op(const Op& op);
  void fail(const Op& op, const std::string& why);
  Tensor input(const Op& op);
  void send_output(const Op& op, Tensor out);
  void send(const Op& op, TransferKind kind, Tensor payload);
  Tensor receive(const Op& op, TransferKind kind);
  Tensor onto_stage_device(int stage, Tensor payload) const;
  Device* device_of(int stage) const;
  StageWork& stage_work(int stage) const;
  int channel_key(int micro_batch) const;

  const int device_;
  const int rank_;
  const RuntimeCore& core_;
  std::vector<StageWork>& stages_;
  Transport& transport_;
  StepTimer& timer_;
  Watchdog& watchdog_;
  PairHold<Tensor> pair_;        // the outputs of an overlapped pair still running
  CollectiveTally collectives_;  // the current op's all-reduces (tensor parallelism)
};

}  // namespace pipescope::exec
