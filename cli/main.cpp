// pipescope: plan and check pipeline-parallel training from the command line.
// The subcommands and their options are cli/command_line.h's; every error
// becomes one sentence on stderr and a non-zero exit status.

#include <exception>

#include "cli/command_line.h"
#include "cli/error_line.h"
#include "exec/compute/host_memory.h"
#include "sim/base/file_io.h"
#include "sim/base/signals.h"

namespace {

// What ends the command once it has run: anything left unwritten on standard
// output is an error too (a full disk), except a reader that went away.
int finish(int status) {
  try {
    pipescope::finish_standard_output();
  } catch (const std::exception& e) {
    pipescope::cli::print_error(e.what());
    return status == 0 ? pipescope::cli::kExitBadInput : status;
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  namespace cli = pipescope::cli;
  pipescope::check_standard_output_writes();
  pipescope::refuse_overwriting_inputs(true);
  cli::CommandLine command_line;
  CLI::App& app = command_line.app();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // --help and --version are checked like any output
    return finish(code == 0 ? 0 : cli::kExitUsage);
  }

  pipescope::install_signal_handlers();
  if (command_line.writes_data_to_stdout()) pipescope::reserve_standard_output_for_data();
  // The executor's steps and the profile that predicts them should see memory
  // alike (exec/compute/host_memory.h).
  if (command_line.runs_the_executor()) pipescope::exec::keep_freed_memory();
  return finish(command_line.run(cli::print_line));
}
