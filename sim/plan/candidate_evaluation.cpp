#include "sim/plan/candidate_evaluation.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "sim/base/format.h"
#include "sim/engine/device_partition.h"
#include "sim/engine/expert_parallel.h"
#include "sim/engine/zero.h"
#include "sim/plan/step_floor.h"

namespace pipescope {

std::vector<SimTime> floor_exchanges(const Scenario& replica, const DataParallel& ring,
                                     int micro_batches) {
  if (replica.training.framework.pair_alltoall_overlap) return {};
  return layer_alltoalls(replica.model, ring, replica.training.global_batch / micro_batches);
}

PartitionProblem candidate_problem(const Scenario& replica, const CostModel& cost,
                                   const PlanCandidate& c, const DataParallel& ring) {
  PartitionProblem p = partition_problem(replica, cost, c.stages * c.chunks, c.micro_batches,
                                         c.remat, c.schedule, c.chunks, c.custom.get());
  p.gathers = zero_gathers(replica, ring);
  p.exchanges = floor_exchanges(replica, ring, c.micro_batches);
  add_zero_reduce_scatters(p, replica, ring);
  return p;
}

namespace {

// The candidate's replica on the cut `cut` of the device partitioner, or with
// several chunks the fastest of the cuts `pass` asks for.
SimResult simulate_candidate(const Scenario& replica, SimConfig config, const CostModel& cost,
                             const PartitionProblem& problem, const std::vector<StageRange>& cut,
                             Pass pass) {
  config.stage_ranges = cut;
  if (config.chunks == 1) return simulate(replica, config, cost);
  if (!pass.every_cut) {
    SimResult r = simulate(replica, config, cost);
    if (r.metrics.fits()) return r;
  }
  return *fastest_chunked_cut(replica, config, cost, problem, cut);
}

// Whether the partitioner's cut `cut` of `problem` on `devices` is, provably,
// as good by its objective (the busiest stage or device) as any cut with no
// memory limit: the count shows no cut is faster, or the search without the
// limit, carried to its end, finds none.
bool memory_did_not_bind(PartitionProblem problem, int devices, const PartitionResult& cut,
                         Pass pass) {
  if (no_cut_is_faster(problem, devices, cut.bottleneck)) return true;
  problem.memory_capacity.reset();
  const PartitionResult free =
      partition_devices(problem, devices, std::nullopt, pass.exhaustive_nodes);
  return free.exact && free.bottleneck >= cut.bottleneck;
}

// The ring of candidate c's D replicas (and its E's group).
DataParallel ring_of(const PlanCandidate& c) {
  return data_parallel_ring(c.scenario->cluster, c.stages, c.data_parallel, c.expert_parallel());
}

}  // namespace

SearchCache::Group& SearchCache::group(const PlanCandidate& c) {
  return groups_[{c.scenario.get(), c.stages, c.data_parallel}];
}

const DataParallel& SearchCache::ring(const PlanCandidate& c) {
  const std::lock_guard lock(mu_);
  Group& g = group(c);
  if (!g.ring) g.ring = std::make_unique<DataParallel>(ring_of(c));
  return *g.ring;
}

const Scenario& SearchCache::replica(const PlanCandidate& c) {
  const std::lock_guard lock(mu_);
  Group& g = group(c);
  if (!g.replica) {
    g.replica =
        std::make_unique<Scenario>(replica_scenario(*c.scenario, c.stages, c.data_parallel));
  }
  return *g.replica;
}

const CostModel& SearchCache::cost(const PlanCandidate& c) {
  const std::lock_guard lock(mu_);
  std::unique_ptr<CostModel>& cost = costs_[c.scenario.get()];
  if (!cost) cost = make_cost_model(*c.scenario);
  return *cost;
}

double ceiling_of(const Scenario& sc, SimTime floor) {
  return floor <= 0 ? std::numeric_limits<double>::infinity()
                    : static_cast<double>(sc.training.global_batch) / simtime_to_seconds(floor);
}

void reject_every_cut(PlanCandidate& c, Bytes needed, Bytes capacity, std::string_view why) {
  c.memory_needed = needed;
  c.memory_needed_at_least = true;
  c.memory_by_rule = !why.empty();
  c.rejected = c.label() + ": every cut needs at least " +
               format_bytes(static_cast<double>(needed)) + " of " +
               format_bytes(static_cast<double>(capacity)) + " on some device" + std::string(why);
}

void bound_out(PlanCandidate& c, double ceiling, double threshold, bool any_cut,
               std::string_view whose) {
  c.bounded = true;
  c.ceiling = ceiling;
  c.ceiling_any_cut = any_cut;
  char text[160];
  std::snprintf(text, sizeof text,
                ": cannot reach %.4g samples/s, the best plans' least (at most %.4g by the "
                "floor under its step%.*s; not simulated)",
                threshold, ceiling, static_cast<int>(whose.size()), whose.data());
  c.rejected = c.label() + text;
}

void evaluate(PlanCandidate& c, Pass pass, SearchCache& cache, std::optional<double> threshold) {
  const Scenario& sc = *c.scenario;
  const Scenario& replica = cache.replica(c);
  const CostModel& cost = cache.cost(c);
  const DataParallel& ring = cache.ring(c);
  const PartitionProblem problem = candidate_problem(replica, cost, c, ring);
  // The floor under every cut first: where it cannot reach the threshold,
  // neither can the cut the partitioner would search for.
  if (threshold) {
    const double ceiling = ceiling_of(sc, step_floor_any_cut(problem, c.stages));
    if (ceiling < *threshold) return bound_out(c, ceiling, *threshold, true);
  }
  PartitionResult cut = partition_devices(problem, c.stages, replica.cluster.device.memory_bytes,
                                          pass.exhaustive_nodes);
  const std::string capacity =
      " of " + format_bytes(static_cast<double>(replica.cluster.device.memory_bytes));
  const auto reject = [&](const char* what, int index, Bytes needed) {
    c.memory_needed = needed;
    // The stage-optimal partitioner's least-memory cut is exact; the device
    // partitioner's, the least stage by stage, is the best it found.
    const char* which =
        c.chunks > 1 ? " in the best cut found" : " even in the cut that needs least";
    c.rejected = c.label() + ": " + what + std::to_string(index) + " needs " +
                 format_bytes(static_cast<double>(needed)) + capacity +
                 (cut.stages.empty() ? which : "");
  };
  if (cut.stages.empty() && !cut.fullest_stage) {  // proven without a cut
    return reject_every_cut(c, *cut.memory_needed, replica.cluster.device.memory_bytes);
  }
  if (cut.stages.empty()) {
    reject(c.chunks > 1 ? "device " : "stage ", *cut.fullest_stage, *cut.memory_needed);
    return;
  }
  if (threshold) {
    const double ceiling = ceiling_of(sc, step_floor(problem, cut.stages, c.stages));
    if (ceiling < *threshold) return bound_out(c, ceiling, *threshold, false);
  }
  SimConfig config;
  config.stages = c.stages;
  config.micro_batches = c.micro_batches;
  config.schedule = c.schedule;
  config.chunks = c.chunks;
  config.remat = c.remat;
  config.custom = c.custom;
  config.data_parallel = ring;
  config.record_timeline = false;
  c.result = simulate_candidate(replica, config, cost, problem, cut.stages, pass);
  c.fits = c.result.metrics.fits();
  if (c.fits) c.cut_unbound = memory_did_not_bind(problem, c.stages, cut, pass);
  c.samples_per_s = c.result.metrics.samples_per_s * c.data_parallel;
  if (!c.fits) {
    // The partitioner's memory model and the simulated curve disagree: report the
    // simulated peak, which is the one that counts.
    const auto& devices = c.result.metrics.devices;
    const auto fullest = std::max_element(
        devices.begin(), devices.end(),
        [](const auto& a, const auto& b) { return a.peak_memory < b.peak_memory; });
    // Device d holds stage d, or with chunks the stages d, d + K, ...
    reject(c.chunks > 1 ? "device " : "stage ", static_cast<int>(fullest - devices.begin()),
           fullest->peak_memory);
  }
}

bool decided(const PlanCandidate& c) {
  return c.fits || c.dominated || c.bounded || !c.rejected.empty();
}

namespace {

// Whether candidate o is proven, before any cut is searched, not to fit in
// memory (no_cut_fits, on its stages' memory alone); where it is, it is
// rejected with the figure and sentence evaluate's partitioner would give
// (evaluate might have left it out by its floor first).
bool proven_unfit(PlanCandidate& o, SearchCache& cache) {
  if (decided(o)) return !o.fits && o.memory_needed_at_least;
  const Scenario& replica = cache.replica(o);
  const Bytes capacity = replica.cluster.device.memory_bytes;
  // The proof reads the stages' memory alone: no layer's time is worked out.
  const PartitionProblem memory = memory_problem(replica, o.stages * o.chunks, o.micro_batches,
                                                 o.remat, o.schedule, o.chunks, o.custom.get());
  const std::optional<PartitionResult> none = no_cut_fits(memory, o.stages, capacity);
  if (!none) return false;
  reject_every_cut(o, *none->memory_needed, capacity);
  return true;
}

}  // namespace

bool unfit_as_sharded(PlanCandidate& c, PlanCandidate& sharded, SearchCache& cache) {
  if (c.zero != 1 || sharded.zero != 2 || sharded.remat != c.remat) return false;
  if (!proven_unfit(sharded, cache)) return false;
  const Scenario& sc = *c.scenario;
  // A parameter's bytes and one more a layer: more than the rounding of the
  // experts' weighing (half a parameter a layer) and of the stages' bytes
  // (half a byte a stage, at most a stage a layer).
  const Bytes slack = static_cast<Bytes>(sc.model.layers.size()) *
                      (static_cast<Bytes>(std::ceil(sc.training.bytes_per_param)) + 1);
  const Bytes needed = sharded.memory_needed - slack;
  if (needed <= sc.cluster.device.memory_bytes) return false;
  reject_every_cut(c, needed, sc.cluster.device.memory_bytes,
                   " (as at ZeRO-2 at its shape, which keeps less)");
  return true;
}

}  // namespace pipescope
