// Simulated ops per second: the engine alone (schedule built, no listener) and
// the whole simulate() call (cost model, schedule, engine, memory tracking,
// metrics; no timeline), for K in {8, 64} and M in {32, 1024}. An "op" is a
// compute op (F, R, B, optimizer step) or a transfer of an activation or a
// gradient. BM_*Interleaved run interleaved-1f1b with v chunks per device on a
// model of 2 K v blocks.
//
//   build/bench/pipescope_sim_bench --benchmark_min_time=1

#include <benchmark/benchmark.h>

#include "costmodels/device.h"
#include "costmodels/model_families.h"
#include "sim/engine.h"
#include "sim/simulator.h"

namespace pipescope {
namespace {

Scenario bench_scenario(int K, int M, int chunks = 1) {
  Scenario sc;
  sc.name = "bench";
  TransformerParams p;
  p.layers = 2 * K * chunks;
  p.d_model = 1024;
  p.heads = 16;
  p.seq_len = 1024;
  p.vocab = 32000;
  p.dtype = DType::kBf16;
  sc.model = make_transformer(p);
  const DevicePreset preset = *find_device_preset("a100-80g");
  sc.cluster.name = "a100-80g";
  sc.cluster.devices = K;
  sc.cluster.device = preset.device;
  sc.cluster.interconnect = preset.interconnect;
  sc.training.global_batch = M;
  sc.training.micro_batches = M;
  sc.training.bytes_per_param = 16;
  sc.training.remat = Remat::kAlways;
  return sc;
}

// Runs the engine (or simulate()) per iteration and reports ops per second.
void time_engine(benchmark::State& state, const Schedule& schedule,
                 const std::vector<StageCost>& stages, const Cluster& cluster) {
  std::int64_t ops = 0;
  for (auto _ : state) {
    const EngineResult r = run_engine(schedule, stages, cluster, nullptr);
    benchmark::DoNotOptimize(r.step_time);
    ops += r.compute_ops + r.transfers;
  }
  state.counters["ops/s"] =
      benchmark::Counter(static_cast<double>(ops), benchmark::Counter::kIsRate);
}

void time_simulate(benchmark::State& state, const Scenario& sc, const SimConfig& cfg) {
  std::int64_t ops = 0;
  for (auto _ : state) {
    const SimResult r = simulate(sc, cfg);
    benchmark::DoNotOptimize(r.metrics.step_time);
    ops += r.compute_ops + r.transfers;
  }
  state.counters["ops/s"] =
      benchmark::Counter(static_cast<double>(ops), benchmark::Counter::kIsRate);
}

void BM_Engine(benchmark::State& state) {
  const int K = static_cast<int>(state.range(0));
  const int M = static_cast<int>(state.range(1));
  const Scenario sc = bench_scenario(K, M);
  const AnalyticCostModel cost(sc.cluster.device, sc.model.dtype, sc.training.bytes_per_param);
  const auto stages = compute_stage_costs(sc.model, partition_uniform(2 * K, K), cost, 1, 16);
  const Schedule schedule = build_gpipe(K, M, Remat::kAlways);
  time_engine(state, schedule, stages, sc.cluster);
}

void BM_Simulate(benchmark::State& state) {
  const int K = static_cast<int>(state.range(0));
  const int M = static_cast<int>(state.range(1));
  const Scenario sc = bench_scenario(K, M);
  SimConfig cfg;
  cfg.record_timeline = false;
  time_simulate(state, sc, cfg);
}

void BM_EngineInterleaved(benchmark::State& state) {
  const int K = static_cast<int>(state.range(0));
  const int v = static_cast<int>(state.range(1));
  const int M = static_cast<int>(state.range(2));
  const Scenario sc = bench_scenario(K, M, v);
  const AnalyticCostModel cost(sc.cluster.device, sc.model.dtype, sc.training.bytes_per_param);
  const int layers = static_cast<int>(sc.model.layers.size());
  const auto stages = compute_stage_costs(sc.model, partition_uniform(layers, K * v), cost, 1, 16);
  const Schedule schedule = build_interleaved_1f1b(K, M, v, Remat::kAlways);
  time_engine(state, schedule, stages, sc.cluster);
}

void BM_SimulateInterleaved(benchmark::State& state) {
  const int K = static_cast<int>(state.range(0));
  const int v = static_cast<int>(state.range(1));
  const int M = static_cast<int>(state.range(2));
  const Scenario sc = bench_scenario(K, M, v);
  SimConfig cfg;
  cfg.schedule = ScheduleKind::kInterleaved1F1B;
  cfg.chunks = v;
  cfg.record_timeline = false;
  time_simulate(state, sc, cfg);
}

BENCHMARK(BM_Engine)
    ->ArgNames({"K", "M"})
    ->ArgsProduct({{8, 64}, {32, 1024}})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Simulate)
    ->ArgNames({"K", "M"})
    ->ArgsProduct({{8, 64}, {32, 1024}})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EngineInterleaved)
    ->ArgNames({"K", "v", "M"})
    ->Args({64, 4, 1024})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SimulateInterleaved)
    ->ArgNames({"K", "v", "M"})
    ->Args({64, 4, 1024})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace pipescope

BENCHMARK_MAIN();
