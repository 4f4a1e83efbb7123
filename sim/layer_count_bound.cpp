#include "sim/layer_count_bound.h"

#include <algorithm>
#include <cstdint>
#include <limits>

namespace pipescope {

namespace {

// The value at fraction q of the sorted `values`.
template <typename T>
T quantile(std::vector<T> values, double q) {
  std::sort(values.begin(), values.end());
  return values[static_cast<std::size_t>(q * static_cast<double>(values.size() - 1))];
}

}  // namespace

LayerCountBound::LayerCountBound(const PartitionProblem& p, const StagePrices& prices,
                                 const std::vector<std::size_t>& stage_device, std::size_t devices)
    : devices_(devices),
      future_(static_cast<std::size_t>(p.stages + 1) * devices, 0),
      first_device_(stage_device.front()),
      last_device_(stage_device.back()) {
  const int L = static_cast<int>(p.layers.size());
  for (int s = -1; s < p.stages; ++s) {
    for (int t = s + 1; t < p.stages; ++t) {
      ++future_[static_cast<std::size_t>(s + 1) * devices +
                stage_device[static_cast<std::size_t>(t)]];
    }
  }
  last_compute_ = prices.compute(L - 1, L - 1);
  last_memory_ = prices.layer_memory_floor(L - 1);
  least_cut_time_ = L > 1 ? std::numeric_limits<SimTime>::max() : 0;
  for (int j = 1; j < L; ++j) least_cut_time_ = std::min(least_cut_time_, prices.cut_time(j));
  if (L < 2) return;
  std::vector<SimTime> compute;
  std::vector<Bytes> memory;
  for (int l = 0; l + 1 < L; ++l) {
    compute.push_back(prices.compute(l, l));
    memory.push_back(prices.layer_memory_floor(l));
  }
  for (const double q : {0.25, 0.5, 0.75}) {
    Size size{quantile(compute, q), quantile(memory, q), {}};
    const bool again = std::any_of(sizes_.begin(), sizes_.end(), [&](const Size& o) {
      return o.time == size.time && o.memory == size.memory;
    });
    if (again) continue;
    for (std::vector<int>& from : size.from) from.assign(static_cast<std::size_t>(L) + 1, 0);
    for (int l = L - 2; l >= 0; --l) {
      const auto i = static_cast<std::size_t>(l);
      const bool slow = compute[i] >= size.time;
      const bool big = memory[i] >= size.memory;
      size.from[kTime][i] = size.from[kTime][i + 1] + (slow ? 1 : 0);
      size.from[kMemory][i] = size.from[kMemory][i + 1] + (big ? 1 : 0);
      size.from[kBoth][i] = size.from[kBoth][i + 1] + (slow && big ? 1 : 0);
    }
    sizes_.push_back(std::move(size));
  }
}

bool LayerCountBound::cannot_place(int stage, int first, const std::vector<DeviceLoad>& loads,
                                   std::optional<SimTime> below,
                                   std::optional<Bytes> capacity) const {
  if (sizes_.empty() || (!below && !capacity)) return false;
  // Per size and kind, the layers the devices can still take.
  std::array<std::array<std::int64_t, 3>, 3> takes{};
  const int* future = &future_[static_cast<std::size_t>(stage + 1) * devices_];
  for (std::size_t d = 0; d < devices_; ++d) {
    const int f = future[d];
    if (f == 0) continue;
    const bool last = d == last_device_;
    // Two cuts a stage, but none before the first stage nor after the last.
    const int cuts = 2 * f - (last ? 1 : 0) - (stage < 0 && d == first_device_ ? 1 : 0);
    SimTime time = 0;  // left below `below`
    Bytes room = 0;    // left within `capacity`
    if (below) {
      time = *below - 1 - loads[d].time - least_cut_time_ * cuts - (last ? last_compute_ : 0);
      if (time < 0) return true;
    }
    if (capacity) {
      room = *capacity - loads[d].memory - (last ? last_memory_ : 0);
      if (room < 0) return true;
    }
    for (std::size_t k = 0; k < sizes_.size(); ++k) {
      const Size& s = sizes_[k];
      const std::int64_t by_time = s.time > 0 ? time / s.time : 0;
      const std::int64_t by_memory = s.memory > 0 ? room / s.memory : 0;
      takes[k][kTime] += by_time;
      takes[k][kMemory] += by_memory;
      takes[k][kBoth] += std::min(by_time, by_memory);
    }
  }
  const auto at = static_cast<std::size_t>(first);
  for (std::size_t k = 0; k < sizes_.size(); ++k) {
    const Size& s = sizes_[k];
    const bool by_time = below && s.time > 0;
    const bool by_memory = capacity && s.memory > 0;
    if (by_time && takes[k][kTime] < s.from[kTime][at]) return true;
    if (by_memory && takes[k][kMemory] < s.from[kMemory][at]) return true;
    if (by_time && by_memory && takes[k][kBoth] < s.from[kBoth][at]) return true;
  }
  return false;
}

}  // namespace pipescope
