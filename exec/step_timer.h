#pragma once
// The measured timeline of one step (step_run.h): every op's wall time since the
// step's start and its thread's CPU time, every transfer's. An op of a device
// stage is timed on its device, by fences around its work, once the step is
// over: its host thread only enqueues. Each worker writes only its own device's
// events; the step reads them all after the workers have returned.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "exec/device.h"
#include "sim/schedule.h"
#include "sim/timeline.h"

namespace pipescope::exec {

// When an op started: on the wall clock, on its thread's CPU clock (-1 without
// one) and, on a device stage, where its work starts on the device's stream.
struct OpStart {
  std::chrono::steady_clock::time_point wall;
  SimTime cpu = -1;
  std::shared_ptr<Fence> fence;
};

class StepTimer {
 public:
  using Clock = std::chrono::steady_clock;

  StepTimer(int devices, int micro_batches);

  // Starts the step's clock, taking a fence of each device in `devices` (null:
  // the host) there. Before the workers start.
  void start(const std::vector<Device*>& devices);
  SimTime since_start(Clock::time_point t) const;

  // An op of a stage on `device` (null: the host) starts now.
  static OpStart op_start(Device* device);
  // Pipeline device d ran `op` on `device` (null: the host), from `start` until now.
  void compute(int d, const Op& op, const OpStart& start, Device* device);
  // A send or receive (`lane`) of micro-batch m's payload from stage `from` to `to`.
  TimelineEvent transfer_event(int device, Lane lane, TransferKind kind, int from, int to, int m,
                               Bytes bytes) const;
  // Records `e` on its device's lane, from `start` until now.
  void record(TimelineEvent e, Clock::time_point start);

  // Once every worker has returned: every device's events, its device ops timed
  // from their fences.
  std::vector<TimelineEvent> finish();

 private:
  // A device op's event and the fences around its work.
  struct DeviceTiming {
    std::size_t event = 0;  // index into its pipeline device's events
    Device* device = nullptr;
    std::shared_ptr<Fence> begin, end;
  };
  // A device's fence at the start of the step and when it was made (ns since the
  // step's start): the device is idle then, so the two coincide.
  struct StepFence {
    std::shared_ptr<Fence> fence;
    SimTime at = 0;
  };

  std::uint64_t flow_id(TransferKind kind, int boundary, int m) const;
  void time_device_ops();

  const int micro_batches_;
  Clock::time_point t0_;
  std::vector<std::vector<TimelineEvent>> events_;  // per pipeline device, written by its worker
  std::vector<std::vector<DeviceTiming>> timings_;  // likewise, for device stages' ops
  std::map<Device*, StepFence> step_fences_;        // made before the workers start
};

}  // namespace pipescope::exec
