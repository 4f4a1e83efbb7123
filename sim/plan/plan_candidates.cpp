#include "sim/plan/plan_candidates.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <utility>

#include "sim/engine/tensor_parallel.h"
#include "sim/engine/zero.h"
#include "sim/scenario/context_groups.h"
#include "sim/scenario/expert_groups.h"

namespace pipescope {
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
    out.push_back(shape);
    out.back().remat = remat;
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
  if (!experts_divide(sc.training.expert_parallel, D, sc.training.context_parallel,
                      sc.cluster.expert_fold)) {
    throw ConfigError(
        what + " leaves D=" + std::to_string(D) + " replicas" +
            (sc.training.context_parallel > 1
                 ? " of C=" + std::to_string(sc.training.context_parallel) + " shares"
                 : std::string()) +
            (sc.cluster.expert_fold > 1
                 ? " of T=" + std::to_string(sc.cluster.expert_fold) + " devices with whole experts"
                 : std::string()) +
            ", which expert_parallel " + std::to_string(sc.training.expert_parallel) +
            " does not divide",
        "training.expert_parallel");
  }
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
                                         const Cluster& cluster, int experts) {
  std::string what = "no configuration of " + cluster.devices_text(N);
  if (experts > 1) {
    what += (cluster.context_parallel > 1 ? " with D x C" : " with D") +
            std::string(" a multiple of training.expert_parallel ") + std::to_string(experts);
  }
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
    // Expert parallelism spreads the experts over E of the D x C.
    if (batch % D != 0 || !experts_divide(sc.training.expert_parallel, D,
                                          sc.training.context_parallel, sc.cluster.expert_fold)) {
      continue;
    }
    for (int M : divisors(batch / D, req.max_micro_batches)) {
      if (req.micro_batches && M != *req.micro_batches) continue;
      PlanCandidate shape;
      shape.stages = K;
      shape.data_parallel = D;
      shape.micro_batches = M;
      add_schedules(out, req, shape, layers);
    }
  }
  if (out.empty()) throw_no_configuration(req, N, batch, sc.cluster, sc.training.expert_parallel);
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

// The ZeRO stages a candidate of D replicas tries, lowest first: the
// scenario's when it says, or with one replica of whole sequences (nothing to shard over);
// otherwise 1, 2 and 3, each where the lower ones do not fit
// (planner.cpp, evaluate_shape). Stage 0 is never faster than 1 nor smaller
// (the same traffic, and each replica steps and keeps 1/D of the
// optimizer), so it is not tried (tests/sim/zero_planner_test.cpp checks the
// order by simulation). Stage 3 (sim/engine/zero.h: the shard of the weights and at
// most two adjacent layers gathered) keeps less than 2 where a stage has
// more than a few layers. Under expert or context parallelism, 1 and 2.
// Where ZeRO-1 all-reduces the gradients whole (zero1_all_reduces) stage 1 moves more than 0 and
// may move more than 2: 0 is tried too, and the planner orders none of them (planner.cpp,
// evaluate_shape).
std::vector<int> zero_choices(const Scenario& sc, int data_parallel) {
  if (sc.training.zero_given || data_parallel * sc.training.context_parallel == 1) {
    return {sc.training.zero};
  }
  std::vector<int> stages = {1, 2, 3};
  // ZeRO-3 beside expert or context parallelism is not modelled
  // (sim/scenario/expert_groups.h, context_groups.h).
  if (sc.training.expert_parallel > 1 || sc.training.context_parallel > 1) stages = {1, 2};
  if (zero1_all_reduces(sc)) stages.insert(stages.begin(), 0);
  return stages;
}

// `split` (one T's scenario) at each ZeRO stage it plans, made once.
class ZeroVariants {
 public:
  explicit ZeroVariants(std::shared_ptr<const Scenario> split) : split_(std::move(split)) {}
  std::shared_ptr<const Scenario> at(int zero) {
    if (zero == split_->training.zero) return split_;
    std::shared_ptr<const Scenario>& v = variants_[static_cast<std::size_t>(zero)];
    if (!v) {
      Scenario sc = *split_;
      sc.training.zero = zero;
      v = std::make_shared<const Scenario>(std::move(sc));
    }
    return v;
  }

 private:
  std::shared_ptr<const Scenario> split_;
  std::array<std::shared_ptr<const Scenario>, kMaxZeroStage + 1> variants_;
};

}  // namespace

