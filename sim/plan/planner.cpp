#include "sim/plan/planner.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <string_view>
#include <tuple>

#include "sim/base/parallel.h"
#include "sim/engine/device_partition.h"
#include "sim/engine/zero.h"
#include "sim/plan/candidate_evaluation.h"
#include "sim/plan/plan.h"
#include "sim/plan/plan_candidates.h"
#include "sim/plan/step_floor.h"

namespace pipescope {

int PlanCandidate::expert_parallel() const {
  return scenario ? scenario->training.expert_parallel : 1;
}

int PlanCandidate::context_parallel() const {
  return scenario ? scenario->training.context_parallel : 1;
}

std::string PlanCandidate::label() const {
  // Appended in place: the planner labels every candidate it leaves out.
  std::string out;
  out.reserve(96);
  const auto add = [&](std::string_view name, int value) {
    out += name;
    out += std::to_string(value);
    out += ' ';
  };
  if (tensor_parallel > 1) add("T=", tensor_parallel);
  add("K=", stages);
  add("D=", data_parallel);
  if (expert_parallel() > 1) add("E=", expert_parallel());
  if (context_parallel() > 1) add("C=", context_parallel());
  add("M=", micro_batches);
  out += "remat ";
  out += remat_label(remat);
  out += ' ';
  out += to_string(schedule);
  if (chunks > 1) {
    out += " v=";
    out += std::to_string(chunks);
  }
  if (zero > 0) {
    out += " ZeRO-";
    out += std::to_string(zero);
  }
  return out;
}

Scenario replica_scenario(const Scenario& scenario, int stages, int data_parallel) {
  Scenario r = scenario;
  r.cluster.devices = stages;
  r.training.global_batch = scenario.training.global_batch / data_parallel;
  // The shards spread over the devices that hold the same weights: the D
  // replicas' C shares of the sequence each.
  r.training.zero_replicas = data_parallel * scenario.training.context_parallel;
  r.cluster.replicas = data_parallel;
  if (r.cluster.rank_order == RankOrder::kTpDpPp) r.cluster.group_stride = data_parallel;
  // Replicas on a machine whose cores the devices share get their share of them.
  if (r.cluster.shared_cores > 0) {
    r.cluster.shared_cores = std::max(1, r.cluster.shared_cores / data_parallel);
  }
  return r;
}

PlanSimulation plan_simulation(const Scenario& scenario, const Plan& plan) {
  PlanSimulation out{replica_scenario(scenario, plan.stages, plan.data_parallel),
                     plan_sim_config(plan)};
  out.config.data_parallel = data_parallel_ring(scenario.cluster, plan.stages, plan.data_parallel,
                                                scenario.training.expert_parallel);
  return out;
}

namespace {

// The candidates whose devices cannot hold the model's weights, gradients
// and optimizer state, activations aside (least_weight_share), rejected
// before anything else is made for them: whatever their M, schedule and
// remat, none fits. The share is worked out once for each scenario (its T,
// C, E and ZeRO stage), K and D, on the replica the search then shares.
void reject_by_weights(std::vector<PlanCandidate>& all, SearchCache& cache) {
  std::map<std::tuple<const Scenario*, int, int>, Bytes> shares;
  for (PlanCandidate& c : all) {
    const auto [at, added] = shares.try_emplace({c.scenario.get(), c.stages, c.data_parallel}, 0);
    if (added) {
      at->second = least_weight_share(cache.replica(c), c.stages);
    }
    const Bytes capacity = c.scenario->cluster.device.memory_bytes;
    if (at->second > capacity) {
      reject_every_cut(c, at->second, capacity,
                       " for its weights, gradients and optimizer state alone");
    }
  }
}

// Where each shape's run of candidates starts in `all` (a shape's remat
// modes, each at its ZeRO stages, one after another), and all.size() last.
std::vector<std::size_t> shape_starts(const std::vector<PlanCandidate>& all) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const PlanCandidate& c = all[i];
    const auto same = [&](const PlanCandidate& o) {
      return o.tensor_parallel == c.tensor_parallel && o.expert_parallel() == c.expert_parallel() &&
             o.context_parallel() == c.context_parallel() && o.stages == c.stages &&
             o.data_parallel == c.data_parallel && o.micro_batches == c.micro_batches &&
             o.schedule == c.schedule && o.chunks == c.chunks && o.custom == c.custom;
    };
    if (i == 0 || !same(all[i - 1])) out.push_back(i);
  }
  out.push_back(all.size());
  return out;
}

