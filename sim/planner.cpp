#include "sim/planner.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>

#include "sim/device_partition.h"
#include "sim/format.h"
#include "sim/parallel.h"
#include "sim/plan.h"
#include "sim/tensor_parallel.h"

namespace pipescope {

std::string PlanCandidate::label() const {
  return (tensor_parallel > 1 ? "T=" + std::to_string(tensor_parallel) + " " : "") +
         "K=" + std::to_string(stages) + " D=" + std::to_string(data_parallel) +
         " M=" + std::to_string(micro_batches) + " remat " + std::string(remat_label(remat)) + " " +
         std::string(to_string(schedule)) + (chunks > 1 ? " v=" + std::to_string(chunks) : "");
}

Scenario replica_scenario(const Scenario& scenario, int stages, int data_parallel) {
  Scenario r = scenario;
  r.cluster.devices = stages;
  r.training.global_batch = scenario.training.global_batch / data_parallel;
  r.training.zero_replicas = data_parallel;
  // Replicas on a machine whose cores the devices share get their share of them.
  if (r.cluster.shared_cores > 0) {
    r.cluster.shared_cores = std::max(1, r.cluster.shared_cores / data_parallel);
  }
  return r;
}

PlanSimulation plan_simulation(const Scenario& scenario, const Plan& plan) {
  PlanSimulation out{replica_scenario(scenario, plan.stages, plan.data_parallel),
                     plan_sim_config(plan)};
  out.config.data_parallel = data_parallel_ring(scenario.cluster, plan.stages, plan.data_parallel);
  return out;
}

namespace {

std::vector<int> divisors(std::int64_t n, std::int64_t limit) {
  std::vector<int> out;
  for (std::int64_t d = 1; d <= std::min(n, limit); ++d) {
    if (n % d == 0) out.push_back(static_cast<int>(d));
  }
  return out;
}

// One candidate of `shape` per remat mode the request allows. With one
// micro-batch, except-last recomputes nothing: remat off, unless asked for.
void add_remat_modes(std::vector<PlanCandidate>& out, const PlanRequest& req,
                     const PlanCandidate& shape) {
  for (const Remat remat : kAllRemats) {
    if (req.remat && remat != *req.remat) continue;
    if (remat == Remat::kExceptLast && shape.micro_batches == 1 && !req.remat) continue;
    PlanCandidate c = shape;
    c.remat = remat;
    out.push_back(c);
  }
}

// A custom schedule fixes K, M and v: one candidate per remat mode.
std::vector<PlanCandidate> enumerate_custom(const Scenario& sc, const PlanRequest& req, int N) {
  const CustomSchedule& custom = *req.custom;
  const int K = custom.devices();
  const int M = custom.micro_batches;
  const std::string what = "the custom schedule's K=" + std::to_string(K);
  if (req.schedule && *req.schedule != ScheduleKind::kCustom) {
    throw ConfigError("a schedule file makes the schedule custom, not " +
                      std::string(to_string(*req.schedule)));
  }
  if ((req.stages && *req.stages != K) || (req.micro_batches && *req.micro_batches != M) ||
      (req.chunks && *req.chunks != custom.chunks())) {
    throw ConfigError(
        "-K, -M and --chunks must agree with the custom schedule's K=" + std::to_string(K) +
        ", M=" + std::to_string(M) + " and chunks=" + std::to_string(custom.chunks()));
  }
  if (N % K != 0) {
    throw ConfigError(what + " does not divide the " + sc.cluster.devices_text(N));
  }
  if (std::int64_t{K} * custom.chunks() > static_cast<std::int64_t>(sc.model.layers.size())) {
    throw ConfigError(what + " x " + std::to_string(custom.chunks()) +
                      " chunks is more stages than the model's " +
                      std::to_string(sc.model.layers.size()) + " layers");
  }
  const int D = N / K;
  if (sc.training.global_batch % (std::int64_t{D} * M) != 0) {
    throw ConfigError("D=" + std::to_string(D) + " replicas x M=" + std::to_string(M) +
                      " micro-batches do not divide the global batch of " +
                      std::to_string(sc.training.global_batch));
  }
  PlanCandidate shape;
  shape.stages = K;
  shape.data_parallel = D;
  shape.micro_batches = M;
  shape.schedule = ScheduleKind::kCustom;
  shape.chunks = custom.chunks();
  shape.custom = req.custom;
  std::vector<PlanCandidate> out;
  add_remat_modes(out, req, shape);
  return out;
}

// -K, --chunks and -M as given, against N devices and the model's layers.
void check_request(const PlanRequest& req, int N, int layers, const Cluster& cluster) {
  if (req.stages) {
    if (N % *req.stages != 0) {
      throw ConfigError("K=" + std::to_string(*req.stages) + " does not divide the " +
                        cluster.devices_text(N));
    }
    if (*req.stages > layers) {
      throw ConfigError("K=" + std::to_string(*req.stages) + " is more stages than the model's " +
                        std::to_string(layers) + " layers");
    }
  }
  if (req.chunks && (!req.schedule || !takes_chunks(*req.schedule))) {
    throw ConfigError("--chunks " + std::to_string(*req.chunks) +
                      " needs a --schedule that runs several chunks per device (" +
                      chunked_schedule_names() + ")");
  }
  if (req.micro_batches && *req.micro_batches > req.max_micro_batches) {
    throw ConfigError("M=" + std::to_string(*req.micro_batches) +
                      " is above the largest M tried (" + std::to_string(req.max_micro_batches) +
                      "); raise --max-micro-batches");
  }
}

// The shapes the schedule runs (the rule every command applies) with K x v
// stages of at least a layer each. On one device interleaving only adds work:
// the search leaves it out unless asked for it.
std::vector<int> chunk_counts(ScheduleKind schedule, const PlanRequest& req, int K, int M,
                              int layers) {
  if (!takes_chunks(schedule)) return {1};
  std::vector<int> out;
  const bool asked = req.chunks || req.schedule;
  for (const int v : req.chunks ? std::vector<int>{*req.chunks} : std::vector<int>{2, 4}) {
    if ((K > 1 || asked) && schedule_shape_problem(schedule, K, M, v).empty() &&
        std::int64_t{K} * v <= layers) {
      out.push_back(v);
    }
  }
  return out;
}

// Every schedule, chunk count and remat mode the request allows at K, D and M.
void add_schedules(std::vector<PlanCandidate>& out, const PlanRequest& req, PlanCandidate shape,
                   int layers) {
  for (const ScheduleKind schedule : kAllSchedules) {
    if (req.schedule && schedule != *req.schedule) continue;
    shape.schedule = schedule;
    for (const int chunks :
         chunk_counts(schedule, req, shape.stages, shape.micro_batches, layers)) {
      if (std::int64_t{shape.stages} * chunks * shape.micro_batches > kMaxStageMicroBatches) {
        continue;
      }
      shape.chunks = chunks;
      add_remat_modes(out, req, shape);
    }
  }
}

[[noreturn]] void throw_no_configuration(const PlanRequest& req, int N, std::int64_t batch,
                                         const Cluster& cluster) {
  std::string what = "no configuration of " + cluster.devices_text(N);
  if (req.stages) what += " with K=" + std::to_string(*req.stages);
  if (req.micro_batches) what += " and M=" + std::to_string(*req.micro_batches);
  if (req.schedule && takes_chunks(*req.schedule)) {
    const std::string_view rule = schedule_shape_rule(*req.schedule);
    throw ConfigError(what + " can run " + std::string(to_string(*req.schedule)) + ": it needs " +
                      (rule.empty() ? "" : std::string(rule) + " and ") +
                      "K x v stages of at least one layer each");
  }
  throw ConfigError(what + " divides the global batch of " + std::to_string(batch) +
                    " into whole micro-batches (the batch splits over D = N / K replicas, then "
                    "into M micro-batches)");
}

std::vector<PlanCandidate> enumerate_built_in(const Scenario& sc, const PlanRequest& req, int N) {
  const int layers = static_cast<int>(sc.model.layers.size());
  const std::int64_t batch = sc.training.global_batch;
  check_request(req, N, layers, sc.cluster);
  std::vector<PlanCandidate> out;
  for (int K : divisors(N, layers)) {
    if (req.stages && K != *req.stages) continue;
    const int D = N / K;
    if (batch % D != 0) continue;
    for (int M : divisors(batch / D, req.max_micro_batches)) {
      if (req.micro_batches && M != *req.micro_batches) continue;
      PlanCandidate shape;
      shape.stages = K;
      shape.data_parallel = D;
      shape.micro_batches = M;
      add_schedules(out, req, shape, layers);
    }
  }
  if (out.empty()) throw_no_configuration(req, N, batch, sc.cluster);
  return out;
}

std::vector<PlanCandidate> enumerate(const Scenario& sc, const PlanRequest& req, int N) {
  std::vector<PlanCandidate> out =
      req.custom ? enumerate_custom(sc, req, N) : enumerate_built_in(sc, req, N);
  // Without attention, selective recomputation recomputes nothing: remat off.
  if (!req.remat && !sc.model.has_attention_core()) {
    std::erase_if(out, [](const PlanCandidate& c) { return c.remat == Remat::kSelective; });
  }
  return out;
}

// A candidate of several chunks is evaluated in two passes. The first, over
// every candidate, screens: it stops the device partitioner's exhaustive
// search at PlanRequest::screening_nodes partial cuts (enough for models of
// tens of layers; larger ones keep the local search's cut) and simulates the
// device partitioner's cut alone (the others fastest_chunked_cut compares only
// when that one does not fit). The second, over the kRefined best, runs as
// `simulate` does: the full search, the fastest of every cut.
constexpr std::size_t kRefined = 16;

struct Pass {
  long exhaustive_nodes;  // partition_devices' max_exhaustive_nodes
  bool every_cut;         // simulate every cut fastest_chunked_cut compares
};

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

void evaluate(const Scenario& sc, PlanCandidate& c, Pass pass) {
  const Scenario replica = replica_scenario(sc, c.stages, c.data_parallel);
  const std::unique_ptr<CostModel> cost_model = make_cost_model(replica);
  const CostModel& cost = *cost_model;
  const PartitionProblem problem =
      partition_problem(replica, cost, c.stages * c.chunks, c.micro_batches, c.remat, c.schedule,
                        c.chunks, c.custom.get());
  PartitionResult cut = partition_devices(problem, c.stages, replica.cluster.device.memory_bytes,
                                          pass.exhaustive_nodes);
  const auto reject = [&](const char* what, int index, Bytes needed) {
    c.memory_needed = needed;
    c.rejected = c.label() + ": " + what + std::to_string(index) + " needs " +
                 format_bytes(static_cast<double>(needed)) + " of " +
                 format_bytes(static_cast<double>(replica.cluster.device.memory_bytes)) +
                 (cut.stages.empty() ? " even in the cut that needs least" : "");
  };
  if (cut.stages.empty()) {
    reject(c.chunks > 1 ? "device " : "stage ", *cut.fullest_stage, *cut.memory_needed);
    return;
  }
  SimConfig config;
  config.stages = c.stages;
  config.micro_batches = c.micro_batches;
  config.schedule = c.schedule;
  config.chunks = c.chunks;
  config.remat = c.remat;
  config.custom = c.custom;
  config.data_parallel = data_parallel_ring(sc.cluster, c.stages, c.data_parallel);
  config.record_timeline = false;
  c.result = simulate_candidate(replica, config, cost, problem, cut.stages, pass);
  c.fits = c.result.metrics.fits();
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

// Where each shape's run of candidates starts in `all` (enumerate lists a
// shape's remat modes one after another), and all.size() last.
std::vector<std::size_t> shape_starts(const std::vector<PlanCandidate>& all) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const PlanCandidate& c = all[i];
    const auto same = [&](const PlanCandidate& o) {
      return o.scenario == c.scenario && o.stages == c.stages &&
             o.data_parallel == c.data_parallel && o.micro_batches == c.micro_batches &&
             o.schedule == c.schedule && o.chunks == c.chunks && o.custom == c.custom;
    };
    if (i == 0 || !same(all[i - 1])) out.push_back(i);
  }
  out.push_back(all.size());
  return out;
}

// The remat modes of one shape, remat off first: where it fits, the others
// fit too (they keep less) but cannot be faster (on any one cut they take at
// least its time), so they are not simulated. Memory gives no such order
// (remat on keeps every input and a rebuilt stash, which may exceed what
// except-last or, at M = 1, remat off keeps).
void evaluate_shape(std::vector<PlanCandidate>::iterator first,
                    std::vector<PlanCandidate>::iterator last, Pass pass) {
  const auto never =
      std::find_if(first, last, [](const PlanCandidate& c) { return c.remat == Remat::kNever; });
  if (never != last) evaluate(*never->scenario, *never, pass);
  for (auto c = first; c != last; ++c) {
    if (c == never) continue;
    if (never != last && never->fits) {
      c->dominated = true;
      c->rejected = c->label() + ": fits, but recomputes what remat off, which fits at the " +
                    "same shape, keeps (not simulated)";
    } else {
      evaluate(*c->scenario, *c, pass);
    }
  }
}

}  // namespace

