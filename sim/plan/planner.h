#pragma once
// The planner (docs/commands.md, "`pipescope plan`"): given N devices, tries every K that divides
// N (the other N / K are data-parallel replicas of the pipeline), every M that
// divides the per-replica batch, every remat mode and every schedule (interleaved
// with v = 2 and 4 chunks per device where the shape suits it); cuts each
// optimally within memory, simulates it, and ranks what fits by throughput.
// Choosing M is the point: more micro-batches shrink the bubble, smaller ones run
// less efficiently per sample.
//
// With D > 1 replicas each stage all-reduces its gradients over a ring of the
// replicas (DataParallel, from the cluster's route between replicas) before its
// optimizer step, overlapping the backward of earlier stages; each tries
// ZeRO-1, ZeRO-2 where that does not fit or fits only on a cut memory
// shaped, and ZeRO-3 where neither fits so; under T > 1 the sequence is
// split too (sim/plan/plan_candidates.h lists what is tried and why).
//
// Tensor parallelism: each T of tensor_parallel_choices (sim/engine/tensor_parallel.h;
// the scenario's own when it gives one) splits the layers over T devices, and K
// x D then covers the N / T groups; the search is the union over T, exact for
// each as above. Expert parallelism: for a mixture of experts, each E of
// expert_parallel_choices (sim/scenario/expert_groups.h; the scenario's own
// when it gives one) spreads the experts over E of the D replicas (of the
// D x C devices under context parallelism), D x C a multiple of E; the
// union over (T, E, C).

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "costmodels/cost_model.h"
#include "sim/engine/simulator.h"
#include "sim/scenario/scenario.h"

namespace pipescope {

struct Plan;  // sim/plan/plan.h

struct PlanRequest {
  std::optional<int> devices;            // N devices; default: all of the cluster's
  std::optional<int> tensor_parallel;    // fix T; default: the scenario's T if it gives one, else
                                         // each of tensor_parallel_choices
  std::optional<int> expert_parallel;    // fix E; default: the scenario's E if it gives one, else
                                         // each of expert_parallel_choices
  std::optional<int> context_parallel;   // fix C; default: the scenario's C if it gives one, else
                                         // each of context_parallel_choices
  std::optional<int> stages;             // fix K
  std::optional<int> micro_batches;      // fix M
  std::optional<Remat> remat;            // fix remat; default: try each mode
  std::optional<ScheduleKind> schedule;  // fix the schedule; default: try each
  std::optional<int> chunks;             // fix v (the chunked schedules); default: 2 and 4
  // Plan a custom schedule: its K, M and chunks are fixed; D and remat are searched.
  std::shared_ptr<const CustomSchedule> custom;
  int max_micro_batches = 512;  // bound on M
  // The device partitioner's exhaustive search in the first pass over the
  // candidates of several chunks, in partial cuts (the best are cut again
  // with the full search; planner.cpp, kRefined).
  long screening_nodes = 1000;
  // The best plans found for certain: a candidate is not simulated when a
  // floor under its step (sim/plan/step_floor.h) shows it
  // cannot beat the exact_top-th best simulated so far.
  std::size_t exact_top = 16;
  unsigned threads = 0;  // 0: one per core
  std::function<void(std::size_t done, std::size_t total)> progress;
};

struct PlanCandidate {
  int tensor_parallel = 1;  // T
  // The scenario it was planned on, its layers split by T and its devices
  // grouped by T; shared by the candidates of one T.
  std::shared_ptr<const Scenario> scenario;
  int stages = 1;         // K
  int data_parallel = 1;  // D
  int micro_batches = 1;  // M
  ScheduleKind schedule = ScheduleKind::kGpipe;
  int chunks = 1;  // v
  int zero = 0;    // ZeRO stage over the D replicas, as `scenario` has it
  Remat remat = Remat::kAlways;
  std::shared_ptr<const CustomSchedule> custom;  // schedule custom only
  bool fits = false;
  // Its cut is as good, by the partitioner's objective, as with no memory
  // limit: memory did not shape it (what lets it stand for others of its
  // shape, PlanReport::dominated).
  bool cut_unbound = false;
  bool dominated = false;  // fits, not simulated (PlanReport::dominated)
  bool bounded = false;    // not simulated: cannot reach the best (PlanReport::bounded)
  // When bounded: the most samples a second it can reach, and whether on
  // every cut (its floor under any cut) or on the cut found for it.
  double ceiling = 0.0;
  bool ceiling_any_cut = false;
  std::string rejected;     // why it does not fit, one sentence; empty when it fits
  Bytes memory_needed = 0;  // when rejected: the least memory per device that would fit
  // memory_needed is a floor: every cut needs at least that much (the
  // partitioner proved that none fits without searching for the cut that
  // needs least, or a rule did: memory_by_rule).
  bool memory_needed_at_least = false;
  // Refused by a rule before its own problem was built (its weights alone,
  // or its ZeRO-2 sibling's proof): memory_needed is that rule's floor, which
  // may lie below what its own proof would give.
  bool memory_by_rule = false;
  double samples_per_s = 0.0;  // all D replicas together
  SimResult result;            // the replica's simulation (no timeline); empty when rejected

