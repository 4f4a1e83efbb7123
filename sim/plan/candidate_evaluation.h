#pragma once
// How the planner judges one candidate (sim/plan/planner.h): on its replica,
// the floors under its step, the partitioner's proof or cut within memory,
// and the simulation; and the rules that decide a candidate from another's
// verdict without building its problem.

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <tuple>
#include <vector>

#include "costmodels/cost_model.h"
#include "costmodels/units.h"
#include "sim/engine/simulator.h"
#include "sim/plan/planner.h"
#include "sim/scenario/scenario.h"

namespace pipescope {

// A candidate of several chunks is evaluated in two passes (planner.cpp):
// the first, over every candidate, screens; the second, over the best, runs
// as `simulate` does.
struct Pass {
  long exhaustive_nodes;  // partition_devices' max_exhaustive_nodes
  bool every_cut;         // simulate every cut fastest_chunked_cut compares
};

// What the candidates of a search share, each made once and safe to reach
// from the search's threads: the rings and replicas (the candidates of one
// split, its scenario: the cluster, T, C and E, with the same K and D share
// them, whatever their M, schedule, remat or ZeRO stage), and the cost models
// (one a scenario: a cost model reads the device, the model and the
// framework, which replica_scenario leaves as they are; its memo of the
// layers' times then serves every K, D and M).
class SearchCache {
 public:
  const DataParallel& ring(const PlanCandidate& c);  // data_parallel_ring of c's D (and E)
  const Scenario& replica(const PlanCandidate& c);   // replica_scenario of c's K and D
  const CostModel& cost(const PlanCandidate& c);     // make_cost_model of c's scenario

 private:
  struct Group {  // what one scenario, K and D make
    std::unique_ptr<DataParallel> ring;
    std::unique_ptr<Scenario> replica;
  };
  Group& group(const PlanCandidate& c);  // under mu_
  std::mutex mu_;
  std::map<std::tuple<const Scenario*, int, int>, Group> groups_;
  std::map<const Scenario*, std::unique_ptr<CostModel>> costs_;
};

// The mixtures' all-to-alls over `ring` that the ops of a candidate with
// `micro_batches` on `replica` wait for (PartitionProblem::exchanges).
std::vector<SimTime> floor_exchanges(const Scenario& replica, const DataParallel& ring,
                                     int micro_batches);

// The most samples a second the whole batch can reach in a step of `floor`.
double ceiling_of(const Scenario& sc, SimTime floor);

// Marks `c` as not fitting: every cut needs at least `needed` bytes on some
// device of `capacity`; `why` says how that is known where a rule and not
// the partitioner's proof on c's own problem shows it (memory_by_rule).
void reject_every_cut(PlanCandidate& c, Bytes needed, Bytes capacity, std::string_view why = {});

// Marks `c` as not simulated: at most `ceiling` samples/s (on any cut where
// `any_cut`), less than `threshold`, the exact_top-th best simulated;
// `whose`, where another candidate's floor shows it (" at ZeRO-1 ...").
void bound_out(PlanCandidate& c, double ceiling, double threshold, bool any_cut,
               std::string_view whose = {});

// Evaluates c. `threshold`: where set, a candidate whose step_floor gives
// less throughput is not simulated (bound_out).
void evaluate(PlanCandidate& c, Pass pass, SearchCache& cache,
              std::optional<double> threshold = std::nullopt);

// Whether c has been evaluated, or found dominated or bounded.
bool decided(const PlanCandidate& c);

// c at ZeRO-1 does not fit where its shape's candidate at its remat and
// ZeRO-2 (`sharded`) is proven not to: ZeRO-2 keeps every stage's
// activations as 1 does and less per parameter (the gradients sharded too),
// so what it needs on some device of every cut, 1 needs too, less the
// rounding (half a parameter's bytes a layer in the experts' weighing, half
// a byte a stage). Proves `sharded` unfit first where it is undecided;
// where it is proven not to fit, rejects c and returns true.
bool unfit_as_sharded(PlanCandidate& c, PlanCandidate& sharded, SearchCache& cache);

}  // namespace pipescope
