#include "cli/profile_command.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/gpu_stages.h"
#include "cli/json_output.h"
#include "cli/mpi_job.h"
#include "cli/progress.h"
#include "exec/compute/gemm_rate.h"
#include "exec/compute/host_memory.h"
#include "exec/compute/kernel_level.h"
#include "exec/plan_runner.h"
#include "exec/profiler.h"
#include "exec/share_exchange_profile.h"
#include "sim/base/format.h"
#include "sim/formats/profile_io.h"

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
  add_backend_option(
      *cmd, o.backend,
      "What to measure: cpu (the layers on one thread, the in-process channel), cuda "
      "(the layers on GPU 0, copies from it to GPU 1, or to another stream of GPU 0 "
      "when it is the only one) or mpi (under `mpirun -np 2` or more: the layers on "
      "rank 0, MPI point-to-point between ranks 0 and 1)");
  cmd->add_option("-o,--output", o.output, "Profile JSON to write")->capture_default_str();
  add_number_list_option(*cmd, "--batch-sizes", o.batch_sizes,
                         "Micro-batch sizes to measure, comma-separated (default: every divisor "
                         "of training.global_batch, the largest 12)",
                         CLI::Range(std::int64_t{1}, std::int64_t{1} << 20));
  cmd->add_option("--repeats", o.repeats, "Timings per figure (the median is kept)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  add_seed_option(*cmd, o.seed, "Seed of the weights and the data");
  cmd->add_flag("--json", o.json,
                "Print the profile as JSON, with each layer's FLOPs, achieved FLOP/s and share "
                "of the machine's GEMM rate");
  return cmd;
}

