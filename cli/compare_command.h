#pragma once
// `pipescope compare PLAN --backend cpu`: run the plan, profile its model between
// the steps (or reuse a profile), simulate, and put prediction and measurement
// side by side.

#include <cstdint>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

namespace pipescope::cli {

struct CompareOptions {
  std::string plan;
  std::string backend = "cpu";
  std::optional<std::string> profile;  // reuse instead of profiling
  std::optional<int> tensor_parallel;  // -T: checked against the plan's T
  int steps = 12;
  int warmup = 2;
  int rounds = 1;
  double learning_rate = 1e-2;
  std::uint64_t seed = 1;
  bool json = false;
};

CLI::App* add_compare_command(CLI::App& app, CompareOptions& options);
int run_compare(const CompareOptions& options);

}  // namespace pipescope::cli
