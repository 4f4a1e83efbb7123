#include "sim/plan/step_floor.h"

#include <algorithm>
#include <optional>

#include "sim/engine/device_partition.h"

namespace pipescope {

namespace {

// Compute time `t` as the simulation may scale it at the least
// (PartitionProblem::compute_scale).
SimTime scaled(const PartitionProblem& p, SimTime t) {
  if (p.compute_scale >= 1.0) return t;
  return static_cast<SimTime>(static_cast<double>(t) * p.compute_scale);
}

// The rounding slack of step_floor: a nanosecond a layer and micro-batch.
SimTime rounding_slack(const PartitionProblem& p) {
  return static_cast<SimTime>(p.layers.size()) * (p.micro_batches + 1);
}

// ZeRO-3's gathers of layers [first, last] for one micro-batch: before the
// forward and before the backward (a recompute gathers again, not counted).
SimTime gathered(const PartitionProblem& p, int first, int last) {
  if (p.gathers.empty()) return 0;
  SimTime sum = 0;
  for (int l = first; l <= last; ++l) sum += p.gathers[static_cast<std::size_t>(l)];
  return 2 * sum;
}

// The all-to-alls of layers [first, last] for one micro-batch: its forward's
// and its backward's (a recompute's again, not counted).
SimTime exchanged(const PartitionProblem& p, int first, int last) {
  if (p.exchanges.empty()) return 0;
  SimTime sum = 0;
  for (int l = first; l <= last; ++l) sum += p.exchanges[static_cast<std::size_t>(l)];
  return 2 * sum;
}

// The least step of any cut and schedule by the chain of one micro-batch:
// its forward through every layer and then its backward back through them,
// each waiting for the one before and for its all-to-alls (under a split
// backward the forwards alone: B's share of a layer's backward is not known
// here, and W need not follow); the micro-batch whose forward comes last on
// the first layer's device starts it after M - 1 others, each at least that
// layer's forward. The transfers between stages, which lengthen the chain,
// are left out.
SimTime chain_floor(const PartitionProblem& p) {
  if (p.layers.empty()) return 0;
  SimTime chain = 0;
  for (std::size_t i = 0; i < p.layers.size(); ++i) {
    const LayerCost& l = p.layers[i];
    const SimTime exchange = p.exchanges.empty() ? 0 : p.exchanges[i];
    chain += l.least_forward + exchange + (p.backward_split ? 0 : l.backward + exchange);
  }
  chain += (p.micro_batches - 1) * p.layers.front().least_forward;
  return scaled(p, chain);
}

}  // namespace

SimTime step_floor(const PartitionProblem& p, const std::vector<StageRange>& cut, int devices) {
  const StagePrices prices(p);
  const auto n = static_cast<std::size_t>(devices);
  std::vector<SimTime> busy(n, 0);
  std::vector<SimTime> gathering(n, 0);   // on the link to the replicas, before ops
  std::vector<SimTime> scattering(n, 0);  // on that link too, after backwards
  std::vector<SimTime> lead(n, 0);        // the first op's gathers, which may overlap the fill
  std::vector<std::optional<SimTime>> fill(n);  // before the device's first stage
  std::vector<SimTime> drain(n, 0);
  SimTime forwards = 0;  // of the stages so far, one micro-batch each
  SimTime backwards = 0;
  for (std::size_t s = 0; s < cut.size(); ++s) {
    const std::size_t d = device_of_stage(p, s, devices);
    const int first = cut[s].first_layer, last = cut[s].last_layer;
    busy[d] += scaled(p, prices.compute(first, last)) + exchanged(p, first, last);
    gathering[d] += gathered(p, first, last);
    scattering[d] += p.stage_reduce_scatter(first, last);
    if (!fill[d]) {
      fill[d] = scaled(p, forwards);
      drain[d] = p.backward_split ? 0 : scaled(p, backwards);
      lead[d] = gathered(p, first, last) / 2;  // its forward's
    }
    for (int l = first; l <= last; ++l) {
      forwards += p.layers[static_cast<std::size_t>(l)].forward;
      backwards += p.layers[static_cast<std::size_t>(l)].backward;
    }
  }
  const SimTime M = p.micro_batches;
  SimTime floor = 0;
  for (std::size_t d = 0; d < n; ++d) {
    // The device's first op gathers as soon as the step starts: it waits
    // for nothing, and may do so during the fill. Every other gather
    // precedes an op, so the last backward and the drain follow them all.
    const SimTime gathers = gathering[d] * M - lead[d];
    const SimTime start = fill[d].value_or(0);
    floor = std::max(floor, start + std::max(busy[d] * M, gathers) + drain[d]);
    // A reduce-scatter follows its backward: the last one runs beside the
    // drain, and the link's whole load ends the step at the earliest.
    floor = std::max(floor, start + gathers + scattering[d] * M);
  }
  floor = std::max(floor, chain_floor(p));
  return std::max<SimTime>(0, floor - rounding_slack(p));
}

namespace {

// Whether device d runs stage d alone, for every d (GPipe, 1F1B, ZB-H1).
bool one_stage_a_device_in_order(const PartitionProblem& p, int devices) {
  if (p.stages != devices) return false;
  for (std::size_t s = 0; s < static_cast<std::size_t>(p.stages); ++s) {
    if (device_of_stage(p, s, devices) != s) return false;
  }
  return true;
}

// The least over every cut of step_floor's most over devices (before its
// rounding slack) where device d runs stage d alone. Stage s from layer f to
// l weighs term(f, l) = before(f) + M x compute(f, l) (its all-to-alls
// included), before(f) the fill and
// drain of the layers before f. term grows with l and never grows with f
// (before(f + 1) - before(f) is at most layer f's compute), so whether every
// stage can stay within t is decided by giving each stage in turn as many
// layers as stay within t, keeping a layer for each stage after it; the least
// such t is found by bisection.
SimTime least_pipeline_floor(const PartitionProblem& p) {
  const StagePrices prices(p);
  const int L = static_cast<int>(p.layers.size());
  std::vector<SimTime> before(static_cast<std::size_t>(L) + 1, 0);
  std::vector<SimTime> exchanges(static_cast<std::size_t>(L) + 1, 0);  // prefix sums
  for (std::size_t l = 0; l < p.layers.size(); ++l) {
    before[l + 1] = before[l] + p.layers[l].forward + (p.backward_split ? 0 : p.layers[l].backward);
    exchanges[l + 1] = exchanges[l] + (p.exchanges.empty() ? 0 : 2 * p.exchanges[l]);
  }
  const auto term = [&](int first, int last) {
    const auto f = static_cast<std::size_t>(first), l = static_cast<std::size_t>(last);
    return before[f] +
           (prices.compute(first, last) + exchanges[l + 1] - exchanges[f]) * p.micro_batches;
  };
  const auto within = [&](SimTime t) {
    int first = 0;
    for (int s = 0; s + 1 < p.stages; ++s) {
      const int highest = L - (p.stages - s);  // a layer left for each stage after s
      if (term(first, first) > t) return false;
      int last = first;
      while (last < highest && term(first, last + 1) <= t) ++last;
      first = last + 1;
    }
    return term(first, L - 1) <= t;
  };
  // Every cut is within M x all the compute: a stage's fill and drain are at
  // most the compute before it.
  SimTime lo = 0;
  SimTime hi = term(0, L - 1);
  if (within(lo)) return lo;
  // lo is never within, hi always; 2^-24 of the step is precision enough.
  while (hi - lo > std::max<SimTime>(1, hi >> 24)) {
    const SimTime mid = lo + (hi - lo) / 2;
    (within(mid) ? hi : lo) = mid;
  }
  return lo;
}

}  // namespace

SimTime step_floor_any_cut(const PartitionProblem& p, int devices) {
  const StagePrices prices(p);
  const int L = static_cast<int>(p.layers.size());
  // The link to the replicas: every gather but the devices' first ops'
  // (each layer's forward gather at most once over the devices, step_floor),
  // and the reduce-scatters, whose time grows slower than their bytes (a
  // latency and a time a byte, the least of NCCL's protocols), so that the
  // stages' together take at least one of all the bytes.
  const SimTime M = p.micro_batches;
  const SimTime gathers = gathered(p, 0, L - 1);
  const SimTime linked = gathers * M - gathers / 2 + p.stage_reduce_scatter(0, L - 1) * M;
  SimTime floor =
      std::max((scaled(p, prices.compute(0, L - 1)) + exchanged(p, 0, L - 1)) / devices * M,
               linked / devices);
  floor = std::max(floor, chain_floor(p));
  // The least over the cuts of unscaled terms, scaled: never above the least
  // of scaled ones (the all-to-alls, unscaled there, count in full).
  if (one_stage_a_device_in_order(p, devices)) {
    floor = std::max(floor, scaled(p, least_pipeline_floor(p)));
  }
  return std::max<SimTime>(0, floor - rounding_slack(p));
}

}  // namespace pipescope
