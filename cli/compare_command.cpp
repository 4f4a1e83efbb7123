#include "cli/compare_command.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/compare_rounds.h"
#include "cli/gpu_stages.h"
#include "cli/json_output.h"
#include "cli/mpi_job.h"
#include "cli/scenario_options.h"
#include "exec/backends.h"
#include "exec/compare.h"
#include "exec/compute/kernel_level.h"
#include "exec/machine_speed.h"
#include "exec/plan_runner.h"
#include "exec/profiler.h"
#include "exec/shared_cores_note.h"
#include "sim/base/format.h"
#include "sim/formats/plan_io.h"
#include "sim/formats/profile_io.h"

namespace pipescope::cli {

CLI::App* add_compare_command(CLI::App& app, CompareOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "compare",
      "Predict a plan's step from a profile of this machine, run it for real, and show "
      "predicted against measured: step time, throughput, bubble and per-stage busy time. With "
      "--backend mpi it runs under `mpirun -np DEVICES`, one process per device, and rank 0 "
      "prints");
  cmd->add_option("plan", o.plan, "Plan JSON written by `pipescope plan -o`")->required();
  add_backend_option(
      *cmd, o.backend,
      "Where to run: cpu (a thread per device), cuda (a stream per stage on the GPUs "
      "visible; profiled on them) or mpi (a process per device; the MPI transport is "
      "measured after the run unless --profile is given)");
  cmd->add_option("-T,--tensor-parallel", o.tensor_parallel,
                  "The plan's tensor-parallel ranks per stage, checked against the T the plan "
                  "carries (a thread per rank on the cpu backend)")
      ->check(positive_count());
  cmd->add_option("--profile", o.profile,
                  "Predict from this profile (`pipescope profile`) instead of profiling the "
                  "plan's model at its micro-batch size before each round's steps");
  cmd->add_option("--steps", o.steps, "Training steps to run, warm-up included")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--warmup", o.warmup, "Leading steps left out of the median")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  cmd->add_option("--rounds", o.rounds,
                  "Independent runs (each with its own profile); of those whose run other work "
                  "left alone (at most 5 % of the ops' wall time taken) and, on the cpu backend, "
                  "whose cores kept their speed (or else the least disturbed half), the one with "
                  "the median error is reported; on the cpu backend, with 2 or more asked, a "
                  "round whose cores changed speed is run again, up to three times as many in "
                  "all")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  cmd->add_option("--lr", o.learning_rate, "Learning rate")
      ->check(positive_number())
      ->capture_default_str();
  add_seed_option(*cmd, o.seed, "Seed of the weights and the data");
  cmd->add_flag("--json", o.json, "Print the comparison as JSON");
  return cmd;
}

