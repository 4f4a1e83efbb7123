// The partitioner and the planner at the sizes people plan for:
//   BM_PartitionOptimal: GPipe's largest Transformer (1,663 layers) into 128
//     stages on TPU v3 cores, with memory limits;
//   BM_PlanGpt3On1024: `plan` for scenarios/gpt3-175b-1024.json (96 layers,
//     d_model 12,288, 1,024 devices) on all-to-all links (cluster.preset
//     a100-80g): every K dividing 1,024, M up to 512, every remat mode and
//     schedule, on all cores;
//   BM_PlanGpt3On1024Nodes: the same on the scenario's DGX A100 nodes, where
//     the planner also tries T = 1, 2, 4, 8;
//   BM_PlanGpt3On1024NodesOneCore and BM_Plan1TOn3072NodesOneCore: the
//     planner on one thread, for GPT-3 as above and for Megatron-LM's 1T
//     model (128 layers, d_model 25,600, 160 heads) on 3,072 A100s in DGX
//     nodes, global batch 3,072;
//   BM_PlanGpt3On1024SharedNicsOneCore: GPT-3 as above on nodes whose 8
//     GPUs share 2 NICs of 4 x 200 Gb/s each (interconnect.nics_per_node),
//     where every route counts the copies on its NICs;
//   BM_PlanDeepSeekV3On2048NodesOneCore: DeepSeek-V3 from its config
//     (tests/data/hf/deepseek-v3: 61 blocks, 256 routed experts, latent
//     attention; sequence 4,096) on 2,048 H100s in DGX nodes, global batch
//     15,360 as its report trained with, on one thread: T, E (1 to 256), K,
//     D, M, schedules, remat and ZeRO searched;
//   BM_PlanDeepSeekV3At32kOn2048NodesOneCore: the same at sequences of 32,768
//     (global batch 1,920: the same 63M tokens a step), where C of 1, 2, 4
//     and 8 is searched too;
//   BM_PlanScenario/demo and /gpipe_transformer: `plan` for scenarios/demo.json
//     (the search the desktop app runs when it opens it: 26 layers on 4
//     devices) and scenarios/gpipe/transformer-tpuv3.json (50 layers on 8),
//     where the chunked schedules' device partitioner does most of the work.
//
//   build/bench/pipescope_plan_bench

#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "costmodels/model_families.h"
#include "costmodels/shared_memo.h"
#include "sim/plan/planner.h"
#include "sim/scenario/hf_config.h"
#include "sim/scenario/model_json.h"
#include "sim/scenario/scenario_io.h"

