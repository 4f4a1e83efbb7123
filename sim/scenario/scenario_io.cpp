// Scenario JSON -> Scenario. Validation walks the document with ObjectReader, which
// remembers every key it was asked for: whatever else an object holds is a typo or a
// field of another form, and is reported with the keys that would have been read.

#include "sim/scenario/scenario_io.h"

#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "costmodels/device.h"
#include "costmodels/framework.h"
#include "costmodels/layer_graph.h"
#include "costmodels/model_families.h"
#include "sim/base/input_file.h"
#include "sim/base/json_reader.h"
#include "sim/scenario/scenario_limits.h"
#include "sim/scenario/scenario_override.h"
#include "sim/scenario/stated_cut.h"
#include "sim/scenario/tensor_groups.h"

namespace pipescope {

using nlohmann::json;

namespace {

using namespace json_io;

// Layers and devices each become entries in per-layer and per-device tables.
// The optimal partitioner's search grows with the square of the layer count:
// 16,384 layers (far beyond any published model) still cut in seconds.
constexpr IntRange kLayerCount{1, 1 << 14};
constexpr IntRange kDeviceCount{1, 1 << 20};
// Tensor parallelism runs inside a node's fast links: 1024 is far beyond any.
constexpr IntRange kTensorParallel{1, 1 << 10};

DType read_dtype(ObjectReader& m) {
  return opt_choice(m, "dtype", "dtype", parse_dtype, "fp32, bf16, fp16").value_or(DType::kFp32);
}

// "fused" or "unfused" as true or false: model.attention, model.norm.
std::optional<bool> parse_fused(std::string_view v) {
  if (v == "fused") return true;
  if (v == "unfused") return false;
  return std::nullopt;
}

// The fields the framework's profile gives a transformer unless the model
// says otherwise: how attention, the layer norms and the loss run.
ModelSpec read_transformer(ObjectReader& m, const Framework& fw) {
  const std::string name = m.opt_string("name").value_or("transformer");
  TransformerParams p;
  p.layers = static_cast<int>(m.integer("layers", kLayerCount));
  p.d_model = m.integer("d_model", kModelWidth);
  p.d_ff = m.opt_integer("d_ff", kModelWidth).value_or(4 * p.d_model);
  p.heads = m.integer("heads", kModelWidth);
  p.seq_len = m.integer("seq_len", kModelLength);
  p.vocab = m.integer("vocab", kModelLength);
  p.dtype = read_dtype(m);
  const auto parse_positions = [](std::string_view v) -> std::optional<bool> {
    if (v == "sinusoidal") return false;
    if (v == "learned") return true;
    return std::nullopt;
  };
  p.learned_positions =
      opt_choice(m, "positions", "positions", parse_positions, "sinusoidal, learned")
          .value_or(false);
  p.tied_embeddings = m.opt_bool("tied_embeddings").value_or(false);
  p.kv_heads = m.opt_integer("kv_heads", kModelWidth).value_or(p.heads);
  p.dropout = m.opt_bool("dropout").value_or(true);
  p.fused_attention = opt_choice(m, "attention", "attention", parse_fused, "fused, unfused")
                          .value_or(fw.fused_attention);
  p.fused_norm =
      opt_choice(m, "norm", "norm", parse_fused, "fused, unfused").value_or(fw.fused_norm);
  p.fp8 = m.opt_bool("fp8").value_or(false);
  p.cross_entropy = opt_choice(m, "cross_entropy", "cross_entropy", parse_cross_entropy,
                               "fp32, fp32-fused, fused")
                        .value_or(fw.cross_entropy);
  if (p.d_model % p.heads != 0) {
    m.fail("heads",
           std::to_string(p.heads) + " heads do not divide d_model " + std::to_string(p.d_model));
  }
  if (p.kv_heads > p.heads || p.heads % p.kv_heads != 0) {
    m.fail("kv_heads", std::to_string(p.kv_heads) + " key/value heads do not divide heads " +
                           std::to_string(p.heads));
  }
  return make_transformer(p, name);
}

ModelSpec read_mlp(ObjectReader& m) {
  const std::string name = m.opt_string("name").value_or("mlp");
  MlpParams p;
  p.layers = static_cast<int>(m.integer("layers", kLayerCount));
  p.d_model = m.integer("d_model", kModelWidth);
  p.d_hidden = m.opt_integer("d_hidden", kModelWidth).value_or(4 * p.d_model);
  p.classes = m.opt_integer("classes", kModelLength).value_or(p.d_model);
  p.dtype = read_dtype(m);
  return make_mlp(p, name);
}

ModelSpec read_amoebanet(ObjectReader& m) {
  const std::string name = m.opt_string("name").value_or("amoebanet");
  AmoebaNetParams p;
  p.cells = static_cast<int>(m.integer("cells", kLayerCount));
  p.filters = m.integer("filters", kModelWidth);
  if (p.filters < 8) {
    m.fail("filters",
           "expected at least 8 (the stem has filters / 4 channels and its first "
           "reduction cell's bottlenecks filters / 8), got " +
               std::to_string(p.filters));
  }
  p.image_size = m.opt_integer("image_size", kPositiveSmallInt).value_or(224);
  p.classes = m.opt_integer("classes", kModelLength).value_or(1000);
  p.dtype = read_dtype(m);
  return make_amoebanet(p, name);
}

ModelSpec read_resnet(ObjectReader& m) {
  const std::string name = m.opt_string("name").value_or("resnet");
  ResNetParams p;
  p.depth = static_cast<int>(m.integer("depth", kPositiveSmallInt));
  if (p.depth != 50 && p.depth != 101 && p.depth != 152) {
    m.fail("depth", "expected 50, 101 or 152, got " + std::to_string(p.depth));
  }
  p.image_size = m.opt_integer("image_size", kPositiveSmallInt).value_or(224);
  if (p.image_size < 32) {
    m.fail("image_size", "expected at least 32 (five halvings leave a 1 x 1 map), got " +
                             std::to_string(p.image_size));
  }
  p.classes = m.opt_integer("classes", kModelLength).value_or(1000);
  p.dtype = read_dtype(m);
  return make_resnet(p, name);
}

LayerSpec read_layer(ObjectReader l) {
  LayerSpec layer;
  layer.name = l.string("name");
  layer.fwd_flops = l.number("fwd_flops", NumberRange::kNonNegative);
  layer.bwd_flops =
      l.opt_number("bwd_flops", NumberRange::kNonNegative).value_or(2.0 * layer.fwd_flops);
  layer.params = l.integer("params", kNonNegativeInt);
  layer.out_bytes = l.integer("out_bytes", kNonNegativeInt);
  layer.stash_bytes = l.integer("stash_bytes", kNonNegativeInt);
  if (l.find("inputs") != nullptr) {
    const json& names = l.array("inputs");
    if (names.empty()) {
      l.fail("inputs",
             "expected at least one layer name (leave 'inputs' out for the previous layer)");
    }
    for (std::size_t j = 0; j < names.size(); ++j) {
      layer.inputs.push_back(as_string(names[j], l.where("inputs").index(j)));
    }
  }
  l.finish();
  return layer;
}

ModelSpec read_layer_list(ObjectReader& m) {
  ModelSpec spec;
  spec.name = m.opt_string("name").value_or("layers");
  const Where list_at = m.where("layers");
  const json& list = m.at("layers");
  if (!list.is_array()) list_at.fail("expected an array of layers, got " + type_of(list));
  if (list.empty()) list_at.fail("expected at least one layer, got an empty array");
  if (list.size() > static_cast<std::size_t>(kLayerCount.max)) {
    list_at.fail("expected at most " + std::to_string(kLayerCount.max) + " layers, got " +
                 std::to_string(list.size()));
  }
  std::map<std::string, std::size_t> index_of_name;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const Where at = list_at.index(i);
    LayerSpec layer = read_layer(ObjectReader(list[i], at));
    const auto [it, inserted] = index_of_name.emplace(layer.name, i);
    if (!inserted) {
      at.key("name").fail("duplicate layer name '" + layer.name + "' (also used by " +
                          list_at.index(it->second).path + ")");
    }
    spec.layers.push_back(std::move(layer));
  }
  spec.dtype = read_dtype(m);
  spec.input_bytes = m.opt_integer("input_bytes", kNonNegativeInt).value_or(0);
  spec.tokens_per_sample = m.opt_integer("tokens_per_sample", kPositiveInt).value_or(1);
  // Layers that name their inputs form a graph: check it, order it, size its cuts.
  try {
    resolve_layer_graph(spec);
  } catch (const LayerGraphError& e) {
    const Where layer_at = list_at.index(static_cast<std::size_t>(e.layer()));
    const Where at =
        e.input() ? layer_at.key("inputs").index(static_cast<std::size_t>(*e.input())) : layer_at;
    at.fail(e.reason());
  }
  return spec;
}

ModelSpec read_model(ObjectReader m, const Framework& fw) {
  const std::string family = m.string("family");
  ModelSpec spec;
  if (family == "transformer" || family == "mlp" || family == "amoebanet" || family == "resnet") {
    try {
      spec = family == "transformer" ? read_transformer(m, fw)
             : family == "mlp"       ? read_mlp(m)
             : family == "amoebanet" ? read_amoebanet(m)
                                     : read_resnet(m);
    } catch (const std::overflow_error& e) {
      m.fail_here(e.what());
    }
  } else if (family == "layers") {
    spec = read_layer_list(m);
  } else {
    m.fail("family", "unknown family '" + family +
                         "' (expected one of: transformer, mlp, amoebanet, resnet, layers)");
  }
  spec.family = family;
  m.finish();
  return spec;
}

EfficiencyCurve read_efficiency(const json& v, const Where& w) {
  EfficiencyCurve curve;
  if (v.is_number()) {
    curve.max_efficiency = as_number(v, w, NumberRange::kEfficiency);
    return curve;
  }
  if (!v.is_object()) {
    w.fail("expected an efficiency from 1e-6 to 1 or an object {max, half_flops}, got " +
           type_of(v));
  }
  ObjectReader e(v, w);
  curve.max_efficiency = e.number("max", NumberRange::kEfficiency);
  curve.half_flops = e.number("half_flops", NumberRange::kNonNegative);
  e.finish();
  return curve;
}

// The deepest tile overhead a kernel table may give, in units of reduction
// depth: far beyond any real tile, and small enough that times stay finite.
constexpr double kMaxKOverhead = 1e4;

// A device's kernel table (costmodels/kernel_table.h), every figure required but
// the FP8 peak: a partial table would mix figures of two devices. The figures
// calibrate may fit keep to the ranges of calibration_parameters(), so that a
// table read here can always be written as a cost-model file.
KernelTable read_kernel_table(ObjectReader k) {
  KernelTable t;
  t.present = true;
  t.multiprocessors = static_cast<int>(k.integer("multiprocessors", {1, 1 << 16}));
  t.tile_m = static_cast<int>(k.integer("tile_m", {1, 1 << 12}));
  t.tile_n = static_cast<int>(k.integer("tile_n", {1, 1 << 12}));
  t.gemm_k_overhead = k.number("gemm_k_overhead", NumberRange::kNonNegative);
  if (t.gemm_k_overhead > kMaxKOverhead) {
    k.fail("gemm_k_overhead", "expected a depth from 0 to " + describe(json(kMaxKOverhead)) +
                                  ", got " + describe(json(t.gemm_k_overhead)));
  }
  for (const CalibrationParameter& p : calibration_parameters()) {
    const double v = k.number(p.name, NumberRange::kNonNegative);
    if (v < p.min || v > p.max) {
      k.fail(p.name, "expected " + describe(json(p.min)) + " to " + describe(json(p.max)) + " (" +
                         p.meaning + "), got " + describe(json(v)));
    }
    t.*p.field = v;
  }
  t.peak_flops_fp8 = k.opt_number("peak_flops_fp8", NumberRange::kRate).value_or(0.0);
  // Optional figures, which a table that leaves them out does not have
  // (kernel_table.h): the network's share, FP8's and FlashAttention-2's rates.
  t.network_efficiency =
      k.opt_number("network_efficiency", NumberRange::kEfficiency).value_or(t.network_efficiency);
  t.fp8_gemm_efficiency =
      k.opt_number("fp8_gemm_efficiency", NumberRange::kEfficiency).value_or(0.0);
  t.fa2_attention_fwd_efficiency =
      k.opt_number("fa2_attention_fwd_efficiency", NumberRange::kEfficiency).value_or(0.0);
  t.fa2_attention_bwd_efficiency =
      k.opt_number("fa2_attention_bwd_efficiency", NumberRange::kEfficiency).value_or(0.0);
  if ((t.fa2_attention_fwd_efficiency > 0.0) != (t.fa2_attention_bwd_efficiency > 0.0)) {
    k.fail("fa2_attention_bwd_efficiency",
           "FlashAttention-2's forward and backward efficiencies go together (0 to 1 each)");
  }
  k.finish();
  return t;
}

Device read_device(ObjectReader d) {
  Device dev;
  dev.name = d.opt_string("name").value_or("custom");
  dev.peak_flops_fp32 = d.number("peak_flops", NumberRange::kRate);
  dev.peak_flops_16bit =
      d.opt_number("peak_flops_16bit", NumberRange::kRate).value_or(dev.peak_flops_fp32);
  dev.memory_bytes = d.integer("memory_bytes", kPositiveInt);
  dev.mem_bandwidth = d.number("mem_bandwidth", NumberRange::kRate);
  dev.op_overhead_s = d.opt_number("op_overhead_s", NumberRange::kDuration).value_or(0.0);
  if (const json* e = d.find("efficiency"))
    dev.efficiency = read_efficiency(*e, d.where("efficiency"));
  if (auto k = d.opt_object("kernels")) dev.kernels = read_kernel_table(*k);
  d.finish();
  return dev;
}

Interconnect read_interconnect(ObjectReader ic) {
  Interconnect out;
  ic.at("topology");  // reports a missing key
  out.topology = *opt_choice(ic, "topology", "topology", parse_topology,
                             "all-to-all, pcie-host, ring, nodes, torus");
  out.bandwidth = ic.number("bandwidth", NumberRange::kRate);
  out.latency_s = ic.number("latency_s", NumberRange::kDuration);
  if (out.topology == TopologyKind::kNodes) {
    // Nodes of devices behind a switch (bandwidth, latency_s), a link per device
    // to a spine between nodes.
    out.devices_per_node = static_cast<int>(ic.integer("devices_per_node", kDeviceCount));
    out.inter_node_bandwidth = ic.number("inter_node_bandwidth", NumberRange::kRate);
    out.inter_node_latency_s = ic.number("inter_node_latency_s", NumberRange::kDuration);
    // NICs the node's devices share; 0 or absent: one per device.
    out.nics_per_node =
        static_cast<int>(ic.opt_integer("nics_per_node", {0, kDeviceCount.max}).value_or(0));
    if (out.nics_per_node > 0 && out.devices_per_node % out.nics_per_node != 0) {
      ic.fail("nics_per_node", std::to_string(out.nics_per_node) +
                                   " NICs do not divide the node's " +
                                   std::to_string(out.devices_per_node) +
                                   " devices (devices_per_node): each NIC serves as many devices");
    }
  }
  if (out.topology == TopologyKind::kPcieHost) {
    // Devices behind PCIe switches that share an uplink to the host; 0 or
    // absent: every device on its own root port.
    out.devices_per_switch =
        static_cast<int>(ic.opt_integer("devices_per_switch", {0, kDeviceCount.max}).value_or(0));
  }
  if (out.topology == TopologyKind::kTorus) {
    out.torus_width = static_cast<int>(ic.opt_integer("torus_width", kDeviceCount).value_or(0));
  }
  ic.finish();
  return out;
}

std::string preset_names() {
  std::vector<std::string> names;
  for (const DevicePreset& p : device_presets()) names.push_back(p.device.name);
  return join(names);
}

// How the cluster's stages exchange tensors and where its ranks run, as far
// as the scenario says; the framework's profile gives the rest
// (with_exchanges).
struct Exchanges {
  std::optional<P2pMode> p2p;
  std::optional<bool> p2p_split;
  std::optional<RankOrder> rank_order;
};

void with_exchanges(Cluster& cluster, const Exchanges& given, const Framework& fw) {
  cluster.p2p = given.p2p.value_or(fw.p2p);
  cluster.p2p_interleaved = given.p2p.value_or(fw.p2p_interleaved);
  cluster.p2p_split = given.p2p_split.value_or(fw.p2p_split);
  cluster.rank_order = given.rank_order.value_or(fw.rank_order);
}

Cluster read_cluster(ObjectReader c, Exchanges& exchanges) {
  Cluster cluster;
  cluster.devices = static_cast<int>(c.integer("devices", kDeviceCount));
  const std::optional<std::string> preset_name = c.opt_string("preset");
  const bool has_device = c.find("device") != nullptr;
  if (preset_name) {
    if (has_device) c.fail("device", "'device' cannot be given together with 'preset'");
    const std::optional<DevicePreset> preset = find_device_preset(*preset_name);
    if (!preset) {
      c.fail("preset",
             "unknown preset '" + *preset_name + "' (expected one of: " + preset_names() + ")");
    }
    cluster.name = *preset_name;
    cluster.device = preset->device;
    cluster.interconnect = preset->interconnect;
    if (auto ic = c.opt_object("interconnect")) cluster.interconnect = read_interconnect(*ic);
  } else {
    if (!has_device) c.fail_here("expected a 'preset', or a 'device' and an 'interconnect'");
    cluster.device = read_device(c.object("device"));
    cluster.name = cluster.device.name;
    cluster.interconnect = read_interconnect(c.object("interconnect"));
  }
  const bool has_table = cluster.device.kernels.present;
  cluster.cost_model =
      opt_choice(c, "cost_model", "cost model", parse_cost_model_kind, "analytic, kernels")
          .value_or(has_table ? CostModelKind::kKernels : CostModelKind::kAnalytic);
  exchanges.rank_order =
      opt_choice(c, "rank_order", "rank order", parse_rank_order, "tp-pp-dp, tp-dp-pp");
  exchanges.p2p = opt_choice(c, "p2p", "point-to-point mode", parse_p2p_mode, kP2pModeNames);
  exchanges.p2p_split = c.opt_bool("p2p_split");
  if (cluster.cost_model == CostModelKind::kKernels && !has_table) {
    c.fail("cost_model", "the kernels model needs the device's kernel table: device '" +
                             cluster.device.name +
                             "' has none (give \"kernels\" in the device, or use \"analytic\")");
  }
  c.finish();
  try {
    cluster.build_topology();
  } catch (const std::invalid_argument& e) {
    c.fail("interconnect", e.what());
  }
  return cluster;
}

TrainingConfig read_training(ObjectReader t, DType dtype) {
  TrainingConfig cfg;
  cfg.global_batch = t.integer("global_batch", kGlobalBatch);
  cfg.micro_batches =
      static_cast<int>(t.opt_integer("micro_batches", kPositiveSmallInt).value_or(1));
  if (cfg.global_batch % cfg.micro_batches != 0) {
    t.fail("micro_batches", std::to_string(cfg.micro_batches) + " does not divide global_batch " +
                                std::to_string(cfg.global_batch));
  }
  const std::optional<Optimizer> optimizer =
      opt_choice(t, "optimizer", "optimizer", parse_optimizer, "sgd, momentum, rmsprop, adam");
  const std::optional<double> given_bytes = t.opt_number("bytes_per_param", NumberRange::kPositive);
  if (optimizer && given_bytes) {
    t.fail("bytes_per_param", "'bytes_per_param' cannot be given together with 'optimizer'");
  }
  if (given_bytes) {
    cfg.bytes_per_param = *given_bytes;
  } else {
    cfg.optimizer = optimizer.value_or(Optimizer::kAdam);
    cfg.bytes_per_param = bytes_per_param(*cfg.optimizer, dtype);
  }
  cfg.schedule = opt_choice(t, "schedule", "schedule", parse_schedule, kScheduleNames)
                     .value_or(ScheduleKind::kGpipe);
  if (cfg.schedule == ScheduleKind::kCustom) {
    t.fail("schedule",
           "a custom schedule comes from its action file: pass it with --schedule-file and "
           "give a built-in schedule here (" +
               std::string(kScheduleNames) + ")");
  }
  cfg.chunks = static_cast<int>(t.opt_integer("chunks", kLayerCount)
                                    .value_or(takes_chunks(cfg.schedule) ? kDefaultChunks : 1));
  if (cfg.chunks > 1 && !takes_chunks(cfg.schedule)) {
    t.fail("chunks", std::to_string(cfg.chunks) +
                         " chunks need a schedule that takes chunks: " + chunked_schedule_names());
  }
  if (const json* r = t.find("remat"); r != nullptr && r->is_string()) {
    cfg.remat = *opt_choice(t, "remat", "remat mode", parse_remat, kRematNames);
  } else if (r != nullptr && !r->is_boolean()) {
    t.fail("remat",
           "expected true, false or one of: " + std::string(kRematNames) + ", got " + type_of(*r));
  } else {
    cfg.remat = remat_from_bool(t.opt_bool("remat").value_or(true));
  }
  cfg.checkpoint =
      opt_choice(t, "checkpoint", "checkpoint unit", parse_checkpoint, kCheckpointNames)
          .value_or(Checkpoint::kStage);
  const std::optional<std::int64_t> tensor_parallel =
      t.opt_integer("tensor_parallel", kTensorParallel);
  cfg.tensor_parallel = static_cast<int>(tensor_parallel.value_or(1));
  cfg.tensor_parallel_given = tensor_parallel.has_value();
  const std::optional<bool> sequence_parallel = t.opt_bool("sequence_parallel");
  cfg.sequence_parallel = sequence_parallel.value_or(false);
  cfg.sequence_parallel_given = sequence_parallel.has_value();
  if (const nlohmann::json* z = t.find("zero");
      z != nullptr && z->is_number_integer() && (*z < 0 || *z > kMaxZeroStage)) {
    t.fail("zero", "expected a ZeRO stage, 0, 1, 2 or 3, got " + z->dump());
  }
  const std::optional<std::int64_t> zero = t.opt_integer("zero", IntRange{0, kMaxZeroStage});
  cfg.zero = static_cast<int>(zero.value_or(0));
  cfg.zero_given = zero.has_value();
  if (cfg.sequence_parallel && cfg.tensor_parallel == 1) {
    t.fail("sequence_parallel",
           "sequence parallelism splits activations among tensor-parallel devices: it needs "
           "tensor_parallel above 1");
  }
  cfg.cut = read_stated_cut(t);
  t.finish();
  return cfg;
}

// The framework into the training, with what its gradients keep: a bf16 run
// under fp32_grads keeps fp32 gradients (4 bytes a parameter instead of 2,
// Megatron-LM's 18 bytes with Adam), an fp16 one an fp32 copy of its fp16
// gradients for the optimizer (20 bytes with Adam). A bytes_per_param the
// scenario gives stays as given.
void with_framework_gradients(TrainingConfig& cfg, DType dtype, const Framework& fw) {
  cfg.framework = fw;
  const Bytes e = dtype_bytes(dtype);
  cfg.gradient_bytes = e;
  if (!cfg.optimizer || !is_16bit(dtype) || !fw.fp32_grads) return;
  if (dtype == DType::kBf16) {
    cfg.gradient_bytes = 4;
    cfg.bytes_per_param += 4.0 - static_cast<double>(e);
  } else {
    cfg.bytes_per_param += 4.0;
  }
}

// A profile by name, or a failure at `at` naming the profiles.
Framework profile_named(const Where& at, const std::string& name) {
  std::optional<Framework> fw = find_framework(name);
  if (!fw) at.fail("unknown framework '" + name + "' (expected one of: " + framework_names() + ")");
  return *fw;
}

// training.framework: a profile's name, or an object naming one ("profile",
// by default the cluster's) and overriding its fields (framework_fields).
// Without it, the profile of the cluster's cost model (kDefaultGpuFramework
// under the kernels model, kIdealFramework otherwise).
Framework read_framework(ObjectReader& t, CostModelKind cost_model) {
  const std::string fallback =
      cost_model == CostModelKind::kKernels ? kDefaultGpuFramework : kIdealFramework;
  const json* f = t.find("framework");
  if (f == nullptr) return *find_framework(fallback);
  if (f->is_string()) return profile_named(t.where("framework"), f->get<std::string>());
  if (!f->is_object()) {
    t.fail("framework", "expected a profile (" + framework_names() +
                            ") or an object {\"profile\": NAME, FIELD: VALUE, ...}, got " +
                            type_of(*f));
  }
  ObjectReader o = t.object("framework");
  Framework fw = profile_named(o.where("profile"), o.opt_string("profile").value_or(fallback));
  for (const FrameworkField& field : framework_fields()) {
    if (field.flag != nullptr) {
      if (const std::optional<bool> b = o.opt_bool(field.key)) fw.*field.flag = *b;
      continue;
    }
    const std::optional<double> x = o.opt_number(field.key, NumberRange::kNonNegative);
    if (!x) continue;
    if (*x > field.max) {
      o.fail(field.key,
             "expected 0 to " + describe(json(field.max)) + ", got " + describe(json(*x)));
    }
    fw.*field.number = *x;
  }
  o.finish();
  return fw;
}

std::string default_name(const std::string& file) {
  const std::string stem = std::filesystem::path(file).stem().string();
  return stem.empty() ? "scenario" : stem;
}

}  // namespace

