#pragma once
// `pipescope run PLAN --backend cpu|mpi`: train the plan's model for real with
// the plan's cut, schedule and remat, and measure it. `mpi` runs under
// `mpirun -np K`, one process per device; rank 0 prints.

#include <cstdint>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

namespace pipescope::cli {

struct RunOptions {
  std::string plan;
  std::string backend = "cpu";
  std::string device = "cpu";          // --backend mpi: where each rank computes (cpu or cuda)
  std::optional<int> tensor_parallel;  // -T: checked against the plan's T
  int steps = 20;
  double learning_rate = 1e-2;
  std::uint64_t seed = 1;
  std::optional<std::string> trace;
  bool json = false;
  int watchdog_ms = 30000;
  // Testing hook, hidden from --help: "throw:B(1,3)" makes that op throw,
  // "kill:B(1,3)" kills its process, "stall:B(1,3)" makes it wait forever.
  std::optional<std::string> inject_fault;
};

CLI::App* add_run_command(CLI::App& app, RunOptions& options);
int run_run(const RunOptions& options);

}  // namespace pipescope::cli
