#include "sim/engine/layer_count_bound.h"

#include <algorithm>
#include <cstdint>
#include <limits>

namespace pipescope {

namespace {

// The value at fraction q of `sorted`.
template <typename T>
T quantile(const std::vector<T>& sorted, double q) {
  return sorted[static_cast<std::size_t>(q * static_cast<double>(sorted.size() - 1))];
}

template <typename T>
std::vector<T> sorted(std::vector<T> values) {
  std::sort(values.begin(), values.end());
  return values;
}

}  // namespace

LayerCountBound::LayerCountBound(const PartitionProblem& p, const StagePrices& prices,
                                 int device_count)
    : devices_(static_cast<std::size_t>(device_count)),
      future_(static_cast<std::size_t>(p.stages + 1) * devices_, 0),
      held_future_(future_.size(), 0),
      first_device_(device_of_stage(p, 0, device_count)),
      last_device_(device_of_stage(p, static_cast<std::size_t>(p.stages - 1), device_count)) {
  const std::size_t devices = devices_;
  std::vector<std::size_t> stage_device;
  for (int s = 0; s < p.stages; ++s) {
    stage_device.push_back(device_of_stage(p, static_cast<std::size_t>(s), device_count));
  }
  const int L = static_cast<int>(p.layers.size());
  // Each device's fewest micro-batches of each kind over its stages.
  std::vector<std::optional<StashCount>> fewest(devices);
  const std::vector<Bytes> stage_floors = prices.stage_floors();
  for (int s = -1; s < p.stages; ++s) {
    for (int t = s + 1; t < p.stages; ++t) {
      const std::size_t at =
          static_cast<std::size_t>(s + 1) * devices + stage_device[static_cast<std::size_t>(t)];
      ++future_[at];
      held_future_[at] += stage_floors[static_cast<std::size_t>(t)];
    }
    if (s < 0) continue;
    std::optional<StashCount>& f = fewest[stage_device[static_cast<std::size_t>(s)]];
    f = f ? least_of(*f, prices.counts(s)) : prices.counts(s);
  }
  const auto on = [&](std::size_t d, const StagePrices::LayerFloor& layer) {
    return prices.floor_bytes(layer, fewest[d].value_or(StashCount{}));
  };
  last_compute_ = prices.compute(L - 1, L - 1);
  last_memory_ = on(last_device_, prices.layer_floor(L - 1));
  least_cut_time_ = L > 1 ? std::numeric_limits<SimTime>::max() : 0;
  for (int j = 1; j < L; ++j) least_cut_time_ = std::min(least_cut_time_, prices.cut_time(j));
  if (L < 2) return;
  const bool inputs = p.checkpoint == Checkpoint::kLayer;  // else not in the floor
  std::vector<SimTime> compute;
  std::vector<Bytes> weights;
  std::vector<Bytes> stashes;
  std::vector<Bytes> cuts;
  for (int l = 0; l + 1 < L; ++l) {
    const StagePrices::LayerFloor f = prices.layer_floor(l);
    compute.push_back(prices.compute(l, l));
    weights.push_back(f.weights);
    stashes.push_back(f.stash);
    cuts.push_back(inputs ? f.input : 0);
  }
  const std::vector<SimTime> compute_order = sorted(compute);
  const std::vector<Bytes> weight_order = sorted(weights);
  const std::vector<Bytes> stash_order = sorted(stashes);
  const std::vector<Bytes> cut_order = sorted(cuts);
  for (const double q : {0.25, 0.5, 0.75}) {
    Size size;
    size.time = quantile(compute_order, q);
    size.memory = {quantile(weight_order, q), quantile(stash_order, q), quantile(cut_order, q)};
    const bool again = std::any_of(sizes_.begin(), sizes_.end(), [&](const Size& o) {
      return o.time == size.time && o.memory.weights == size.memory.weights &&
             o.memory.stash == size.memory.stash && o.memory.input == size.memory.input;
    });
    if (again) continue;
    for (std::size_t d = 0; d < devices; ++d) size.unit.push_back(on(d, size.memory));
    for (std::vector<int>& from : size.from) from.assign(static_cast<std::size_t>(L) + 1, 0);
    for (int l = L - 2; l >= 0; --l) {
      const auto i = static_cast<std::size_t>(l);
      const bool slow = compute[i] >= size.time;
      const bool big = weights[i] >= size.memory.weights && stashes[i] >= size.memory.stash &&
                       cuts[i] >= size.memory.input;
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
  const Bytes* held = &held_future_[static_cast<std::size_t>(stage + 1) * devices_];
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
      room = *capacity - loads[d].memory - held[d] - (last ? last_memory_ : 0);
      if (room < 0) return true;
    }
    for (std::size_t k = 0; k < sizes_.size(); ++k) {
      const Size& s = sizes_[k];
      const std::int64_t by_time = s.time > 0 ? time / s.time : 0;
      const std::int64_t by_memory = s.unit[d] > 0 ? room / s.unit[d] : 0;
      takes[k][kTime] += by_time;
      takes[k][kMemory] += by_memory;
      takes[k][kBoth] += std::min(by_time, by_memory);
    }
  }
  const auto at = static_cast<std::size_t>(first);
  for (std::size_t k = 0; k < sizes_.size(); ++k) {
    const Size& s = sizes_[k];
    const bool by_time = below && s.time > 0;
    const bool by_memory =
        capacity && std::all_of(s.unit.begin(), s.unit.end(), [](Bytes u) { return u > 0; });
    if (by_time && takes[k][kTime] < s.from[kTime][at]) return true;
    if (by_memory && takes[k][kMemory] < s.from[kMemory][at]) return true;
    if (by_time && by_memory && takes[k][kBoth] < s.from[kBoth][at]) return true;
  }
  return false;
}

Bytes LayerCountBound::least_capacity() const {
  const std::vector<DeviceLoad> none(devices_);
  const auto refuses = [&](Bytes c) { return cannot_place(-1, 0, none, std::nullopt, c); };
  Bytes ok = std::max<Bytes>(1, last_memory_);
  while (refuses(ok)) ok *= 2;
  Bytes refused = -1;  // the most known to be refused
  while (ok - refused > 1) {
    const Bytes mid = refused + (ok - refused) / 2;
    (refuses(mid) ? refused : ok) = mid;
  }
  return ok;
}

}  // namespace pipescope
