#include "sim/engine/partition.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "costmodels/check.h"
#include "costmodels/shared_memo.h"
#include "sim/base/cancel.h"
#include "sim/base/format.h"

namespace pipescope {

std::string_view to_string(PartitionMethod p) {
  switch (p) {
    case PartitionMethod::kOptimal:
      return "optimal";
    case PartitionMethod::kUniform:
      return "uniform";
    case PartitionMethod::kParams:
      return "params";
    case PartitionMethod::kGpipe:
      return "gpipe";
  }
  return "?";
}

std::optional<PartitionMethod> parse_partition_method(std::string_view name) {
  for (PartitionMethod p : {PartitionMethod::kOptimal, PartitionMethod::kUniform,
                            PartitionMethod::kParams, PartitionMethod::kGpipe}) {
    if (name == to_string(p)) return p;
  }
  return std::nullopt;
}

SimTime PartitionProblem::stage_reduce_scatter(int first, int last) const {
  if (dense_grad_bytes.empty()) return 0;
  Bytes dense = 0, experts = 0;
  for (int l = first; l <= last; ++l) {
    dense += dense_grad_bytes[static_cast<std::size_t>(l)];
    experts += expert_grad_bytes[static_cast<std::size_t>(l)];
  }
  return reduce_scatter(dense, experts);
}

namespace {

SimTime transfer_time(const PartitionProblem& p, Bytes bytes) {
  if (p.link_bandwidth <= 0.0) return 0;
  return seconds_to_simtime(p.link_latency_s + static_cast<double>(bytes) / p.link_bandwidth);
}

// Of n micro-batches in flight, those whose whole stash a stage holds at its
// peak, those whose checkpoint alone it keeps, and the stashes a recompute
// rebuilds (stage_memory). None shrinks as n grows.
StashCount held_of(const PartitionProblem& p, int n) {
  switch (p.remat) {
    case Remat::kNever:
    case Remat::kSelective:
      return {n, 0, 0};
    case Remat::kAlways:
      return {0, n, 1};
    case Remat::kExceptLast:
      return {1, n - 1, n > 1 && !p.forwards_first ? 1 : 0};
  }
  return {n, 0, 0};
}

// `formula`, raised to what the schedule's order holds where that is more.
StashCount at_least(StashCount formula, const std::optional<StashCount>& order) {
  return order ? most_of(formula, *order) : formula;
}

// The largest of a range of values in O(1) after O(n log n) (a sparse table).
class RangeMax {
 public:
  explicit RangeMax(const std::vector<Bytes>& values) {
    if (values.empty()) return;
    table_.push_back(values);
    for (std::size_t width = 2; width <= values.size(); width *= 2) {
      const std::vector<Bytes>& half = table_.back();
      std::vector<Bytes> row(values.size() - width + 1);
      for (std::size_t i = 0; i < row.size(); ++i) {
        row[i] = std::max(half[i], half[i + width / 2]);
      }
      table_.push_back(std::move(row));
    }
  }
  // Of values[first] .. values[last].
  [[gnu::always_inline]] Bytes of(int first, int last) const {
    const auto n = static_cast<unsigned>(last - first + 1);
    const auto level = static_cast<std::size_t>(std::bit_width(n) - 1);
    const std::vector<Bytes>& row = table_[level];
    return std::max(row[static_cast<std::size_t>(first)],
                    row[static_cast<std::size_t>(last + 1) - (std::size_t{1} << level)]);
  }

 private:
  std::vector<std::vector<Bytes>> table_;
};

// Prefix sums over the layers, so that any stage's totals cost O(1).
struct Prefix {
  std::vector<SimTime> cut_time;  // moving cut i between devices; 0 for the model's ends
  std::vector<SimTime> compute;   // forward + backward (+ recompute's share under remat)
  std::vector<SimTime> fwd_bwd;   // forward + backward
  std::vector<std::int64_t> params;
  std::vector<Bytes> stash;
  std::vector<Bytes> layer_inputs;        // under Checkpoint::kLayer: the cut before each layer
  std::optional<RangeMax> largest_stash;  // under Checkpoint::kLayer
  std::optional<RangeMax> largest_pair;   // under ZeRO-3: two adjacent layers' parameters
  bool plain = true;                      // neither layer checkpoints nor ZeRO-3's gathers
  StashCount held;                        // every stage's, from in_flight: fixed for the problem
  StashCount least;                       // the least any stage holds, of each kind

