#include "sim/engine/device_partition.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <string>
#include <utility>

#include "costmodels/check.h"
#include "sim/base/cancel.h"
#include "sim/base/format.h"
#include "sim/engine/exhaustive_cut.h"
#include "sim/engine/layer_count_bound.h"

namespace pipescope {

std::size_t device_of_stage(const PartitionProblem& p, std::size_t stage, int devices) {
  if (p.stage_device.empty()) return stage % static_cast<std::size_t>(devices);
  return static_cast<std::size_t>(p.stage_device[stage]);
}

std::vector<DeviceLoad> device_loads(const PartitionProblem& p, const std::vector<StageRange>& cut,
                                     int devices) {
  PS_CHECK(devices >= 1, "need at least one device");
  const StagePrices prices(p);
  std::vector<DeviceLoad> load(static_cast<std::size_t>(devices));
  for (std::size_t s = 0; s < cut.size(); ++s) {
    DeviceLoad& d = load[device_of_stage(p, s, devices)];
    d.time += prices.time(cut[s].first_layer, cut[s].last_layer);
    d.memory += prices.memory(static_cast<int>(s), cut[s].first_layer, cut[s].last_layer);
  }
  return load;
}

namespace {

// Transfers across many stages cost O(stages) each and are tried O(stages)
// times a round: beyond this many stages only single boundary moves run.
constexpr std::size_t kMaxTransferStages = 128;

// What the search minimises, in order.
struct Score {
  SimTime busiest = 0;
  double spread = 0.0;  // sum of squared device times, in double (ns^2 overflow)
  friend bool operator<(const Score& a, const Score& b) {
    return a.busiest != b.busiest ? a.busiest < b.busiest : a.spread < b.spread;
  }
};

// One cut under search, with its stages' times and memory kept per stage so
// that a moved boundary costs O(1) to price (plus a rescan of the devices
// when the busiest one gets lighter).
class Search {
 public:
  Search(const PartitionProblem& p, std::vector<StageRange> cut, int devices,
         std::optional<Bytes> capacity)
      : problem_(p), prices_(p), cut_(std::move(cut)), devices_(devices), capacity_(capacity) {
    stage_time_.resize(cut_.size());
    stage_memory_.resize(cut_.size());
    load_.assign(static_cast<std::size_t>(devices_), DeviceLoad{});
    for (std::size_t s = 0; s < cut_.size(); ++s) {
      stage_time_[s] = prices_.time(cut_[s].first_layer, cut_[s].last_layer);
      stage_memory_[s] =
          prices_.memory(static_cast<int>(s), cut_[s].first_layer, cut_[s].last_layer);
      load_[device_of(s)].time += stage_time_[s];
      load_[device_of(s)].memory += stage_memory_[s];
    }
  }

  bool fits() const {
    return std::all_of(load_.begin(), load_.end(), [&](const DeviceLoad& d) { return ok(d); });
  }
  Score score() const {
    Score sc;
    for (const DeviceLoad& d : load_) {
      sc.busiest = std::max(sc.busiest, d.time);
      sc.spread += static_cast<double>(d.time) * static_cast<double>(d.time);
    }
    return sc;
  }
  const std::vector<StageRange>& cut() const { return cut_; }

  // Moves boundaries while that improves the score; returns the final score.
  Score improve() {
    Score now = score();
    do {
      for (bool moved = true; moved;) {
        throw_if_cancelled();
        moved = false;
        for (std::size_t b = 1; b < cut_.size(); ++b) {
          for (const int step : {-1, 1}) {
            if (try_move(b, step, now)) moved = true;
          }
        }
      }
    } while (cut_.size() <= kMaxTransferStages && relieve_busiest(now));
    return now;
  }

 private:
  std::size_t device_of(std::size_t stage) const {
    return device_of_stage(problem_, stage, devices_);
  }
  bool ok(const DeviceLoad& d) const { return !capacity_ || d.memory <= *capacity_; }

