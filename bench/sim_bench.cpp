// Simulated ops per second: the engine alone (schedule built, no listener) and
// the whole simulate() call (cost model, schedule, engine, memory tracking,
// metrics; no timeline), for K in {8, 64} and M in {32, 1024}. An "op" is a
// compute op (F, R, B, optimizer step) or a transfer of an activation or a
// gradient. BM_*Interleaved run interleaved-1f1b with v chunks per device on a
// model of 2 K v blocks. BM_SimulateAtScale is the largest run of record: K =
// 1,024 stages, M = 8,192 micro-batches (17 million compute ops and as many
// transfers). BM_StreamTrace adds the Chrome trace, written while the engine
// runs into a stream that only counts the bytes.
//
//   build/bench/pipescope_sim_bench --benchmark_min_time=1

#include <benchmark/benchmark.h>

#include <ostream>
#include <streambuf>

#include "costmodels/device.h"
#include "costmodels/model_families.h"
#include "sim/engine/engine.h"
#include "sim/engine/simulator.h"
#include "sim/formats/trace_io.h"

namespace pipescope {
namespace {

Scenario bench_scenario(int K, int M, int chunks = 1, int blocks_per_stage = 2) {
  Scenario sc;
  sc.name = "bench";
  TransformerParams p;
  p.layers = blocks_per_stage * K * chunks;
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
  sc.cluster.cost_model = CostModelKind::kKernels;  // what a scenario on the preset gets
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
  const auto stages =
      compute_stage_costs(sc.model, partition_uniform(2 * K, K), cost, 1, 16, Remat::kAlways);
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
  const auto stages =
      compute_stage_costs(sc.model, partition_uniform(layers, K * v), cost, 1, 16, Remat::kAlways);
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

void BM_SimulateAtScale(benchmark::State& state) {
  const int K = static_cast<int>(state.range(0));
  const int M = static_cast<int>(state.range(1));
  const Scenario sc = bench_scenario(K, M, 1, 1);
  SimConfig cfg;
  cfg.record_timeline = false;
  time_simulate(state, sc, cfg);
}

// Counts what is written to it and keeps nothing.
class CountingBuffer final : public std::streambuf {
 public:
  std::int64_t bytes = 0;

 protected:
  int_type overflow(int_type c) override {
    if (!traits_type::eq_int_type(c, traits_type::eof())) ++bytes;
    return traits_type::not_eof(c);
  }
  std::streamsize xsputn(const char*, std::streamsize n) override {
    bytes += n;
    return n;
  }
};

void BM_StreamTrace(benchmark::State& state) {
  const int K = static_cast<int>(state.range(0));
  const int M = static_cast<int>(state.range(1));
  const Scenario sc = bench_scenario(K, M, 1, 1);
  std::int64_t slices = 0;
  std::int64_t bytes = 0;
  for (auto _ : state) {
    CountingBuffer buffer;
    std::ostream out(&buffer);
    ChromeTraceWriter writer(out);
    SimConfig cfg;
    cfg.timeline_sink = &writer;
    const SimResult r = simulate(sc, cfg);
    benchmark::DoNotOptimize(r.metrics.step_time);
    slices += writer.slices();
    bytes += buffer.bytes;
  }
  state.counters["slices/s"] =
      benchmark::Counter(static_cast<double>(slices), benchmark::Counter::kIsRate);
  state.counters["bytes/s"] =
      benchmark::Counter(static_cast<double>(bytes), benchmark::Counter::kIsRate);
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
BENCHMARK(BM_SimulateAtScale)
    ->ArgNames({"K", "M"})
    ->Args({1024, 8192})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);
BENCHMARK(BM_StreamTrace)
    ->ArgNames({"K", "M"})
    ->Args({64, 1024})
    ->Args({1024, 512})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace pipescope

BENCHMARK_MAIN();