// The planner evaluates the candidates in two rounds over the shapes: those
// without remat first, the likeliest to be fastest, so that the threshold
// rises before the others are looked at; then the rest. Each shape's
// candidates are decided in the same order in both (remat off before the
// others at each ZeRO stage), so what dominates what does not change.
enum class Round { kRematOff, kRest };

// The remat modes of one shape at each ZeRO stage it tries (zero_choices),
// the stages lowest first and within one remat off first. Where remat off
// fits at a stage, the other modes fit too (they keep less) but cannot be
// faster (on any one cut they take at least its time). Where a mode fits at
// ZeRO-1, it fits at ZeRO-2 too (which shards the gradients as well) but
// cannot be faster: it reduce-scatters after every backward what ZeRO-1
// reduce-scatters once, and gathers the same after the step
// (tests/sim/zero_planner_test.cpp). Neither is simulated, where the one
// that fits does so on a cut memory did not shape (cut_unbound): a cut
// squeezed into memory may be slower than the one the other, keeping less,
// can take. ZeRO-3 is planned where neither 1 nor 2 fits so: a choice, not
// an order the simulation proves. It gathers every layer in each forward
// and backward, half as much traffic again as 2 in as many collectives as
// layers, whose fixed costs the model leaves out, and hides them behind the
// layers' compute where it leaves 1's and 2's gather of the updated weights
// after the step exposed (Megatron-LM can overlap it with the next step);
// searched beside them it won by that alone (the demo's 4 GPUs: ZeRO-3 at
// K = 1, 2 % faster than ZeRO-1). Memory gives no
// order of the remat modes (remat on keeps every input and a rebuilt stash,
// which may exceed what except-last or, at M = 1, remat off keeps): they are
// still tried where nothing dominates them.
void evaluate_shape(std::vector<PlanCandidate>::iterator first,
                    std::vector<PlanCandidate>::iterator last, Pass pass,
                    std::optional<double> threshold, double shape_ceiling, Round round,
                    SearchCache& cache) {
  std::vector<PlanCandidate*> order;
  for (auto c = first; c != last; ++c) order.push_back(&*c);
  std::stable_sort(order.begin(), order.end(), [](const PlanCandidate* a, const PlanCandidate* b) {
    if (a->zero != b->zero) return a->zero < b->zero;
    return (a->remat == Remat::kNever) > (b->remat == Remat::kNever);
  });
  for (PlanCandidate* c : order) {
    if (decided(*c) || (round == Round::kRematOff && c->remat != Remat::kNever)) continue;
    // o fits with remat off at c's stage, or at a lower one with c's mode
    // (not where ZeRO-1 all-reduces whole: stages 0 to 2 are not ordered
    // then; 3 is still planned only where none of them fits).
    const bool ordered_stages = !zero1_all_reduces(*c->scenario) || c->zero == 3;
    const auto dominates = [&](const PlanCandidate* o) {
      if (o == c || !o->fits || !o->cut_unbound || o->zero > c->zero) return false;
      if (o->zero == c->zero) return o->remat == Remat::kNever;
      if (!ordered_stages) return false;
      return o->remat == c->remat || o->remat == Remat::kNever;
    };
    // o, at c's remat and a lower ZeRO stage, cannot reach the threshold on
    // any cut: nor can c, whose higher stage only adds to that floor (its
    // reduce-scatters after each backward, its gathers) and leaves the
    // layers' times as they are.
    const auto bounds = [&](const PlanCandidate* o) {
      return o->bounded && o->ceiling_any_cut && o->remat == c->remat && o->zero < c->zero;
    };
    const auto by = std::find_if(order.begin(), order.end(), dominates);
    const auto under = std::find_if(order.begin(), order.end(), bounds);
    const auto sharded = std::find_if(order.begin(), order.end(), [&](const PlanCandidate* o) {
      return o->remat == c->remat && o->zero == 2;
    });
    if (by != order.end()) {
      c->dominated = true;
      c->rejected =
          c->label() +
          ((*by)->zero == c->zero
               ? ": fits, but recomputes what remat off, which fits at the same shape, keeps"
               : ": fits, but " + (*by)->label() + " fits too and shards less") +
          " (not simulated)";
    } else if (threshold && under != order.end()) {
      bound_out(*c, (*under)->ceiling, *threshold, true,
                " at ZeRO-" + std::to_string((*under)->zero) + " at its shape and remat");
    } else if (threshold && shape_ceiling < *threshold) {
      bound_out(*c, shape_ceiling, *threshold, true);
    } else if (sharded != order.end() && unfit_as_sharded(*c, **sharded, cache)) {
      continue;
    } else {
      evaluate(*c, pass, cache, threshold);
    }
  }
}

}  // namespace

