#pragma once
// `pipescope capacity`: the largest model that fits with K stages.

#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/scenario_options.h"

namespace pipescope::cli {

struct CapacityOptions {
  ScenarioOptions scenario;
  int stages = 1;
  std::optional<int> micro_batches;
  std::optional<std::string> remat;
  std::optional<std::string> checkpoint;  // --checkpoint
  std::optional<int> tensor_parallel;     // T
  std::optional<int> context_parallel;    // C
  std::optional<std::string> param;
  bool json = false;
};

CLI::App* add_capacity_command(CLI::App& app, CapacityOptions& options);
int run_capacity(const CapacityOptions& options);

}  // namespace pipescope::cli