const PlanCandidate* closest_rejected(const PlanReport& report) {
  const PlanCandidate* best = nullptr;
  for (const PlanCandidate& c : report.rejected) {
    if (best == nullptr || c.memory_needed < best->memory_needed) best = &c;
  }
  return best;
}

namespace {

// Best throughput first; among equals, smaller T, fewer stages, fewer
// micro-batches, less recomputation (kAllRemats lists the modes from none to
// most).
void rank(std::vector<PlanCandidate>& ranked) {
  const auto remat_rank = [](Remat r) {
    return std::find(std::begin(kAllRemats), std::end(kAllRemats), r) - std::begin(kAllRemats);
  };
  std::stable_sort(ranked.begin(), ranked.end(),
                   [&](const PlanCandidate& a, const PlanCandidate& b) {
                     if (a.samples_per_s != b.samples_per_s)
                       return a.samples_per_s > b.samples_per_s;
                     if (a.tensor_parallel != b.tensor_parallel)
                       return a.tensor_parallel < b.tensor_parallel;
                     if (a.stages != b.stages) return a.stages < b.stages;
                     if (a.micro_batches != b.micro_batches)
                       return a.micro_batches < b.micro_batches;
                     return remat_rank(a.remat) < remat_rank(b.remat);
                   });
}

// The second pass over the kRefined best candidates of several
// chunks: keeps the faster of each one's two simulated steps, and ranks again.
void refine_best(std::vector<PlanCandidate>& ranked, unsigned threads) {
  std::vector<std::size_t> best;
  for (std::size_t i = 0; i < ranked.size() && best.size() < kRefined; ++i) {
    if (ranked[i].chunks > 1) best.push_back(i);
  }
  if (best.empty()) return;
  parallel_for(best.size(), threads, [&](std::size_t i) {
    PlanCandidate& c = ranked[best[i]];
    PlanCandidate again = c;
    evaluate(*c.scenario, again, Pass{kMaxExhaustiveNodes, true});
    if (again.fits && again.samples_per_s > c.samples_per_s) c = std::move(again);
  });
  rank(ranked);
}

// The T to plan, each with its scenario: split by T, devices grouped by T.
std::vector<std::shared_ptr<const Scenario>> tensor_splits(const Scenario& sc,
                                                           const PlanRequest& req) {
  const int given = sc.cluster.tensor_parallel;
  const bool fixed = given > 1 || sc.training.tensor_parallel_given;
  if (req.tensor_parallel && fixed && *req.tensor_parallel != given) {
    throw ConfigError("T=" + std::to_string(*req.tensor_parallel) + " was asked for, but the " +
                      "scenario splits its layers over T=" + std::to_string(given));
  }
  if (fixed || req.tensor_parallel == given) return {std::make_shared<const Scenario>(sc)};
  std::vector<std::shared_ptr<const Scenario>> out;
  const std::vector<int> choices =
      req.tensor_parallel ? std::vector<int>{*req.tensor_parallel} : tensor_parallel_choices(sc);
  for (const int T : choices) {
    if (const std::string problem = tensor_parallel_problem(sc, T, false); !problem.empty()) {
      throw ConfigError("T=" + std::to_string(T) + ": " + problem);
    }
    out.push_back(std::make_shared<const Scenario>(with_tensor_parallel(sc, T, false)));
  }
  return out;
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
  // Every T whose groups the N devices make; the first one's error when none.
  std::vector<PlanCandidate> all;
  std::optional<ConfigError> first_error;
  report.tensor_parallel.clear();
  for (const std::shared_ptr<const Scenario>& split : tensor_splits(scenario, request)) {
    const int T = split->cluster.tensor_parallel;
    report.tensor_parallel.push_back(T);
    try {
      if (report.devices % T != 0) {
        throw ConfigError(std::to_string(report.devices) +
                          " devices do not form whole groups of T=" + std::to_string(T));
      }
      for (PlanCandidate& c : enumerate(*split, request, report.devices / T)) {
        c.tensor_parallel = T;
        c.scenario = split;
        all.push_back(std::move(c));
      }
    } catch (const ConfigError& e) {
      if (!first_error) first_error = e;
    }
  }
  if (all.empty() && first_error) throw *first_error;
  const std::vector<std::size_t> shapes = shape_starts(all);
  parallel_for(
      shapes.size() - 1, request.threads,
      [&](std::size_t i) {
        evaluate_shape(all.begin() + static_cast<std::ptrdiff_t>(shapes[i]),
                       all.begin() + static_cast<std::ptrdiff_t>(shapes[i + 1]),
                       Pass{request.screening_nodes, false});
      },
      request.progress);
  for (PlanCandidate& c : all) {
    (c.fits        ? report.ranked
     : c.dominated ? report.dominated
                   : report.rejected)
        .push_back(std::move(c));
  }
  rank(report.ranked);
  refine_best(report.ranked, request.threads);
  return report;
}

}  // namespace pipescope