  // Moves the first layer of stage b by `step` (-1: stage b takes the last
  // layer of stage b - 1; +1: gives its first layer to it) when both stages
  // keep a layer, every device still fits, and the score improves.
  bool try_move(std::size_t b, int step, Score& now) {
    StageRange left = cut_[b - 1];
    StageRange right = cut_[b];
    left.last_layer += step;
    right.first_layer += step;
    if (left.layer_count() < 1 || right.layer_count() < 1) return false;
    const SimTime left_time = prices_.time(left.first_layer, left.last_layer);
    const SimTime right_time = prices_.time(right.first_layer, right.last_layer);
    const Bytes left_memory =
        prices_.memory(static_cast<int>(b - 1), left.first_layer, left.last_layer);
    const Bytes right_memory =
        prices_.memory(static_cast<int>(b), right.first_layer, right.last_layer);
    // The two devices' loads after the move (one device when they share it).
    const std::size_t dl = device_of(b - 1);
    const std::size_t dr = device_of(b);
    DeviceLoad l = load_[dl];
    l.time += left_time - stage_time_[b - 1];
    l.memory += left_memory - stage_memory_[b - 1];
    DeviceLoad r = dr == dl ? l : load_[dr];
    r.time += right_time - stage_time_[b];
    r.memory += right_memory - stage_memory_[b];
    if (dr == dl) l = r;
    if (!ok(l) || !ok(r)) return false;
    if (!(price(dl, l, dr, r, now) < now)) return false;
    // price() rounds the spread; only an exact improvement is taken, so that
    // the score strictly falls and the search ends.
    const DeviceLoad old_l = load_[dl];
    const DeviceLoad old_r = load_[dr];
    load_[dl] = l;
    load_[dr] = r;
    const Score next = score();
    if (!(next < now)) {
      load_[dr] = old_r;
      load_[dl] = old_l;
      return false;
    }
    stage_time_[b - 1] = left_time;
    stage_time_[b] = right_time;
    stage_memory_[b - 1] = left_memory;
    stage_memory_[b] = right_memory;
    cut_[b - 1] = left;
    cut_[b] = right;
    now = next;
    return true;
  }

  // Where no single boundary move helps, one layer can still go from a stage of
  // the busiest device to a stage far away, every stage between shifting by a
  // layer: tries those transfers, keeps the first that improves the score.
  bool relieve_busiest(Score& now) {
    const std::size_t busiest = static_cast<std::size_t>(
        std::max_element(load_.begin(), load_.end(),
                         [](const DeviceLoad& a, const DeviceLoad& b) { return a.time < b.time; }) -
        load_.begin());
    for (std::size_t from = 0; from < cut_.size(); ++from) {
      if (device_of(from) != busiest) continue;
      for (std::size_t to = 0; to < cut_.size(); ++to) {
        throw_if_cancelled();
        if (device_of(to) != busiest && try_transfer(from, to, now)) return true;
      }
    }
    return false;
  }

  // Moves one layer from stage `from` to stage `to`: the boundaries between
  // them shift by one layer towards `from`.
  bool try_transfer(std::size_t from, std::size_t to, Score& now) {
    if (cut_[from].layer_count() < 2) return false;
    const int step = from < to ? -1 : 1;
    std::vector<StageRange> moved(
        cut_.begin() + static_cast<std::ptrdiff_t>(std::min(from, to)),
        cut_.begin() + static_cast<std::ptrdiff_t>(std::max(from, to)) + 1);
    for (std::size_t i = 0; i + 1 < moved.size(); ++i) {
      moved[i].last_layer += step;
      moved[i + 1].first_layer += step;
    }
    std::vector<DeviceLoad> load = load_;
    const std::size_t first = std::min(from, to);
    for (std::size_t i = 0; i < moved.size(); ++i) {
      DeviceLoad& d = load[device_of(first + i)];
      d.time += prices_.time(moved[i].first_layer, moved[i].last_layer) - stage_time_[first + i];
      d.memory +=
          prices_.memory(static_cast<int>(first + i), moved[i].first_layer, moved[i].last_layer) -
          stage_memory_[first + i];
    }
    std::swap(load, load_);
    const Score next = score();
    if (!fits() || !(next < now)) {
      std::swap(load, load_);
      return false;
    }
    for (std::size_t i = 0; i < moved.size(); ++i) {
      cut_[first + i] = moved[i];
      stage_time_[first + i] = prices_.time(moved[i].first_layer, moved[i].last_layer);
      stage_memory_[first + i] =
          prices_.memory(static_cast<int>(first + i), moved[i].first_layer, moved[i].last_layer);
    }
    now = next;
    return true;
  }

