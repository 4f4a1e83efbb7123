#pragma once
// `pipescope validate`: the GPipe paper's tables beside the simulator's figures.

#include <optional>
#include <string>

#include <CLI/CLI.hpp>

namespace pipescope::cli {

struct ValidateOptions {
  // A folder holding transformer-tpuv3.json and amoebanet-tpuv2.json; default:
  // the copies of scenarios/gpipe/ built into the program.
  std::optional<std::string> scenarios;
  bool json = false;
};

CLI::App* add_validate_command(CLI::App& app, ValidateOptions& options);
// 0 when every checked figure is within its tolerance, 1 otherwise.
int run_validate(const ValidateOptions& options);

}  // namespace pipescope::cli