namespace pipescope {
namespace {

void BM_PartitionOptimal(benchmark::State& state) {
  Scenario sc;
  TransformerParams p;
  p.layers = 1661;  // + embedding and head = 1,663 layers
  p.d_model = 2048;
  p.d_ff = 8192;
  p.heads = 32;
  p.seq_len = 1024;
  p.vocab = 32000;
  sc.model = make_transformer(p);
  const DevicePreset preset = *find_device_preset("tpu-v3");
  sc.cluster.devices = 128;
  sc.cluster.device = preset.device;
  sc.cluster.interconnect = preset.interconnect;
  sc.training.global_batch = 128;
  sc.training.micro_batches = 128;
  sc.training.bytes_per_param = 12;
  const AnalyticCostModel cost(sc.cluster.device, sc.model.dtype, 12);
  const PartitionProblem problem = partition_problem(sc, cost, 128, 128, Remat::kAlways);
  for (auto _ : state) {
    const PartitionResult r = partition_optimal(problem);
    benchmark::DoNotOptimize(r.bottleneck);
    if (r.stages.empty()) state.SkipWithError("nothing fits");
  }
}

// Plans `sc` with the default request, as `pipescope plan` does, each
// iteration; on `threads` threads (0: one per core). Each from cold, as a
// fresh `pipescope plan` process runs: nothing remembered from the last.
void plan_loop(benchmark::State& state, const Scenario& sc, unsigned threads = 0) {
  std::size_t tried = 0;
  PlanRequest request;
  request.threads = threads;
  for (auto _ : state) {
    clear_shared_memos();
    const PlanReport r = run_planner(sc, request);
    tried = r.ranked.size() + r.rejected.size() + r.dominated.size() + r.bounded.size();
    benchmark::DoNotOptimize(r.ranked.data());
  }
  state.counters["configurations"] = static_cast<double>(tried);
}

void BM_PlanScenario(benchmark::State& state, const char* file) {
  plan_loop(state, load_scenario(std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/" + file));
}
void BM_PlanGpt3On1024(benchmark::State& state) {
  plan_loop(state,
            load_scenario(std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/gpt3-175b-1024.json",
                          {"cluster.preset=a100-80g"}));
}
BENCHMARK(BM_PartitionOptimal)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_PlanScenario, demo, "demo.json")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_PlanScenario, gpipe_transformer, "gpipe/transformer-tpuv3.json")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
void BM_PlanGpt3On1024Nodes(benchmark::State& state) {
  plan_loop(state,
            load_scenario(std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/gpt3-175b-1024.json",
                          {"cluster.preset=dgx-a100"}));
}
Scenario gpt3_on_nodes(std::vector<std::string> sets = {}) {
  sets.insert(sets.begin(), "cluster.preset=dgx-a100");
  return load_scenario(std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/gpt3-175b-1024.json", sets);
}
void BM_PlanGpt3On1024NodesOneCore(benchmark::State& state) {
  plan_loop(state, gpt3_on_nodes(), 1);
}
void BM_Plan1TOn3072NodesOneCore(benchmark::State& state) {
  plan_loop(state,
            gpt3_on_nodes({"model.layers=128", "model.d_model=25600", "model.heads=160",
                           "cluster.devices=3072", "training.global_batch=3072"}),
            1);
}
void BM_PlanGpt3On1024SharedNicsOneCore(benchmark::State& state) {
  Scenario sc = gpt3_on_nodes();
  sc.cluster.interconnect.nics_per_node = 2;
  sc.cluster.interconnect.inter_node_bandwidth *= 4;
  sc.cluster.build_topology();
  plan_loop(state, sc, 1);
}
Scenario deepseek_v3_on_2048(std::int64_t seq_len, std::int64_t global_batch) {
  const std::string config =
      std::string(PIPESCOPE_SOURCE_DIR) + "/tests/data/hf/deepseek-v3/config.json";
  nlohmann::json doc = {{"name", "deepseek-v3-2048"},
                        {"cluster", {{"preset", "dgx-h100"}, {"devices", 2048}}},
                        {"training", {{"global_batch", global_batch}, {"optimizer", "adam"}}}};
  doc["model"] = transformer_model_json(read_hf_config(config, seq_len), "deepseek-v3");
  return parse_scenario_with_hf_model(doc, "deepseek-v3-2048", config, {});
}
void BM_PlanDeepSeekV3On2048NodesOneCore(benchmark::State& state) {
  plan_loop(state, deepseek_v3_on_2048(4096, 15360), 1);
}
void BM_PlanDeepSeekV3At32kOn2048NodesOneCore(benchmark::State& state) {
  plan_loop(state, deepseek_v3_on_2048(32768, 1920), 1);
}

BENCHMARK(BM_PlanGpt3On1024)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_PlanGpt3On1024Nodes)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(2);
BENCHMARK(BM_PlanGpt3On1024NodesOneCore)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(2);
BENCHMARK(BM_Plan1TOn3072NodesOneCore)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(2);
BENCHMARK(BM_PlanGpt3On1024SharedNicsOneCore)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(2);
BENCHMARK(BM_PlanDeepSeekV3On2048NodesOneCore)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(2);
BENCHMARK(BM_PlanDeepSeekV3At32kOn2048NodesOneCore)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(2);

}  // namespace
}  // namespace pipescope

BENCHMARK_MAIN();
