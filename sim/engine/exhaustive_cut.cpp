// The device partitioner's exact search over every cut
// (sim/engine/exhaustive_cut.h), and the table of the states it has met.
#include "sim/engine/exhaustive_cut.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>

#include "sim/base/cancel.h"
#include "sim/engine/device_partition.h"

namespace pipescope {

namespace {

// The states a search has met, by the hash of (stage, first layer, device
// loads): an open-addressing table whose slot `stage` is -1 when free, and the
// loads of each state from `loads` on. One a thread, kept between searches
// (a search empties the slots it used when it ends) so that no search pays
// for a fresh table.
struct SeenState {
  std::uint64_t key = 0;
  int stage = -1;
  int first = 0;
  std::size_t loads = 0;
};
struct SeenTable {
  std::vector<SeenState> slots;
  std::vector<std::size_t> used;  // the slots taken
  std::vector<DeviceLoad> loads;
  void clear() {
    for (const std::size_t i : used) slots[i].stage = -1;
    used.clear();
    loads.clear();
  }
};
SeenTable& seen_table() {
  thread_local SeenTable table;
  return table;
}

// Every cut, depth first, pruned as partition_devices describes: exact, unless
// it would visit more than `max_nodes` partial cuts (then it gives up and
// returns false, and the local search's cut stands).

class Exhaustive {
 public:
  Exhaustive(const PartitionProblem& p, const StagePrices& prices, const LayerCountBound& count,
             int devices, std::optional<Bytes> capacity, std::vector<StageRange> incumbent,
             SimTime incumbent_time, long max_nodes)
      : max_nodes_(max_nodes),
        problem_(p),
        prices_(prices),
        count_bound_(count),
        layers_(static_cast<int>(p.layers.size())),
        stages_(p.stages),
        capacity_(capacity),
        load_(static_cast<std::size_t>(devices)),
        cut_(static_cast<std::size_t>(p.stages)),
        last_stage_(static_cast<std::size_t>(devices), -1),
        best_(std::move(incumbent)),
        best_time_(incumbent_time) {
    for (int s = 0; s < stages_; ++s) {
      last_stage_[device_of_stage(p, static_cast<std::size_t>(s), devices)] = s;
    }
    open_after_.assign(static_cast<std::size_t>(stages_), 0);
    for (int s = 0; s < stages_; ++s) {
      for (const int last : last_stage_) {
        open_after_[static_cast<std::size_t>(s)] += last > s ? 1 : 0;
      }
    }
  }
  ~Exhaustive() { seen_.clear(); }
  Exhaustive(const Exhaustive&) = delete;
  Exhaustive& operator=(const Exhaustive&) = delete;

  // Whether the search finished; best() is then an optimal cut.
  bool run() {
    if (!rest_cannot_hold(-1, 0)) descend(0, 0);
    return nodes_ <= max_nodes_;
  }
  const std::vector<StageRange>& best() const { return best_; }
  SimTime best_time() const { return best_time_; }

