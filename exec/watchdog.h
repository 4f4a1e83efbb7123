#pragma once
// One step's watchdog (step_run.h): what each device is doing, the step's first
// error, and the stop that error, a stop request (Ctrl-C) or a receive waiting
// past the limit sets off. A stalled receive names every device's state in its
// error; once the step stops, every worker ends after its current op and the
// waiting ones wake at once. Every method may be called from any worker.

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "exec/runtime.h"
#include "exec/transport.h"

namespace pipescope::exec {

class Watchdog {
 public:
  using Clock = std::chrono::steady_clock;
  enum class State { kStarting, kRunning, kWaiting, kDone };

  // `limit`: how long a receive may wait; `devices`: the schedule's, each run by
  // `ranks` workers (its tensor ranks); `transport` is woken when the step stops.
  Watchdog(std::chrono::milliseconds limit, int devices, Transport& transport, int ranks = 1);

  std::chrono::milliseconds limit() const { return limit_; }
  // The devices this process runs and the ranks of each it runs (all of
  // them when empty), whose states a stall names; before the workers start.
  void watch(std::vector<int> devices, std::vector<int> ranks = {});

  // Device `device`'s tensor rank `rank` (0 without tensor parallelism) is in
  // `state`, at `op`.
  void set(int device, int rank, State state, const Op& op);
  // The op that device's rank is at.
  Op op_of(int device, int rank) const;
  // "device 1", or "device 1 rank 0" under tensor parallelism.
  std::string worker_name(int device, int rank) const;

  // Records the step's error, unless it has one already, and stops the step.
  void fail(StageError err);
  // A receive of `op` waited the whole limit: fails the step, as op's stage, with
  // what each watched device is doing.
  void stalled(const Op& op);
  // A stop request: stops the step, which ends with Cancelled.
  void cancel();
  // Stops the step and wakes every receiver.
  void abort();

  bool aborted() const { return aborted_.load(); }
  // Set once the step stops; a waiting receive watches it.
  const std::atomic<bool>& abort_flag() const { return aborted_; }
  bool cancelled() const { return cancelled_.load(); }
  std::optional<StageError> error() const;

 private:
  struct Status {
    State state = State::kStarting;
    Op op;
  };

  std::string stall_report() const;
  static std::string status_text(const Status& s);
  std::size_t slot(int device, int rank) const {
    return static_cast<std::size_t>(device * ranks_ + rank);
  }

  const std::chrono::milliseconds limit_;
  Transport& transport_;
  const int ranks_;
  std::vector<int> watched_;
  std::vector<int> watched_ranks_;
  std::atomic<bool> aborted_{false};
  std::atomic<bool> cancelled_{false};
  mutable std::mutex status_mu_;
  std::vector<Status> status_;  // per pipeline device and tensor rank (slot())
  mutable std::mutex error_mu_;
  std::optional<StageError> error_;
};

}  // namespace pipescope::exec
