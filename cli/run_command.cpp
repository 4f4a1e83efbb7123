#include "cli/run_command.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/progress.h"
#include "exec/data.h"
#include "exec/models.h"
#include "exec/runtime.h"
#include "sim/format.h"
#include "sim/plan_io.h"
#include "sim/scenario_io.h"
#include "sim/trace_io.h"

namespace pipescope::cli {

// Weights, gradients and two optimizer slots in fp32; beyond this a run would
// swap or be killed rather than teach anything.
constexpr double kMaxExecutorBytes = 4.0 * 1024 * 1024 * 1024;

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

namespace {

// The measured bubble: 1 - compute time / (devices x step time).
double measured_bubble(const exec::StepResult& r, int devices) {
  SimTime busy = 0;
  for (const TimelineEvent& e : r.timeline.events) {
    if (e.lane == Lane::kCompute) busy += e.end - e.start;
  }
  const double total = static_cast<double>(r.step_time) * devices;
  return total > 0 ? 1.0 - static_cast<double>(busy) / total : 0.0;
}

}  // namespace

int run_run(const RunOptions& o) {
  const Plan plan = read_plan_file(o.plan);
  if (plan.model_spec.is_null()) {
    throw std::invalid_argument(o.plan +
                                ": model.spec: the executor runs transformer and mlp models; this "
                                "plan's model is an explicit layer list or another family");
  }
  const ModelSpec spec = parse_model(plan.model_spec, o.plan, "model.spec");
  const double bytes = static_cast<double>(spec.total_params()) * 16.0;
  if (bytes > kMaxExecutorBytes) {
    throw std::invalid_argument(
        o.plan + ": model.spec: " + format_count(static_cast<double>(spec.total_params())) +
        " parameters need " + format_bytes(bytes) +
        " of weights, gradients and optimizer state in fp32; the CPU executor takes up to " +
        format_bytes(kMaxExecutorBytes) + " (plan a smaller model, e.g. scenarios/cpu-small.json)");
  }
  exec::LayerList all = exec::build_layers(spec, o.seed);
  std::vector<exec::LayerList> stages;
  for (const StageRange& r : plan.stage_ranges()) {
    exec::LayerList stage;
    for (int l = r.first_layer; l <= r.last_layer; ++l)
      stage.push_back(std::move(all[static_cast<std::size_t>(l)]));
    stages.push_back(std::move(stage));
  }
  exec::RuntimeOptions options;
  options.optimizer.kind = plan.optimizer.value_or(Optimizer::kAdam);
  options.optimizer.learning_rate = o.learning_rate;
  exec::PipelineRuntime runtime(
      std::move(stages), build_schedule(plan.schedule, plan.stages, plan.micro_batches, plan.remat),
      options);
  exec::TaskShape task;
  task.language_model = spec.transformer != nullptr;
  if (spec.transformer) {
    task.seq_len = static_cast<int>(spec.transformer->seq_len);
    task.vocab = static_cast<int>(spec.transformer->vocab);
  } else {
    task.features = static_cast<int>(spec.mlp->d_model);
    task.classes = static_cast<int>(spec.mlp->classes == 0 ? spec.mlp->d_model : spec.mlp->classes);
  }
  // One replica of the plan's D: its share of the batch.
  const int batch = static_cast<int>(plan.global_batch / plan.data_parallel);

  std::vector<double> losses;
  std::vector<SimTime> times;
  std::vector<double> bubbles;
  exec::StepResult last;
  {
    ProgressBar bar("training");
    for (int step = 0; step < o.steps; ++step) {
      last = runtime.step(exec::synthetic_batch(task, batch, plan.micro_batches,
                                                static_cast<std::uint64_t>(step), o.seed));
      losses.push_back(last.loss);
      times.push_back(last.step_time);
      bubbles.push_back(measured_bubble(last, plan.stages));
      bar.update(static_cast<std::size_t>(step + 1), static_cast<std::size_t>(o.steps));
    }
  }
  // The first step warms caches and allocators; the median of the rest stands for
  // the run.
  std::vector<std::size_t> order;
  for (std::size_t i = o.steps > 1 ? 1 : 0; i < times.size(); ++i) order.push_back(i);
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return times[a] < times[b]; });
  const std::size_t median = order[order.size() / 2];
  const double step_s = simtime_to_seconds(times[median]);
  const double throughput = batch / step_s;
  if (o.trace) write_chrome_trace_file(*o.trace, last.timeline);
  if (o.json) {
    std::cout << nlohmann::json{{"losses", losses},
                                {"measured_step_time_s", step_s},
                                {"throughput_samples_per_s", throughput},
                                {"bubble_fraction", bubbles[median]}}
                     .dump(2)
              << "\n";
    return 0;
  }
  std::cout << "Running " << o.plan << ": " << spec.name << ", "
            << format_count(static_cast<double>(spec.total_params()))
            << " params, K=" << plan.stages << ", M=" << plan.micro_batches << ", batch " << batch
            << ", remat " << (plan.remat ? "on" : "off") << ", " << o.steps
            << " steps on the CPU (one thread per stage)\n\n";
  for (std::size_t i = 0; i < losses.size(); ++i) {
    std::printf("step %4zu  loss %.5f  %s\n", i + 1, losses[i],
                format_seconds(simtime_to_seconds(times[i])).c_str());
  }
  std::printf(
      "\nMeasured step time  %s (median of steps 2-%d)\nThroughput          %.4g samples/s\nBubble "
      "             %s\n",
      format_seconds(step_s).c_str(), o.steps, throughput, format_percent(bubbles[median]).c_str());
  if (plan.data_parallel > 1)
    std::printf("(one of the plan's %d data-parallel replicas)\n", plan.data_parallel);
  if (o.trace) std::printf("Trace written to %s\n", o.trace->c_str());
  return 0;
}

}  // namespace pipescope::cli
