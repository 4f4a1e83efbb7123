#include "cli/sweep_command.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/json_output.h"
#include "cli/progress.h"
#include "cli/summary.h"
#include "sim/base/file_io.h"
#include "sim/base/format.h"
#include "sim/engine/simulator.h"
#include "sim/plan/sweep.h"

namespace pipescope::cli {

CLI::App* add_sweep_command(CLI::App& app, SweepOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "sweep", "Simulate every K x M pair and print throughput, bubble and peak memory tables");
  add_scenario_options(*cmd, o.scenario);
  add_cost_model_option(*cmd, o.scenario);
  add_number_list_option(*cmd, "-K,--stages", o.stages,
                         "Stage counts, comma-separated (default: 1, 2, 4, ... up to the devices)",
                         positive_count());
  add_number_list_option(
      *cmd, "-M,--micro-batches", o.micro_batches,
      "Micro-batch counts, comma-separated (default: 1, 2, 4, ... dividing the batch)",
      positive_count());
  add_remat_option(*cmd, o.remat, "default: training.remat");
  add_checkpoint_option(*cmd, o.checkpoint);
  add_tensor_parallel_option(*cmd, o.tensor_parallel);
  add_expert_parallel_option(*cmd, o.expert_parallel, o.expert_tensor_parallel);
  add_context_parallel_option(*cmd, o.context_parallel);
  cmd->add_option("--schedule", o.schedule, "Pipeline schedule (default: training.schedule)")
      ->check(CLI::IsMember(schedule_choices(false)));
  cmd->add_option("--chunks", o.chunks, chunks_help("default: training.chunks"))
      ->check(positive_count());
  cmd->add_option("-D,--data-parallel", o.data_parallel,
                  "Data-parallel replicas of each pipeline: every K x M point simulates one of "
                  "D replicas of K devices on batch / D, with each stage's gradient all-reduce, "
                  "and counts all D in its throughput (default: 1)")
      ->check(positive_count());
  add_partition_option(*cmd, o.partition);
  add_balance_option(*cmd, o.balance);
  cmd->add_option("--csv", o.csv, "Also write the results as CSV");
  cmd->add_flag("--json", o.json, "Print the results as JSON");
  return cmd;
}

namespace {

std::vector<int> powers_of_two(std::int64_t limit, const std::function<bool(int)>& keep) {
  std::vector<int> out;
  for (std::int64_t v = 1; v <= limit; v *= 2) {
    if (keep(static_cast<int>(v))) out.push_back(static_cast<int>(v));
  }
  return out;
}

void print_grid(const std::string& title, const SweepRequest& req,
                const std::vector<SweepPoint>& points,
                const std::function<std::string(const SweepPoint&)>& cell) {
  std::printf("%s\n%8s", title.c_str(), "K \\ M");
  for (int M : req.micro_batches) std::printf(" %10d", M);
  std::printf("\n");
  std::size_t i = 0;
  for (int K : req.stages) {
    std::printf("%8d", K);
    for (std::size_t m = 0; m < req.micro_batches.size(); ++m, ++i) {
      const SweepPoint& p = points[i];
      std::printf(" %10s", p.error.empty() ? cell(p).c_str() : "-");
    }
    std::printf("\n");
  }
  std::printf("\n");
}

}  // namespace

int run_sweep_command(const SweepOptions& o) {
  TrainingFlags flags;
  flags.micro_batches_vary = !o.micro_batches.empty();
  flags.schedule = o.schedule;
  flags.chunks = o.chunks;
  flags.remat = o.remat;
  flags.checkpoint = o.checkpoint;
  flags.tensor_parallel = o.tensor_parallel;
  flags.expert_parallel = o.expert_parallel;
  flags.expert_tensor_parallel = o.expert_tensor_parallel;
  flags.context_parallel = o.context_parallel;
  const Scenario sc = load(with_balance(with_training_flags(o.scenario, flags), o.balance));
  SweepRequest req;
  req.stages = o.stages;
  req.micro_batches = o.micro_batches;
  const int layers = static_cast<int>(sc.model.layers.size());
  const int D = o.data_parallel;
  if (sc.training.global_batch % D != 0 || D > sc.cluster.devices) {
    throw ConfigError("--data-parallel " + std::to_string(D) + " needs at most " +
                      std::to_string(sc.cluster.devices) +
                      " replicas dividing the global batch of " +
                      std::to_string(sc.training.global_batch));
  }
  req.data_parallel = D;
  const std::int64_t replica_batch = sc.training.global_batch / D;
  if (req.stages.empty()) {
    req.stages = powers_of_two(sc.cluster.devices / D, [&](int K) { return K <= layers; });
  }
  if (req.micro_batches.empty()) {
    req.micro_batches = powers_of_two(replica_batch, [&](int M) { return replica_batch % M == 0; });
  }
  req.remat = remat_of(o.remat);
  if (o.schedule) req.schedule = parse_schedule(*o.schedule);
  req.chunks = o.chunks;
  req.partition = *parse_partition_method(o.partition);
  std::vector<SweepPoint> points;
  {
    ProgressBar bar("sweeping");
    req.progress = [&](std::size_t done, std::size_t total) { bar.update(done, total); };
    points = run_sweep(sc, req);
  }
  // A table of configurations that cannot run tells nothing: say why instead,
  // and leave any --csv file as it was.
  const std::string nothing = sweep_nothing_fits(points, sc.cluster.device.memory_bytes);
  if (!nothing.empty()) throw ConfigError("sweep of " + sc.name + ": " + nothing);
  if (o.csv) write_file_atomically(*o.csv, sweep_csv(points));
  if (o.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const SweepPoint& p : points) {
      nlohmann::json j = {{"K", p.stages}, {"M", p.micro_batches}};
      if (!p.error.empty()) {
        j["error"] = p.error;
      } else {
        j.update({{"step_time_s", p.step_time_s},
                  {"throughput_samples_per_s", p.samples_per_s},
                  {"bubble_fraction", p.bubble_fraction},
                  {"mfu", p.mfu},
                  {"peak_memory_bytes", p.peak_memory},
                  {"fits", p.fits}});
      }
      out.push_back(j);
    }
    print_json(out);
    return 0;
  }
  std::cout << "Sweep of " << sc.name << " on " << sc.cluster.device.name << " ("
            << format_bytes(static_cast<double>(sc.cluster.device.memory_bytes))
            << " per device), global batch " << sc.training.global_batch << ", partition "
            << (sc.training.cut ? "given (" + cut_source(sc, o.balance.has_value()) + ")"
                                : o.partition);
  if (D > 1) {
    std::cout << ", D=" << D << " replicas of each pipeline (one simulated, with its gradient "
              << "all-reduce; throughput counts all)";
  }
  std::cout << "\n\n";
  char buf[64];
  print_grid("Throughput (samples/s)", req, points, [&](const SweepPoint& p) {
    std::snprintf(buf, sizeof buf, "%.4g", p.samples_per_s);
    return std::string(buf);
  });
  print_grid("Bubble", req, points,
             [](const SweepPoint& p) { return format_percent(p.bubble_fraction); });
  print_grid("Peak memory per device (! = does not fit)", req, points, [](const SweepPoint& p) {
    return format_bytes(static_cast<double>(p.peak_memory)) + (p.fits ? "" : "!");
  });
  for (const SweepPoint& p : points) {
    if (!p.error.empty()) {
      std::cout << "K=" << p.stages << " M=" << p.micro_batches << ": " << p.error << "\n";
    }
  }
  if (o.csv) std::cout << "CSV written to " << output_name(*o.csv) << "\n";
  return 0;
}

}  // namespace pipescope::cli
