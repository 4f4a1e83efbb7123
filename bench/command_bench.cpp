// The command line's own time for a command, in the process, as the Python
// package runs it (python/core_module.cpp): the arguments parsed by the
// command line, the command run with its --json document captured instead of
// printed, the best plan written. bench/python_plan_bench.py times the same
// command from Python; docs/performance.md sets the two side by side.
//
//   BM_PlanCommand/demo and /gpt3: `plan SCENARIO --json -o FILE` for
//     scenarios/demo.json and scenarios/gpt3-175b-1024.json, each from cold
//     (the planner's shared memos cleared), as a fresh process runs it, the
//     document captured;
//   BM_PlanCommandPrinting/demo and /gpt3: the same with the document
//     written out as the command prints it (to /dev/null), what
//     `pipescope plan --json` spends in its process.
//
//   build/bench/pipescope_command_bench

#include <benchmark/benchmark.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/command_line.h"
#include "cli/json_output.h"
#include "costmodels/shared_memo.h"

namespace {

void plan_command_loop(benchmark::State& state, const char* file, bool printing) {
  const std::string scenario = std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/" + file;
  const std::string output =
      (std::filesystem::temp_directory_path() / "pipescope_command_bench.plan.json").string();
  for (auto _ : state) {
    pipescope::clear_shared_memos();
    pipescope::cli::CommandLine command_line;
    const std::vector<const char*> argv{"pipescope", "plan", scenario.c_str(),
                                        "--json",    "-o",   output.c_str()};
    command_line.app().parse(static_cast<int>(argv.size()), argv.data());
    nlohmann::json document;
    pipescope::cli::JsonCapture capture(document);
    // The notes the command writes beside its document, kept as the module
    // keeps them.
    std::ostringstream notes;
    std::streambuf* saved = std::cerr.rdbuf(notes.rdbuf());
    std::string error;
    if (command_line.run([&](const std::string& line) { error = line; }) != 0) {
      state.SkipWithError(error.c_str());
    }
    std::cerr.rdbuf(saved);
    if (printing) {
      std::ofstream null("/dev/null");
      null << document.dump(2) << "\n";  // as print_json does
    }
    benchmark::DoNotOptimize(document);
  }
  std::filesystem::remove(output);
}
void BM_PlanCommand(benchmark::State& state, const char* file) {
  plan_command_loop(state, file, false);
}
void BM_PlanCommandPrinting(benchmark::State& state, const char* file) {
  plan_command_loop(state, file, true);
}
BENCHMARK_CAPTURE(BM_PlanCommand, demo, "demo.json")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_PlanCommand, gpt3, "gpt3-175b-1024.json")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_PlanCommandPrinting, demo, "demo.json")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_PlanCommandPrinting, gpt3, "gpt3-175b-1024.json")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
BENCHMARK_MAIN();