ModelSpec parse_model(const json& model, const std::string& file, const std::string& path,
                      const Framework& framework) {
  return read_model(ObjectReader(model, Where{file, path}), framework);
}

Scenario parse_scenario(const json& doc, const std::string& file) {
  ObjectReader top(doc, Where{file, ""});
  Scenario s;
  s.name = top.opt_string("name").value_or(default_name(file));
  s.notes = top.opt_string("notes").value_or("");
  ObjectReader model = top.object("model");
  ObjectReader cluster = top.object("cluster");
  ObjectReader training = top.object("training");
  top.finish();

  // The cluster first: its cost model chooses the framework's default
  // profile, which gives the model and the exchanges their defaults.
  Exchanges exchanges;
  s.cluster = read_cluster(std::move(cluster), exchanges);
  const Framework framework = read_framework(training, s.cluster.cost_model);
  with_exchanges(s.cluster, exchanges, framework);
  s.model = read_model(std::move(model), framework);
  if (s.model.transformer && s.model.transformer->fp8) {
    const Where fp8 = Where{file, ""}.key("model").key("fp8");
    if (s.cluster.cost_model != CostModelKind::kKernels) {
      fp8.fail(
          "FP8 GEMMs are costed by the kernels model only, and the cluster's cost_model is "
          "analytic");
    }
    if (!(s.cluster.device.kernels.peak_flops_fp8 > 0.0)) {
      fp8.fail("device '" + s.cluster.device.name + "' has no FP8 peak (expected false)");
    }
  }
  s.training = read_training(std::move(training), s.model.dtype);
  with_framework_gradients(s.training, s.model.dtype, framework);
  if (s.training.cut) check_stated_cut(*s.training.cut, s.model, file);
  // Under tensor parallelism the model becomes one device's share and the
  // cluster's devices groups of T.
  const int t = s.training.tensor_parallel;
  const bool sequence = s.training.sequence_parallel;
  if (const std::string problem = tensor_parallel_problem(s, t, sequence); !problem.empty()) {
    Where{file, ""}.key("training").key("tensor_parallel").fail(problem);
  }
  if (t > 1) s = with_tensor_parallel(s, t, sequence);
  check_magnitudes(s, file);
  return s;
}

Scenario parse_scenario_text(const std::string& text, const std::string& file,
                             const std::vector<std::string>& overrides) {
  json doc = parse_json(text, file);
  for (const std::string& assignment : overrides) apply_override(doc, assignment, file);
  return parse_scenario(doc, file);
}

Scenario load_scenario(const std::filesystem::path& file,
                       const std::vector<std::string>& overrides) {
  const std::string label = file.string();
  return parse_scenario(load_scenario_json(file, overrides), label);
}

json load_scenario_json(const std::filesystem::path& file,
                        const std::vector<std::string>& overrides) {
  const std::string label = file.string();
  json doc = parse_json(read_input_file(file, label, kMaxDocumentBytes, "a scenario"), label);
  for (const std::string& assignment : overrides) apply_override(doc, assignment, label);
  return doc;
}

}  // namespace pipescope
