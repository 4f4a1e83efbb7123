#include "cli/plan_command.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/json_output.h"
#include "cli/progress.h"
#include "cli/summary.h"
#include "sim/base/file_io.h"
#include "sim/base/format.h"
#include "sim/engine/simulator.h"
#include "sim/formats/plan_io.h"
#include "sim/plan/plan.h"
#include "sim/plan/planner.h"
#include "sim/scenario/config_error.h"

namespace pipescope::cli {

CLI::App* add_plan_command(CLI::App& app, PlanOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "Find the fastest plan that fits: every K dividing the devices (the rest are data-parallel "
      "replicas), every M dividing the per-replica batch, each schedule, each remat mode; each "
      "cut "
      "optimally "
      "within memory, simulated and ranked by throughput");
  add_scenario_options(*cmd, o.scenario);
  add_cost_model_option(*cmd, o.scenario);
  cmd->add_option("--devices", o.devices, "Devices N to plan for (default: the cluster's)")
      ->check(positive_count());
  cmd->add_option("-K,--stages", o.stages, "Fix the number of pipeline stages")
      ->check(positive_count());
  cmd->add_option("-M,--micro-batches", o.micro_batches, "Fix the number of micro-batches")
      ->check(positive_count());
  add_remat_option(*cmd, o.remat, "fixes it (default: try each)");
  add_checkpoint_option(*cmd, o.checkpoint);
  add_tensor_parallel_option(*cmd, o.tensor_parallel);
  add_expert_parallel_option(*cmd, o.expert_parallel, o.expert_tensor_parallel);
  add_context_parallel_option(*cmd, o.context_parallel);
  cmd->add_option("--schedule", o.schedule, "Fix the schedule (default: try each)")
      ->check(CLI::IsMember(schedule_choices(true)));
  add_schedule_file_option(*cmd, o.schedule_file);
  cmd->add_option("--chunks", o.chunks, chunks_help("default: try 2 and 4"))
      ->check(positive_count());
  cmd->add_option("--max-micro-batches", o.max_micro_batches, "Largest M to try")
      ->check(positive_count())
      ->capture_default_str();
  cmd->add_option("--top", o.top, "How many plans to list")
      ->check(positive_count())
      ->capture_default_str();
  cmd->add_option("-o,--output", o.output, "Write the best plan as plan JSON");
  cmd->add_flag("--json", o.json, "Print the ranking as JSON");
  return cmd;
}

