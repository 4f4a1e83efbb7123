// pipescope: plan and check pipeline-parallel training from the command line.
// Subcommands parse their options here and call the library; every error becomes
// one sentence on stderr and a non-zero exit status.

#include <signal.h>

#include <csignal>
#include <cstdio>
#include <exception>
#include <iostream>
#include <new>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

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
#include "costmodels/check.h"
#include "exec/host_memory.h"
#include "sim/cancel.h"

namespace {

// Exit statuses: 0 success, 1 bad input or configuration, 2 command-line usage
// (CLI11's own codes are mapped to it), 3 internal error (a bug), 4 the
// hardware a selftest checks is not there (cli/selftest_command.h).
constexpr int kExitBadInput = 1;
constexpr int kExitUsage = 2;
constexpr int kExitInternal = 3;
constexpr int kExitInterrupted = 128 + SIGINT;  // what shells report for Ctrl-C

// Ctrl-C or SIGTERM asks long work to stop (sim/cancel.h): workers finish their
// current job or op, nothing is written, and the program exits 130. A second one
// ends the program at once, the default way.
extern "C" void on_stop_signal(int sig) {
  if (pipescope::cancel_requested()) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  pipescope::request_cancel();
}

// An error quotes what the user wrote, which may hold a newline or other control
// characters: escaped, so the message stays one line.
std::string one_line(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

}  // namespace

int main(int argc, char** argv) {
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

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : kExitUsage;
  }

  install_stop_handlers();
  // The executor's steps and the profile that predicts them should see memory
  // alike (exec/host_memory.h).
  if (run_cmd->parsed() || profile_cmd->parsed() || compare_cmd->parsed()) {
    pipescope::exec::keep_freed_memory();
  }
  try {
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
  } catch (const pipescope::Cancelled&) {
    std::cerr << "pipescope: interrupted\n";
    return kExitInterrupted;
  } catch (const pipescope::InternalError& e) {
    std::cerr << "pipescope: internal error (please report): " << one_line(e.what()) << "\n";
    return kExitInternal;
  } catch (const std::bad_alloc&) {
    std::cerr << "pipescope: error: out of memory; try a smaller K, M or model\n";
    return kExitBadInput;
  } catch (const std::exception& e) {
    // ScenarioError, ConfigError and I/O errors already read as one sentence.
    std::cerr << "pipescope: error: " << one_line(e.what()) << "\n";
    return kExitBadInput;
  }
  return kExitUsage;
}