const PlanCandidate* closest_rejected(const PlanReport& report) {
  // Those refused by a rule last: their figure is the rule's floor, below
  // what their own proof would say (a ZeRO-1 refused by its ZeRO-2
  // sibling's proof: the sibling, which needs less, is closer).
  const auto before = [](const PlanCandidate& a, const PlanCandidate& b) {
    return std::make_pair(a.memory_by_rule, a.memory_needed) <
           std::make_pair(b.memory_by_rule, b.memory_needed);
  };
  const PlanCandidate* best = nullptr;
  for (const PlanCandidate& c : report.rejected) {
    if (best == nullptr || before(c, *best)) best = &c;
  }
  return best;
}

namespace {

// Where r is in kAllRemats, which lists the modes from none to most
// recomputation.
std::ptrdiff_t remat_rank(Remat r) {
  return std::find(std::begin(kAllRemats), std::end(kAllRemats), r) - std::begin(kAllRemats);
}

// Best throughput first; among equals, smaller T, smaller E, fewer stages, fewer
// micro-batches, less recomputation, the lower ZeRO stage.
void rank(std::vector<PlanCandidate>& ranked) {
  std::stable_sort(ranked.begin(), ranked.end(),
                   [&](const PlanCandidate& a, const PlanCandidate& b) {
                     if (a.samples_per_s != b.samples_per_s)
                       return a.samples_per_s > b.samples_per_s;
                     if (a.tensor_parallel != b.tensor_parallel)
                       return a.tensor_parallel < b.tensor_parallel;
                     if (a.expert_parallel() != b.expert_parallel())
                       return a.expert_parallel() < b.expert_parallel();
                     if (a.stages != b.stages) return a.stages < b.stages;
                     if (a.micro_batches != b.micro_batches)
                       return a.micro_batches < b.micro_batches;
                     if (a.remat != b.remat) return remat_rank(a.remat) < remat_rank(b.remat);
                     return a.zero < b.zero;
                   });
}

// A candidate of several chunks is evaluated in two passes (Pass). The
// first, over every candidate, screens: it stops the device partitioner's
// exhaustive search at PlanRequest::screening_nodes partial cuts (enough for
// models of tens of layers; larger ones keep the local search's cut) and
// simulates the device partitioner's cut alone (the others
// fastest_chunked_cut compares only when that one does not fit). The second,
// over the kRefined best, runs as `simulate` does: the full search, the
// fastest of every cut.
constexpr std::size_t kRefined = 16;

// The second pass over the kRefined best candidates of several
// chunks: keeps the faster of each one's two simulated steps, and ranks again.
void refine_best(std::vector<PlanCandidate>& ranked, unsigned threads, SearchCache& cache) {
  std::vector<std::size_t> best;
  for (std::size_t i = 0; i < ranked.size() && best.size() < kRefined; ++i) {
    if (ranked[i].chunks > 1) best.push_back(i);
  }
  if (best.empty()) return;
  parallel_for(best.size(), threads, [&](std::size_t i) {
    PlanCandidate& c = ranked[best[i]];
    PlanCandidate again = c;
    evaluate(again, Pass{kMaxExhaustiveNodes, true}, cache);
    if (again.fits && again.samples_per_s > c.samples_per_s) c = std::move(again);
  });
  rank(ranked);
}

// What the planner knows of a shape before it evaluates its candidates.
struct ShapeOutlook {
  double ceiling = 0.0;   // the most samples a second any of its candidates can reach
  double estimate = 0.0;  // a guess at the most they reach, to try the likeliest first
};

// The outlook of the shape [first, last): under its fastest candidate's costs
// (least recomputation; the ZeRO stage does not change them), the ceiling on
// any cut, and the estimate on the even split by layer count, whose floor is
// close to its step where the layers are alike. Both count the all-to-alls,
// which every candidate of the shape waits for alike.
ShapeOutlook shape_outlook(std::vector<PlanCandidate>::const_iterator first,
                           std::vector<PlanCandidate>::const_iterator last, SearchCache& cache) {
  const auto lead =
      std::min_element(first, last, [](const PlanCandidate& a, const PlanCandidate& b) {
        return remat_rank(a.remat) < remat_rank(b.remat);
      });
  const Scenario& replica = cache.replica(*lead);
  // Without ZeRO-3's gathers, which raise the floor of that stage alone.
  PartitionProblem p = partition_problem(replica, cache.cost(*lead), lead->stages * lead->chunks,
                                         lead->micro_batches, lead->remat, lead->schedule,
                                         lead->chunks, lead->custom.get());
  p.exchanges = floor_exchanges(replica, cache.ring(*lead), lead->micro_batches);
  const std::vector<StageRange> even =
      partition_uniform(static_cast<int>(p.layers.size()), p.stages);
  return {ceiling_of(*lead->scenario, step_floor_any_cut(p, lead->stages)),
          ceiling_of(*lead->scenario, step_floor(p, even, lead->stages))};
}

// The exact_top-th best throughput among the candidates simulated that fit,
// kept as they are found: the `top` best so far in a min-heap.
class Threshold {
 public:
  explicit Threshold(std::size_t top) : top_(top) {}
  // Counts candidate `c` once it fits.
  void add(const PlanCandidate& c) {
    if (!c.fits || top_ == 0) return;
    if (best_.size() < top_) {
      best_.push_back(c.samples_per_s);
      std::push_heap(best_.begin(), best_.end(), std::greater<>());
    } else if (c.samples_per_s > best_.front()) {
      std::pop_heap(best_.begin(), best_.end(), std::greater<>());
      best_.back() = c.samples_per_s;
      std::push_heap(best_.begin(), best_.end(), std::greater<>());
    }
  }
  std::optional<double> value() const {
    if (top_ == 0 || best_.size() < top_) return std::nullopt;
    return best_.front();
  }

