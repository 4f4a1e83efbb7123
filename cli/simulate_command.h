#pragma once
// `pipescope simulate`: one training step of a scenario, as a table, JSON and a
// Chrome trace.

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/scenario_options.h"

namespace pipescope::cli {

struct SimulateOptions {
  ScenarioOptions scenario;
  std::optional<std::string> plan;
  std::optional<int> stages;
  std::optional<int> micro_batches;
  std::optional<std::string> schedule;
  std::optional<std::string> schedule_file;   // custom schedule, per-rank action CSV
  std::optional<int> chunks;                  // v, interleaved-1f1b
  std::optional<int> data_parallel;           // D replicas
  std::optional<int> tensor_parallel;         // T
  std::optional<int> expert_parallel;         // E
  std::optional<int> expert_tensor_parallel;  // --expert-tensor-parallel
  std::optional<int> context_parallel;        // C
  std::optional<std::string> remat;           // "on" | "off" | "always" | "never" | "except-last"
  std::optional<std::string> checkpoint;      // "stage" | "layer"
  std::string partition = "optimal";
  bool partition_given = false;        // --partition was on the command line
  std::optional<std::string> balance;  // the cut to simulate, "3,2,2"
  std::optional<std::string> trace;
  bool json = false;
};

// Registers the subcommand, binding its options to `options`.
CLI::App* add_simulate_command(CLI::App& app, SimulateOptions& options);

int run_simulate(const SimulateOptions& options);

}  // namespace pipescope::cli
