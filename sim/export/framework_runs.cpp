#include "sim/export/framework_runs.h"

#include <cstdint>
#include <optional>
#include <string>

#include "costmodels/check.h"
#include "sim/base/format.h"
#include "sim/engine/simulator.h"
#include "sim/plan/planner.h"

namespace pipescope {
namespace {

std::string_view schedule_label(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::kGpipe:
      return "GPipe";
    case ScheduleKind::k1F1B:
      return "1F1B";
    case ScheduleKind::kZbH1:
      return "ZB-H1";
    case ScheduleKind::kInterleaved1F1B:
      return "interleaved 1F1B";
    case ScheduleKind::kLoopedBfs:
      return "looped BFS";
    case ScheduleKind::kZbV:
      return "ZB-V";
    case ScheduleKind::kInterleavedZb:
      return "interleaved zero bubble";
    case ScheduleKind::kDualPipeV:
      return "DualPipeV";
    case ScheduleKind::kCustom:
      return "a custom schedule";
  }
  return "unknown";
}

// A step's time and its largest peak memory, with the device that has it.
struct StepFigures {
  double step_s = 0.0;
  Bytes peak = 0;
  int device = 0;
};

void keep_larger_peak(StepFigures& f, Bytes peak, int device) {
  if (peak > f.peak) {
    f.peak = peak;
    f.device = device;
  }
}

StepFigures planned_figures(const Plan& p) {
  StepFigures f{p.step_time_s, 0, 0};
  for (const PlanStage& s : p.stage_plans) keep_larger_peak(f, s.peak_memory, s.device);
  return f;
}

// The plan's pipeline (K, M, cut, remat) simulated under `run` on its scenario,
// its stages exchanging tensors as `sends` says (the plan's when unset).
StepFigures simulated_figures(const Scenario& scenario, const Plan& p, FrameworkSchedule run,
                              std::optional<FrameworkSends> sends = std::nullopt) {
  PlanSimulation sim = plan_simulation(scenario, p);
  if (sends) {
    sim.scenario.cluster.p2p = sim.scenario.cluster.p2p_interleaved = sends->mode;
    sim.scenario.cluster.p2p_split = sends->split;
  }
  sim.config.schedule = run.schedule;
  sim.config.chunks = run.chunks;
  sim.config.custom = nullptr;
  const Metrics m = simulate(sim.scenario, sim.config).metrics;
  StepFigures f{m.step_time_s(), 0, 0};
  for (std::size_t d = 0; d < m.devices.size(); ++d) {
    keep_larger_peak(f, m.devices[d].peak_memory, static_cast<int>(d));
  }
  return f;
}

std::string bytes(Bytes b) {
  return format_bytes(static_cast<double>(b));
}

// What differs between the framework's sends and the plan's, where it
// matters: the mode with K > 1, the split with K > 1 and T > 1 without
// sequence parallelism.
struct SendsDiffer {
  bool mode = false;
  bool split = false;
  bool any() const { return mode || split; }
};
SendsDiffer sends_differ(const Plan& p, const FrameworkSends& there) {
  SendsDiffer d;
  d.mode = p.stages > 1 && there.mode != p.p2p;
  d.split =
      p.stages > 1 && p.tensor_parallel > 1 && !p.sequence_parallel && there.split != p.p2p_split;
  return d;
}

// The framework's sends for the plan, all blocking where the scenario's
// launches block (Framework::launch_blocking: nothing overlaps a send there).
FrameworkSends sends_there(ExportFormat format, const Plan& p, const Scenario* scenario) {
  FrameworkSends s = framework_sends(format, p);
  if (scenario != nullptr && scenario->training.framework.launch_blocking) {
    s.mode = P2pMode::kBlocking;
  }
  return s;
}

}  // namespace

std::string_view framework_label(ExportFormat f) {
  switch (f) {
    case ExportFormat::kTorchGpipe:
      return "torchgpipe";
    case ExportFormat::kDeepSpeed:
      return "DeepSpeed";
    case ExportFormat::kMegatron:
      return "Megatron-LM";
    case ExportFormat::kTorchPipelining:
      return "PyTorch pipelining";
  }
  return "unknown";
}

// Comment lines: the schedule the framework runs and, when it is not the plan's,
// what the plan becomes under it (with the framework's sends, framework_sends).
std::string schedule_note(const Plan& p, ExportFormat format, const Scenario* scenario) {
  const FrameworkSchedule run = framework_schedule(format, p);
  const std::string runs = "# " + std::string(framework_label(format)) + " runs " +
                           std::string(schedule_label(run.schedule));
  if (run == FrameworkSchedule{p.schedule, p.chunks}) {
    // Sends exchanged otherwise change the step (sends_note), not the memory.
    if (sends_differ(p, sends_there(format, p, scenario)).any()) {
      return runs + ", the plan's schedule: the plan's memory holds there.\n";
    }
    return runs + ", the plan's schedule: the plan's step time and memory hold there.\n";
  }
  const std::string head = runs + ", not " + std::string(schedule_label(p.schedule)) + ": ";
  if (scenario == nullptr) {
    return head + "the step time and peak memory there are not\n# the plan's; " +
           "export with the plan's scenario (--scenario FILE) to see them simulated.\n";
  }
  const StepFigures there = simulated_figures(*scenario, p, run, sends_there(format, p, scenario));
  const StepFigures planned = planned_figures(p);
  const Bytes capacity = scenario->cluster.device.memory_bytes;
  return head + "this plan there takes " + format_seconds(there.step_s) +
         " a step (plan: " + format_seconds(planned.step_s) + ")\n# and peaks at " +
         bytes(there.peak) + " on device " + std::to_string(there.device) +
         " (plan: " + bytes(planned.peak) + " on device " + std::to_string(planned.device) + ")" +
         (there.peak > capacity ? ", more than a device's " + bytes(capacity) : "") + ".\n";
}

