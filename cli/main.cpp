// pipescope: plan and check pipeline-parallel training from the command line.
// Subcommands parse their options here and call the library; every error becomes
// one sentence on stderr and a non-zero exit status.

#include <exception>
#include <iostream>
#include <new>

#include <CLI/CLI.hpp>

#include "cli/simulate_command.h"
#include "costmodels/check.h"

namespace {

// Exit statuses: 0 success, 1 bad input or configuration, 2 command-line usage
// (CLI11's own codes are mapped to it), 3 internal error (a bug).
constexpr int kExitBadInput = 1;
constexpr int kExitUsage = 2;
constexpr int kExitInternal = 3;

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"PipeScope: plan, simulate and check pipeline-parallel training (GPipe and after)",
               "pipescope"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "pipescope 0.1.0");
  pipescope::cli::SimulateOptions simulate;
  CLI::App* simulate_cmd = pipescope::cli::add_simulate_command(app, simulate);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : kExitUsage;
  }

  try {
    if (simulate_cmd->parsed()) return pipescope::cli::run_simulate(simulate);
  } catch (const pipescope::InternalError& e) {
    std::cerr << "pipescope: internal error (please report): " << e.what() << "\n";
    return kExitInternal;
  } catch (const std::bad_alloc&) {
    std::cerr << "pipescope: error: out of memory; try a smaller K, M or model\n";
    return kExitBadInput;
  } catch (const std::exception& e) {
    // ScenarioError, ConfigError and I/O errors already read as one sentence.
    std::cerr << "pipescope: error: " << e.what() << "\n";
    return kExitBadInput;
  }
  return kExitUsage;
}
