// The CPU executor's speed: scenarios/cpu-small.json trained on two stages
// (one thread each), GPipe and 1F1B, and with four experts, two a token, on
// one stage of two expert ranks (BM_TrainCpuSmallExperts: a thread each), as
// `pipescope run` trains them. Each iteration trains 6 steps; `step_ms` is
// the median over the iterations of each one's median of steps 2-6 (the
// first warms caches), `samples_per_s` the global batch over it. And one
// all-to-all of a TensorGroup of two threads (BM_TensorGroupAllToAll/rows:
// each rank sends parts of `rows` x 256 floats, one to each rank, 200 times
// back to back; `us_per_call` the slower rank's mean). Built with the
// kernels' default copies (the loader picks one: `kernels` in the context) or,
// side by side, in a build configured with -DCMAKE_CXX_FLAGS=-march=native.
//
//   build/bench/pipescope_exec_bench

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>

#include "exec/compute/kernel_level.h"
#include "exec/compute/tensor_group.h"
#include "exec/plan_runner.h"
#include "sim/formats/plan_io.h"

namespace {

using namespace pipescope;

// The plan `pipescope plan` makes for the CPU scenario with `args` (-K 2 on
// two stages).
Plan cpu_small_plan(const std::string& schedule, const std::string& args = "-K 2") {
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("pipescope_exec_bench_" + schedule + ".json");
  const std::string cmd = std::string(PIPESCOPE_CLI) + " plan " + PIPESCOPE_SOURCE_DIR +
                          "/scenarios/cpu-small.json " + args + " --schedule " + schedule + " -o " +
                          file.string() + " > /dev/null";
  if (std::system(cmd.c_str()) != 0) return {};
  Plan plan = read_plan_file(file);
  std::filesystem::remove(file);
  return plan;
}

void train(benchmark::State& state, const std::string& schedule, const std::string& args = "-K 2") {
  const Plan plan = cpu_small_plan(schedule, args);
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

void BM_TrainCpuSmallExperts(benchmark::State& state) {
  train(state, "1f1b",
        "--set model.experts=4 --set model.experts_per_token=2 --set model.expert_d_ff=64 "
        "--set cluster.devices=2 -K 1 -E 2 -M 4 --remat off");
}

void BM_TensorGroupAllToAll(benchmark::State& state) {
  const auto rows = static_cast<Eigen::Index>(state.range(0));
  constexpr int kCalls = 200;
  double slowest_us = 0.0;
  for (auto _ : state) {
    exec::TensorGroup group(2);
    std::vector<double> us(2);
    const auto rank = [&](int r) {
      std::vector<exec::Matrix> parts;
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kCalls; ++i) {
        parts.assign(2, exec::Matrix::Constant(rows, 256, 1.0f));
        group.all_to_all(r, parts);
      }
      us[static_cast<std::size_t>(r)] =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
          kCalls;
    };
    std::thread other(rank, 1);
    rank(0);
    other.join();
    slowest_us = std::max(us[0], us[1]);
  }
  state.counters["us_per_call"] = slowest_us;
}

}  // namespace

BENCHMARK(BM_TrainCpuSmallGpipe)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_TrainCpuSmall1F1B)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_TrainCpuSmallExperts)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_TensorGroupAllToAll)->Arg(8)->Arg(512)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