 private:
  std::size_t top_;
  std::vector<double> best_;  // a min-heap: the least of them first
};

// Shapes in a batch are evaluated in parallel against one threshold, so that
// what is simulated does not depend on the number of threads.
constexpr std::size_t kBatch = 8;

// Evaluates every shape in two rounds (Round), each the most promising shape
// first (by its outlook's estimate), in batches; after each batch the
// threshold rises to the exact_top-th best so far, and a candidate that
// cannot reach it is not simulated.
void evaluate_all(std::vector<PlanCandidate>& all, const PlanRequest& request, SearchCache& cache) {
  const std::vector<std::size_t> starts = shape_starts(all);
  const std::size_t shapes = starts.size() - 1;
  const auto begin = [&](std::size_t i) {
    return all.begin() + static_cast<std::ptrdiff_t>(starts[i]);
  };
  std::vector<ShapeOutlook> outlook(shapes);
  parallel_for(shapes, request.threads, [&](std::size_t i) {
    // A shape whose candidates are all rejected already is looked at last.
    if (std::all_of(begin(i), begin(i + 1), decided)) return;
    outlook[i] = shape_outlook(begin(i), begin(i + 1), cache);
  });
  std::vector<std::size_t> order(shapes);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return outlook[a].estimate > outlook[b].estimate;
  });
  std::size_t looked = 0;  // shapes over both rounds, for progress
  Threshold best(request.exact_top);
  std::vector<char> counted(all.size(), 0);  // fits already added to `best`
  for (const Round round : {Round::kRematOff, Round::kRest}) {
    for (std::size_t done = 0; done < shapes; done += kBatch) {
      const std::optional<double> threshold = best.value();
      const std::size_t n = std::min(kBatch, shapes - done);
      // The batch's likely longest first (the chunked schedules' device
      // partitioner, the most stages), so that the threads finish together;
      // the order within a batch changes nothing else.
      std::vector<std::size_t> batch(order.begin() + static_cast<std::ptrdiff_t>(done),
                                     order.begin() + static_cast<std::ptrdiff_t>(done + n));
      std::stable_sort(batch.begin(), batch.end(), [&](std::size_t a, std::size_t b) {
        const PlanCandidate& x = *begin(a);
        const PlanCandidate& y = *begin(b);
        return std::make_pair(x.chunks, x.stages) > std::make_pair(y.chunks, y.stages);
      });
      parallel_for(n, request.threads, [&](std::size_t k) {
        const std::size_t i = batch[k];
        evaluate_shape(begin(i), begin(i + 1), Pass{request.screening_nodes, false}, threshold,
                       outlook[i].ceiling, round, cache);
      });
      for (const std::size_t i : batch) {
        for (std::size_t c = starts[i]; c < starts[i + 1]; ++c) {
          if (all[c].fits && !counted[c]) {
            counted[c] = 1;
            best.add(all[c]);
          }
        }
      }
      looked += n;
      if (request.progress) request.progress(looked, 2 * shapes);
    }
  }
}

}  // namespace

