#pragma once
// Runs the pipescope program as a user would and captures what it prints.

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace pipescope::testing {

struct CliResult {
  int status = -1;
  std::string out;
  std::string err;
};

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs `program` (a path; "mpirun -np 2 <path>" also works) with `args`, which
// go through the shell: quote what needs it.
inline CliResult run_program(const std::string& program, const std::string& args) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("pipescope_cli_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string cmd = program + " " + args + " >" + (dir / "out").string() + " 2>" +
                          (dir / "err").string() + " </dev/null";
  const int raw = std::system(cmd.c_str());
  CliResult r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  r.out = slurp(dir / "out");
  r.err = slurp(dir / "err");
  fs::remove_all(dir);
  return r;
}

// `launcher` comes before the program (e.g. "mpirun -np 2").
inline CliResult run_under(const std::string& launcher, const std::string& args) {
  return run_program(launcher + " " + std::string(PIPESCOPE_CLI), args);
}

inline CliResult run(const std::string& args) {
  return run_under("", args);
}

// The step lines' losses of `run`'s output ("step    1  loss 4.17126 ...").
inline std::vector<double> run_losses(const std::string& out) {
  std::vector<double> found;
  for (std::size_t at = out.find("loss "); at != std::string::npos;
       at = out.find("loss ", at + 1)) {
    found.push_back(std::stod(out.substr(at + 5, out.find(' ', at + 5) - (at + 5))));
  }
  return found;
}

}  // namespace pipescope::testing
