#pragma once
// How activations and gradients travel between stages, and which devices this
// process runs. The runtime (runtime.h) interprets the op lists the same way
// whatever the transport: in-process channels with one thread per device
// (the CPU backend), or one process per device over MPI (exec/mpi/).

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "exec/channel.h"
#include "exec/compute/group_link.h"
#include "exec/compute/tensor.h"
#include "sim/engine/schedule.h"
#include "sim/engine/sim_listener.h"
#include "sim/engine/timeline.h"

namespace pipescope::exec {

// Why an MPI job of `ranks` processes cannot run a plan of `devices` devices
// of `group_ranks` ranks each (one process a device and share or expert rank,
// `rank_name` saying which), or empty: "the plan runs on 2 devices but this
// MPI job has 1 process; start it with mpirun -np 2".
std::string rank_count_problem(int devices, int ranks, int group_ranks = 1,
                               const char* rank_name = "ranks");

class Transport {
 public:
  using Clock = Channel::Clock;
  using Wait = Channel::Wait;

  virtual ~Transport() = default;

  // The devices of a `devices`-device schedule whose ops this process runs.
  virtual std::vector<int> local_devices(int devices) const = 0;
  // Where each device runs the `group_ranks` ranks of a group (context
  // parallelism's C shares or expert parallelism's E ranks) as processes of their own: the link
  // that joins this process to the others of its device, the same one for every call with the same
  // arguments. Null (the default) where the ranks are threads of one process. Throws
  // std::invalid_argument when the job cannot hold that many (the wrong number of processes).
  // Before begin_step; under MPI every process calls it at the same point.
  virtual std::shared_ptr<GroupLink> link_group(int devices, int group_ranks) {
    (void)devices;
    (void)group_ranks;
    return nullptr;
  }
  // The ranks of each local device's group that this process runs: all
  // `group_ranks` of them (threads), or under a link its own one.
  virtual std::vector<int> local_group_ranks(int group_ranks) const;
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
  // After end_step: the first compute op's start and the last one's end over
  // every process, on the merged timeline's clock, from this process's.
  using Span = std::optional<std::pair<SimTime, SimTime>>;
  virtual Span merge_span(Span local) { return local; }
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