  explicit Prefix(const PartitionProblem& p)
      : held(at_least(held_of(p, p.in_flight.value_or(p.micro_batches)), p.order_held)),
        least(held) {
    for (std::size_t s = 0; s < p.stage_held.size(); ++s) {
      least = s == 0 ? p.stage_held[s] : least_of(least, p.stage_held[s]);
    }
    const std::size_t n = p.layers.size();
    compute.assign(n + 1, 0);
    fwd_bwd.assign(n + 1, 0);
    params.assign(n + 1, 0);
    stash.assign(n + 1, 0);
    cut_time.assign(n + 1, 0);
    for (std::size_t i = 1; i < n; ++i) {
      cut_time[i] = transfer_time(p, (p.cut_bytes[i] + p.cut_split - 1) / p.cut_split);
    }
    for (std::size_t i = 0; i < n; ++i) {
      const LayerCost& l = p.layers[i];
      fwd_bwd[i + 1] = fwd_bwd[i] + l.forward + l.backward;
      compute[i + 1] = compute[i] + l.forward + l.backward +
                       l.recompute * recomputed_count(p.remat, p.micro_batches) / p.micro_batches;
      params[i + 1] = params[i] + l.params;
      stash[i + 1] = stash[i] + l.stash_bytes;
    }
    plain = p.checkpoint == Checkpoint::kStage && p.gathered_bytes_per_param == 0.0;
    if (p.checkpoint == Checkpoint::kLayer) {
      layer_inputs.assign(n + 1, 0);
      std::vector<Bytes> stashes(n);
      for (std::size_t i = 0; i < n; ++i) {
        layer_inputs[i + 1] = layer_inputs[i] + p.cut_bytes[i];
        stashes[i] = p.layers[i].stash_bytes;
      }
      largest_stash.emplace(stashes);
    }
    if (p.gathered_bytes_per_param > 0.0 && n > 1) {
      std::vector<Bytes> pairs(n - 1);
      for (std::size_t i = 0; i + 1 < n; ++i)
        pairs[i] = p.layers[i].params + p.layers[i + 1].params;
      largest_pair.emplace(pairs);
    }
  }
  // Under ZeRO-3, the most parameters a stage holds gathered at once.
  [[gnu::always_inline]] std::int64_t gathered_of(const PartitionProblem& p, int first,
                                                  int last) const {
    if (first == last || !largest_pair) return p.layers[static_cast<std::size_t>(first)].params;
    return largest_pair->of(first, last - 1);
  }
  SimTime compute_of(int first, int last) const { return compute[last + 1] - compute[first]; }
  SimTime fwd_bwd_of(int first, int last) const { return fwd_bwd[last + 1] - fwd_bwd[first]; }
  std::int64_t params_of(int first, int last) const { return params[last + 1] - params[first]; }
  Bytes stash_of(int first, int last) const { return stash[last + 1] - stash[first]; }
};

// params x per_param rounded half up, as std::llround rounds these
// non-negative values, without a library call in the partitioners' innermost
// loop.
Bytes rounded_bytes(std::int64_t params, double per_param) {
  const double exact = static_cast<double>(params) * per_param;
  auto whole = static_cast<Bytes>(exact);
  if (exact - static_cast<double>(whole) >= 0.5) ++whole;
  return whole;
}

// memory_floor's terms besides the weights' under layer checkpoints or ZeRO-3.
[[gnu::noinline]] Bytes memory_beyond(const PartitionProblem& p, const Prefix& pre, int first,
                                      int last, StashCount held) {
  Bytes bytes = 0;
  if (!pre.largest_stash) {
    bytes += held.all_stashes() * pre.stash_of(first, last);
  } else {
    bytes += held.stashes * pre.stash_of(first, last) +
             held.rebuilt * (p.backward_split ? pre.stash_of(first, last)
                                              : pre.largest_stash->of(first, last)) +
             held.inputs * (pre.layer_inputs[static_cast<std::size_t>(last) + 1] -
                            pre.layer_inputs[static_cast<std::size_t>(first)]);
  }
  if (p.gathered_bytes_per_param > 0.0) {
    bytes += rounded_bytes(pre.gathered_of(p, first, last), p.gathered_bytes_per_param);
  }
  return bytes;
}

// The part of a stage's memory that only grows as the stage takes more layers:
// everything but the stage inputs kept under Checkpoint::kStage. The
// partitioners' innermost loop: the common case (stage checkpoints, nothing
// gathered) takes two prefix differences.
inline Bytes memory_floor(const PartitionProblem& p, const Prefix& pre, int first, int last,
                          StashCount held) {
  const Bytes floor = rounded_bytes(pre.params_of(first, last), p.bytes_per_param);
  if (pre.plain) return floor + held.all_stashes() * pre.stash_of(first, last);
  return floor + memory_beyond(p, pre, first, last, held);
}
Bytes memory_floor(const PartitionProblem& p, const Prefix& pre, int first, int last) {
  return memory_floor(p, pre, first, last, pre.held);
}

inline Bytes memory_of(const PartitionProblem& p, const Prefix& pre, int first, int last,
                       StashCount held) {
  const Bytes floor = memory_floor(p, pre, first, last, held);
  if (pre.largest_stash) return floor;
  return floor + held.inputs * p.cut_bytes[static_cast<std::size_t>(first)];
}
Bytes memory_of(const PartitionProblem& p, const Prefix& pre, int first, int last) {
  return memory_of(p, pre, first, last, pre.held);
}

// The model's input and the loss do not cross between devices (cut_time is 0 at
// both ends).
SimTime time_of(const Prefix& pre, int first, int last) {
  return pre.compute_of(first, last) + pre.cut_time[static_cast<std::size_t>(first)] +
         pre.cut_time[static_cast<std::size_t>(last + 1)];
}

// Cuts L layers into K contiguous stages minimising combine() over the stages of
// cost(first, last), among the stages that pass ok(first, last). `floor` is a
// lower bound of cost that grows as a stage extends to the left, and `too_big`
// a condition that stays true once true as it does, which both end the search
// early. best[s][j]: the best value of s stages over layers [0, j).
template <typename V, typename Cost, typename Floor, typename TooBig, typename Ok, typename Combine>
std::optional<std::pair<V, std::vector<StageRange>>> dp_partition(int L, int K, Cost cost,
                                                                  Floor floor, TooBig too_big,
                                                                  Ok ok, Combine combine) {
  PS_CHECK(K >= 1 && K <= L, "need 1 <= stages <= layers");
  const V inf = std::numeric_limits<V>::max();
  const auto W = static_cast<std::size_t>(L + 1);
  std::vector<V> best(static_cast<std::size_t>(K + 1) * W, inf);
  std::vector<int> from(static_cast<std::size_t>(K + 1) * W, -1);
  const auto at = [W](int s, int j) {
    return static_cast<std::size_t>(s) * W + static_cast<std::size_t>(j);
  };
  best[at(0, 0)] = V{};
  for (int s = 1; s <= K; ++s) {
    throw_if_cancelled();
    // The last stage ends at layer L - 1: only best[K][L] is wanted.
    for (int j = s == K ? L : s; j <= L - (K - s); ++j) {
      V b = inf;
      int arg = -1;
      // The first stage starts at layer 0; stage s at s - 1 or later.
      const int lowest = s == 1 ? 0 : s - 1;
      const int highest = s == 1 ? 0 : j - 1;
      for (int i = highest; i >= lowest; --i) {
        const V f = floor(i, j - 1);
        if (b != inf && f >= b) break;
        if (too_big(i, j - 1)) break;
        const V prev = best[at(s - 1, i)];
        if (prev == inf || !ok(i, j - 1)) continue;
        const V v = combine(prev, cost(i, j - 1));
        if (v < b) {
          b = v;
          arg = i;
        }
      }
      best[at(s, j)] = b;
      from[at(s, j)] = arg;
    }
  }
  if (best[at(K, L)] == inf) return std::nullopt;
  std::vector<StageRange> stages(static_cast<std::size_t>(K));
  for (int s = K, j = L; s >= 1; --s) {
    const int i = from[at(s, j)];
    stages[static_cast<std::size_t>(s - 1)] = StageRange{i, j - 1};
    j = i;
  }
  return std::make_pair(best[at(K, L)], std::move(stages));
}

const auto kMax = [](auto a, auto b) { return std::max(a, b); };
const auto kNever = [](int, int) { return false; };
const auto kAlways = [](int, int) { return true; };

void check_problem(const PartitionProblem& p) {
  PS_CHECK(p.cut_bytes.size() == p.layers.size() + 1, "cut_bytes needs layers + 1 entries");
  PS_CHECK(p.cut_split >= 1, "cut_split must be at least 1");
  PS_CHECK(p.stages >= 1 && p.stages <= static_cast<int>(p.layers.size()), "need 1 <= K <= layers");
  PS_CHECK(p.stage_held.empty() || static_cast<int>(p.stage_held.size()) == p.stages,
           "stage_held needs one count per stage");
}

}  // namespace

SimTime stage_time(const PartitionProblem& p, int first, int last) {
  return StagePrices(p).time(first, last);
}

Bytes stage_memory(const PartitionProblem& p, int first, int last) {
  return StagePrices(p).memory(first, last);
}

struct StagePrices::Sums : Prefix {
  using Prefix::Prefix;
};

StagePrices::StagePrices(const PartitionProblem& p) : p_(p) {
  check_problem(p);
  sums_ = std::make_unique<const Sums>(p);
}
StagePrices::~StagePrices() = default;

SimTime StagePrices::time(int first, int last) const {
  return time_of(*sums_, first, last);
}

SimTime StagePrices::compute(int first, int last) const {
  return sums_->compute_of(first, last);
}

SimTime StagePrices::cut_time(int boundary) const {
  return sums_->cut_time[static_cast<std::size_t>(boundary)];
}

StagePrices::LayerFloor StagePrices::layer_floor(int layer) const {
  const LayerCost& l = p_.layers[static_cast<std::size_t>(layer)];
  const Bytes weights = std::max<Bytes>(
      0, static_cast<Bytes>(static_cast<double>(l.params) * p_.bytes_per_param) - 1);
  return {weights, l.stash_bytes, p_.cut_bytes[static_cast<std::size_t>(layer)]};
}

Bytes StagePrices::floor_bytes(const LayerFloor& f, StashCount counts) const {
  // As memory_floor and memory_beyond count: every stash under stage
  // checkpoints; the kept stashes and the inputs under layer checkpoints,
  // and the rebuilt ones where the backward is split (else the rebuilt
  // stash is the range's largest, not a sum: stage_floors).
  if (!sums_->largest_stash) return f.weights + counts.all_stashes() * f.stash;
  return f.weights + (counts.stashes + (p_.backward_split ? counts.rebuilt : 0)) * f.stash +
         counts.inputs * f.input;
}

std::vector<Bytes> StagePrices::stage_floors() const {
  const std::size_t L = p_.layers.size();
  Bytes least_cut = L > 1 ? std::numeric_limits<Bytes>::max() : 0;
  for (std::size_t i = 1; i < L; ++i) least_cut = std::min(least_cut, p_.cut_bytes[i]);
  Bytes least_stash = std::numeric_limits<Bytes>::max();
  std::int64_t least_params = std::numeric_limits<std::int64_t>::max();
  for (const LayerCost& l : p_.layers) {
    least_stash = std::min(least_stash, l.stash_bytes);
    least_params = std::min(least_params, l.params);
  }
  const Bytes gathered =
      p_.gathered_bytes_per_param > 0.0
          ? std::max<Bytes>(0, static_cast<Bytes>(static_cast<double>(least_params) *
                                                  p_.gathered_bytes_per_param) -
                                   1)
          : 0;
  std::vector<Bytes> out;
  for (int s = 0; s < p_.stages; ++s) {
    const StashCount c = counts(s);
    Bytes held = gathered;
    if (!sums_->largest_stash) {
      held += c.inputs * (s == 0 ? p_.cut_bytes[0] : least_cut);
    } else if (!p_.backward_split) {
      held += c.rebuilt * least_stash;
    }
    out.push_back(held);
  }
  return out;
}

StashCount StagePrices::counts(int stage) const {
  return p_.stage_held.empty() ? sums_->held : p_.stage_held[static_cast<std::size_t>(stage)];
}

Bytes StagePrices::layer_memory_floor(int layer) const {
  return floor_bytes(layer_floor(layer), sums_->least);
}

Bytes StagePrices::memory(int first, int last) const {
  return memory_of(p_, *sums_, first, last);
}

Bytes StagePrices::memory(int stage, int first, int last) const {
  if (p_.stage_held.empty()) return memory(first, last);
  return memory_of(p_, *sums_, first, last, p_.stage_held[static_cast<std::size_t>(stage)]);
}

Bytes StagePrices::least_memory(int first, int last) const {
  return memory_of(p_, *sums_, first, last, sums_->least);
}

namespace {

std::optional<std::pair<SimTime, std::vector<StageRange>>> least_slowest(const PartitionProblem& p,
                                                                         const Prefix& pre) {
  const int L = static_cast<int>(p.layers.size());
  const auto time = [&](int i, int j) { return time_of(pre, i, j); };
  const auto compute = [&](int i, int j) { return pre.compute_of(i, j); };
  const Bytes cap = p.memory_capacity.value_or(std::numeric_limits<Bytes>::max());
  const auto too_big = [&](int i, int j) { return memory_floor(p, pre, i, j) > cap; };
  const auto fits = [&](int i, int j) { return memory_of(p, pre, i, j) <= cap; };
  return dp_partition<SimTime>(L, p.stages, time, compute, too_big, fits, kMax);
}

}  // namespace

std::vector<StageRange> optimal_cut(const PartitionProblem& p) {
  check_problem(p);
  auto best = least_slowest(p, Prefix(p));
  return best ? std::move(best->second) : std::vector<StageRange>{};
}

PartitionResult partition_optimal(const PartitionProblem& p) {
  check_problem(p);
  const Prefix pre(p);
  PartitionResult result;
  if (auto best = least_slowest(p, pre)) {
    result.bottleneck = best->first;
    result.stages = std::move(best->second);
    return result;
  }
  // Nothing fits: the smallest capacity that would, and where it is needed.
  const Bytes cap = p.memory_capacity.value_or(std::numeric_limits<Bytes>::max());
  const std::vector<StageRange> cut = min_peak_memory_cut(p);
  Bytes least = 0;
  for (std::size_t s = 0; s < cut.size(); ++s) {
    const Bytes m = memory_of(p, pre, cut[s].first_layer, cut[s].last_layer);
    if (m > least) {
      least = m;
      result.fullest_stage = static_cast<int>(s);
    }
  }
  result.memory_needed = least;
  result.why = "no cut into " + std::to_string(p.stages) + " stages fits " +
               format_bytes(static_cast<double>(cap)) + " per device; the best needs " +
               format_bytes(static_cast<double>(least)) + " on its fullest stage";
  return result;
}

Bytes min_peak_memory(const PartitionProblem& p) {
  const StagePrices prices(p);
  Bytes peak = 0;
  for (const StageRange& s : min_peak_memory_cut(p))
    peak = std::max(peak, prices.memory(s.first_layer, s.last_layer));
  return peak;
}

namespace {

// The last layer a stage starting at `first` can end at within `cap`, or
// first - 1 when not even the one layer fits: a stage's memory never shrinks
// as it ends later, so a binary search finds it.
int last_fitting(const PartitionProblem& p, const Prefix& pre, int first, Bytes cap) {
  int lo = first - 1;                          // fits (vacuously)
  int hi = static_cast<int>(p.layers.size());  // beyond the model
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    (memory_of(p, pre, first, mid) <= cap ? lo : hi) = mid;
  }
  return lo;
}

}  // namespace