namespace {

// The T to plan, each with its scenario: split by T, devices grouped by T.
std::vector<Scenario> tensor_splits(const Scenario& sc, const PlanRequest& req) {
  const int given = sc.cluster.tensor_parallel;
  const bool fixed = given > 1 || sc.training.tensor_parallel_given;
  if (req.tensor_parallel && fixed && *req.tensor_parallel != given) {
    throw ConfigError("T=" + std::to_string(*req.tensor_parallel) + " was asked for, but the " +
                      "scenario splits its layers over T=" + std::to_string(given));
  }
  if (fixed || req.tensor_parallel == given) return {sc};
  std::vector<Scenario> out;
  const std::vector<int> choices =
      req.tensor_parallel ? std::vector<int>{*req.tensor_parallel} : tensor_parallel_choices(sc);
  for (const int T : choices) {
    const bool sequence = sequence_parallel_choice(sc, T);
    if (const std::string problem = tensor_parallel_problem(sc, T, sequence); !problem.empty()) {
      throw ConfigError("T=" + std::to_string(T) + ": " + problem);
    }
    out.push_back(with_tensor_parallel(sc, T, sequence));
  }
  return out;
}

// A C asked for (PlanRequest::context_parallel) that the scenario, its
// sequence split over `split_c` already, cannot take.
void check_asked_context(const Scenario& sc, const PlanRequest& req, int split_c) {
  if (!req.context_parallel) return;
  const int C = *req.context_parallel;
  if (split_c > 1 && C != split_c) {
    throw ConfigError("C=" + std::to_string(C) + ": the scenario splits each sequence over C=" +
                      std::to_string(split_c) + " already (its training.context_parallel)");
  }
  if (split_c == 1) {
    if (const std::string problem = context_parallel_problem(sc, C); !problem.empty()) {
      throw ConfigError("C=" + std::to_string(C) + ": " + problem);
    }
  }
}

}  // namespace

std::vector<std::shared_ptr<const Scenario>> parallel_splits(const Scenario& sc,
                                                             const PlanRequest& req) {
  std::vector<std::shared_ptr<const Scenario>> out;
  for (const Scenario& split : tensor_splits(sc, req)) {
    // expert_parallel_choices gives only E the experts take; an E asked for
    // is checked here.
    if (req.expert_parallel) {
      if (const std::string problem = expert_parallel_problem(split, *req.expert_parallel);
          !problem.empty()) {
        throw ConfigError("E=" + std::to_string(*req.expert_parallel) + ": " + problem);
      }
    }
    const std::vector<int> choices = req.expert_parallel ? std::vector<int>{*req.expert_parallel}
                                                         : expert_parallel_choices(split);
    for (const int E : choices) {
      const Scenario experts =
          E == split.training.expert_parallel ? split : with_expert_parallel(split, E);
      // The scenario's C (its sequence already split), the C asked for, or
      // each C the planner tries.
      if (experts.cluster.context_parallel > 1) {
        check_asked_context(experts, req, experts.cluster.context_parallel);
        out.push_back(std::make_shared<const Scenario>(experts));
        continue;
      }
      check_asked_context(experts, req, 1);
      const std::vector<int> cs = req.context_parallel ? std::vector<int>{*req.context_parallel}
                                                       : context_parallel_choices(experts);
      for (const int C : cs) {
        out.push_back(
            std::make_shared<const Scenario>(C == 1 ? experts : with_context_parallel(experts, C)));
      }
    }
  }
  return out;
}

std::vector<PlanCandidate> candidates_of(const std::shared_ptr<const Scenario>& split,
                                         const PlanRequest& req, int N) {
  const int T = split->cluster.tensor_parallel;
  ZeroVariants variants(split);
  std::vector<PlanCandidate> unstaged = enumerate(*split, req, N);
  std::vector<PlanCandidate> out;
  // D = 2 tries every stage the split plans (zero_choices), D = 1 no more.
  out.reserve(unstaged.size() * zero_choices(*split, 2).size());
  for (PlanCandidate& c : unstaged) {
    c.tensor_parallel = T;
    for (const int zero : zero_choices(*split, c.data_parallel)) {
      out.push_back(c);
      out.back().zero = zero;
      out.back().scenario = variants.at(zero);
    }
  }
  return out;
}

}  // namespace pipescope
