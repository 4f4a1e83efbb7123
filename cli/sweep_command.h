#pragma once
// `pipescope sweep`: the K x M table of throughput, bubble and peak memory.

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/scenario_options.h"

namespace pipescope::cli {

struct SweepOptions {
  ScenarioOptions scenario;
  std::vector<int> stages;
  std::vector<int> micro_batches;
  std::optional<std::string> remat;
  std::optional<std::string> checkpoint;      // --checkpoint
  std::optional<int> tensor_parallel;         // T
  std::optional<int> expert_parallel;         // E
  std::optional<int> expert_tensor_parallel;  // --expert-tensor-parallel
  std::optional<int> context_parallel;        // C
  int data_parallel = 1;                      // D replicas
  std::optional<std::string> schedule;
  std::optional<int> chunks;  // v, interleaved-1f1b
  std::string partition = "optimal";
  std::optional<std::string> balance;  // the cut of every point, "3,2,2"
  std::optional<std::string> csv;
  bool json = false;
};

CLI::App* add_sweep_command(CLI::App& app, SweepOptions& options);
int run_sweep_command(const SweepOptions& options);

}  // namespace pipescope::cli
