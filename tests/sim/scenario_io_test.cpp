// Good scenarios: what each part of a scenario file becomes, and the
// defaults of what it leaves out.

#include "sim/scenario/scenario_io.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "costmodels/device.h"
#include "costmodels/model_families.h"
#include "scenario_docs.h"
#include "sim/scenario/model_json.h"

namespace pipescope {
namespace {

using nlohmann::json;
using namespace testing::docs;

TEST(ScenarioIo, LoadsDemo) {
  const Scenario s = load_scenario(std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/demo.json");
  EXPECT_EQ(s.name, "demo");
  EXPECT_FALSE(s.notes.empty());
  TransformerParams p;
  p.layers = 24;
  p.d_model = 2048;
  p.d_ff = 8192;
  p.heads = 16;
  p.seq_len = 1024;
  p.vocab = 32000;
  p.dtype = DType::kBf16;
  const ModelSpec expected = make_transformer(p);
  EXPECT_EQ(s.model.family, "transformer");
  EXPECT_EQ(s.model.dtype, DType::kBf16);
  EXPECT_EQ(s.model.layers.size(), expected.layers.size());
  EXPECT_EQ(s.model.total_params(), expected.total_params());
  EXPECT_EQ(s.model.tokens_per_sample, 1024);
  EXPECT_EQ(s.cluster.name, "a100-80g");
  EXPECT_EQ(s.cluster.devices, 4);
  EXPECT_EQ(s.cluster.device.memory_bytes, find_device_preset("a100-80g")->device.memory_bytes);
  EXPECT_EQ(s.training.global_batch, 32);
  EXPECT_EQ(s.training.micro_batches, 8);
  EXPECT_EQ(s.training.micro_batch_size(), 4);
  EXPECT_EQ(s.training.optimizer, Optimizer::kAdam);
  // megatron-core's fp32 gradients, the GPUs' default: 2 bytes more than the
  // 16 of mixed-precision Adam.
  EXPECT_EQ(s.training.framework.name, "megatron-core");
  EXPECT_EQ(s.training.bytes_per_param, bytes_per_param(Optimizer::kAdam, DType::kBf16) + 2.0);
  EXPECT_EQ(s.training.gradient_bytes, 4);
  EXPECT_EQ(s.training.schedule, ScheduleKind::kGpipe);
  EXPECT_EQ(s.training.remat, Remat::kAlways);
}

TEST(ScenarioIo, LoadsGpipeTpuV3Example) {
  const Scenario s =
      load_scenario(std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/gpipe/transformer-tpuv3.json");
  EXPECT_EQ(s.name, "gpipe-transformer-tpuv3");
  EXPECT_EQ(s.model.dtype, DType::kBf16);
  ASSERT_TRUE(s.model.transformer);
  EXPECT_FALSE(s.model.transformer->dropout);
  EXPECT_EQ(s.cluster.name, "tpu-v3");
  EXPECT_EQ(s.cluster.devices, 8);
  EXPECT_EQ(s.training.optimizer, Optimizer::kRmsprop);
  EXPECT_EQ(s.training.bytes_per_param, 12.0);
}

TEST(ScenarioIo, ExplicitClusterAndMlp) {
  const Scenario s = load_scenario(kScenarios + "explicit_cluster.json");
  EXPECT_EQ(s.name, "explicit_cluster");  // the file's stem
  EXPECT_EQ(s.notes, "");
  MlpParams p;
  p.layers = 6;
  p.d_model = 512;
  p.d_hidden = 2048;
  p.classes = 10;
  EXPECT_EQ(s.model.family, "mlp");
  EXPECT_EQ(s.model.name, "mlp");
  EXPECT_EQ(s.model.total_params(), make_mlp(p).total_params());
  EXPECT_EQ(s.cluster.name, "toy-gpu");
  EXPECT_EQ(s.cluster.devices, 2);
  EXPECT_EQ(s.cluster.device.name, "toy-gpu");
  EXPECT_EQ(s.cluster.device.peak_flops_fp32, 10e12);
  EXPECT_EQ(s.cluster.device.peak_flops_16bit, 80e12);
  EXPECT_EQ(s.cluster.device.memory_bytes, 16'000'000'000);
  EXPECT_EQ(s.cluster.device.mem_bandwidth, 900e9);
  EXPECT_EQ(s.cluster.device.op_overhead_s, 5e-6);
  EXPECT_EQ(s.cluster.device.efficiency.max_efficiency, 0.5);
  EXPECT_EQ(s.cluster.device.efficiency.half_flops, 0.0);
  EXPECT_EQ(s.cluster.interconnect.topology, TopologyKind::kPcieHost);
  EXPECT_EQ(s.cluster.interconnect.bandwidth, 12e9);
  EXPECT_EQ(s.cluster.interconnect.latency_s, 5e-6);
  EXPECT_EQ(s.training.micro_batches, 4);
  EXPECT_EQ(s.training.optimizer, Optimizer::kMomentum);
  EXPECT_EQ(s.training.bytes_per_param, 12.0);
  EXPECT_EQ(s.training.remat, Remat::kNever);
}

TEST(ScenarioIo, ExplicitLayerList) {
  const Scenario s = load_scenario(kScenarios + "layer_list.json");
  EXPECT_EQ(s.name, "three-layers");
  EXPECT_EQ(s.model.name, "toy");
  EXPECT_EQ(s.model.family, "layers");
  EXPECT_EQ(s.model.dtype, DType::kFp16);
  EXPECT_EQ(s.model.input_bytes, 64);
  EXPECT_EQ(s.model.tokens_per_sample, 16);
  ASSERT_EQ(s.model.layers.size(), 3u);
  const LayerSpec& in = s.model.layers[0];
  EXPECT_EQ(in.name, "in");
  EXPECT_EQ(in.fwd_flops, 1e6);
  EXPECT_EQ(in.bwd_flops, 2e6);  // default: twice the forward
  EXPECT_EQ(in.params, 1000);
  EXPECT_EQ(in.out_bytes, 256);
  EXPECT_EQ(in.stash_bytes, 64);
  EXPECT_EQ(s.model.layers[1].bwd_flops, 5e6);
  EXPECT_EQ(s.model.layers[2].fwd_flops, 0.0);
  // Without a name or op_overhead_s the device is "custom" with no per-op cost, one
  // peak for every dtype and flat full efficiency.
  EXPECT_EQ(s.cluster.name, "custom");
  EXPECT_EQ(s.cluster.device.peak_flops_16bit, 1e12);
  EXPECT_EQ(s.cluster.device.op_overhead_s, 0.0);
  EXPECT_EQ(s.cluster.device.efficiency.max_efficiency, 1.0);
  EXPECT_EQ(s.cluster.device.efficiency.half_flops, 0.0);
  EXPECT_EQ(s.cluster.interconnect.latency_s, 0.0);
  EXPECT_FALSE(s.training.optimizer.has_value());
  EXPECT_EQ(s.training.bytes_per_param, 10.0);
}

TEST(ScenarioIo, EfficiencyObject) {
  json doc = explicit_cluster_doc();
  doc["cluster"]["device"]["efficiency"] = {{"max", 0.8}, {"half_flops", 1e9}};
  const Scenario s = parse_scenario(doc, "eff.json");
  EXPECT_EQ(s.cluster.device.efficiency.max_efficiency, 0.8);
  EXPECT_EQ(s.cluster.device.efficiency.half_flops, 1e9);
}

TEST(ScenarioIo, PresetInterconnectOverride) {
  json doc = good_doc();
  doc["cluster"]["interconnect"] = {{"topology", "ring"}, {"bandwidth", 5e9}, {"latency_s", 2e-6}};
  const Scenario s = parse_scenario(doc, "ic.json");
  const DevicePreset a100 = *find_device_preset("a100-80g");
  EXPECT_EQ(s.cluster.name, "a100-80g");
  EXPECT_EQ(s.cluster.device.peak_flops_16bit, a100.device.peak_flops_16bit);
  EXPECT_EQ(s.cluster.interconnect.topology, TopologyKind::kRing);
  EXPECT_EQ(s.cluster.interconnect.bandwidth, 5e9);
  EXPECT_EQ(s.cluster.interconnect.latency_s, 2e-6);
}

TEST(ScenarioIo, PcieSwitchesBuildATree) {
  json doc = explicit_cluster_doc();
  doc["cluster"]["devices"] = 4;
  doc["cluster"]["interconnect"] = {{"topology", "pcie-host"},
                                    {"bandwidth", 12e9},
                                    {"latency_s", 5e-6},
                                    {"devices_per_switch", 2}};
  const Scenario s = parse_scenario(doc, "tree.json");
  EXPECT_EQ(s.cluster.interconnect.devices_per_switch, 2);
  ASSERT_TRUE(s.cluster.graph);
  EXPECT_EQ(s.cluster.link_name(s.cluster.route(2, 3)[1].link), "pcie1->host");
  doc["cluster"]["interconnect"]["devices_per_switch"] = -1;
  EXPECT_EQ(error_of(doc).json_path(), "cluster.interconnect.devices_per_switch");
  // Only the PCIe tree has switches.
  doc["cluster"]["interconnect"]["topology"] = "ring";
  doc["cluster"]["interconnect"]["devices_per_switch"] = 2;
  EXPECT_EQ(error_of(doc).json_path(), "cluster.interconnect.devices_per_switch");
}

TEST(ScenarioIo, DefaultsAndNameFromText) {
  json doc = good_doc();
  doc["training"].erase("micro_batches");
  const Scenario s = parse_scenario_text(doc.dump(), "");
  EXPECT_EQ(s.name, "scenario");
  EXPECT_EQ(s.model.name, "transformer");
  EXPECT_EQ(s.model.dtype, DType::kFp32);
  EXPECT_EQ(s.training.micro_batches, 1);
  EXPECT_EQ(s.training.optimizer, Optimizer::kAdam);
  EXPECT_EQ(s.training.bytes_per_param, 16.0);
  EXPECT_EQ(s.training.schedule, ScheduleKind::kGpipe);
  EXPECT_EQ(s.training.remat, Remat::kAlways);
  TransformerParams p;  // d_ff defaults to 4 * d_model
  p.layers = 4;
  p.d_model = 64;
  p.d_ff = 256;
  p.heads = 4;
  p.seq_len = 32;
  p.vocab = 100;
  EXPECT_EQ(s.model.total_params(), make_transformer(p).total_params());
}

TEST(ScenarioIo, IntegralFloatsAreIntegers) {
  json doc = good_doc();
  doc["training"]["global_batch"] = 3.2e1;
  EXPECT_EQ(parse_scenario(doc, "f.json").training.global_batch, 32);
}

// chunks belong to interleaving: 2 by default there, an error elsewhere.
TEST(ScenarioTraining, ChunksGoWithInterleaving) {
  const Scenario inter =
      parse_scenario_text(good_doc().dump(), "o.json", {"training.schedule=interleaved-1f1b"});
  EXPECT_EQ(inter.training.chunks, 2);
  const Scenario four = parse_scenario_text(
      good_doc().dump(), "o.json", {"training.schedule=interleaved-1f1b", "training.chunks=4"});
  EXPECT_EQ(four.training.chunks, 4);
  EXPECT_EQ(parse_scenario_text(good_doc().dump(), "o.json", {}).training.chunks, 1);
  const ScenarioError e = error_of(good_doc(), {"training.chunks=2"});
  EXPECT_EQ(e.json_path(), "training.chunks");
  EXPECT_NE(
      std::string(e.what()).find("2 chunks need a schedule that takes chunks: interleaved-1f1b, "
                                 "looped-bfs, zb-v, interleaved-zb, dualpipe-v"),
      std::string::npos)
      << e.what();
  EXPECT_EQ(
      error_of(good_doc(), {"training.schedule=interleaved-1f1b", "training.chunks=0"}).json_path(),
      "training.chunks");
}

TEST(Scenario, TransformerPositions) {
  json doc = good_doc();
  const auto embed_params = [&] { return parse_scenario(doc, "p.json").model.layers[0].params; };
  const std::int64_t sinusoidal = embed_params();
  doc["model"]["positions"] = "learned";
  const std::int64_t learned = embed_params();
  EXPECT_EQ(learned - sinusoidal, doc["model"]["seq_len"].get<std::int64_t>() *
                                      doc["model"]["d_model"].get<std::int64_t>());
  doc["model"]["positions"] = "rotary";
  try {
    parse_scenario(doc, "p.json");
    FAIL() << "expected ScenarioError";
  } catch (const ScenarioError& e) {
    EXPECT_STREQ(
        e.what(),
        "p.json: model.positions: unknown positions 'rotary' (expected one of: sinusoidal, "
        "learned)");
  }
}

TEST(Scenario, TransformerDropout) {
  json doc = good_doc();
  const Scenario with = parse_scenario(doc, "d.json");
  ASSERT_TRUE(with.model.transformer);
  EXPECT_TRUE(with.model.transformer->dropout);
  doc["model"]["dropout"] = false;
  const Scenario without = parse_scenario(doc, "d.json");
  EXPECT_FALSE(without.model.transformer->dropout);
  EXPECT_LT(without.model.layers[1].stash_bytes, with.model.layers[1].stash_bytes);
  EXPECT_EQ(without.model.total_params(), with.model.total_params());
  // A plan carries the setting: the model it rebuilds stashes the same bytes.
  json again = good_doc();
  again["model"] = model_spec_json(without.model);
  EXPECT_EQ(parse_scenario(again, "d.json").model.layers[1].stash_bytes,
            without.model.layers[1].stash_bytes);
  doc["model"]["dropout"] = "no";
  EXPECT_EQ(error_of(doc).json_path(), "model.dropout");
}

// model.cross_entropy: fp32 by default; the head keeps fp32 probabilities
// under fp32 and fp32-fused, its gradient in dtype under fused; a plan's model
// carries the choice; anything else is refused with the valid names.
TEST(Scenario, TransformerCrossEntropy) {
  json doc = good_doc();
  doc["model"]["dtype"] = "bf16";
  const Scenario plain = parse_scenario(doc, "d.json");
  ASSERT_TRUE(plain.model.transformer);
  EXPECT_EQ(plain.model.transformer->cross_entropy, CrossEntropy::kFp32);
  EXPECT_FALSE(model_spec_json(plain.model).contains("cross_entropy"));
  doc["model"]["cross_entropy"] = "fp32-fused";
  const Scenario fused_fp32 = parse_scenario(doc, "d.json");
  EXPECT_EQ(fused_fp32.model.transformer->cross_entropy, CrossEntropy::kFp32Fused);
  EXPECT_EQ(fused_fp32.model.layers.back().stash_bytes, plain.model.layers.back().stash_bytes);
  doc["model"]["cross_entropy"] = "fused";
  const Scenario fused = parse_scenario(doc, "d.json");
  EXPECT_LT(fused.model.layers.back().stash_bytes, plain.model.layers.back().stash_bytes);
  json again = doc;
  again["model"] = model_spec_json(fused.model);
  EXPECT_EQ(again["model"]["cross_entropy"], "fused");
  EXPECT_EQ(parse_scenario(again, "d.json").model.transformer->cross_entropy, CrossEntropy::kFused);
  doc["model"]["cross_entropy"] = "bf16";
  const ScenarioError e = error_of(doc);
  EXPECT_EQ(e.json_path(), "model.cross_entropy");
  EXPECT_NE(std::string(e.what()).find(
                "unknown cross_entropy 'bf16' (expected one of: fp32, fp32-fused, fused)"),
            std::string::npos)
      << e.what();
}

TEST(ScenarioIo, RematModes) {
  json doc = good_doc();
  for (const auto& [value, want] :
       std::vector<std::pair<json, Remat>>{{true, Remat::kAlways},
                                           {false, Remat::kNever},
                                           {"always", Remat::kAlways},
                                           {"never", Remat::kNever},
                                           {"except-last", Remat::kExceptLast},
                                           {"on", Remat::kAlways},
                                           {"off", Remat::kNever}}) {
    doc["training"]["remat"] = value;
    EXPECT_EQ(parse_scenario(doc, "s.json").training.remat, want) << value.dump();
  }
}

// More devices than layers loads: -K can ask for fewer stages, and later the
// devices beyond K hold data-parallel replicas. simulate() rejects K > layers.
TEST(Scenario, MoreDevicesThanLayersLoads) {
  json doc = layer_list_doc();
  doc["cluster"]["devices"] = 4;
  EXPECT_EQ(parse_scenario(doc, "ok.json").cluster.devices, 4);
}

TEST(ScenarioCostModel, GpuPresetsDefaultToTheKernelsModelAndAnalyticStaysByName) {
  EXPECT_EQ(parse_scenario(good_doc(), "a.json").cluster.cost_model, CostModelKind::kKernels);
  json doc = good_doc();
  doc["cluster"]["cost_model"] = "analytic";
  EXPECT_EQ(parse_scenario(doc, "a.json").cluster.cost_model, CostModelKind::kAnalytic);
  EXPECT_EQ(parse_scenario(explicit_cluster_doc(), "e.json").cluster.cost_model,
            CostModelKind::kAnalytic);
}

TEST(ScenarioCostModel, KernelsNeedTheDevicesTable) {
  json doc = explicit_cluster_doc();
  doc["cluster"]["cost_model"] = "kernels";
  const ScenarioError e = error_of(doc);
  EXPECT_EQ(e.json_path(), "cluster.cost_model");
  EXPECT_NE(std::string(e.what()).find("has none"), std::string::npos) << e.what();
  doc["cluster"]["cost_model"] = "roofline";
  EXPECT_NE(std::string(error_of(doc).what()).find("expected one of: analytic, kernels"),
            std::string::npos);
}

TEST(ScenarioCostModel, AnExplicitDeviceCarriesAWholeKernelTable) {
  json doc = explicit_cluster_doc();
  doc["cluster"]["device"]["kernels"] = json::parse(R"({
      "multiprocessors": 30, "tile_m": 128, "tile_n": 64, "gemm_efficiency": 0.7,
      "gemm_k_overhead": 32, "attention_fwd_efficiency": 0.5, "attention_bwd_efficiency": 0.4,
      "memory_efficiency": 0.9, "kernel_overhead_s": 5e-6, "link_efficiency": 0.7 })");
  const Scenario sc = parse_scenario(doc, "e.json");
  EXPECT_EQ(sc.cluster.cost_model, CostModelKind::kKernels);
  EXPECT_EQ(sc.cluster.device.kernels.multiprocessors, 30);
  EXPECT_EQ(sc.cluster.device.kernels.tile_n, 64);
  EXPECT_DOUBLE_EQ(sc.cluster.device.kernels.link_efficiency, 0.7);
  doc["cluster"]["device"]["kernels"].erase("memory_efficiency");
  EXPECT_EQ(error_of(doc).json_path(), "cluster.device.kernels.memory_efficiency");
  doc["cluster"]["device"]["kernels"]["memory_efficiency"] = 1.5;
  EXPECT_EQ(error_of(doc).json_path(), "cluster.device.kernels.memory_efficiency");
}

TEST(ScenarioCostModel, Fp8NeedsAnFp8PeakAndTheKernelsModel) {
  json doc = good_doc();
  doc["model"]["fp8"] = true;
  ScenarioError e = error_of(doc);  // a100-80g has no FP8
  EXPECT_EQ(e.json_path(), "model.fp8");
  EXPECT_NE(std::string(e.what()).find("no FP8 peak"), std::string::npos) << e.what();
  doc["cluster"]["preset"] = "h100-sxm";
  EXPECT_TRUE(parse_scenario(doc, "a.json").model.transformer->fp8);
  doc["cluster"]["cost_model"] = "analytic";
  e = error_of(doc);
  EXPECT_EQ(e.json_path(), "model.fp8");
  EXPECT_NE(std::string(e.what()).find("kernels model only"), std::string::npos) << e.what();
}

TEST(ScenarioCostModel, AttentionIsFusedOrUnfused) {
  json doc = good_doc();
  EXPECT_TRUE(parse_scenario(doc, "a.json").model.transformer->fused_attention);
  doc["model"]["attention"] = "unfused";
  EXPECT_FALSE(parse_scenario(doc, "a.json").model.transformer->fused_attention);
  EXPECT_FALSE(parse_scenario(doc, "a.json").model.transformer->eager_attention);
  doc["model"]["attention"] = "eager";
  const Scenario eager = parse_scenario(doc, "a.json");
  EXPECT_FALSE(eager.model.transformer->fused_attention);
  EXPECT_TRUE(eager.model.transformer->eager_attention);
  EXPECT_EQ(transformer_model_json(*eager.model.transformer, "m")["attention"], "eager");
  doc["model"]["attention"] = "flash";
  EXPECT_EQ(error_of(doc).json_path(), "model.attention");
}

}  // namespace
}  // namespace pipescope
