// pipescope._core: the command line's subcommands, run in this process for the
// Python package (python/pipescope/). Python turns its arguments into the
// command's own (the names, defaults and checks of cli/command_line.h) and gets
// back what `--json` prints, the notes the command wrote beside it (through
// std::cout and std::cerr), and the command's one error line.

#include <signal.h>

#include <iostream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <nlohmann/json.hpp>

#include "cli/command_line.h"
#include "cli/json_output.h"
#include "costmodels/shared_memo.h"
#include "exec/compute/host_memory.h"
#include "sim/base/cancel.h"
#include "sim/base/file_io.h"

namespace nb = nanobind;

namespace {

// One command at a time: the commands share the process's standard streams
// (whose notes are collected here: std::cout and std::cerr are swapped for
// the whole process while a command runs, so another extension writing to
// them then would write into the notes) and its stop flag.
std::mutex g_command_mutex;

struct Outcome {
  int status = 0;
  std::string json;   // the --json document, compact; empty if none
  std::string notes;  // what the command wrote to std::cout and std::cerr
  std::string error;  // its one error line, if it failed
};

// While alive, what is written to `stream` goes to `into`.
class StreamCapture {
 public:
  StreamCapture(std::ostream& stream, std::ostringstream& into)
      : stream_(stream), saved_(stream.rdbuf(into.rdbuf())) {}
  ~StreamCapture() { stream_.rdbuf(saved_); }
  StreamCapture(const StreamCapture&) = delete;
  StreamCapture& operator=(const StreamCapture&) = delete;

 private:
  std::ostream& stream_;
  std::streambuf* saved_;
};

extern "C" void on_interrupt(int /*sig*/) {
  pipescope::request_cancel();  // async-signal-safe
}

// While alive, Ctrl-C (SIGINT) asks the running command to stop, as it does
// the command line's, instead of reaching Python's handler, which is put back
// after. Only for a command run from Python's main thread, the one Python's
// own handler serves (a notebook's "interrupt").
class InterruptScope {
 public:
  explicit InterruptScope(bool on) : on_(on) {
    if (!on_) return;
    struct sigaction action {};
    action.sa_handler = on_interrupt;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    sigaction(SIGINT, &action, &saved_);
  }
  ~InterruptScope() {
    if (on_) sigaction(SIGINT, &saved_, nullptr);
  }
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;

 private:
  bool on_;
  struct sigaction saved_ {};
};

// What a command run here may not do, as a usage error's line; empty if
// nothing: write data to standard output ("-", which is the process's, not
// Python's sys.stdout), or run the CUDA or MPI backends (the command line's:
// an MPI rank's failure ends its process).
std::string refused_here(const pipescope::cli::CommandLine& command_line) {
  if (command_line.writes_data_to_stdout()) {
    return "standard output (\"-\") is the command line's; give a file";
  }
  const CLI::App* sub = command_line.chosen();
  for (const char* name : {"--backend", "--device"}) {
    const CLI::Option* option = sub == nullptr ? nullptr : sub->get_option_no_throw(name);
    if (option == nullptr || option->count() == 0) continue;
    for (const std::string& value : option->results()) {
      if (value != "cpu") {
        return std::string(name) + " " + value +
               ": the Python package runs the CPU executor only; use the command line";
      }
    }
  }
  return "";
}

Outcome run_command(const std::vector<std::string>& args,
                    const std::optional<std::string>& scenario_json,
                    const std::string& scenario_name, bool interruptible) {
  Outcome out;
  std::lock_guard<std::mutex> lock(g_command_mutex);
  pipescope::reset_cancel();  // a stop asked of the command before is not this one's
  InterruptScope interrupts(interruptible);
  pipescope::cli::CommandLine command_line;
  std::vector<const char*> argv{"pipescope"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  try {
    command_line.app().parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    out.status = pipescope::cli::kExitUsage;
    out.error = e.what();
    return out;
  }
  if (const std::string refused = refused_here(command_line); !refused.empty()) {
    out.status = pipescope::cli::kExitUsage;
    out.error = refused;
    return out;
  }
  if (scenario_json) {
    nlohmann::json document = nlohmann::json::parse(*scenario_json, nullptr, false);
    if (document.is_discarded()) {
      out.status = pipescope::cli::kExitBadInput;
      out.error = "pipescope: error: " + scenario_name + ": not a JSON document";
      return out;
    }
    command_line.read_scenario_from(document, scenario_name);
  }
  // As the command does: the executor's steps and the profile that predicts
  // them see memory alike (process-wide, for the rest of the process).
  if (command_line.runs_the_executor()) pipescope::exec::keep_freed_memory();
  nlohmann::json document;
  std::ostringstream notes;
  {
    pipescope::cli::JsonCapture capture(document);
    StreamCapture cout(std::cout, notes);
    StreamCapture cerr(std::cerr, notes);
    out.status = command_line.run([&](const std::string& line) { out.error = line; });
  }
  // Invalid UTF-8 in a string (a name from a file) is replaced, as the
  // command's own output would show it, rather than failing here.
  if (!document.is_null())
    out.json = document.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  out.notes = notes.str();
  return out;
}

// The help a subcommand prints for --help.
std::string command_help(const std::string& name) {
  pipescope::cli::CommandLine command_line;
  const CLI::App* sub = command_line.app().get_subcommand(name);
  return sub->help();
}

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "PipeScope's command line, run in this process";
  // As the command line: an output that names a file the command read is
  // refused (plan(s, output=s) would lose the scenario).
  pipescope::refuse_overwriting_inputs(true);
  nb::class_<Outcome>(m, "Outcome")
      .def_ro("status", &Outcome::status)
      .def_ro("json", &Outcome::json)
      .def_ro("notes", &Outcome::notes)
      .def_ro("error", &Outcome::error);
  m.def("run", &run_command, nb::arg("args"), nb::arg("scenario_json") = nb::none(),
        nb::arg("scenario_name") = "", nb::arg("interruptible") = false,
        nb::call_guard<nb::gil_scoped_release>(),
        "Runs `pipescope ARGS...` (the scenario read from scenario_json when given) and "
        "returns its status, --json document, notes and error line. interruptible: Ctrl-C "
        "stops the command (status 130) while it runs; for Python's main thread only.");
  m.def("cancel_requested", &pipescope::cancel_requested,
        "Whether a stop of the running command was asked (for tests).");
  m.def("help", &command_help, nb::arg("command"), "The --help text of a subcommand.");
  m.def("clear_memos", &pipescope::clear_shared_memos,
        "Empties the planner's shared memos, so that the next command runs as in a fresh "
        "process (for benchmarks: bench/python_plan_bench.py).");
}
