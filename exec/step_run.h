#pragma once
// One step of a PipelineRuntime (runtime.h): a worker thread per device this
// process runs (device_worker.h), the stages' work (stage_work.h), the step's
// timer (step_timer.h) and watchdog (watchdog.h). It starts the workers, waits
// for them, and gathers the step's loss and measured timeline.
//
// It lives for one call of PipelineRuntime::step, and longer only when a worker
// never returns (a stage stuck in an op): the workers' threads co-own it, and it
// co-owns the layers, the micro-batches and the transport they use, so an
// abandoned worker never touches freed memory.

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <latch>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "exec/device_worker.h"
#include "exec/runtime_core.h"
#include "exec/stage_work.h"
#include "exec/step_timer.h"
#include "exec/transport.h"
#include "exec/watchdog.h"

namespace pipescope::exec {

class StepRun : public std::enable_shared_from_this<StepRun> {
 public:
  StepRun(std::shared_ptr<RuntimeCore> core, std::vector<MicroBatch> micro_batches,
          std::shared_ptr<Transport> transport);

  // Runs the step; throws what PipelineRuntime::step documents.
  StepResult run();

  // Whether the step ended with workers still running (abandoned), and which,
  // e.g. "device 1 (in F(1,2))".
  bool abandoned() const { return !abandoned_.empty(); }
  const std::string& abandoned_ops() const { return abandoned_; }

 private:
  void start_workers(std::vector<std::thread>& threads);
  void worker_done(std::size_t i);
  void wait_for_workers();
  void end_workers(std::vector<std::thread>& threads);
  void throw_if_failed() const;
  // Cuts the micro-batches into the shares' inputs, targets and contexts.
  void share_micro_batches();
  StepResult result();
  std::string device_name(int d) const;

  std::shared_ptr<RuntimeCore> core_;
  const Schedule& sched_;
  const std::vector<MicroBatch> mbs_;
  // Per share k = e C + c of each micro-batch (one without expert or context
  // parallelism), per micro-batch: the share's rows (none for one share: mbs_
  // are), stage 0's input (host token ids or features) and the context.
  std::vector<std::vector<MicroBatch>> shares_;
  std::vector<std::vector<Tensor>> inputs_;
  std::vector<std::vector<Context>> contexts_;
  std::vector<StageWork> stages_;
  std::shared_ptr<Transport> transport_owner_;
  Transport& transport_;
  Watchdog watchdog_;
  StepTimer timer_;
  std::vector<int> local_;             // the devices this process runs
  std::vector<DeviceWorker> workers_;  // per local device, one per tensor rank
  std::mutex running_mu_;
  std::condition_variable running_cv_;
  std::size_t running_ = 0;     // workers still running
  std::vector<char> finished_;  // per worker (index into workers_): returned
  // Opens once every worker's thread has started (and pinned itself), so that
  // they begin their first ops together, as a framework's ranks, already
  // running, begin a step: a thread made later than another would otherwise
  // start behind it, and its partners wait out that skew at their first
  // exchange.
  std::unique_ptr<std::latch> start_gate_;
  std::string abandoned_;  // the workers left running
};

}  // namespace pipescope::exec