namespace {

void row(const std::string& what, const std::string& predicted, const std::string& measured,
         double error) {
  std::printf("%-18s %12s %12s %9s\n", what.c_str(), predicted.c_str(), measured.c_str(),
              format_signed_percent(error).c_str());
}

// Reads and checks the plan, its model and a given profile before any step.
CompareInputs read_inputs(const CompareOptions& o) {
  CompareInputs in;
  in.mpi = o.backend == "mpi";
  if (o.backend == "cuda") in.gpus = gpu_stages();
  if (o.warmup >= o.steps) {
    throw std::invalid_argument("--warmup " + std::to_string(o.warmup) + " leaves none of the " +
                                std::to_string(o.steps) + " steps to measure; raise --steps");
  }
  in.plan = read_plan_file(o.plan);
  exec::check_requested_tensor_parallel(in.plan, o.plan, o.tensor_parallel);
  exec::check_tensor_parallel_backend(in.plan, o.plan, o.backend);
  in.model = exec::plan_model(in.plan, o.plan);
  if (model_hash(in.model) != in.plan.model_hash) {
    throw std::invalid_argument(o.plan +
                                ": model.hash: the plan's layers do not match its model.spec "
                                "(edited by hand?)");
  }
  if (o.backend == "cpu") exec::check_plan_fits_host(in.plan, o.plan);
  if (in.gpus) check_plan_fits_gpus(in.plan, o.plan, in.gpus->gpus);
  if (o.profile) in.given = std::make_shared<const Profile>(read_profile_file(*o.profile));
  in.profile_label = o.profile
                         ? *o.profile
                         : std::string(in.mpi ? "a profile measured before each round's steps "
                                                "(rank 0) and of the MPI transport after them"
                                              : "a profile measured before each round's steps");
  if (in.given)
    in.given_scenario = exec::cpu_scenario(in.plan, in.model, in.given, in.profile_label);
  return in;
}

nlohmann::json comparison_json(const exec::Comparison& c) {
  nlohmann::json stages = nlohmann::json::array();
  for (const exec::StageComparison& s : c.per_stage) {
    stages.push_back({{"predicted_busy_s", s.predicted_busy_s},
                      {"measured_busy_s", s.measured_busy_s},
                      {"relative_error", s.relative_error}});
  }
  nlohmann::json ops = nlohmann::json::array();
  for (const exec::OpComparison& op : c.per_op) {
    ops.push_back({{"stage", op.stage},
                   {"kind", op.kind},
                   {"count", op.count},
                   {"predicted_s", op.predicted_s},
                   {"measured_s", op.measured_s},
                   {"measured_cpu_s", op.measured_cpu_s},
                   {"relative_error", op.relative_error}});
  }
  nlohmann::json out{{"K", c.stages},
                     {"T", c.tensor_parallel},
                     {"C", c.context_parallel},
                     {"E", c.expert_parallel},
                     {"M", c.micro_batches},
                     {"predicted_step_time_s", c.predicted_step_s},
                     {"measured_step_time_s", c.measured_step_s},
                     {"relative_error", c.relative_error},
                     {"predicted_throughput_samples_per_s", c.predicted_throughput},
                     {"measured_throughput_samples_per_s", c.measured_throughput},
                     {"predicted_bubble_fraction", c.predicted_bubble},
                     {"measured_bubble_fraction", c.measured_bubble},
                     {"stages", stages},
                     {"ops", ops},
                     {"replayed_step_time_s", c.replayed_step_s},
                     {"runtime_overhead", c.runtime_overhead},
                     {"cpu_replayed_step_time_s", c.cpu_replayed_step_s},
                     {"cpu_relative_error", c.cpu_relative_error},
                     {"steal_fraction", c.steal_fraction},
                     {"warmup_steps", c.warmup_steps},
                     {"measured_steps", c.measured_steps},
                     {"cores", c.cores},
                     {"shared_cores", c.shared_cores}};
  if (c.tensor_parallel * c.context_parallel * c.expert_parallel > 1) {
    nlohmann::json ranks = nlohmann::json::array();
    for (const exec::RankBusy& r : c.measured_ranks) {
      ranks.push_back({{"device", r.device},
                       {"rank", r.rank},
                       {"compute_s", simtime_to_seconds(r.compute)},
                       {"collectives_s", simtime_to_seconds(r.collectives)}});
    }
    out["measured_ranks"] = ranks;
  }
  if (c.tensor_parallel > 1) {
    const exec::CollectiveMatch& m = c.collectives;
    out["tensor_collectives"] = {{"predicted", m.predicted},
                                 {"measured", m.measured},
                                 {"matched", m.matched},
                                 {"predicted_bytes", m.predicted_bytes},
                                 {"measured_bytes", m.measured_bytes}};
  }
  return out;
}

// The expert ranks' load, the group's all-to-all, the ranks' gradient sum
// and their slowdown together: the figures the prediction took (the load as
// the cost model took it, at the plan's micro-batch size; the group where it
// priced the all-to-alls; the sum where it timed the ranks' gradient
// reduction; the slowdown where it stretched the ranks' layers by it).
void add_group_figures(nlohmann::json& out, const exec::Comparison& c) {
  if (c.expert_load.ranks > 1) out["expert_load"] = expert_load_json(c.expert_load);
  if (c.alltoall_group.ranks > 1) out["alltoall_group"] = alltoall_group_json(c.alltoall_group);
  if (c.gradient_sum.ranks > 1) out["gradient_sum"] = gradient_sum_json(c.gradient_sum);
  if (c.group_slowdown.ranks > 1) out["group_slowdown"] = group_slowdown_json(c.group_slowdown);
}

void print_comparison_json(const exec::Comparison& c, const std::vector<exec::Comparison>& rounds,
                           const std::string& note, bool on_host, const Profile& profile) {
  nlohmann::json out = comparison_json(c);
  add_group_figures(out, c);
  if (const ProfileRounds& r = profile.rounds; r.measured > 0) {
    out["profile_rounds"] = {{"measured", r.measured},
                             {"kept", r.kept},
                             {"other_work", r.other_work},
                             {"concurrency_slowdown", profile.concurrency_slowdown}};
  }
  if (!note.empty()) out["shared_cores_note"] = note;
  nlohmann::json errors = nlohmann::json::array();
  nlohmann::json steal = nlohmann::json::array();
  nlohmann::json speed = nlohmann::json::array();
  for (const exec::Comparison& r : rounds) {
    errors.push_back(r.relative_error);
    steal.push_back(r.steal_fraction);
    speed.push_back(r.speed_spread >= 0.0 ? nlohmann::json(r.speed_spread) : nlohmann::json());
  }
  out["round_relative_errors"] = errors;
  out["round_steal_fractions"] = steal;
  out["round_speed_spreads"] = speed;
  out["rounds_kept"] = kept_rounds(rounds);
  if (on_host) out["kernels"] = exec::kernel_level();
  print_json(out);
}

// One line on the rounds: each one's error, the share other work took of its
// ops, how far the cores' speed moved over it, and which are kept.
void print_rounds(const std::vector<exec::Comparison>& rounds) {
  std::string errors;
  std::string other;
  std::string speed;
  for (const exec::Comparison& r : rounds) {
    errors += (errors.empty() ? "" : ", ") + format_signed_percent(r.relative_error);
    other += (other.empty() ? "" : ", ") + format_percent(r.steal_fraction);
    if (r.speed_spread >= 0.0) {
      speed += (speed.empty() ? "" : ", ") + format_percent(r.speed_spread);
    }
  }
  if (!speed.empty()) speed = "; the cores' speed moved " + speed;
  const std::size_t kept = kept_rounds(rounds).size();
  const std::string which =
      kept == rounds.size()
          ? "them"
          : std::to_string(kept) + " kept (other work at most " +
                format_percent(exec::kDiscardOtherWorkAbove) + " and the speed within " +
                format_percent(exec::kDiscardSpeedSpreadAbove) + ", or the least disturbed half)";
  std::printf(
      "Rounds: %zu (step-time errors %s; other work took %s of the ops' wall time%s); the median "
      "of %s is shown\n",
      rounds.size(), errors.c_str(), other.c_str(), speed.c_str(), which.c_str());
}

// The report's head: the plan, the prediction's profile, the rounds.
void print_heading(const CompareOptions& o, const CompareInputs& in, const Profile& profile,
                   const exec::Comparison& c, const std::vector<exec::Comparison>& rounds) {
  const std::string T =
      (c.tensor_parallel > 1 ? ", T=" + std::to_string(c.tensor_parallel) : std::string()) +
      (c.context_parallel > 1 ? ", C=" + std::to_string(c.context_parallel) : std::string()) +
      (c.expert_parallel > 1 ? ", E=" + std::to_string(c.expert_parallel) : std::string());
  std::printf("Comparing %s: %s, K=%d%s, M=%d, micro-batch %lld, remat %s, %s\n", o.plan.c_str(),
              in.model.name.c_str(), c.stages, T.c_str(), c.micro_batches,
              static_cast<long long>(in.plan.micro_batch_size),
              std::string(remat_label(in.plan.remat)).c_str(), to_string(in.plan.schedule).data());
  std::string measured = exec::measured_steps_label(o.steps, c.warmup_steps);
  if (c.measured_steps < o.steps - c.warmup_steps) {
    measured += ", the " + std::to_string(c.measured_steps) +
                " of them whose cores ran at the profile's speed";
  }
  std::printf("Prediction from %s (%s, %d %s); measurement: %s\n", in.profile_label.c_str(),
              profile.machine.c_str(), profile.cores,
              profile.backend == "cuda" ? (profile.cores == 1 ? "GPU" : "GPUs")
                                        : (profile.cores == 1 ? "core" : "cores"),
              measured.c_str());
  if (!in.gpus) std::printf("Kernels: %s\n", exec::kernel_level_label().c_str());
  if (const ProfileRounds& r = profile.rounds; r.measured > 0) {
    std::printf(
        "Profile rounds: %d measured, %d kept (other work took up to %s of a kept one's wall "
        "time; ops timed on their threads' CPU clocks)\n",
        r.measured, r.kept, format_percent(r.other_work).c_str());
  }
  if (rounds.size() > 1 || rounds.front().speed_spread >= 0.0) print_rounds(rounds);
  std::printf("\n");
}

// Step time, throughput, bubble and each device's busy time, then each kind of
// op's mean time.
void print_table(const exec::Comparison& c) {
  std::printf("%-18s %12s %12s %9s\n", "", "predicted", "measured", "error");
  row("step time", format_seconds(c.predicted_step_s), format_seconds(c.measured_step_s),
      c.relative_error);
  char p_tp[32], m_tp[32];
  std::snprintf(p_tp, sizeof p_tp, "%.4g/s", c.predicted_throughput);
  std::snprintf(m_tp, sizeof m_tp, "%.4g/s", c.measured_throughput);
  row("throughput", p_tp, m_tp,
      exec::relative_error(c.predicted_throughput, c.measured_throughput));
  row("bubble", format_percent(c.predicted_bubble), format_percent(c.measured_bubble),
      exec::relative_error(c.predicted_bubble, c.measured_bubble));
  for (std::size_t s = 0; s < c.per_stage.size(); ++s) {
    const exec::StageComparison& st = c.per_stage[s];
    row((c.chunks > 1 ? "device " : "stage ") + std::to_string(s) + " busy",
        format_seconds(st.predicted_busy_s), format_seconds(st.measured_busy_s), st.relative_error);
  }
  if (c.per_op.empty()) return;
  std::printf("\n%-18s %12s %12s %9s\n", "mean op time", "predicted", "measured", "error");
  for (const exec::OpComparison& op : c.per_op) {
    row((c.per_op.back().stage > 0 ? "stage " + std::to_string(op.stage) + " " : "") + op.kind +
            " x" + std::to_string(op.count),
        format_seconds(op.predicted_s), format_seconds(op.measured_s), op.relative_error);
  }
}

// How the prediction priced a time-sliced group's exchanges.
const char* const in_sliced_ops =
    "within the group's ops (the slowdown the profile measured as the group ran time-sliced "
    "holds them)";

// How the prediction priced a group's all-to-alls (the expert ranks' or the
// shares' trading heads): as the profile measured the group (threads, or
// the MPI backend's processes), or over the transport between two stages'
// threads.
std::string alltoall_pricing(const exec::Comparison& c, const Profile& profile) {
  // A time-sliced group's slowdown holds its all-to-alls, the experts' and
  // the shares' trading heads.
  if (c.group_slowdown.time_sliced) return in_sliced_ops;
  const GroupAllToAllFigures& a = c.alltoall_group;
  if (a.ranks < 2) return "over the transport";
  return "as the profile's group of " + std::to_string(a.ranks) + " " +
         (profile.backend == "mpi" ? "processes" : "threads") + " ran them (" +
         format_seconds(a.latency_s) + " latency, " + format_rate(a.bandwidth) + ")";
}

// How the prediction timed the C shares' or E expert ranks' gradient sum.
void print_gradient_sum_note(const exec::Comparison& c, const Profile& profile) {
  const int n = c.context_parallel * c.expert_parallel;
  if (n < 2) return;
  const GradientSumFigures& g = c.gradient_sum;
  const std::string priced =
      g.ranks < 2 ? "as a ring over the transport"
                  : "as the profile's group of " + std::to_string(g.ranks) + " " +
                        (profile.backend == "mpi" ? "processes" : "threads") + " ran it (" +
                        format_seconds(g.latency_s) + " latency, " + format_rate(g.bandwidth) + ")";
  const std::string who =
      c.context_parallel > 1 && c.expert_parallel > 1
          ? std::to_string(n) + " ranks (" + std::to_string(c.expert_parallel) +
                " expert ranks of " + std::to_string(c.context_parallel) +
                " shares) sum the gradients they all hold, and each expert's over the shares of "
                "its rank,"
          : std::to_string(n) + (c.expert_parallel > 1 ? " expert ranks" : " shares") +
                " sum the gradients they all hold";
  std::printf(
      "Gradient sum        the %s before each step; measured: laid end to end, all-reduced and "
      "laid back (the optimizer's collectives row); predicted: %s\n",
      who.c_str(), priced.c_str());
}

// What the runtime and other work add, shared cores, replicas.
void print_notes(const CompareInputs& in, const exec::Comparison& c, const Profile& profile,
                 const std::string& note) {
  std::printf(
      "\nRuntime overhead     %s: the measured step against the engine replayed with this run's "
      "own op durations (%s)\n",
      format_signed_percent(c.runtime_overhead).c_str(), format_seconds(c.replayed_step_s).c_str());
  std::printf(
      "Taken from the ops   %s of their wall time went to other work (the OS, other "
      "processes, a hypervisor's steal); replayed with CPU time only the step is %s, %s from "
      "the prediction\n",
      format_percent(c.steal_fraction).c_str(), format_seconds(c.cpu_replayed_step_s).c_str(),
      format_signed_percent(c.cpu_relative_error).c_str());
  if (!note.empty()) {
    std::printf("%-20s %s\n", in.gpus ? "Shared GPUs" : "Shared cores", note.c_str());
  }
  if (c.tensor_parallel > 1) {
    const exec::CollectiveMatch& m = c.collectives;
    std::printf(
        "All-reduces         %d measured (%s) against %d predicted (%s): %d matched op for op "
        "(stage, op, micro-batch and bytes)\n",
        m.measured, format_bytes(static_cast<double>(m.measured_bytes)).c_str(), m.predicted,
        format_bytes(static_cast<double>(m.predicted_bytes)).c_str(), m.matched);
  }
  if (c.context_parallel > 1 && in.plan.cp_comm_type == ContextExchange::kAllToAll) {
    std::printf(
        "Heads traded        %d shares; measured: each share's all-to-alls of the queries, keys "
        "and values and of the output, waits for the others included (the collectives rows); "
        "predicted: four all-to-alls in each forward and each backward, %s\n",
        c.context_parallel, alltoall_pricing(c, profile).c_str());
  } else if (c.context_parallel > 1) {
    std::printf(
        "Ring exchanges      %d shares; measured: each share's waits for the keys and values "
        "and their gradients (the collectives rows); predicted: %s\n",
        c.context_parallel,
        c.group_slowdown.time_sliced ? in_sliced_ops : "within the step, on the context lane");
  }
  if (c.expert_parallel > 1) {
    std::printf(
        "All-to-alls         %d expert ranks, each a replica of its own; measured: each rank's "
        "dispatch and combination, waits for the others included (the collectives rows); "
        "predicted: two all-to-alls a mixture in each forward and each backward, %s\n",
        c.expert_parallel, alltoall_pricing(c, profile).c_str());
  }
  if (const ExpertLoadFigures& f = c.expert_load; f.ranks > 1) {
    std::printf(
        "Expert load         the busiest rank receives %.2fx the mean of the routed rows "
        "(profiled); predicted: its experts take %s more in a mixture's forward and %s in its "
        "backward, within the ops (a measured rank's wait for them is in the collectives rows)\n",
        f.imbalance, format_seconds(f.forward_s).c_str(), format_seconds(f.backward_s).c_str());
  }
  print_gradient_sum_note(c, profile);
  if (in.plan.data_parallel > 1) {
    std::printf("(one of the plan's %d data-parallel replicas)\n", in.plan.data_parallel);
  }
}

// What rank 0 prints: the median round, as JSON or as a report.
void report(const CompareOptions& o, const CompareInputs& in, const Rounds& rounds) {
  const exec::Comparison& c = median_round(rounds.comparisons);
  const std::string note =
      c.shared_cores ? exec::shared_cores_note(
                           c.stages, c.cores, in.gpus ? "GPU" : "core",
                           c.tensor_parallel * c.context_parallel * c.expert_parallel, in.mpi,
                           c.group_slowdown.time_sliced ? &c.group_slowdown : nullptr)
                     : "";
  if (o.json) {
    print_comparison_json(c, rounds.comparisons, note, !in.gpus, *rounds.profile);
    return;
  }
  print_heading(o, in, *rounds.profile, c, rounds.comparisons);
  print_table(c);
  print_notes(in, c, *rounds.profile, note);
}

}  // namespace

int run_compare(const CompareOptions& o) {
  const bool mpi = o.backend == "mpi";
  // Errors under MPI: cli/mpi_job.h.
  std::optional<MpiJob> job;
  if (mpi) job.emplace();
  const int rank = mpi ? job->rank() : 0;
  CompareInputs in;
  try {
    if (job) {
      // Each rank reads its own files: one agreement ends the input phase.
      job->agree([&] {
        in = read_inputs(o);
        job->require_devices(in.plan, o.plan);
      });
      job->check_memory(in.plan, o.plan, /*on_gpu=*/false);
    } else {
      in = read_inputs(o);
    }
  } catch (const std::exception& e) {
    if (job) return job->input_error(e);
    throw;
  }
  Rounds rounds;
  try {
    rounds = run_rounds(o, in, rank);
  } catch (const std::exception& e) {
    if (job) job->rank_error(e);
    throw;
  }
  if (rank == 0) report(o, in, rounds);
  return 0;
}

}  // namespace pipescope::cli