PlanReport run_planner(const Scenario& scenario, const PlanRequest& request) {
  PlanReport report;
  const int physical = scenario.cluster.physical_devices();
  report.devices = request.devices.value_or(physical);
  if (report.devices < 1) throw ConfigError("the number of devices must be at least 1");
  if (report.devices > physical) {
    throw ConfigError(std::to_string(report.devices) + " devices asked for, but the cluster has " +
                      std::to_string(physical));
  }
  // Every (T, E) whose groups the N devices make, each noted as searched
  // where it has a candidate; the first one's error when none has.
  std::vector<PlanCandidate> all;
  std::optional<ConfigError> first_error;
  report.tensor_parallel.clear();
  report.expert_parallel.clear();
  report.context_parallel.clear();
  const auto note = [](std::vector<int>& searched, int value) {
    if (std::find(searched.begin(), searched.end(), value) == searched.end()) {
      searched.push_back(value);
    }
  };
  std::vector<std::vector<PlanCandidate>> splits;
  for (const std::shared_ptr<const Scenario>& split : parallel_splits(scenario, request)) {
    const int T = split->cluster.tensor_parallel;
    const int group = split->cluster.group_size();  // T x C
    try {
      if (report.devices % group != 0) {
        throw ConfigError(std::to_string(report.devices) + " devices do not form whole groups of " +
                          split->cluster.devices_text(1).substr(12));
      }
      std::vector<PlanCandidate> of_split = candidates_of(split, request, report.devices / group);
      if (!of_split.empty()) {
        note(report.tensor_parallel, T);
        note(report.expert_parallel, split->training.expert_parallel);
        note(report.context_parallel, split->training.context_parallel);
      }
      splits.push_back(std::move(of_split));
    } catch (const ConfigError& e) {
      if (!first_error) first_error = e;
    }
  }
  // Moved once into place: hundreds of thousands of candidates on a large search.
  std::size_t total = 0;
  for (const std::vector<PlanCandidate>& of_split : splits) total += of_split.size();
  all.reserve(total);
  for (std::vector<PlanCandidate>& of_split : splits) {
    std::move(of_split.begin(), of_split.end(), std::back_inserter(all));
    std::vector<PlanCandidate>().swap(of_split);  // its storage freed as it goes
  }
  // Each split without candidates throws (enumerate_built_in), so this is
  // the first of their errors; the lists of T and E searched are not empty
  // after it.
  if (all.empty()) {
    throw first_error ? *first_error
                      : ConfigError("no configuration of the " + std::to_string(report.devices) +
                                    " devices to plan");
  }
  SearchCache cache;
  reject_by_weights(all, cache);
  evaluate_all(all, request, cache);
  // Each candidate's list, counted first so that each is allocated once.
  std::vector<PlanCandidate>* lists[] = {&report.ranked, &report.dominated, &report.bounded,
                                         &report.rejected};
  const auto list_of = [](const PlanCandidate& c) {
    return c.fits ? 0 : c.dominated ? 1 : c.bounded ? 2 : 3;
  };
  std::size_t sizes[4] = {};
  for (const PlanCandidate& c : all) ++sizes[list_of(c)];
  for (int k = 0; k < 4; ++k) lists[k]->reserve(sizes[k]);
  for (PlanCandidate& c : all) lists[list_of(c)]->push_back(std::move(c));
  std::vector<PlanCandidate>().swap(all);
  rank(report.ranked);
  refine_best(report.ranked, request.threads, cache);
  return report;
}

}  // namespace pipescope