  // The score once devices dl and dr carry l and r: O(1) unless one of them was
  // the busiest and gets lighter, when the others are scanned.
  Score price(std::size_t dl, const DeviceLoad& l, std::size_t dr, const DeviceLoad& r,
              const Score& now) const {
    const auto sq = [](SimTime t) { return static_cast<double>(t) * static_cast<double>(t); };
    Score next;
    next.spread = now.spread - sq(load_[dl].time) + sq(l.time);
    if (dr != dl) next.spread += sq(r.time) - sq(load_[dr].time);
    next.busiest = std::max({now.busiest, l.time, r.time});
    const bool was_busiest = load_[dl].time == now.busiest || load_[dr].time == now.busiest;
    if (was_busiest && std::max(l.time, r.time) < now.busiest) {
      next.busiest = std::max(l.time, r.time);
      for (std::size_t d = 0; d < load_.size(); ++d) {
        if (d != dl && d != dr) next.busiest = std::max(next.busiest, load_[d].time);
      }
    }
    return next;
  }

  const PartitionProblem& problem_;
  StagePrices prices_;
  std::vector<StageRange> cut_;
  int devices_;
  std::optional<Bytes> capacity_;
  std::vector<SimTime> stage_time_;
  std::vector<Bytes> stage_memory_;
  std::vector<DeviceLoad> load_;
};

// No cut found fits: the fullest device of the cut that needs least memory
// stage by stage, as the figure to beat.
PartitionResult nothing_fits(const PartitionProblem& p, int devices, Bytes capacity) {
  PartitionResult r;
  const std::vector<DeviceLoad> loads = device_loads(p, min_peak_memory_cut(p), devices);
  for (std::size_t d = 0; d < loads.size(); ++d) {
    if (!r.memory_needed || loads[d].memory > *r.memory_needed) {
      r.memory_needed = loads[d].memory;
      r.fullest_stage = static_cast<int>(d);  // device d runs stage d first
    }
  }
  r.why = "no cut into " + std::to_string(p.stages) + " stages on " + std::to_string(devices) +
          " devices fits " + format_bytes(static_cast<double>(capacity)) +
          " per device; the best found needs " +
          format_bytes(static_cast<double>(*r.memory_needed)) + " on its fullest device";
  return r;
}

// The two proofs that no cut fits `capacity`, and from them the least
// memory every cut needs on some device. (1) The stages' memory, summed over
// any cut, is at least that of one stage holding every layer with the
// fewest micro-batches any stage holds (less two bytes a stage for rounding,
// rest_cannot_fit), and the fullest device holds at least its share of that
// sum. (2) The devices cannot hold the larger layers counted whole
// (LayerCountBound).
class NoCutFits {
 public:
  NoCutFits(const PartitionProblem& p, const StagePrices& prices, const LayerCountBound& count,
            int devices)
      : devices_(devices), count_(count) {
    const Bytes total =
        prices.least_memory(0, static_cast<int>(p.layers.size()) - 1) - 2 * Bytes{p.stages};
    share_ = (total + devices - 1) / devices;
  }
  bool proven(Bytes capacity) const {
    return share_ > capacity ||
           count_.cannot_place(-1, 0, std::vector<DeviceLoad>(static_cast<std::size_t>(devices_)),
                               std::nullopt, capacity);
  }
  Bytes least_needed() const { return std::max(share_, count_.least_capacity()); }

