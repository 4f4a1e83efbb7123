// The CPU executor's speed: scenarios/cpu-small.json trained on two stages
// (one thread each), GPipe and 1F1B, as `pipescope run` trains it. Each
// iteration trains 6 steps; `step_ms` is the median over the iterations of
// each one's median of steps 2-6 (the first warms caches), `samples_per_s` the
// global batch over it. Built with the
// kernels' default copies (the loader picks one: `kernels` in the context) or,
// side by side, in a build configured with -DCMAKE_CXX_FLAGS=-march=native.
//
//   build/bench/pipescope_exec_bench

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "exec/compute/kernel_level.h"
#include "exec/plan_runner.h"
#include "sim/formats/plan_io.h"

namespace {

using namespace pipescope;

// The plan `pipescope plan` makes for the CPU scenario on two stages.
Plan cpu_small_plan(const std::string& schedule) {
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("pipescope_exec_bench_" + schedule + ".json");
  const std::string cmd = std::string(PIPESCOPE_CLI) + " plan " + PIPESCOPE_SOURCE_DIR +
                          "/scenarios/cpu-small.json -K 2 --schedule " + schedule + " -o " +
                          file.string() + " > /dev/null";
  if (std::system(cmd.c_str()) != 0) return {};
  Plan plan = read_plan_file(file);
  std::filesystem::remove(file);
  return plan;
}

void train(benchmark::State& state, const std::string& schedule) {
  const Plan plan = cpu_small_plan(schedule);
  if (plan.stages == 0) {
    state.SkipWithError("pipescope plan failed");
    return;
  }
  const ModelSpec model = exec::plan_model(plan, "cpu-small");
  exec::PlanRunOptions options;
  options.steps = 6;
  std::vector<double> medians;  // of each iteration's steps 2-6
  for (auto _ : state) {
    const std::vector<exec::StepResult> steps = exec::run_plan(plan, model, options);
    medians.push_back(simtime_to_seconds(steps[exec::median_step(steps, 1)].step_time));
  }
  std::nth_element(medians.begin(), medians.begin() + medians.size() / 2, medians.end());
  const double step_s = medians[medians.size() / 2];
  state.counters["step_ms"] = step_s * 1e3;
  state.counters["samples_per_s"] = static_cast<double>(plan.global_batch) / step_s;
  state.SetLabel(std::string("kernels ") + exec::kernel_level());
}

void BM_TrainCpuSmallGpipe(benchmark::State& state) {
  train(state, "gpipe");
}

void BM_TrainCpuSmall1F1B(benchmark::State& state) {
  train(state, "1f1b");
}

}  // namespace

BENCHMARK(BM_TrainCpuSmallGpipe)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_TrainCpuSmall1F1B)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