namespace {

// "gpipe", "interleaved-1f1b v=2".
std::string schedule_label(const PlanCandidate& c) {
  return std::string(to_string(c.schedule)) +
         (c.chunks > 1 ? " v=" + std::to_string(c.chunks) : "");
}

Bytes fullest(const SimResult& r) {
  Bytes peak = 0;
  for (const DeviceMetrics& d : r.metrics.devices) peak = std::max(peak, d.peak_memory);
  return peak;
}

// What a candidate's layout is, as --json writes it for ranked and rejected
// candidates alike (an object's keys print sorted, wherever they are set).
nlohmann::json layout_json(const PlanCandidate& c) {
  return {{"T", c.tensor_parallel},
          {"E", c.expert_parallel()},
          {"C", c.context_parallel()},
          {"K", c.stages},
          {"D", c.data_parallel},
          {"M", c.micro_batches},
          {"remat", c.remat != Remat::kNever},
          {"remat_mode", std::string(to_string(c.remat))},
          {"schedule", std::string(to_string(c.schedule))},
          {"chunks", c.chunks},
          {"zero", c.zero}};
}

nlohmann::json candidate_json(const PlanCandidate& c, int rank) {
  nlohmann::json stages = nlohmann::json::array();
  for (const StageCost& s : c.result.stage_costs) {
    stages.push_back({{"first_layer", s.layers.first_layer}, {"last_layer", s.layers.last_layer}});
  }
  // One replica's devices, as `simulate --json` gives them.
  nlohmann::json devices = nlohmann::json::array();
  const std::vector<MemorySplit> splits = memory_splits(c.result);
  for (std::size_t d = 0; d < splits.size(); ++d) {
    devices.push_back({{"peak_memory_bytes", c.result.metrics.devices[d].peak_memory},
                       {"weights_bytes", splits[d].weights},
                       {"gradients_bytes", splits[d].gradients},
                       {"optimizer_bytes", splits[d].optimizer},
                       {"activations_bytes", splits[d].activations}});
  }
  nlohmann::json out = layout_json(c);
  out.update({{"rank", rank},
              {"sequence_parallel", c.scenario->training.sequence_parallel},
              {"micro_batch_size", c.result.micro_batch_size},
              {"step_time_s", c.result.metrics.step_time_s()},
              {"throughput_samples_per_s", c.samples_per_s},
              {"bubble_fraction", c.result.metrics.bubble_fraction},
              {"mfu", c.result.metrics.mfu},
              {"peak_memory_bytes", fullest(c.result)},
              {"devices", devices},
              {"stages", stages}});
  return out;
}

// Layers per stage, runs of equal counts shortened: "7 7 7 5", "2x34 1x30".
std::string layer_counts(const SimResult& r) {
  std::string out;
  const auto& st = r.stage_costs;
  for (std::size_t i = 0; i < st.size();) {
    std::size_t j = i;
    while (j < st.size() && st[j].layers.layer_count() == st[i].layers.layer_count()) ++j;
    const std::string n = std::to_string(st[i].layers.layer_count());
    const std::size_t run = j - i;
    for (std::size_t k = 0; k < (run > 3 ? 1 : run); ++k) out += (out.empty() ? "" : " ") + n;
    if (run > 3) out += "x" + std::to_string(run);
    i = j;
  }
  return out;
}

// The best plan's fullest device and what its peak holds, as the simulate
// summary's "Memory" line gives them.
// The values searched, as the header lists them ("1, 2, 4").
std::string listed(const std::vector<int>& values) {
  std::string out;
  for (const int v : values) out += (out.empty() ? "" : ", ") + std::to_string(v);
  return out;
}

std::string memory_line(const PlanCandidate& best) {
  const std::optional<FullestDevice> f = fullest_device(best.result);
  if (!f) return "";
  const auto bytes = [](Bytes b) { return format_bytes(static_cast<double>(b)); };
  return "Memory of plan 1: largest peak " + bytes(f->metrics.peak_memory) + " of " +
         bytes(f->metrics.memory_capacity) + " (device " + std::to_string(f->device) + ": " +
         f->parts + ")";
}

// The plans the planner finds for certain: those listed, and at least the
// 16 it refines.
std::size_t exact_top(const PlanOptions& o) {
  return std::max<std::size_t>(16, static_cast<std::size_t>(std::max(o.top, 0)));
}

void print_table(const Scenario& sc, const PlanReport& report, const PlanOptions& o) {
  const std::size_t tried = report.ranked.size() + report.rejected.size() +
                            report.dominated.size() + report.bounded.size();
  const std::vector<int>& ts = report.tensor_parallel;
  const bool show_t = ts.size() > 1 || ts.front() > 1;
  const std::vector<int>& es = report.expert_parallel;
  const std::vector<int>& cs = report.context_parallel;
  const std::string tensor = listed(ts), experts = listed(es), contexts = listed(cs);
  // Under context parallelism the experts spread over the D x C devices; kept
  // whole (expert_tensor_parallel 1), over the T x D (x C) devices.
  const bool folded = sc.training.expert_tensor_parallel == 1 && show_t;
  const std::string holders = std::string(cs.size() > 1 || cs[0] > 1 ? " x C" : "") +
                              (folded                       ? " x T devices, whole experts on each"
                               : cs.size() > 1 || cs[0] > 1 ? " devices"
                                                            : " replicas");
  std::cout << "Plans for " << sc.name << " on " << report.devices << " x "
            << sc.cluster.device.name << " ("
            << format_bytes(static_cast<double>(sc.cluster.device.memory_bytes)) << " each"
            << (ts.size() > 1 ? "; tensor-parallel T of " + tensor
                : show_t      ? "; tensor-parallel T=" + tensor
                              : std::string())
            << (es.size() > 1 ? "; the experts over E of " + experts + " of the D" + holders
                : es[0] > 1   ? "; the experts over E=" + experts + " of the D" + holders
                              : std::string())
            << (cs.size() > 1 ? "; each sequence over C of " + contexts + " devices"
                : cs[0] > 1   ? "; each sequence over C=" + contexts + " devices"
                              : std::string())
            << "), global batch " << sc.training.global_batch << ": " << tried
            << " configurations tried, " << report.ranked.size() + report.dominated.size() << " fit"
            << (report.dominated.empty()
                    ? std::string()
                    : " (" + std::to_string(report.dominated.size()) +
                          " not simulated: remat off or a lower ZeRO stage fits at their shape)")
            << (report.bounded.empty()
                    ? std::string()
                    : "; " + std::to_string(report.bounded.size()) +
                          " not simulated: the floor under their step cannot reach the best " +
                          std::to_string(exact_top(o)))
            << "\n\n";
  if (!report.ranked.empty()) {
    const auto n = std::min<std::size_t>(report.ranked.size(), static_cast<std::size_t>(o.top));
    // The schedule column as wide as its longest label ("interleaved-1f1b v=2").
    int schedule_width = 8;
    for (std::size_t i = 0; i < n; ++i) {
      schedule_width =
          std::max(schedule_width, static_cast<int>(schedule_label(report.ranked[i]).size()));
    }
    // The T column only where some plan splits its layers, the E column
    // where some spreads its experts, the C column where some splits its
    // sequences, the ZeRO column only where some plan shards over its
    // replicas.
    const auto t_cell = [&](const std::string& text) {
      if (show_t) std::printf(" %3s", text.c_str());
    };
    const bool show_e = es.size() > 1 || es[0] > 1;
    const auto e_cell = [&](const std::string& text) {
      if (show_e) std::printf(" %4s", text.c_str());
    };
    const bool show_c = cs.size() > 1 || cs[0] > 1;
    const auto c_cell = [&](const std::string& text) {
      if (show_c) std::printf(" %3s", text.c_str());
    };
    const bool show_zero = std::any_of(report.ranked.begin(), report.ranked.begin() + n,
                                       [](const PlanCandidate& c) { return c.zero > 0; });
    const auto zero_cell = [&](const std::string& text) {
      if (show_zero) std::printf(" %4s", text.c_str());
    };
    std::printf("%4s", "rank");
    t_cell("T");
    std::printf(" %5s %5s", "K", "D");
    e_cell("E");
    c_cell("C");
    zero_cell("ZeRO");
    std::printf(" %5s %11s %*s %10s %12s %7s %6s %12s  %s\n", "M", "remat", schedule_width,
                "schedule", "step time", "samples/s", "bubble", "MFU", "peak memory",
                "stages (layers)");
    for (std::size_t i = 0; i < n; ++i) {
      const PlanCandidate& c = report.ranked[i];
      const std::string cuts = layer_counts(c.result);
      std::printf("%4zu", i + 1);
      t_cell(std::to_string(c.tensor_parallel));
      std::printf(" %5d %5d", c.stages, c.data_parallel);
      e_cell(std::to_string(c.expert_parallel()));
      c_cell(std::to_string(c.context_parallel()));
      zero_cell(std::to_string(c.zero));
      std::printf(" %5d %11s %*s %10s %12.4g %7s %6s %12s  %s\n", c.micro_batches,
                  std::string(remat_label(c.remat)).c_str(), schedule_width,
                  schedule_label(c).c_str(), format_seconds(c.result.metrics.step_time_s()).c_str(),
                  c.samples_per_s, format_percent(c.result.metrics.bubble_fraction).c_str(),
                  format_percent(c.result.metrics.mfu).c_str(),
                  format_bytes(static_cast<double>(fullest(c.result))).c_str(), cuts.c_str());
    }
    std::fflush(stdout);
    std::cout << "\n" << memory_line(report.ranked.front()) << "\n";
  }
  if (!report.rejected.empty()) {
    std::cout << "\nRejected (" << report.rejected.size() << "):\n";
    for (const PlanCandidate& c : report.rejected) std::cout << "  " << c.rejected << "\n";
  }
  if (sc.training.cut) {
    std::cout << "\nThe planner cuts each configuration itself and leaves out the cut "
              << sc.training.cut->field
              << " gives (`pipescope simulate` sets that cut's step beside the partitioner's).\n";
  }
}

}  // namespace

