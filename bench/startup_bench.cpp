// What starting the command costs: wall time and peak resident memory of
// `pipescope --help` and of simulating the default scenario, each in a fresh
// process (posix_spawn, then wait4 for the child's own resource use), output
// to /dev/null. PIPESCOPE_BENCH_CLI names another pipescope to measure (a
// previous build, side by side with this one).
//
//   build/bench/pipescope_startup_bench
//   PIPESCOPE_BENCH_CLI=/path/to/old/pipescope build/bench/pipescope_startup_bench

#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

extern char** environ;

namespace {

std::string program() {
  const char* other = std::getenv("PIPESCOPE_BENCH_CLI");
  return other != nullptr ? other : PIPESCOPE_CLI;
}

// Runs the program once with `args`; the child's peak resident set in KiB, or
// -1 when it could not start or failed.
long run_once(const std::vector<std::string>& args) {
  const std::string path = program();
  std::vector<char*> argv{const_cast<char*>(path.c_str())};
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&files, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, path.c_str(), &files, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  if (spawned != 0) return -1;
  int status = 0;
  rusage usage{};
  if (wait4(pid, &status, 0, &usage) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return -1;
  }
  return usage.ru_maxrss;
}

void measure(benchmark::State& state, const std::vector<std::string>& args) {
  long peak = 0;
  for (auto _ : state) {
    const long rss = run_once(args);
    if (rss < 0) {
      state.SkipWithError(("cannot run " + program()).c_str());
      return;
    }
    peak = std::max(peak, rss);
  }
  state.counters["peak_rss_MiB"] = static_cast<double>(peak) / 1024.0;
}

void BM_StartHelp(benchmark::State& state) {
  measure(state, {"--help"});
}

void BM_StartSimulateDemo(benchmark::State& state) {
  measure(state, {"simulate", std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/demo.json"});
}

}  // namespace

BENCHMARK(BM_StartHelp)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_StartSimulateDemo)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