bool fits_memory(const PartitionProblem& p, Bytes cap) {
  check_problem(p);
  const Prefix pre(p);
  const int L = static_cast<int>(p.layers.size());
  std::vector<int> reach_end(static_cast<std::size_t>(L));  // last_fitting of each start
  for (int i = 0; i < L; ++i) reach_end[static_cast<std::size_t>(i)] = last_fitting(p, pre, i, cap);
  // reached[j]: whether s stages can cover layers [0, j) within cap. A start
  // i reached by s - 1 stages reaches every boundary i + 1 .. last_fitting + 1.
  std::vector<char> reached(static_cast<std::size_t>(L) + 1, 0);
  reached[0] = 1;
  std::vector<int> opened(static_cast<std::size_t>(L) + 2);
  for (int s = 1; s <= p.stages; ++s) {
    throw_if_cancelled();
    std::fill(opened.begin(), opened.end(), 0);
    for (int i = 0; i < L; ++i) {
      const int end = reach_end[static_cast<std::size_t>(i)];
      if (!reached[static_cast<std::size_t>(i)] || end < i) continue;
      ++opened[static_cast<std::size_t>(i) + 1];
      --opened[static_cast<std::size_t>(end) + 2];
    }
    bool any = false;
    for (int j = 0, open = 0; j <= L; ++j) {
      open += opened[static_cast<std::size_t>(j)];
      reached[static_cast<std::size_t>(j)] = open > 0 ? 1 : 0;
      any = any || open > 0;
    }
    if (!any) return false;
  }
  return reached[static_cast<std::size_t>(L)] != 0;
}