 private:
  void descend(int stage, int first) {
    if (stage > 0 && stage < stages_ - 2 && seen_before(stage, first)) return;
    const std::size_t dev =
        device_of_stage(problem_, static_cast<std::size_t>(stage), static_cast<int>(load_.size()));
    const int highest = stage == stages_ - 1 ? layers_ - 1 : layers_ - (stages_ - stage);
    for (int last = stage == stages_ - 1 ? layers_ - 1 : first; last <= highest; ++last) {
      const DeviceLoad& d = load_[dev];
      if (d.time + prices_.compute(first, last) >= best_time_) return;  // grows with `last`
      const SimTime time = prices_.time(first, last);
      if (d.time + time >= best_time_) continue;
      // Memory counts only under a limit.
      const Bytes memory = capacity_ ? prices_.memory(stage, first, last) : 0;
      if (capacity_ && d.memory + memory > *capacity_) return;  // grows with `last`
      if (++nodes_ > max_nodes_) return;
      if ((nodes_ & 4095) == 0) throw_if_cancelled();
      add(dev, time, memory);
      cut_[static_cast<std::size_t>(stage)] = {first, last};
      // The device's last stage: its load is final from here on.
      const bool closes = last_stage_[dev] == stage;
      const DeviceLoad closing = closes ? load_[dev] : DeviceLoad{};
      if (stage == stages_ - 1) {
        record();
      } else if (!rest_cannot_beat_best(stage, last + 1, closing.time) &&
                 !rest_cannot_fit(stage, last + 1, closing.memory) &&
                 !rest_cannot_hold(stage, last + 1)) {
        closed_ += closing.time;
        closed_memory_ += closing.memory;
        descend(stage + 1, last + 1);
        closed_ -= closing.time;
        closed_memory_ -= closing.memory;
      }
      add(dev, -time, -memory);
      if (nodes_ > max_nodes_) return;
    }
  }
  void add(std::size_t dev, SimTime time, Bytes memory) {
    load_[dev].time += time;
    load_[dev].memory += memory;
    total_ += time;
    total_memory_ += memory;
  }
  // Whether layers [first, end) cannot fit in the room left on the devices
  // that still have a stage to come: the stages after `stage` need at least
  // the least memory of those layers as one stage (less two bytes a stage
  // for rounding: the weights' and ZeRO-3's gathered layers'), as
  // NoCutFits counts, and only those devices can take them.
  // Proves "nothing fits" early for the problems that cannot fit at all.
  // `closing`: the memory of the device whose last stage `stage` is, if it is.
  bool rest_cannot_fit(int stage, int first, Bytes closing) const {
    if (!capacity_) return false;
    const SimTime n = open_after_[static_cast<std::size_t>(stage)];
    const Bytes held = total_memory_ - closed_memory_ - closing;
    const Bytes needed = prices_.least_memory(first, layers_ - 1) - 2 * (stages_ - stage - 1);
    return n > 0 && needed > n * *capacity_ - held;
  }
  // Whether layers [first, end) cannot go to the stages after `stage` without a
  // device reaching the best time: each of those stages takes at least its
  // layers' compute, all of it on the devices that still have a stage to come,
  // so the busiest of them ends at least at their mean load once it is added.
  // `closing`: the load of the device whose last stage `stage` is, if it is.
  bool rest_cannot_beat_best(int stage, int first, SimTime closing) const {
    const SimTime n = open_after_[static_cast<std::size_t>(stage)];
    const SimTime filled = prices_.compute(first, layers_ - 1) + total_ - closed_ - closing;
    return n > 0 && (filled + n - 1) / n >= best_time_;
  }
  // Whether LayerCountBound shows that layers [first, end) cannot go to the
  // stages after `stage` (-1: all) with every device below the best time
  // and within memory.
  bool rest_cannot_hold(int stage, int first) const {
    const std::optional<SimTime> below =
        best_time_ < std::numeric_limits<SimTime>::max() ? std::optional(best_time_) : std::nullopt;
    return count_bound_.cannot_place(stage, first, load_, below, capacity_);
  }
  // The hash of (stage, first layer, device loads; their memory only under a
  // limit).
  std::uint64_t state_key(int stage, int first) const {
    const auto scramble = [](std::uint64_t x) {  // splitmix64's finaliser
      x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
      x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
      return x ^ (x >> 31);
    };
    std::uint64_t key =
        scramble((static_cast<std::uint64_t>(stage) << 32) ^ static_cast<std::uint64_t>(first));
    for (const DeviceLoad& d : load_) {
      key = scramble(key ^ static_cast<std::uint64_t>(d.time));
      if (capacity_) key = scramble(key ^ static_cast<std::uint64_t>(d.memory));
    }
    return key;
  }
  // Whether the search was here before, at stage `stage` from layer `first`
  // with the same device loads: what follows can do no better than it did
  // then (the best time only falls). Otherwise remembers this state while
  // there is room: an open-addressing table of kSeenSlots states, kept at most
  // half full, and kSeenLoads device loads in all (16 MiB).
  bool seen_before(int stage, int first) {
    // Partial cuts that do not repeat (layers all unlike) are not worth the
    // hashing: after kSeenTrial looks with almost no repeat, stop looking.
    if (lookups_ >= kSeenTrial && hits_ * 64 < lookups_) return false;
    ++lookups_;
    const std::uint64_t key = state_key(stage, first);
    SeenTable& seen = seen_;
    if (seen.slots.empty()) seen.slots.assign(kSeenSlots, SeenState{});
    for (std::size_t i = key & (kSeenSlots - 1);; i = (i + 1) & (kSeenSlots - 1)) {
      SeenState& slot = seen.slots[i];
      if (slot.stage < 0) {
        if (2 * (seen.used.size() + 1) > kSeenSlots ||
            seen.loads.size() + load_.size() > kSeenLoads) {
          return false;  // full: remember no more
        }
        seen.used.push_back(i);
        slot = SeenState{key, stage, first, seen.loads.size()};
        seen.loads.insert(seen.loads.end(), load_.begin(), load_.end());
        return false;
      }
      if (slot.key == key && slot.stage == stage && slot.first == first &&
          std::equal(load_.begin(), load_.end(),
                     seen.loads.begin() + static_cast<std::ptrdiff_t>(slot.loads),
                     [&](const DeviceLoad& a, const DeviceLoad& b) {
                       return a.time == b.time && (!capacity_ || a.memory == b.memory);
                     })) {
        ++hits_;
        return true;
      }
    }
  }
  void record() {
    SimTime busiest = 0;
    for (const DeviceLoad& d : load_) busiest = std::max(busiest, d.time);
    if (busiest < best_time_) {
      best_time_ = busiest;
      best_ = cut_;
    }
  }

  long max_nodes_;
  const PartitionProblem& problem_;
  const StagePrices& prices_;
  const LayerCountBound& count_bound_;
  int layers_;
  int stages_;
  std::optional<Bytes> capacity_;
  std::vector<DeviceLoad> load_;
  std::vector<StageRange> cut_;
  std::vector<int> last_stage_;  // of each device
  static constexpr std::size_t kSeenSlots = std::size_t{1} << 16;
  static constexpr std::size_t kSeenLoads = std::size_t{1} << 20;
  static constexpr long kSeenTrial = 4096;
  SeenTable& seen_ = seen_table();
  std::vector<SimTime> open_after_;  // devices with a stage after each stage
  SimTime total_ = 0;                // the devices' loads summed
  SimTime closed_ = 0;               // those of devices whose stages are all placed
  Bytes total_memory_ = 0;           // as total_ and closed_, of memory (under a limit)
  Bytes closed_memory_ = 0;
  std::vector<StageRange> best_;
  SimTime best_time_;
  long nodes_ = 0;
  long lookups_ = 0;  // of seen_before
  long hits_ = 0;     // seen_before's trues
};

}  // namespace

ExhaustiveCut exhaustive_cut(const PartitionProblem& p, const StagePrices& prices,
                             const LayerCountBound& count, int devices,
                             std::optional<Bytes> capacity, std::vector<StageRange> incumbent,
                             SimTime incumbent_time, long max_nodes) {
  Exhaustive exhaustive(p, prices, count, devices, capacity, std::move(incumbent), incumbent_time,
                        max_nodes);
  ExhaustiveCut out;
  out.exact = exhaustive.run();
  out.stages = exhaustive.best();
  out.busiest = exhaustive.best_time();
  return out;
}

}  // namespace pipescope