// What stages do with their sends under `mode`, for the notes below.
std::string sends_phrase(P2pMode mode) {
  switch (mode) {
    case P2pMode::kBlocking:
      return "waits for every send between stages";
    case P2pMode::kOverlapped:
      return "overlaps its sends between stages with compute";
    case P2pMode::kOverlappedSteady:
      return "overlaps its sends between stages with compute but in the warm-up and cool-down";
  }
  return "";
}

// Comment lines when the framework's stages exchange tensors otherwise than
// the plan's (docs/models.md, "How stages exchange tensors"): what differs
// and, when the scenario is given, what the plan takes there.
std::string sends_note(const Plan& p, ExportFormat format, const Scenario* scenario) {
  const FrameworkSends there = sends_there(format, p, scenario);
  const SendsDiffer differ = sends_differ(p, there);
  if (!differ.any()) return "";
  const std::string name = "# " + std::string(framework_label(format));
  std::string head;
  std::string set;
  if (differ.mode) {
    head += name + " " + sends_phrase(there.mode) + ", where the plan\n# " + sends_phrase(p.p2p) +
            " (cluster.p2p " + std::string(to_string(p.p2p)) + ")";
    set += "--set cluster.p2p=" + std::string(to_string(there.mode));
  }
  if (differ.split) {
    head += std::string(differ.mode ? ";\n" : "") + name +
            (there.split ? " sends 1/T of a cut from each device, where the plan\n"
                           "# sends each device's whole copy (cluster.p2p_split false)"
                         : " sends each device's whole copy of a cut, where the plan\n"
                           "# sends 1/T of it (cluster.p2p_split true)");
    set += std::string(set.empty() ? "" : " ") +
           "--set cluster.p2p_split=" + (there.split ? "true" : "false");
  }
  const FrameworkSchedule run = framework_schedule(format, p);
  if (scenario == nullptr) {
    return head + ";\n# plan with " + set + " for the step time there.\n";
  }
  // Under another schedule the line above gave the figures, sends included.
  if (!(run == FrameworkSchedule{p.schedule, p.chunks})) {
    return head + ": the figures above count\n# them; plan with " + set + " for them.\n";
  }
  const StepFigures figures = simulated_figures(*scenario, p, run, there);
  return head + ": this plan there takes " + format_seconds(figures.step_s) +
         " a step\n# (plan: " + format_seconds(p.step_time_s) + "); plan with " + set +
         " for it.\n";
}

// DeepSpeed and Megatron-LM recompute every micro-batch or none.
std::string except_last_note(const Plan& p, ExportFormat format) {
  if (p.remat != Remat::kExceptLast) return "";
  std::string times;
  for (std::size_t s = 0; s < p.stage_plans.size(); ++s) {
    times += (s ? " / " : "") + format_seconds(p.stage_plans[s].recompute_s);
  }
  return "# " + std::string(framework_label(format)) +
         " recomputes every micro-batch: remat except-last runs as remat on,\n" +
         "# one recompute more per stage and step than the plan predicts (" + times + ").\n";
}

FrameworkSends framework_sends(ExportFormat format, const Plan& plan) {
  switch (format) {
    case ExportFormat::kDeepSpeed:
      return {P2pMode::kBlocking, true};
    case ExportFormat::kMegatron:
      // Blocking sends with virtual stages need more than 2 pipeline stages
      // (Megatron-LM's validate_args); below that it overlaps them as by default.
      if (plan.chunks == 1) return {P2pMode::kBlocking, false};
      if (plan.p2p == P2pMode::kBlocking && plan.stages <= 2) {
        return {P2pMode::kOverlappedSteady, false};
      }
      return {plan.p2p, false};
    case ExportFormat::kTorchGpipe:
    case ExportFormat::kTorchPipelining:
      return {P2pMode::kOverlapped, false};
  }
  fail_check("format is known", __FILE__, __LINE__, "unknown export format");
}

FrameworkSchedule framework_schedule(ExportFormat format, const Plan& plan) {
  switch (format) {
    case ExportFormat::kTorchGpipe:
      return {ScheduleKind::kGpipe, 1};
    case ExportFormat::kDeepSpeed:
      return {ScheduleKind::k1F1B, 1};
    case ExportFormat::kMegatron:
      return plan.chunks > 1 ? FrameworkSchedule{ScheduleKind::kInterleaved1F1B, plan.chunks}
                             : FrameworkSchedule{ScheduleKind::k1F1B, 1};
    case ExportFormat::kTorchPipelining:
      return {plan.schedule, plan.chunks};
  }
  fail_check("format is known", __FILE__, __LINE__, "unknown export format");
}

}  // namespace pipescope
