#include "exec/compare.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "costmodels/check.h"
#include "costmodels/device.h"
#include "exec/plan_runner.h"
#include "sim/engine.h"
#include "sim/profile_io.h"

namespace pipescope::exec {

Scenario cpu_scenario(const Plan& plan, const ModelSpec& model,
                      std::shared_ptr<const Profile> profile, const std::string& profile_file) {
  const DevicePreset preset = find_device_preset("cpu").value();
  Scenario sc;
  sc.name =
      plan.scenario_name + (profile && profile->backend == "cuda" ? " (on this machine's GPUs)"
                                                                  : " (on this machine's CPU)");
  sc.model = model;
  sc.cluster.name = "cpu";
  sc.cluster.devices = plan.stages;
  sc.cluster.device = preset.device;
  sc.cluster.interconnect = preset.interconnect;
  sc.training.global_batch = plan.global_batch / plan.data_parallel;
  sc.training.micro_batches = plan.micro_batches;
  sc.training.optimizer = plan.optimizer.value_or(Optimizer::kAdam);
  sc.training.bytes_per_param = bytes_per_param(*sc.training.optimizer, model.dtype);
  sc.training.schedule = plan.schedule;
  sc.training.chunks = plan.chunks;
  sc.training.remat = plan.remat;
  if (profile) apply_profile(sc, std::move(profile), profile_file);
  return sc;
}

double relative_error(double predicted, double measured) {
  if (measured == 0.0) return predicted == 0.0 ? 0.0 : INFINITY;
  return (predicted - measured) / measured;
}

std::string shared_cores_note(int stages, int cores, const std::string& what) {
  const std::string many = what + "s";
  const std::string who = what == "GPU" ? "each GPU interleaves the streams' kernels"
                                        : "the OS time-slices the threads";
  return std::to_string(stages) + " stages share " + std::to_string(cores) + " " +
         (cores == 1 ? what : many) + ": predicted with a pool of that many " + many +
         ", each op holding one for its whole duration and ops served in the order they became "
         "ready (" +
         who + " instead, so the order, not the total work, is approximate)";
}

namespace {

// The kinds of compute op compared, indexed by EventKind for F, R, B, W and the
// optimizer, and apart (kKept) for the forwards that keep their stash (not
// rematerialized), which cost more.
constexpr std::size_t kKept = 5;
constexpr std::size_t kKinds = 6;

constexpr std::size_t at(EventKind k) {
  return static_cast<std::size_t>(k);
}

// One model stage's compute ops in the median step, by kind.
struct OpSums {
  SimTime total[kKinds] = {0, 0, 0, 0, 0, 0};
  SimTime cpu[kKinds] = {0, 0, 0, 0, 0, 0};
  SimTime count[kKinds] = {0, 0, 0, 0, 0, 0};

