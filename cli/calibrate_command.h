#pragma once
// `pipescope calibrate`: fits the kernel-level cost model's efficiency
// parameters to step times measured on real hardware and writes them as a
// cost-model file, which simulate, plan and sweep take with --cost-model.

#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/scenario_options.h"

namespace pipescope::cli {

struct CalibrateOptions {
  ScenarioOptions scenario;
  std::string measured;            // CSV of measured steps
  std::string output;              // the cost-model file
  std::optional<std::string> fit;  // comma-separated parameter names
  std::string partition = "optimal";
};

CLI::App* add_calibrate_command(CLI::App& app, CalibrateOptions& options);
int run_calibrate(const CalibrateOptions& options);

}  // namespace pipescope::cli
