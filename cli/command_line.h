#pragma once
// The command line itself: every subcommand with its options, and how a run of
// one ends. `pipescope` (cli/main.cpp) parses its arguments with it; the Python
// module (python/) parses the arguments its functions are given, so that both
// take the same names, defaults and checks.

#include <functional>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/calibrate_command.h"
#include "cli/capacity_command.h"
#include "cli/compare_command.h"
#include "cli/export_command.h"
#include "cli/plan_command.h"
#include "cli/profile_command.h"
#include "cli/run_command.h"
#include "cli/selftest_command.h"
#include "cli/simulate_command.h"
#include "cli/sweep_command.h"
#include "cli/validate_command.h"

namespace pipescope::cli {

// Exit statuses: 0 success, 1 bad input or configuration, 2 command-line usage
// (CLI11's own codes are mapped to it), 3 internal error (a bug), 4 the
// hardware a selftest checks is not there (cli/selftest_command.h), 128 + N
// stopped by signal N (Ctrl-C: 130; sim/base/signals.h).
constexpr int kExitBadInput = 1;
constexpr int kExitUsage = 2;
constexpr int kExitInternal = 3;

class CommandLine {
 public:
  CommandLine();
  CommandLine(const CommandLine&) = delete;
  CommandLine& operator=(const CommandLine&) = delete;

  CLI::App& app() { return app_; }
  // The subcommand the arguments named, once parsed; null before.
  const CLI::App* chosen() const;
  // Whether the parsed command runs the executor (run, profile, compare).
  bool runs_the_executor() const;
  // Whether one of the parsed command's output options names standard output
  // ("-"): --output, --trace or --csv.
  bool writes_data_to_stdout() const;
  // Makes every subcommand read its scenario from `document`, named `name` in
  // messages, instead of from a file.
  void read_scenario_from(const nlohmann::json& document, const std::string& name);

  // Runs the parsed subcommand. What it throws becomes one line (the CLI's
  // "pipescope: error: ...") handed to `report`, and an exit status.
  int run(const std::function<void(const std::string&)>& report);

 private:
  int dispatch();

  CLI::App app_;
  SimulateOptions simulate_;
  PlanOptions plan_;
  SweepOptions sweep_;
  CapacityOptions capacity_;
  ExportOptions export_;
  RunOptions run_;
  ProfileOptions profile_;
  CompareOptions compare_;
  ValidateOptions validate_;
  SelftestOptions selftest_;
  CalibrateOptions calibrate_;
  CLI::App* simulate_cmd_;
  CLI::App* plan_cmd_;
  CLI::App* sweep_cmd_;
  CLI::App* capacity_cmd_;
  CLI::App* export_cmd_;
  CLI::App* run_cmd_;
  CLI::App* profile_cmd_;
  CLI::App* compare_cmd_;
  CLI::App* validate_cmd_;
  CLI::App* selftest_cmd_;
  CLI::App* calibrate_cmd_;
};

}  // namespace pipescope::cli