  // "K=4 D=2 M=8 remat on gpipe", "... interleaved-1f1b v=2", "T=2 K=4 ..." under T > 1,
  // "K=4 D=16 E=8 ..." under expert parallelism
  std::string label() const;
  // E, the replicas the experts spread over: the scenario's (1 without one)
  int expert_parallel() const;
  int context_parallel() const;  // C: the scenario's
};

struct PlanReport {
  int devices = 1;                       // N, all devices
  std::vector<int> tensor_parallel{1};   // the T searched
  std::vector<int> expert_parallel{1};   // the E searched
  std::vector<int> context_parallel{1};  // the C searched
  std::vector<PlanCandidate> ranked;     // fitting candidates, best first
  std::vector<PlanCandidate> rejected;   // in search order
  // Candidates that fit but were not simulated: the same shape fits with
  // remat off, which recomputes nothing, or at a lower ZeRO stage, on a cut
  // that memory did not shape (PlanCandidate::cut_unbound), so they cannot be
  // faster; or, at ZeRO-3, a lower stage fits so, which the planner prefers
  // (sim/plan/plan_candidates.cpp, zero_choices). Their `rejected` says which.
  std::vector<PlanCandidate> dominated;
  // Candidates not simulated because a floor under their step shows they
  // cannot beat the PlanRequest::exact_top-th best plan (their `rejected`
  // says by how much); the partitioner's memory model finds a cut for them,
  // or did not look (their whole shape was that slow, or a lower ZeRO stage
  // at their shape and remat was, on any cut).
  std::vector<PlanCandidate> bounded;
};

// The per-replica scenario: K devices of the cluster and the global batch / D.
Scenario replica_scenario(const Scenario& scenario, int stages, int data_parallel);

// The partition problem of candidate `c` on its `replica` (replica_scenario)
// priced by `cost`, with what the step floors count beyond it over the ring
// of its replicas `ring`: ZeRO-3's gathers, ZeRO-2/3's reduce-scatters and
// the mixtures' all-to-alls (sim/plan/step_floor.h).
PartitionProblem candidate_problem(const Scenario& replica, const CostModel& cost,
                                   const PlanCandidate& c, const DataParallel& ring);

// A plan's pipeline as it was planned on `scenario` (the whole cluster): one of
// its D replicas on the replica's share of the batch, with the plan's K, M,
// schedule, chunks, remat and cuts, all-reducing over the ring of the replicas.
struct PlanSimulation {
  Scenario scenario;
  SimConfig config;
};
PlanSimulation plan_simulation(const Scenario& scenario, const Plan& plan);

// Among rejected candidates, the one that needs the least memory (for "no plan
// fits: the closest needs ..."), those refused by a rule (memory_by_rule)
// only where no other was; null when there are none.
const PlanCandidate* closest_rejected(const PlanReport& report);

// Every candidate is simulated on the device partitioner's cut; candidates of
// several chunks are first cut with a short exhaustive search and simulated
// on that cut alone, and the 16 best of them again with the full search and
// every cut fastest_chunked_cut compares (planner.cpp, kRefined).
// Throws ConfigError when the request cannot be met at all (N not divisible as
// asked, K larger than the number of layers, a batch that no D divides).
PlanReport run_planner(const Scenario& scenario, const PlanRequest& request);

}  // namespace pipescope