  SimTime mean(std::size_t i) const { return count[i] == 0 ? SimTime{0} : total[i] / count[i]; }
  SimTime mean_cpu(std::size_t i) const { return count[i] == 0 ? SimTime{0} : cpu[i] / count[i]; }
};

// The median step's compute ops: per model stage and kind, busy time per
// pipeline device, and wall and CPU time summed over them all.
struct MeasuredOps {
  std::vector<OpSums> stages;
  std::vector<SimTime> device_busy;
  SimTime wall = 0;
  SimTime cpu = 0;
};

MeasuredOps measure_ops(const Timeline& timeline, const Schedule& schedule, int model_stages,
                        int devices) {
  MeasuredOps ops;
  ops.stages.resize(static_cast<std::size_t>(model_stages));
  ops.device_busy.assign(static_cast<std::size_t>(devices), 0);
  for (const TimelineEvent& e : timeline.events) {
    if (e.lane != Lane::kCompute) continue;
    OpSums& s = ops.stages.at(static_cast<std::size_t>(e.stage));
    auto kind = static_cast<std::size_t>(e.kind);
    PS_CHECK(kind < kKept, "compute events are F, R, B, W or the optimizer");
    if (e.kind == EventKind::kForward && !schedule.recomputes(e.micro_batch)) kind = kKept;
    const SimTime wall = e.end - e.start;
    ops.device_busy.at(static_cast<std::size_t>(e.device)) += wall;
    s.total[kind] += wall;
    // Without a CPU clock the wall time stands in.
    const SimTime cpu = e.cpu_time ? std::min(*e.cpu_time, wall) : wall;
    s.cpu[kind] += cpu;
    s.count[kind] += 1;
    ops.wall += wall;
    ops.cpu += cpu;
  }
  return ops;
}

// Step time, throughput and bubble of the prediction against the median step.
void compare_step(Comparison& c, const Scenario& scenario, const SimResult& predicted,
                  const StepResult& median) {
  const double samples = static_cast<double>(scenario.training.global_batch);
  c.predicted_step_s = predicted.metrics.step_time_s();
  c.measured_step_s = simtime_to_seconds(median.step_time);
  c.relative_error = relative_error(c.predicted_step_s, c.measured_step_s);
  c.predicted_throughput = predicted.metrics.samples_per_s;
  c.measured_throughput = c.measured_step_s > 0 ? samples / c.measured_step_s : 0.0;
  c.predicted_bubble = predicted.metrics.bubble_fraction;
  c.measured_bubble = measured_bubble(median, c.stages);
  c.cores = scenario.cluster.shared_cores;
  c.shared_cores = c.cores > 0 && c.cores < c.stages;
}

std::vector<StageComparison> compare_busy(const SimResult& predicted,
                                          const std::vector<SimTime>& device_busy) {
  std::vector<StageComparison> per_stage;
  for (std::size_t d = 0; d < device_busy.size(); ++d) {
    StageComparison sc;
    sc.predicted_busy_s = simtime_to_seconds(predicted.metrics.devices[d].busy);
    sc.measured_busy_s = simtime_to_seconds(device_busy[d]);
    sc.relative_error = relative_error(sc.predicted_busy_s, sc.measured_busy_s);
    per_stage.push_back(sc);
  }
  return per_stage;
}

// The predicted stage costs with each stage's op times replaced by its
// measured means (wall time, or with `cpu` the CPU time).
std::vector<StageCost> measured_costs(const std::vector<StageCost>& predicted,
                                      const std::vector<OpSums>& stages, bool cpu) {
  std::vector<StageCost> costs = predicted;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const OpSums& m = stages[s];
    const auto of = [&](std::size_t i) { return cpu ? m.mean_cpu(i) : m.mean(i); };
    StageCost& cost = costs[s];
    // A split backward's B and W together are the stage's backward.
    cost.forward = of(at(EventKind::kForward));
    cost.forward_kept = of(kKept);
    cost.weight = of(at(EventKind::kWeight));
    cost.input = of(at(EventKind::kBackward));
    cost.backward = cost.input + cost.weight;
    cost.recompute = of(at(EventKind::kRecompute));
    cost.optimizer = of(at(EventKind::kOptimizer));
  }
  return costs;
}

std::string kind_name(std::size_t i, bool split) {
  return i == kKept                       ? "F kept"
         : i == at(EventKind::kForward)   ? "F"
         : i == at(EventKind::kRecompute) ? "R"
         : i == at(EventKind::kBackward)  ? (split ? "B input" : "B")
         : i == at(EventKind::kWeight)    ? "W"
                                          : "optimizer";
}

// Model stage s's predicted op times against its measured means, each kind it ran.
void compare_ops(std::vector<OpComparison>& out, int s, const StageCost& p, const OpSums& m,
                 bool split) {
  const std::pair<std::size_t, SimTime> kinds[] = {
      {at(EventKind::kForward), p.forward},
      {kKept, p.forward_kept.value_or(p.forward)},
      {at(EventKind::kRecompute), p.recompute},
      {at(EventKind::kBackward), split ? p.input : p.backward},
      {at(EventKind::kWeight), p.weight},
      {at(EventKind::kOptimizer), p.optimizer}};
  for (const auto& [i, predicted_ns] : kinds) {
    if (m.count[i] == 0) continue;
    OpComparison op;
    op.stage = s;
    op.kind = kind_name(i, split);
    op.count = static_cast<int>(m.count[i]);
    op.predicted_s = simtime_to_seconds(predicted_ns);
    op.measured_s = simtime_to_seconds(m.mean(i));
    op.measured_cpu_s = simtime_to_seconds(m.mean_cpu(i));
    op.relative_error = relative_error(op.predicted_s, op.measured_s);
    out.push_back(std::move(op));
  }
}

// The engine replayed with the run's own op times (wall, then CPU), and what
// the ops' wall time lost to other work.
void compare_replays(Comparison& c, const Scenario& scenario, const Schedule& schedule,
                     const SimResult& predicted, const MeasuredOps& ops) {
  c.steal_fraction =
      ops.wall > 0 ? 1.0 - static_cast<double>(ops.cpu) / static_cast<double>(ops.wall) : 0.0;
  const std::vector<StageCost> replay = measured_costs(predicted.stage_costs, ops.stages, false);
  const std::vector<StageCost> cpu_replay = measured_costs(predicted.stage_costs, ops.stages, true);
  const EngineResult replayed = run_engine(schedule, replay, scenario.cluster, nullptr);
  c.replayed_step_s = simtime_to_seconds(replayed.step_time);
  c.runtime_overhead = c.replayed_step_s > 0 ? c.measured_step_s / c.replayed_step_s - 1.0 : 0.0;
  c.cpu_replayed_step_s =
      simtime_to_seconds(run_engine(schedule, cpu_replay, scenario.cluster, nullptr).step_time);
  c.cpu_relative_error = relative_error(c.predicted_step_s, c.cpu_replayed_step_s);
}

}  // namespace

Comparison compare_run(const Scenario& scenario, const Plan& plan,
                       const std::vector<StepResult>& steps, int warmup) {
  PS_CHECK(!steps.empty(), "compare needs at least one measured step");
  const SimResult predicted = simulate(scenario, plan_sim_config(plan));
  Comparison c;
  c.stages = plan.stages;
  c.chunks = plan.chunks;
  c.micro_batches = plan.micro_batches;
  c.warmup_steps =
      static_cast<std::size_t>(std::max(0, warmup)) < steps.size() ? std::max(0, warmup) : 0;
  c.measured_steps = static_cast<int>(steps.size()) - c.warmup_steps;
  const StepResult& median = steps[median_step(steps, c.warmup_steps)];
  compare_step(c, scenario, predicted, median);

  // Mean op durations per model stage (K x v of them), busy time per device.
  const Schedule schedule = plan.schedule_ops();
  const MeasuredOps ops = measure_ops(median.timeline, schedule, plan.model_stages(), plan.stages);
  c.per_stage = compare_busy(predicted, ops.device_busy);
  for (int s = 0; s < plan.model_stages(); ++s) {
    compare_ops(c.per_op, s, predicted.stage_costs.at(static_cast<std::size_t>(s)),
                ops.stages[static_cast<std::size_t>(s)], schedule.split);
  }
  compare_replays(c, scenario, schedule, predicted, ops);
  return c;
}

}  // namespace pipescope::exec
