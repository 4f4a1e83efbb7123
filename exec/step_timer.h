#pragma once
// The measured timeline of one step (step_run.h): every op's wall time since the
// step's start and its thread's CPU time, every transfer's, and under tensor
// parallelism each op's all-reduces. An op of a device
// stage is timed on its device, by fences around its work, once the step is
// over: its host thread only enqueues. Each worker writes only its own device's
// events; the step reads them all after the workers have returned.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "exec/compute/device.h"
#include "exec/compute/tensor_group.h"
#include "exec/runtime.h"
#include "sim/engine/schedule.h"
#include "sim/engine/timeline.h"

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

  // `ranks`: the workers of each device (its tensor ranks).
  StepTimer(int devices, int micro_batches, int ranks = 1);

  // Starts the step's clock at `zero` (the transport's, so that its alignment
  // of processes and these times count from one instant), taking a fence of
  // each device in `devices` (null: the host) now. Before the workers start.
  void start(const std::vector<Device*>& devices, Clock::time_point zero);
  SimTime since_start(Clock::time_point t) const;

  // An op of a stage on `device` (null: the host) starts now.
  static OpStart op_start(Device* device);
  // Pipeline device d's tensor rank `rank` ran `op` on `device` (null: the
  // host), from `start` until now. With `collectives` (the op's all-reduces,
  // when it ran any) the op's compute event ends their time before now and a
  // tensor-lane event covers them, as the simulator draws an op's collectives
  // after its compute.
  void compute(int d, int rank, const Op& op, const OpStart& start, Device* device,
               const CollectiveTally* collectives = nullptr);
  // A send or receive (`lane`) of micro-batch m's payload from stage `from` to `to`.
  TimelineEvent transfer_event(int device, Lane lane, TransferKind kind, int from, int to, int m,
                               Bytes bytes) const;
  // Records `e` on its device's (and tensor rank's) lane, from `start` until now.
  void record(TimelineEvent e, Clock::time_point start, int rank = 0);

  // Once every worker has returned: every device's events (tensor rank 0's),
  // its device ops timed from their fences.
  std::vector<TimelineEvent> finish();
  // Each worker's compute and collectives over the step (slot order: device,
  // then rank), those that recorded an op; after finish().
  std::vector<RankBusy> rank_busy() const;
  // The first compute op's start and the last one's end over every rank, after
  // finish(); nullopt without any.
  std::optional<std::pair<SimTime, SimTime>> compute_span() const;

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

  std::size_t slot(int d, int rank) const { return static_cast<std::size_t>(d * ranks_ + rank); }

  const int micro_batches_;
  const int ranks_;
  Clock::time_point t0_;
  // Per pipeline device and tensor rank (slot()), written by its worker.
  std::vector<std::vector<TimelineEvent>> events_;
  std::vector<std::vector<DeviceTiming>> timings_;  // likewise, for device stages' ops
  std::map<Device*, StepFence> step_fences_;        // made before the workers start
};

}  // namespace pipescope::exec