int run_plan(const PlanOptions& o) {
  const Scenario scenario =
      load(with_training_flags(o.scenario, {.micro_batches = o.micro_batches,
                                            .schedule = o.schedule,
                                            .chunks = o.chunks,
                                            .remat = o.remat,
                                            .checkpoint = o.checkpoint,
                                            .tensor_parallel = o.tensor_parallel,
                                            .expert_parallel = o.expert_parallel,
                                            .expert_tensor_parallel = o.expert_tensor_parallel,
                                            .context_parallel = o.context_parallel}));
  PlanRequest request;
  request.exact_top = exact_top(o);
  request.devices = o.devices;
  request.stages = o.stages;
  request.micro_batches = o.micro_batches;
  request.remat = remat_of(o.remat);
  if (o.schedule) request.schedule = parse_schedule(*o.schedule);
  request.chunks = o.chunks;
  request.custom = custom_of(o.schedule_file);
  request.max_micro_batches = o.max_micro_batches;
  PlanReport report;
  {
    ProgressBar bar("planning");
    request.progress = [&](std::size_t done, std::size_t total) { bar.update(done, total); };
    report = naming_scenario_file(o.scenario.file, [&] { return run_planner(scenario, request); });
  }
  if (report.ranked.empty()) {
    const PlanCandidate* closest = closest_rejected(report);
    std::string message = "no plan fits " + scenario.cluster.device.name + " (" +
                          format_bytes(static_cast<double>(scenario.cluster.device.memory_bytes)) +
                          " per device)";
    if (closest != nullptr) {
      message += "; the least any configuration needs is " +
                 std::string(closest->memory_needed_at_least ? "at least " : "") +
                 format_bytes(static_cast<double>(closest->memory_needed)) + " (" +
                 closest->label() + ")";
    }
    throw ConfigError(message);
  }
  if (o.output) {
    const PlanCandidate& best = report.ranked.front();
    Plan plan = make_plan(replica_scenario(*best.scenario, best.stages, best.data_parallel),
                          best.result, best.data_parallel, "optimal");
    plan.global_batch = scenario.training.global_batch;
    plan.scenario_name = scenario.name;
    write_plan_file(*o.output, plan);
  }
  if (o.json) {
    nlohmann::json ranked = nlohmann::json::array();
    for (std::size_t i = 0;
         i < std::min<std::size_t>(report.ranked.size(), static_cast<std::size_t>(o.top)); ++i) {
      ranked.push_back(candidate_json(report.ranked[i], static_cast<int>(i + 1)));
    }
    nlohmann::json rejected = nlohmann::json::array();
    for (const PlanCandidate& c : report.rejected) {
      nlohmann::json j = layout_json(c);
      j["reason"] = c.rejected;
      rejected.push_back(std::move(j));
    }
    print_json(nlohmann::json{{"devices", report.devices},
                              {"plans", ranked},
                              {"rejected", rejected},
                              {"dominated", report.dominated.size()},
                              {"bounded", report.bounded.size()}});
  } else {
    print_table(scenario, report, o);
  }
  if (o.output)
    (o.json ? std::cerr : std::cout) << "\nBest plan written to " << output_name(*o.output) << "\n";
  return 0;
}

}  // namespace pipescope::cli
