#pragma once
// How activations and gradients travel between stages, and which devices this
// process runs. The runtime (runtime.h) interprets the op lists the same way
// whatever the transport: in-process channels with one thread per device
// (the CPU backend), or one process per device over MPI (exec/mpi/).

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "exec/channel.h"
#include "exec/compute/tensor.h"
#include "sim/engine/schedule.h"
#include "sim/engine/sim_listener.h"
#include "sim/engine/timeline.h"

namespace pipescope::exec {

// Why an MPI job of `ranks` processes cannot run a plan of `devices` devices
// (one process a device), or empty: "the plan runs on 2 devices but this MPI
// job has 1 process; start it with mpirun -np 2".
std::string rank_count_problem(int devices, int ranks);

class Transport {
 public:
  using Clock = Channel::Clock;
  using Wait = Channel::Wait;

  virtual ~Transport() = default;

  // The devices of a `devices`-device schedule whose ops this process runs.
  virtual std::vector<int> local_devices(int devices) const = 0;
  // Before the step's workers start, all processes together. Returns the
  // step clock's zero on this process, the one instant its timeline's times
  // and end_step's alignment of the processes both count from. Throws
  // std::invalid_argument when the transport cannot carry this schedule (e.g.
  // the wrong number of processes).
  virtual Clock::time_point begin_step(const Schedule& schedule) = 0;
  // Hands micro-batch `micro_batch`'s payload to stage `to_stage` in direction
  // `kind` (its route_id). Returns without waiting for the receiver.
  virtual void send(TransferKind kind, int to_stage, int micro_batch, Tensor payload) = 0;
  // Blocks until that payload arrives (moved into `out`), `aborted` is set, or
  // `deadline` passes.
  virtual Wait take(TransferKind kind, int to_stage, int micro_batch, Clock::time_point deadline,
                    const std::atomic<bool>& aborted, Tensor& out) = 0;
  // Wakes every take(); call after setting the abort flag.
  virtual void wake_all() = 0;
  // After this process's workers have all joined without error: completes its
  // sends, and merges the processes' losses and timelines so that every process
  // holds the whole step's (`loss` and `timeline` hold this process's on entry).
  virtual void end_step(double& loss, Timeline& timeline) {
    (void)loss;
    (void)timeline;
  }
  // Timeline names: a device ("device 0 (cpu thread)") and the transport.
  virtual std::string device_name(int device) const = 0;
  virtual std::string route_name() const = 0;
};

// The CPU backend's transport: every device a thread of this process, payloads
// moved through in-process channels (never copied).
class InProcessTransport final : public Transport {
 public:
  std::vector<int> local_devices(int devices) const override;
  Clock::time_point begin_step(const Schedule& schedule) override;
  void send(TransferKind kind, int to_stage, int micro_batch, Tensor payload) override;
  Wait take(TransferKind kind, int to_stage, int micro_batch, Clock::time_point deadline,
            const std::atomic<bool>& aborted, Tensor& out) override;
  void wake_all() override;
  std::string device_name(int device) const override;
  std::string route_name() const override { return "in-process queue"; }

 private:
  std::vector<Channel> channels_;  // index route_id(kind, receiving stage)
};

}  // namespace pipescope::exec