namespace {

// All that memory_of reads of a problem: the least-memory cut is a function of
// it, and many problems share it (schedules that hold as many micro-batches,
// whatever their times), so the cuts are remembered by it.
std::vector<std::int64_t> memory_signature(const PartitionProblem& p, StashCount held) {
  std::vector<std::int64_t> sig{p.stages,
                                held.stashes,
                                held.inputs,
                                held.rebuilt,
                                static_cast<std::int64_t>(p.checkpoint),
                                std::bit_cast<std::int64_t>(p.bytes_per_param),
                                std::bit_cast<std::int64_t>(p.gathered_bytes_per_param)};
  sig.reserve(sig.size() + 3 * p.layers.size() + 1);
  for (const LayerCost& l : p.layers) {
    sig.push_back(l.params);
    sig.push_back(l.stash_bytes);
  }
  sig.insert(sig.end(), p.cut_bytes.begin(), p.cut_bytes.end());
  return sig;
}

std::vector<StageRange> compute_min_peak_memory_cut(const PartitionProblem& p, const Prefix& pre) {
  const auto memory = [&](int i, int j) { return memory_of(p, pre, i, j); };
  const auto floor = [&](int i, int j) { return memory_floor(p, pre, i, j); };
  const auto least = dp_partition<Bytes>(static_cast<int>(p.layers.size()), p.stages, memory, floor,
                                         kNever, kAlways, kMax);
  PS_CHECK(least.has_value(), "an unconstrained partition always exists");
  return least->second;
}

// Beyond this many problems the memo starts again (one plan meets a few
// thousand at most).
constexpr std::size_t kMaxRemembered = std::size_t{1} << 12;

}  // namespace

