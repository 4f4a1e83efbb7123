// Reading a scenario's "cluster" object: the device (its efficiency and kernel
// table), the interconnect, device presets, the cost model and the exchanges.

#include "sim/scenario/cluster_reader.h"

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "costmodels/device.h"

namespace pipescope {

using nlohmann::json;

namespace {

using namespace json_io;

// Devices each become entries in per-device tables.
constexpr IntRange kDeviceCount{1, 1 << 20};

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

std::string preset_names() {
  std::vector<std::string> names;
  for (const DevicePreset& p : device_presets()) names.push_back(p.device.name);
  return join(names);
}

// An explicit device: every figure given, or a preset's device ("preset")
// with the figures given replacing its own (a kernel table only whole).
Device read_device(ObjectReader d) {
  Device dev;
  const std::optional<std::string> base = d.opt_string("preset");
  if (base) {
    const std::optional<DevicePreset> preset = find_device_preset(*base);
    if (!preset) {
      d.fail("preset", "unknown preset '" + *base + "' (expected one of: " + preset_names() + ")");
    }
    dev = preset->device;
  }
  const auto number = [&](const char* key, NumberRange range, double fallback) {
    return base ? d.opt_number(key, range).value_or(fallback) : d.number(key, range);
  };
  dev.name = d.opt_string("name").value_or(base ? dev.name : "custom");
  dev.peak_flops_fp32 = number("peak_flops", NumberRange::kRate, dev.peak_flops_fp32);
  dev.peak_flops_16bit = d.opt_number("peak_flops_16bit", NumberRange::kRate)
                             .value_or(base ? dev.peak_flops_16bit : dev.peak_flops_fp32);
  dev.memory_bytes = base ? d.opt_integer("memory_bytes", kPositiveInt).value_or(dev.memory_bytes)
                          : d.integer("memory_bytes", kPositiveInt);
  dev.mem_bandwidth = number("mem_bandwidth", NumberRange::kRate, dev.mem_bandwidth);
  dev.op_overhead_s =
      d.opt_number("op_overhead_s", NumberRange::kDuration).value_or(dev.op_overhead_s);
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

}  // namespace

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

}  // namespace pipescope
