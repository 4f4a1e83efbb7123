#pragma once
// `pipescope plan`: search K, D, M and remat for the fastest plan that fits.

#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/scenario_options.h"

namespace pipescope::cli {

struct PlanOptions {
  ScenarioOptions scenario;
  std::optional<int> devices;
  std::optional<int> stages;
  std::optional<int> micro_batches;
  std::optional<std::string> remat;
  std::optional<std::string> checkpoint;      // --checkpoint
  std::optional<int> chunks;                  // v, interleaved-1f1b
  std::optional<int> tensor_parallel;         // T, fixed
  std::optional<int> expert_parallel;         // E
  std::optional<int> expert_tensor_parallel;  // --expert-tensor-parallel
  std::optional<int> context_parallel;        // C
  std::optional<std::string> schedule;
  std::optional<std::string> schedule_file;  // custom schedule, per-rank action CSV
  int max_micro_batches = 512;
  int top = 10;
  std::optional<std::string> output;
  bool json = false;
};

CLI::App* add_plan_command(CLI::App& app, PlanOptions& options);
int run_plan(const PlanOptions& options);

}  // namespace pipescope::cli
