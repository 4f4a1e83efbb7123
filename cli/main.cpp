// pipescope: plan and check pipeline-parallel training from the command line.
// Subcommands parse their options here and call the library; every error becomes
// one sentence on stderr and a non-zero exit status.

#include <signal.h>

#include <csignal>
#include <cstdio>
#include <exception>
#include <functional>
#include <new>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/calibrate_command.h"
#include "cli/capacity_command.h"
#include "cli/compare_command.h"
#include "cli/error_line.h"
#include "cli/export_command.h"
#include "cli/plan_command.h"
#include "cli/profile_command.h"
#include "cli/run_command.h"
#include "cli/selftest_command.h"
#include "cli/simulate_command.h"
#include "cli/sweep_command.h"
#include "cli/validate_command.h"
#include "costmodels/check.h"
#include "exec/compute/host_memory.h"
#include "sim/base/cancel.h"
#include "sim/base/file_io.h"
#include "sim/base/format.h"
#include "sim/base/signals.h"

namespace {

// Exit statuses: 0 success, 1 bad input or configuration, 2 command-line usage
// (CLI11's own codes are mapped to it), 3 internal error (a bug), 4 the
// hardware a selftest checks is not there (cli/selftest_command.h), 128 + N
// stopped by signal N (Ctrl-C: 130; sim/base/signals.h).
constexpr int kExitBadInput = 1;
constexpr int kExitUsage = 2;
constexpr int kExitInternal = 3;

// Whether a subcommand's output options name standard output ("-"). Those are
// the options that take an output file: --output, --trace and --csv.
bool writes_data_to_stdout(const CLI::App& app) {
  for (const CLI::App* sub : app.get_subcommands()) {
    for (const char* name : {"--output", "--trace", "--csv"}) {
      const CLI::Option* option = sub->get_option_no_throw(name);
      if (option == nullptr || option->count() == 0) continue;
      for (const std::string& value : option->results()) {
        if (pipescope::is_standard_output(value)) return true;
      }
    }
  }
  return false;
}

// What ends the command once it has run: anything left unwritten on standard
// output is an error too (a full disk), except a reader that went away.
int finish(int status) {
  try {
    pipescope::finish_standard_output();
  } catch (const std::exception& e) {
    pipescope::cli::print_error(e.what());
    return status == 0 ? kExitBadInput : status;
  }
  return status;
}

// Runs the command and turns what it throws into one line on stderr and an
// exit status.
int run_reporting_errors(const std::function<int()>& command) {
  using pipescope::escape_for_terminal;
  try {
    return command();
  } catch (const pipescope::Cancelled&) {
    pipescope::cli::print_line("pipescope: interrupted");
    const int sig = pipescope::stop_signal();
    return 128 + (sig != 0 ? sig : SIGINT);
  } catch (const pipescope::InternalError& e) {
    pipescope::cli::print_line("pipescope: internal error (please report): " +
                               escape_for_terminal(e.what()));
    return kExitInternal;
  } catch (const std::bad_alloc&) {
    pipescope::cli::print_error("out of memory; try a smaller K, M or model");
    return kExitBadInput;
  } catch (const std::exception& e) {
    // ScenarioError, ConfigError and I/O errors already read as one sentence.
    pipescope::cli::print_error(escape_for_terminal(e.what()));
    return kExitBadInput;
  }
}

}  // namespace

int main(int argc, char** argv) {
  pipescope::check_standard_output_writes();
  pipescope::refuse_overwriting_inputs(true);
  CLI::App app{"PipeScope: plan, simulate and check pipeline-parallel training (GPipe and after)",
               "pipescope"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "pipescope 0.1.0");
  namespace cli = pipescope::cli;
  cli::SimulateOptions simulate;
  cli::PlanOptions plan;
  cli::SweepOptions sweep;
  cli::CapacityOptions capacity;
  cli::ExportOptions exporting;
  cli::RunOptions running;
  cli::ProfileOptions profiling;
  cli::CompareOptions comparing;
  cli::ValidateOptions validating;
  cli::SelftestOptions selftesting;
  cli::CalibrateOptions calibrating;
  CLI::App* simulate_cmd = cli::add_simulate_command(app, simulate);
  CLI::App* plan_cmd = cli::add_plan_command(app, plan);
  CLI::App* sweep_cmd = cli::add_sweep_command(app, sweep);
  CLI::App* capacity_cmd = cli::add_capacity_command(app, capacity);
  CLI::App* export_cmd = cli::add_export_command(app, exporting);
  CLI::App* run_cmd = cli::add_run_command(app, running);
  CLI::App* profile_cmd = cli::add_profile_command(app, profiling);
  CLI::App* compare_cmd = cli::add_compare_command(app, comparing);
  CLI::App* validate_cmd = cli::add_validate_command(app, validating);
  CLI::App* selftest_cmd = cli::add_selftest_command(app, selftesting);
  CLI::App* calibrate_cmd = cli::add_calibrate_command(app, calibrating);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // --help and --version are checked like any output
    return finish(code == 0 ? 0 : kExitUsage);
  }

  pipescope::install_signal_handlers();
  if (writes_data_to_stdout(app)) pipescope::reserve_standard_output_for_data();
  // The executor's steps and the profile that predicts them should see memory
  // alike (exec/compute/host_memory.h).
  if (run_cmd->parsed() || profile_cmd->parsed() || compare_cmd->parsed()) {
    pipescope::exec::keep_freed_memory();
  }
  const auto command = [&]() -> int {
    if (simulate_cmd->parsed()) return cli::run_simulate(simulate);
    if (plan_cmd->parsed()) return cli::run_plan(plan);
    if (sweep_cmd->parsed()) return cli::run_sweep_command(sweep);
    if (capacity_cmd->parsed()) return cli::run_capacity(capacity);
    if (export_cmd->parsed()) return cli::run_export(exporting);
    if (run_cmd->parsed()) return cli::run_run(running);
    if (profile_cmd->parsed()) return cli::run_profile(profiling);
    if (compare_cmd->parsed()) return cli::run_compare(comparing);
    if (validate_cmd->parsed()) return cli::run_validate(validating);
    if (selftest_cmd->parsed()) return cli::run_selftest(selftesting);
    if (calibrate_cmd->parsed()) return cli::run_calibrate(calibrating);
    return kExitUsage;
  };
  return finish(run_reporting_errors(command));
}
