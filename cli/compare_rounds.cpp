// The rounds of `pipescope compare`.
#include "cli/compare_rounds.h"

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <utility>

#include "cli/progress.h"
#include "exec/backends.h"
#include "exec/machine_speed.h"
#include "exec/plan_runner.h"
#include "exec/profiler.h"

namespace pipescope::cli {

namespace {

// The rounds' progress: profiling passes and steps alike.
struct RoundsProgress {
  std::optional<ProgressBar> bar;
  std::size_t done = 0;
  std::size_t total = 0;

  void advance() {
    if (bar) bar->update(++done, total);
  }
};

// The speed of the cores a round's run uses, checked before its profile,
// after each of the profile's passes (the profiler's own checks,
// ProfileOptions::check_speed) and after each step (the steps are timed one
// by one, without it): exec/machine_speed.h. Off on the MPI and GPU backends,
// whose ranks are processes of their own or whose ops are not the cores'.
struct SpeedChecks {
  bool on = false;
  int cores = 1;
  std::vector<std::vector<double>> times;

  void check() {
    if (on) times.push_back(exec::reference_times(cores));
  }
};

// The ops as the plan's devices run them on host cores at T = 1 (each
// stage's stashes kept from op to op as in a step), or null.
std::shared_ptr<const exec::PlanStages> plan_stages(const CompareInputs& in) {
  if (in.gpus || in.plan.tensor_parallel != 1) return nullptr;
  auto stages = std::make_shared<exec::PlanStages>();
  stages->schedule = in.plan.schedule_ops();
  for (const StageRange& r : in.plan.stage_ranges()) {
    stages->stage_layers.push_back(
        {static_cast<std::size_t>(r.first_layer), static_cast<std::size_t>(r.last_layer) + 1});
  }
  return stages;
}

// Profiles the plan's model at its micro-batch size in `passes` clean rounds
// (exec/profiler.h), through `stages` (plan_stages') where it has them.
Profile profile_model(const CompareOptions& o, const CompareInputs& in,
                      const std::shared_ptr<const exec::PlanStages>& stages, std::size_t passes,
                      RoundsProgress& progress, SpeedChecks& speed) {
  exec::ProfileOptions p;
  p.batch_sizes = {in.plan.micro_batch_size};
  p.seed = o.seed;
  p.optimizer = in.plan.optimizer.value_or(Optimizer::kAdam);
  p.measure_threads = !in.mpi;                 // measure_mpi_machine measures the ranks instead
  p.tensor_ranks = in.plan.tensor_parallel;    // its group's all-reduce and optimizer
  p.context_ranks = in.plan.context_parallel;  // the shares' exchanges
  p.expert_ranks = in.plan.expert_parallel;    // the routed load
  p.check_speed = speed.on;
  p.speed_check_cores = speed.cores;
  p.stages = stages;
  if (in.gpus) {
    // The layers on stage 0's GPU, the transport to stage 1's, and the GPUs the
    // stages share.
    p.device = in.gpus->stage_device(0, 0);
    p.peer = in.gpus->stage_device(1, 1);
    p.devices = std::min(in.gpus->gpus, in.plan.stages);
  }
  std::unique_ptr<exec::ModelProfiler> profiler;
  try {
    profiler = std::make_unique<exec::ModelProfiler>(in.model, p);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(o.plan + ": micro_batch_size: " + e.what());
  }
  exec::measure_rounds(*profiler, static_cast<int>(passes), [&] {
    // A discarded round makes one more.
    if (static_cast<std::size_t>(profiler->rounds()) > passes) ++progress.total;
    progress.advance();
  });
  const std::vector<std::vector<double>>& checks = profiler->speed_checks();
  speed.times.insert(speed.times.end(), checks.begin(), checks.end());
  return profiler->finish();
}

// Trains the plan for --steps steps, on the backend's devices and transport.
std::vector<exec::StepResult> run_steps(const CompareOptions& o, const CompareInputs& in,
                                        RoundsProgress& progress, SpeedChecks& speed) {
  exec::PlanRunOptions run;
  if (in.gpus) run.stage_device = in.gpus->stage_device;
  run.steps = o.steps;
  run.learning_rate = o.learning_rate;
  run.seed = o.seed;
  if (in.mpi) run.transport = exec::mpi_backend().transport();
  run.on_step = [&](int, int, const exec::StepResult&) {
    progress.advance();
    speed.check();
  };
  return exec::run_plan(in.plan, in.model, run);
}

// The measured steps a round compares, and how far their cores' speed was
// from the profile's (exec/machine_speed.h).
struct StepsAtSpeed {
  std::vector<exec::StepResult> steps;
  double spread = 0.0;
};

// The steps after the warm-up whose speed was within
// kDiscardSpeedSpreadAbove of the profile's, when at least 3 or half the
// measured ones were, and the largest spread among them; otherwise every
// step and the spread of all the checks, which discards the round.
StepsAtSpeed steps_at_profile_speed(const std::vector<exec::StepResult>& steps,
                                    const SpeedChecks& speed, std::size_t profile_checks,
                                    int warmup) {
  const std::size_t first = std::min(steps.size(), static_cast<std::size_t>(std::max(0, warmup)));
  const std::vector<double> spreads = exec::step_speed_spreads(speed.times, profile_checks);
  StepsAtSpeed kept;
  for (std::size_t i = first; i < steps.size() && i < spreads.size(); ++i) {
    if (spreads[i] > exec::kDiscardSpeedSpreadAbove) continue;
    kept.steps.push_back(steps[i]);
    kept.spread = std::max(kept.spread, spreads[i]);
  }
  const std::size_t measured = steps.size() - first;
  if (kept.steps.size() < std::min<std::size_t>(measured, std::max<std::size_t>(3, measured / 2))) {
    return {steps, exec::speed_spread(speed.times)};
  }
  return kept;
}

// How disturbed a round was: the share of its ops' wall time other work took,
// or more than any such share when the cores' speed moved over it
// (exec/machine_speed.h).
double disturbance(const exec::Comparison& r) {
  return exec::speed_checked_disturbance(r.steal_fraction, std::max(0.0, r.speed_spread));
}

}  // namespace

// The rounds as compare_rounds.h says.
Rounds run_rounds(const CompareOptions& o, const CompareInputs& in, int rank) {
  Rounds rounds{{}, in.given};
  const std::size_t passes = static_cast<std::size_t>(std::max(3, (o.steps - o.warmup) / 3));
  const std::size_t per_round = static_cast<std::size_t>(o.steps) + (in.given ? 0 : passes);
  RoundsProgress progress;
  progress.total = per_round * static_cast<std::size_t>(o.rounds);
  if (rank == 0) progress.bar.emplace("comparing");
  const bool check_speed = !in.mpi && !in.gpus;
  const std::shared_ptr<const exec::PlanStages> stages = plan_stages(in);
  // A given profile's speed is not known: its rounds are the ones asked.
  const int most = check_speed && !in.given && o.rounds >= 2 ? 3 * o.rounds : o.rounds;
  int clean = 0;
  for (int round = 0; round < most && clean < o.rounds; ++round) {
    if (round >= o.rounds) progress.total += per_round;
    // A thread a device and rank, each on a core of its own while they fit.
    SpeedChecks speed{check_speed,
                      in.plan.stages * in.plan.tensor_parallel * in.plan.context_parallel *
                          in.plan.expert_parallel,
                      {}};
    // Rank 0 alone profiles while the other ranks wait for the first step: as
    // in the threaded run, one core measures while the others are idle (the
    // profile's concurrency slowdown covers them computing together). The
    // profiler checks the speed before its first pass; a given profile's
    // round starts from a check of its own.
    Profile measured;
    if (!in.given && rank == 0) {
      measured = profile_model(o, in, stages, passes, progress, speed);
    } else {
      speed.check();
    }
    const std::size_t profile_checks = speed.times.size();
    const std::vector<exec::StepResult> all_steps = run_steps(o, in, progress, speed);
    const StepsAtSpeed at_speed =
        check_speed && !in.given
            ? steps_at_profile_speed(all_steps, speed, profile_checks, o.warmup)
            : StepsAtSpeed{all_steps, check_speed ? exec::speed_spread(speed.times) : -1.0};
    const std::vector<exec::StepResult>& steps = at_speed.steps;
    // The steps kept leave the warm-up out already.
    const bool some = steps.size() < all_steps.size();
    const int warmup = some ? 0 : o.warmup;
    if (!in.given) {
      if (in.mpi) {
        exec::mpi_backend().measure_machine(measured, in.model, in.plan.micro_batch_size, o.seed,
                                            stages.get());
      }
      if (rank != 0) continue;
      rounds.profile = std::make_shared<const Profile>(std::move(measured));
      rounds.comparisons.push_back(
          exec::compare_run(exec::cpu_scenario(in.plan, in.model, rounds.profile, in.profile_label),
                            in.plan, steps, warmup));
    } else if (rank == 0) {
      rounds.comparisons.push_back(exec::compare_run(*in.given_scenario, in.plan, steps, warmup));
    }
    if (rank != 0) continue;
    exec::Comparison& c = rounds.comparisons.back();
    c.speed_spread = at_speed.spread;
    if (some) c.warmup_steps = o.warmup;
    // Only a change of speed makes another round: with more threads than
    // cores, other work takes a share of every round.
    if (c.speed_spread <= exec::kDiscardSpeedSpreadAbove) ++clean;
  }
  return rounds;
}

std::vector<std::size_t> kept_rounds(const std::vector<exec::Comparison>& rounds) {
  std::vector<double> other_work;
  for (const exec::Comparison& r : rounds) other_work.push_back(disturbance(r));
  return exec::kept_rounds(other_work);
}

const exec::Comparison& median_round(const std::vector<exec::Comparison>& rounds) {
  std::vector<std::size_t> order = kept_rounds(rounds);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return rounds[a].relative_error < rounds[b].relative_error;
  });
  return rounds[order[order.size() / 2]];
}

}  // namespace pipescope::cli
