#pragma once
// `pipescope validate`: the GPipe paper's tables and published GPU measurements
// beside the simulator's figures.

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace pipescope::cli {

struct ValidateOptions {
  // A folder holding transformer-tpuv3.json and amoebanet-tpuv2.json; default:
  // the copies of scenarios/gpipe/ built into the program.
  std::optional<std::string> scenarios;
  // A folder of GPU validation cases (every *.json in it, see
  // sim/validation/gpu_validation.h); default: the copies of scenarios/validation/ built
  // into the program.
  std::optional<std::string> gpu_scenarios;
  bool json = false;
  // Fit the kernel tables on every source of the GPU suite but one and
  // predict that one (sim/validation/leave_one_out.h), for each source.
  bool leave_one_out = false;
  // A what-if: --set overrides and a --framework profile applied to every GPU
  // case before it is simulated (as simulate applies them to a scenario); the
  // published figures, tolerances and gaps stay as the cases record them.
  std::vector<std::string> overrides;
  std::optional<std::string> framework;
};

CLI::App* add_validate_command(CLI::App& app, ValidateOptions& options);
// 0 when every checked figure is within its tolerance, 1 otherwise.
int run_validate(const ValidateOptions& options);

}  // namespace pipescope::cli
