#include "sim/engine/memory_tracker.h"

#include <algorithm>

#include "costmodels/check.h"

namespace pipescope {

MemoryTracker::MemoryTracker(const Schedule& schedule, const std::vector<StageCost>& stages)
    : stages_(stages),
      remat_(schedule.remat),
      micro_batches_(schedule.micro_batches),
      split_(schedule.split) {
  const auto n = static_cast<std::size_t>(schedule.devices());
  static_bytes_.assign(n, 0);
  allocs_.resize(n);
  frees_.resize(n);
  for (std::size_t s = 0; s < schedule.stage_device.size(); ++s) {
    static_bytes_[static_cast<std::size_t>(schedule.stage_device[s])] += stages[s].static_bytes;
  }
}

void MemoryTracker::on_compute(int device, const Op& op, SimTime start, SimTime end) {
  const StageCost& c = stages_[static_cast<std::size_t>(op.stage)];
  const auto d = static_cast<std::size_t>(device);
  const bool recomputed = recomputes(remat_, op.micro_batch, micro_batches_);
  switch (op.kind) {
    case OpKind::kForward:
      allocs_[d].push_back({start, recomputed ? c.checkpoint_bytes : c.stash_bytes});
      break;
    case OpKind::kRecompute:
      allocs_[d].push_back({start, c.rebuilt_bytes});
      break;
    case OpKind::kBackward:
    case OpKind::kWeight:
      // The last op to need the micro-batch frees it: a recomputed one frees what its
      // forward kept and its recompute rebuilt, otherwise the stash. A split backward keeps them
      // until W, which reads the layers' inputs (and B's output gradients,
      // counted within the stash).
      if ((op.kind == OpKind::kWeight) == split_) {
        frees_[d].push_back(
            {end, recomputed ? c.checkpoint_bytes + c.rebuilt_bytes : c.stash_bytes});
      }
      break;
    case OpKind::kOptimizer:
      break;
  }
  PS_CHECK(
      allocs_[d].size() < 2 || allocs_[d][allocs_[d].size() - 2].time <= allocs_[d].back().time,
      "ops of a device must start in time order");
}

template <typename Fn>
void MemoryTracker::walk(std::size_t device, Fn&& fn) const {
  const auto& a = allocs_[device];
  const auto& f = frees_[device];
  Bytes total = static_bytes_[device];
  std::size_t i = 0;
  std::size_t j = 0;
  while (i < a.size() || j < f.size()) {
    if (j < f.size() && (i == a.size() || f[j].time <= a[i].time)) {
      total -= f[j].bytes;
      fn(f[j++].time, total);
    } else {
      total += a[i].bytes;
      fn(a[i++].time, total);
    }
  }
}

void MemoryTracker::for_each_point(
    const std::function<void(int device, const MemoryPoint& point)>& fn) const {
  for (std::size_t dev = 0; dev < allocs_.size(); ++dev) {
    // One point held back: a later change at the same time replaces it.
    MemoryPoint held{0, static_bytes_[dev]};
    walk(dev, [&](SimTime t, Bytes total) {
      if (held.time != t) {
        fn(static_cast<int>(dev), held);
        held.time = t;
      }
      held.bytes = total;
    });
    fn(static_cast<int>(dev), held);
  }
}

std::vector<std::vector<MemoryPoint>> MemoryTracker::curves() const {
  std::vector<std::vector<MemoryPoint>> out(allocs_.size());
  for_each_point([&](int device, const MemoryPoint& p) {
    out[static_cast<std::size_t>(device)].push_back(p);
  });
  return out;
}

std::vector<Bytes> MemoryTracker::peaks() const {
  // Frees come before allocations at equal times, so the peak is never an
  // artefact of a free and an allocation at the same instant.
  std::vector<Bytes> out;
  for (std::size_t dev = 0; dev < allocs_.size(); ++dev) {
    Bytes peak = static_bytes_[dev];
    walk(dev, [&](SimTime, Bytes total) { peak = std::max(peak, total); });
    out.push_back(peak);
  }
  return out;
}

}  // namespace pipescope
