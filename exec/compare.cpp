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

Comparison compare_run(const Scenario& scenario, const Plan& plan,
                       const std::vector<StepResult>& steps, int warmup) {
  PS_CHECK(!steps.empty(), "compare needs at least one measured step");
  const int K = plan.stages;
  const SimResult predicted = simulate(scenario, plan_sim_config(plan));

  Comparison c;
  c.stages = K;
  c.chunks = plan.chunks;
  c.micro_batches = plan.micro_batches;
  c.warmup_steps =
      static_cast<std::size_t>(std::max(0, warmup)) < steps.size() ? std::max(0, warmup) : 0;
  c.measured_steps = static_cast<int>(steps.size()) - c.warmup_steps;
  const StepResult& median = steps[median_step(steps, c.warmup_steps)];
  const double samples = static_cast<double>(scenario.training.global_batch);
  c.predicted_step_s = predicted.metrics.step_time_s();
  c.measured_step_s = simtime_to_seconds(median.step_time);
  c.relative_error = relative_error(c.predicted_step_s, c.measured_step_s);
  c.predicted_throughput = predicted.metrics.samples_per_s;
  c.measured_throughput = c.measured_step_s > 0 ? samples / c.measured_step_s : 0.0;
  c.predicted_bubble = predicted.metrics.bubble_fraction;
  c.measured_bubble = measured_bubble(median, K);
  c.cores = scenario.cluster.shared_cores;
  c.shared_cores = c.cores > 0 && c.cores < K;

  // Mean op durations per model stage (K x v of them), busy time per device: by
  // EventKind for F, R, B, W and the optimizer, and apart for the forwards that
  // keep their stash (not rematerialized), which cost more.
  constexpr std::size_t kKept = 5;
  struct Sums {
    SimTime total[6] = {0, 0, 0, 0, 0, 0};
    SimTime cpu[6] = {0, 0, 0, 0, 0, 0};
    SimTime count[6] = {0, 0, 0, 0, 0, 0};
  };
  const Schedule schedule = plan.schedule_ops();
  SimTime wall_sum = 0;
  SimTime cpu_sum = 0;
  std::vector<Sums> sums(static_cast<std::size_t>(plan.model_stages()));
  std::vector<SimTime> device_busy(static_cast<std::size_t>(K), 0);
  for (const TimelineEvent& e : median.timeline.events) {
    if (e.lane != Lane::kCompute) continue;
    Sums& s = sums.at(static_cast<std::size_t>(e.stage));
    auto kind = static_cast<std::size_t>(e.kind);
    PS_CHECK(kind < kKept, "compute events are F, R, B, W or the optimizer");
    if (e.kind == EventKind::kForward && !schedule.recomputes(e.micro_batch)) kind = kKept;
    device_busy.at(static_cast<std::size_t>(e.device)) += e.end - e.start;
    s.total[kind] += e.end - e.start;
    // Without a CPU clock the wall time stands in.
    const SimTime cpu = e.cpu_time ? std::min(*e.cpu_time, e.end - e.start) : e.end - e.start;
    s.cpu[kind] += cpu;
    s.count[kind] += 1;
    wall_sum += e.end - e.start;
    cpu_sum += cpu;
  }
  std::vector<StageCost> replay = predicted.stage_costs;
  std::vector<StageCost> cpu_replay = predicted.stage_costs;
  for (int d = 0; d < K; ++d) {
    StageComparison sc;
    sc.predicted_busy_s =
        simtime_to_seconds(predicted.metrics.devices[static_cast<std::size_t>(d)].busy);
    sc.measured_busy_s = simtime_to_seconds(device_busy[static_cast<std::size_t>(d)]);
    sc.relative_error = relative_error(sc.predicted_busy_s, sc.measured_busy_s);
    c.per_stage.push_back(sc);
  }
  for (int s = 0; s < plan.model_stages(); ++s) {
    const Sums& m = sums[static_cast<std::size_t>(s)];
    const auto mean = [&](std::size_t i) {
      return m.count[i] == 0 ? SimTime{0} : m.total[i] / m.count[i];
    };
    const auto mean_cpu = [&](std::size_t i) {
      return m.count[i] == 0 ? SimTime{0} : m.cpu[i] / m.count[i];
    };
    const auto set = [&](StageCost& cost, const auto& of) {
      const auto at = [](EventKind k) { return static_cast<std::size_t>(k); };
      // A split backward's B and W together are the stage's backward.
      cost.forward = of(at(EventKind::kForward));
      cost.forward_kept = of(kKept);
      cost.weight = of(at(EventKind::kWeight));
      cost.backward = of(at(EventKind::kBackward)) + cost.weight;
      cost.recompute = of(at(EventKind::kRecompute));
      cost.optimizer = of(at(EventKind::kOptimizer));
    };
    set(replay[static_cast<std::size_t>(s)], mean);
    set(cpu_replay[static_cast<std::size_t>(s)], mean_cpu);

    const StageCost& p = predicted.stage_costs.at(static_cast<std::size_t>(s));
    const auto at = [](EventKind k) { return static_cast<std::size_t>(k); };
    const bool split = splits_backward(plan.schedule);
    const std::pair<std::size_t, SimTime> kinds[] = {
        {at(EventKind::kForward), p.forward},
        {kKept, p.forward_kept.value_or(p.forward)},
        {at(EventKind::kRecompute), p.recompute},
        {at(EventKind::kBackward), split ? p.backward - p.weight : p.backward},
        {at(EventKind::kWeight), p.weight},
        {at(EventKind::kOptimizer), p.optimizer}};
    for (const auto& [i, predicted_ns] : kinds) {
      if (m.count[i] == 0) continue;
      OpComparison op;
      op.stage = s;
      op.kind = i == kKept                       ? "F kept"
                : i == at(EventKind::kForward)   ? "F"
                : i == at(EventKind::kRecompute) ? "R"
                : i == at(EventKind::kBackward)  ? (split ? "B input" : "B")
                : i == at(EventKind::kWeight)    ? "W"
                                                 : "optimizer";
      op.count = static_cast<int>(m.count[i]);
      op.predicted_s = simtime_to_seconds(predicted_ns);
      op.measured_s = simtime_to_seconds(mean(i));
      op.measured_cpu_s = simtime_to_seconds(mean_cpu(i));
      op.relative_error = relative_error(op.predicted_s, op.measured_s);
      c.per_op.push_back(std::move(op));
    }
  }
  c.steal_fraction =
      wall_sum > 0 ? 1.0 - static_cast<double>(cpu_sum) / static_cast<double>(wall_sum) : 0.0;
  const EngineResult replayed = run_engine(schedule, replay, scenario.cluster, nullptr);
  c.replayed_step_s = simtime_to_seconds(replayed.step_time);
  c.runtime_overhead = c.replayed_step_s > 0 ? c.measured_step_s / c.replayed_step_s - 1.0 : 0.0;
  c.cpu_replayed_step_s =
      simtime_to_seconds(run_engine(schedule, cpu_replay, scenario.cluster, nullptr).step_time);
  c.cpu_relative_error = relative_error(c.predicted_step_s, c.cpu_replayed_step_s);
  return c;
}

}  // namespace pipescope::exec