namespace {

// What every rank checks alike before any measurement.
exec::ProfileOptions profile_options(const ProfileOptions& o, const Scenario& scenario) {
  if (scenario.cluster.context_parallel > 1 && o.backend == "cuda") {
    throw ScenarioError(o.scenario.file, "training.context_parallel",
                        "--backend " + o.backend +
                            " profiles whole sequences; the cpu and mpi backends profile a "
                            "share of each (context parallelism), or profile the scenario with "
                            "context_parallel 1");
  }
  if (scenario.training.tensor_parallel > 1) {
    throw ScenarioError(o.scenario.file, "training.tensor_parallel",
                        "the executor profiles whole layers, one per device; profile the "
                        "scenario with tensor_parallel 1");
  }
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
  exec::check_profile_fits_host(scenario.model, p.batch_sizes.back(), o.scenario.file + ": model");
  p.repeats = o.repeats;
  // Rounds whose cores changed speed are not kept (exec/machine_speed.h).
  p.check_speed = true;
  p.seed = o.seed;
  p.optimizer = scenario.training.optimizer.value_or(Optimizer::kAdam);
  p.context_ranks = scenario.training.context_parallel;  // the shares' exchanges
  p.expert_ranks = scenario.training.expert_parallel;    // the routed load
  return p;
}

Profile measure(const ProfileOptions& o, const Scenario& scenario, exec::ProfileOptions p) {
  try {
    ProgressBar bar("profiling");
    p.progress = [&](std::size_t done, std::size_t total) { bar.update(done, total); };
    Profile profile = exec::profile_model(scenario.model, p);
    // The layers ran on this CPU, one thread: the rate they are measured against.
    if (!p.device) {
      const exec::GemmRate gemm = exec::measure_gemm_rate();
      profile.gemm = MachineGemm{gemm.flop_s, gemm.shape.m, gemm.shape.n, gemm.shape.k};
    }
    return profile;
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(o.scenario.file + ": model: " + e.what());
  }
}

void print_profile(const ProfileOptions& o, const Scenario& scenario, const Profile& profile);

// Under mpirun: rank 0 measures the layers while the others sleep, then ranks 0
// and 1 measure the MPI transport; rank 0 writes the profile (errors:
// cli/mpi_job.h).
int run_profile_mpi(const ProfileOptions& o) {
  const MpiJob job;
  std::optional<Scenario> scenario;
  exec::ProfileOptions p;
  try {
    // Each rank reads its own scenario: one agreement ends the input phase.
    job.agree([&] {
      if (job.size() < 2) {
        throw std::invalid_argument(
            "--backend mpi measures the transport between two processes: start it with mpirun "
            "-np 2");
      }
      scenario = load(o.scenario);
      p = profile_options(o, *scenario);
      p.measure_threads = false;  // measure_mpi_machine measures the ranks instead
    });
  } catch (const std::exception& e) {
    return job.input_error(e);
  }
  Profile profile;
  try {
    if (job.rank() == 0) profile = measure(o, *scenario, p);
    job.backend().measure_machine(profile, scenario->model, p.batch_sizes.back(), o.seed, nullptr);
    if (job.rank() == 0) write_profile_file(o.output, profile);
  } catch (const std::exception& e) {
    job.rank_error(e);
  }
  if (job.rank() == 0) print_profile(o, *scenario, profile);
  return 0;
}

// How the layers were timed (rounds kept, other work) and the cores' slowdown;
// nothing for profiles without rounds (a GPU's).
void print_rounds(const Profile& profile) {
  const ProfileRounds& r = profile.rounds;
  if (r.measured == 0) return;
  const int discarded = r.measured - r.kept;
  std::printf("Rounds     %d measured, %d kept", r.measured, r.kept);
  if (discarded > 0 && r.other_work > r.discard_above) {
    std::printf(
        ": other work took over %s of the ops' wall time in every round (%s in the "
        "least disturbed half, kept)",
        format_percent(r.discard_above).c_str(), format_percent(r.other_work).c_str());
  } else if (discarded > 0) {
    std::printf(" (%d discarded: other work took over %s of their ops' wall time%s)", discarded,
                format_percent(r.discard_above).c_str(),
                r.speed_spread >= 0.0 ? ", or their cores changed speed" : "");
  }
  std::printf("; each op timed on its thread's CPU clock, which leaves out what other work took");
  if (r.speed_spread >= 0.0) {
    std::printf("; the cores' speed moved by at most %s over a kept round",
                format_percent(r.speed_spread).c_str());
  }
  std::printf("\n");
  const std::vector<double>& f = profile.concurrency_slowdown;
  if (r.slowdown_of_stages && f.size() > 1) {
    std::string each;
    for (std::size_t n = 2; n <= f.size(); ++n) {
      char buf[48];
      std::snprintf(buf, sizeof buf, "%s%zu at once x%.3f", each.empty() ? "" : ", ", n, f[n - 1]);
      each += buf;
    }
    std::printf(
        "Cores      %s: every op with each core running a stage's share of the layers, against "
        "one core running them all\n",
        each.c_str());
  }
}

// Each layer's achieved FLOP/s beside the machine's GEMM rate; nothing when the
// rate was not measured (a GPU backend).
void print_layer_rates(const Scenario& scenario, const Profile& profile) {
  if (profile.gemm.flop_s <= 0.0) return;
  std::printf("\nGEMM       %s: the executor's fp32 product at %lld x %lld x %lld on one thread\n",
              format_flop_rate(profile.gemm.flop_s).c_str(), static_cast<long long>(profile.gemm.m),
              static_cast<long long>(profile.gemm.n), static_cast<long long>(profile.gemm.k));
  std::printf(
      "Achieved   each layer's FLOPs over its measured time, and its share of the GEMM rate\n");
  std::printf("%-12s %6s %14s %8s %14s %8s\n", "layer", "batch", "forward", "of GEMM", "backward",
              "of GEMM");
  for (const LayerProfile& l : profile.layers) {
    const LayerSpec* spec = exec::measured_layer(scenario.model, l);
    if (spec == nullptr) continue;
    for (std::size_t i = 0; i < l.batch_sizes.size(); ++i) {
      const exec::LayerRates r = exec::layer_rates(*spec, l, i, profile.gemm.flop_s);
      std::printf(
          "%-12s %6lld %14s %8s %14s %8s\n", i == 0 ? l.example.c_str() : "",
          static_cast<long long>(l.batch_sizes[i]), format_flop_rate(r.forward.flop_s).c_str(),
          format_percent(r.forward.fraction).c_str(), format_flop_rate(r.backward.flop_s).c_str(),
          format_percent(r.backward.fraction).c_str());
    }
  }
}

// The profile as written, each layer with its FLOPs, achieved FLOP/s and (when
// the GEMM rate was measured) their share of it per batch size, and the file.
void print_profile_json(const ProfileOptions& o, const Scenario& scenario, const Profile& profile) {
  nlohmann::json doc = profile_to_json(profile);
  doc["output"] = o.output;
  if (profile.backend != "cuda") doc["kernels"] = exec::kernel_level();
  const bool has_gemm = profile.gemm.flop_s > 0.0;
  for (std::size_t e = 0; e < profile.layers.size(); ++e) {
    const LayerProfile& l = profile.layers[e];
    const LayerSpec* spec = exec::measured_layer(scenario.model, l);
    if (spec == nullptr) continue;
    nlohmann::json& out = doc["layers"][e];
    for (std::size_t i = 0; i < l.batch_sizes.size(); ++i) {
      const exec::LayerRates r = exec::layer_rates(*spec, l, i, profile.gemm.flop_s);
      out["forward_flops"].push_back(r.forward_flops);
      out["backward_flops"].push_back(r.backward_flops);
      out["forward_flop_s"].push_back(r.forward.flop_s);
      out["backward_flop_s"].push_back(r.backward.flop_s);
      if (has_gemm) {
        out["forward_gemm_fraction"].push_back(r.forward.fraction);
        out["backward_gemm_fraction"].push_back(r.backward.fraction);
      }
    }
  }
  print_json(doc);
}

// Why the shares' exchanges (or the expert ranks' load) of a CPU profile
// were not timed, when their layers did not fit the memory (under MPI each
// of the group's processes builds every rank's).
void print_unfit(const Scenario& scenario, const Profile& profile, bool measured, const char* what,
                 const char* instead) {
  const bool mpi = profile.backend == "mpi";
  if (measured || (profile.backend != "cpu" && !mpi) || profile.layers.empty()) return;
  const ModelSpec& m = scenario.model;
  const std::string unfit = exec::share_exchanges_unfit(
      m, profile.layers.front().batch_sizes.back(), exec::host_memory_available(),
      mpi ? m.context_parallel * m.expert_parallel : 1);
  if (!unfit.empty()) std::printf("%s not timed: %s; %s\n", what, unfit.c_str(), instead);
}

// The context shares' exchanges, as their layers ran them, when measured;
// or why they were not, when the shares' layers did not fit the memory.
void print_context_exchanges(const Scenario& scenario, const Profile& profile) {
  if (scenario.model.context_parallel > 1) {
    print_unfit(scenario, profile,
                profile.context_ring.ranks > 1 || profile.alltoall_group.ranks > 1,
                "Context    the shares' exchanges were",
                "predictions from this profile price them as the model does");
  }
  if (const ContextRingFigures& r = profile.context_ring; r.ranks > 1) {
    std::printf("Context    ring of %d shares: a take %s in a forward, %s in a backward\n", r.ranks,
                format_seconds(r.forward_take_s).c_str(),
                format_seconds(r.backward_take_s).c_str());
  }
  if (const GroupAllToAllFigures& a = profile.alltoall_group; a.ranks > 1) {
    std::printf("Context    all-to-all of %d shares: %s latency, %s\n", a.ranks,
                format_seconds(a.latency_s).c_str(), format_rate(a.bandwidth).c_str());
  }
}

// The expert ranks' routed load, when measured; or why it was not, when the
// ranks' layers did not fit the memory.
void print_expert_load(const Scenario& scenario, const Profile& profile) {
  if (scenario.model.expert_parallel > 1) {
    print_unfit(scenario, profile, profile.expert_load.ranks > 1, "Experts    the ranks' load was",
                "predictions from this profile take a balanced router");
  }
  if (const ExpertLoadFigures& f = profile.expert_load; f.ranks > 1) {
    std::printf(
        "Experts    %d ranks: the busiest receives %.2fx the mean of the routed rows; its experts "
        "take %s more in a mixture's forward, %s in its backward\n",
        f.ranks, f.imbalance, format_seconds(f.forward_s).c_str(),
        format_seconds(f.backward_s).c_str());
  }
}

void print_profile(const ProfileOptions& o, const Scenario& scenario, const Profile& profile) {
  if (o.json) {
    print_profile_json(o, scenario, profile);
    return;
  }
  std::printf("Profiled %s on %s (%d cores), %s backend, median of %d\n",
              scenario.model.name.c_str(), profile.machine.c_str(), profile.cores,
              profile.backend.c_str(), o.repeats);
  if (profile.backend != "cuda") std::printf("Kernels: %s\n", exec::kernel_level_label().c_str());
  std::printf("\n");
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
  std::printf(
      "Transport  %s: %s latency, %s\n",
      profile.backend == "mpi" ? "MPI point-to-point between two processes" : "in-process channel",
      format_seconds(profile.transport_latency_s).c_str(),
      format_rate(profile.transport_bandwidth).c_str());
  print_context_exchanges(scenario, profile);
  print_expert_load(scenario, profile);
  print_rounds(profile);
  print_layer_rates(scenario, profile);
  std::printf("\nProfile written to %s (use it with --cost-model %s)\n", o.output.c_str(),
              o.output.c_str());
}

}  // namespace

int run_profile(const ProfileOptions& o) {
  if (o.backend == "mpi") return run_profile_mpi(o);
  const Scenario scenario = load(o.scenario);
  exec::ProfileOptions p = profile_options(o, scenario);
  if (o.backend == "cuda") {
    const GpuStages gpus = gpu_stages();
    p.device = gpus.stage_device(0, 0);
    p.peer = gpus.stage_device(1, 1);
    p.devices = gpus.gpus;
  }
  const Profile profile = measure(o, scenario, p);
  write_profile_file(o.output, profile);
  print_profile(o, scenario, profile);
  return 0;
}

}  // namespace pipescope::cli