std::vector<StageRange> min_peak_memory_cut(const PartitionProblem& p) {
  check_problem(p);
  const Prefix pre(p);
  static SharedMemo<std::vector<std::int64_t>, std::vector<StageRange>, WordsHash> memo(
      kMaxRemembered);
  return memo.get(memory_signature(p, pre.held),
                  [&] { return compute_min_peak_memory_cut(p, pre); });
}

std::vector<StageRange> partition_params(const PartitionProblem& p) {
  check_problem(p);
  const Prefix pre(p);
  const auto params = [&](int i, int j) { return pre.params_of(i, j); };
  return dp_partition<std::int64_t>(static_cast<int>(p.layers.size()), p.stages, params, params,
                                    kNever, kAlways, kMax)
      ->second;
}

std::vector<StageRange> partition_min_variance(const PartitionProblem& p) {
  check_problem(p);
  const Prefix pre(p);
  // The mean stage cost is fixed (total / K), so the variance is least where the
  // sum of squared stage costs is. Forward + backward, as the GPipe paper
  // estimates a cell's cost; in double, since squared nanoseconds overflow.
  const auto square = [&](int i, int j) {
    const auto fb = static_cast<double>(pre.fwd_bwd_of(i, j));
    return fb * fb;
  };
  const auto plus = [](double a, double b) { return a + b; };
  return dp_partition<double>(static_cast<int>(p.layers.size()), p.stages, square, square, kNever,
                              kAlways, plus)
      ->second;
}

}  // namespace pipescope
