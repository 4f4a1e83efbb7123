#include "cli/run_command.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/progress.h"
#include "exec/plan_runner.h"
#include "sim/format.h"
#include "sim/plan_io.h"
#include "sim/trace_io.h"

namespace pipescope::cli {

CLI::App* add_run_command(CLI::App& app, RunOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "run",
      "Train a plan's model for real (synthetic data) with the plan's cut, schedule and remat, "
      "one thread per pipeline stage, and measure step time, throughput and bubble");
  cmd->add_option("plan", o.plan, "Plan JSON written by `pipescope plan -o`")->required();
  cmd->add_option("--backend", o.backend, "Where to run")
      ->check(CLI::IsMember({"cpu"}))
      ->capture_default_str();
  cmd->add_option("--steps", o.steps, "Training steps")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--lr", o.learning_rate, "Learning rate")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--seed", o.seed, "Seed of the weights and the data")->capture_default_str();
  cmd->add_option("--trace", o.trace, "Write the last step's measured timeline as a Chrome trace");
  cmd->add_flag("--json", o.json, "Print the results as JSON");
  return cmd;
}

int run_run(const RunOptions& o) {
  const Plan plan = read_plan_file(o.plan);
  const ModelSpec spec = exec::plan_model(plan, o.plan);
  const int batch = static_cast<int>(plan.global_batch / plan.data_parallel);
  std::vector<exec::StepResult> steps;
  {
    ProgressBar bar("training");
    exec::PlanRunOptions run;
    run.steps = o.steps;
    run.learning_rate = o.learning_rate;
    run.seed = o.seed;
    run.on_step = [&](int done, int total, const exec::StepResult&) {
      bar.update(static_cast<std::size_t>(done), static_cast<std::size_t>(total));
    };
    steps = exec::run_plan(plan, spec, run);
  }
  std::vector<double> losses;
  for (const exec::StepResult& r : steps) losses.push_back(r.loss);
  // The first step warms caches and allocators; the median of the rest stands for
  // the run.
  const exec::StepResult& median = steps[exec::median_step(steps, 1)];
  const exec::StepResult& last = steps.back();
  const double bubble = exec::measured_bubble(median, plan.stages);
  const double step_s = simtime_to_seconds(median.step_time);
  const double throughput = batch / step_s;
  if (o.trace) write_chrome_trace_file(*o.trace, last.timeline);
  if (o.json) {
    std::cout << nlohmann::json{{"losses", losses},
                                {"measured_step_time_s", step_s},
                                {"throughput_samples_per_s", throughput},
                                {"bubble_fraction", bubble}}
                     .dump(2)
              << "\n";
    return 0;
  }
  std::cout << "Running " << o.plan << ": " << spec.name << ", "
            << format_count(static_cast<double>(spec.total_params()))
            << " params, K=" << plan.stages << ", M=" << plan.micro_batches << ", batch " << batch
            << ", remat " << remat_label(plan.remat) << ", " << o.steps
            << " steps on the CPU (one thread per stage)\n\n";
  for (std::size_t i = 0; i < losses.size(); ++i) {
    std::printf("step %4zu  loss %.5f  %s\n", i + 1, losses[i],
                format_seconds(simtime_to_seconds(steps[i].step_time)).c_str());
  }
  std::printf(
      "\nMeasured step time  %s (median of steps 2-%d)\nThroughput          %.4g samples/s\nBubble "
      "             %s\n",
      format_seconds(step_s).c_str(), o.steps, throughput, format_percent(bubble).c_str());
  if (plan.data_parallel > 1)
    std::printf("(one of the plan's %d data-parallel replicas)\n", plan.data_parallel);
  if (o.trace) std::printf("Trace written to %s\n", o.trace->c_str());
  return 0;
}

}  // namespace pipescope::cli
