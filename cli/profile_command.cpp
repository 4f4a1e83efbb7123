#include "cli/profile_command.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "cli/progress.h"
#include "exec/plan_runner.h"
#include "exec/profiler.h"
#include "sim/format.h"
#include "sim/profile_io.h"

namespace pipescope::cli {

// Divisors of the batch beyond this many are dropped from the small end.
constexpr std::size_t kDefaultBatchSizes = 12;

CLI::App* add_profile_command(CLI::App& app, ProfileOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "profile",
      "Measure a scenario's layers (forward, backward, recompute at each micro-batch size a plan "
      "may use), its optimizer step and the transport between stages on this machine; "
      "`simulate`, `plan` and `sweep` take the result with --cost-model");
  add_scenario_options(*cmd, o.scenario);
  cmd->add_option("--backend", o.backend, "What to measure")
      ->check(CLI::IsMember({"cpu"}))
      ->capture_default_str();
  cmd->add_option("-o,--output", o.output, "Profile JSON to write")->capture_default_str();
  cmd->add_option("--batch-sizes", o.batch_sizes,
                  "Micro-batch sizes to measure, comma-separated (default: every divisor of "
                  "training.global_batch, the largest 12)")
      ->delimiter(',')
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20));
  cmd->add_option("--repeats", o.repeats, "Timings per figure (the median is kept)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--seed", o.seed, "Seed of the weights and the data")->capture_default_str();
  return cmd;
}

int run_profile(const ProfileOptions& o) {
  const Scenario scenario = load(o.scenario);
  exec::check_executor_size(scenario.model, o.scenario.file + ": model");
  exec::ProfileOptions p;
  p.batch_sizes = o.batch_sizes;
  std::sort(p.batch_sizes.begin(), p.batch_sizes.end());
  p.batch_sizes.erase(std::unique(p.batch_sizes.begin(), p.batch_sizes.end()), p.batch_sizes.end());
  if (p.batch_sizes.empty()) {
    p.batch_sizes = exec::plan_batch_sizes(scenario.training.global_batch, kDefaultBatchSizes);
    if (p.batch_sizes.back() > (1 << 20)) {
      throw std::invalid_argument(o.scenario.file +
                                  ": training.global_batch: too large a batch to profile every "
                                  "micro-batch size of; give the sizes with --batch-sizes");
    }
  }
  p.repeats = o.repeats;
  p.seed = o.seed;
  p.optimizer = scenario.training.optimizer.value_or(Optimizer::kAdam);
  Profile profile;
  try {
    ProgressBar bar("profiling");
    p.progress = [&](std::size_t done, std::size_t total) { bar.update(done, total); };
    profile = exec::profile_model(scenario.model, p);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(o.scenario.file + ": model: " + e.what());
  }
  write_profile_file(o.output, profile);

  std::printf("Profiled %s on %s (%d cores), %s backend, median of %d\n\n",
              scenario.model.name.c_str(), profile.machine.c_str(), profile.cores,
              profile.backend.c_str(), o.repeats);
  std::printf("%-12s %6s %12s %12s %12s\n", "layer", "batch", "forward", "backward", "recompute");
  for (const LayerProfile& l : profile.layers) {
    for (std::size_t i = 0; i < l.batch_sizes.size(); ++i) {
      std::printf("%-12s %6lld %12s %12s %12s\n", i == 0 ? l.example.c_str() : "",
                  static_cast<long long>(l.batch_sizes[i]),
                  format_seconds(simtime_to_seconds(l.forward[i])).c_str(),
                  format_seconds(simtime_to_seconds(l.backward[i])).c_str(),
                  format_seconds(simtime_to_seconds(l.recompute[i])).c_str());
    }
  }
  std::printf("\nOptimizer  %s: %s + %.3g ns per parameter\n", profile.optimizer.c_str(),
              format_seconds(simtime_to_seconds(profile.optimizer_overhead)).c_str(),
              profile.optimizer_ns_per_param);
  std::printf("Transport  in-process channel: %s latency, %s\n",
              format_seconds(profile.transport_latency_s).c_str(),
              format_rate(profile.transport_bandwidth).c_str());
  std::printf("\nProfile written to %s (use it with --cost-model %s)\n", o.output.c_str(),
              o.output.c_str());
  return 0;
}

}  // namespace pipescope::cli
