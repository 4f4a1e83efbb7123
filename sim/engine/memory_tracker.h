#pragma once
// Memory in use per device over simulated time (docs/models.md, "What the models
// assume", Memory):
//   static: weights + gradients + optimizer state of the device's stages, all step;
//   a micro-batch that is not recomputed: its whole stash, from the start of its F
//     to the end of its B (of its W when the backward is split);
//   one that is (remat always, or except-last for all but the last): what its F
//     keeps (its stage input, or every layer's input under training.checkpoint
//     layer) from the start of F to the end of B, and what its R rebuilds (its
//     whole stash, or its largest layer's) from the start of R to the end of B
//     (StageCost::checkpoint_bytes, rebuilt_bytes).
// Transient buffers inside an op (one layer's output while it is computed, the
// gradient being formed) are not counted; they are small next to the stash.

#include <functional>
#include <vector>

#include "sim/engine/schedule.h"
#include "sim/engine/sim_listener.h"
#include "sim/engine/stage_costs.h"
#include "sim/engine/timeline.h"

namespace pipescope {

class MemoryTracker final : public SimListener {
 public:
  MemoryTracker(const Schedule& schedule, const std::vector<StageCost>& stages);
  void on_compute(int device, const Op& op, SimTime start, SimTime end) override;
  void on_transfer(const TransferRecord&) override {}

  // The curve of each device: a point wherever the total changes. At equal
  // times, frees come before allocations.
  std::vector<std::vector<MemoryPoint>> curves() const;
  // The same points, device after device, without holding them.
  void for_each_point(const std::function<void(int device, const MemoryPoint& point)>& fn) const;
  // Peak of each device, from the same events as curves().
  std::vector<Bytes> peaks() const;
  // Static bytes of each device.
  const std::vector<Bytes>& static_bytes() const { return static_bytes_; }

 private:
  struct Delta {
    SimTime time;
    Bytes bytes;
  };
  // Calls fn(time, total) after each change on `device`, frees first at equal
  // times.
  template <typename Fn>
  void walk(std::size_t device, Fn&& fn) const;

  const std::vector<StageCost>& stages_;
  Remat remat_;
  int micro_batches_;
  bool split_;  // the stash lives until W, not B
  std::vector<Bytes> static_bytes_;
  // Per device. A device runs one op at a time, so op starts and op ends each
  // come in time order: two sorted lists that merge in linear time.
  std::vector<std::vector<Delta>> allocs_;
  std::vector<std::vector<Delta>> frees_;
};

}  // namespace pipescope
