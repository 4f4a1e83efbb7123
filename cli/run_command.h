#pragma once
// `pipescope run PLAN --backend cpu`: train the plan's model for real with the
// plan's cut, schedule and remat, and measure it.

#include <cstdint>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

namespace pipescope::cli {

struct RunOptions {
  std::string plan;
  std::string backend = "cpu";
  int steps = 20;
  double learning_rate = 1e-2;
  std::uint64_t seed = 1;
  std::optional<std::string> trace;
  bool json = false;
};

CLI::App* add_run_command(CLI::App& app, RunOptions& options);
int run_run(const RunOptions& options);

}  // namespace pipescope::cli