 private:
  int devices_;
  const LayerCountBound& count_;
  Bytes share_ = 0;
};

// Proven that no cut fits (NoCutFits): the least memory each needs, no
// device named.
PartitionResult none_can_fit(const PartitionProblem& p, int devices, const NoCutFits& proof,
                             Bytes capacity) {
  PartitionResult r;
  r.memory_needed = proof.least_needed();
  r.why = "no cut into " + std::to_string(p.stages) + " stages on " + std::to_string(devices) +
          " devices fits " + format_bytes(static_cast<double>(capacity)) +
          " per device: every cut needs at least " +
          format_bytes(static_cast<double>(*r.memory_needed)) + " on some device";
  return r;
}

// What partition_devices returns where NoCutFits proves that no cut fits
// `limit`; none where it does not (or no limit).
std::optional<PartitionResult> proven_unfit(const PartitionProblem& p, const StagePrices& prices,
                                            const LayerCountBound& count, int devices,
                                            std::optional<Bytes> limit) {
  if (!limit) return std::nullopt;
  const NoCutFits proof(p, prices, count, devices);
  if (!proof.proven(*limit)) return std::nullopt;
  return none_can_fit(p, devices, proof, *limit);
}

// The limit partition_devices holds the cut to.
std::optional<Bytes> device_limit(const PartitionProblem& p, int devices,
                                  std::optional<Bytes> device_capacity) {
  return devices == p.stages ? p.memory_capacity : device_capacity;
}

}  // namespace

std::optional<PartitionResult> no_cut_fits(const PartitionProblem& p, int devices,
                                           std::optional<Bytes> device_capacity) {
  PS_CHECK(devices >= 1 && p.stages % devices == 0, "stages must be a multiple of the devices");
  const StagePrices prices(p);
  const LayerCountBound count(p, prices, devices);
  return proven_unfit(p, prices, count, devices, device_limit(p, devices, device_capacity));
}

bool no_cut_is_faster(const PartitionProblem& p, int devices, SimTime busiest) {
  const StagePrices prices(p);
  const auto n = static_cast<std::size_t>(devices);
  const LayerCountBound count(p, prices, devices);
  return count.cannot_place(-1, 0, std::vector<DeviceLoad>(n), busiest, std::nullopt);
}

PartitionResult partition_devices(const PartitionProblem& p, int devices,
                                  std::optional<Bytes> device_capacity, long max_exhaustive_nodes) {
  PS_CHECK(devices >= 1 && p.stages % devices == 0, "stages must be a multiple of the devices");
  // With one stage a device the stage-optimal partitioner below holds the
  // problem's own limit; refuse by that one.
  const std::optional<Bytes> limit = device_limit(p, devices, device_capacity);
  if (devices == p.stages && !limit) return partition_optimal(p);
  const StagePrices prices(p);
  const LayerCountBound count(p, prices, devices);
  if (std::optional<PartitionResult> none = proven_unfit(p, prices, count, devices, limit)) {
    return *std::move(none);
  }
  if (devices == p.stages) return partition_optimal(p);
  PartitionResult best;
  std::optional<Score> best_score;
  const auto improve = [&](std::vector<StageRange> start) {
    Search search(p, std::move(start), devices, device_capacity);
    if (!search.fits()) return;
    const Score score = search.improve();
    if (!best_score || score < *best_score) {
      best_score = score;
      best.stages = search.cut();
      best.bottleneck = score.busiest;
    }
  };
  // The starts in turn, until the count proves the best one's busiest time
  // optimal: the others could only tie it, if with less spread, which the
  // tie-break then does not see.
  const auto proven = [&] {
    return best_score &&
           count.cannot_place(-1, 0, std::vector<DeviceLoad>(static_cast<std::size_t>(devices)),
                              best_score->busiest, device_capacity);
  };
  const std::function<std::vector<StageRange>()> starts[] = {
      [&] { return optimal_cut(p); },
      [&] { return partition_min_variance(p); },
      [&] { return partition_uniform(static_cast<int>(p.layers.size()), p.stages); },
  };
  for (const auto& start : starts) {
    if (proven()) break;
    std::vector<StageRange> cut = start();
    if (!cut.empty()) improve(std::move(cut));
  }
  // Where none of those fits, the cut that needs least memory stage by stage,
  // the one most likely to (a DP as costly as the stage-optimal one, so only
  // then).
  if (!best_score) improve(min_peak_memory_cut(p));
  // Exact where the cuts are few enough to search them all (most real models:
  // tens of layers), pruned by the local search's answer; then the local
  // search evens out the other devices without touching the busiest time. A
  // search cut short still offers the best cut it found.
  const SimTime incumbent = best_score ? best_score->busiest : std::numeric_limits<SimTime>::max();
  const ExhaustiveCut exhaustive = exhaustive_cut(p, prices, count, devices, device_capacity,
                                                  best.stages, incumbent, max_exhaustive_nodes);
  if (exhaustive.busiest < incumbent) {
    Search search(p, exhaustive.stages, devices, device_capacity);
    best_score = search.improve();
    best = PartitionResult{};
    best.stages = search.cut();
    best.bottleneck = best_score->busiest;
  }
  if (!best_score) best = nothing_fits(p, devices, device_capacity.value_or(0));
  best.exact = exhaustive.exact;
  return best;
}

}  // namespace pipescope
