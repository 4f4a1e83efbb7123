#pragma once
// Scenarios built in code for exact-value tests: a device with efficiency 1 and
// no overhead, so an op of F FLOPs takes exactly F / peak seconds.

#include <string>

#include <gtest/gtest.h>

#include "sim/engine/custom_schedule.h"
#include "sim/engine/schedule.h"
#include "sim/scenario/scenario.h"
#include "sim/scenario/scenario_io.h"

namespace pipescope::testing {

// 1 GFLOP/s: one FLOP per nanosecond, so FLOPs read directly as ns.
inline constexpr double kPeak = 1e9;

inline Device exact_device(Bytes memory = Bytes{1} << 40) {
  Device d;
  d.name = "exact";
  d.peak_flops_fp32 = kPeak;
  d.peak_flops_16bit = kPeak;
  d.memory_bytes = memory;
  d.mem_bandwidth = 1e30;  // the roofline's memory term never binds
  d.op_overhead_s = 0.0;
  d.efficiency = EfficiencyCurve{1.0, 0.0};
  return d;
}

// `layers` identical layers of `fwd_flops` per sample (backward 2x), no
// parameters or activations unless given.
inline Scenario uniform_scenario(int layers, int devices, Flops fwd_flops,
                                 std::int64_t global_batch, int micro_batches, bool remat) {
  Scenario sc;
  sc.name = "uniform";
  sc.model.name = "uniform";
  sc.model.family = "layers";
  for (int l = 0; l < layers; ++l) {
    LayerSpec layer;
    layer.name = "l" + std::to_string(l);
    layer.fwd_flops = fwd_flops;
    layer.bwd_flops = 2 * fwd_flops;
    sc.model.layers.push_back(layer);
  }
  sc.cluster.name = "exact";
  sc.cluster.devices = devices;
  sc.cluster.device = exact_device();
  sc.cluster.interconnect = Interconnect{TopologyKind::kAllToAll, 1e9, 0.0};
  sc.training.global_batch = global_batch;
  sc.training.micro_batches = micro_batches;
  sc.training.bytes_per_param = 0.0;
  sc.training.remat = remat_from_bool(remat);
  return sc;
}

// 4 layers on 2 stages; per sample: stash 100 B per layer, outputs 10 B, input
// 7 B, 1000 params per layer at 12 B/param; micro-batches of 2.
inline Scenario memory_scenario(int micro_batches, bool remat) {
  Scenario sc = uniform_scenario(4, 2, 1000.0, 2 * micro_batches, micro_batches, remat);
  for (LayerSpec& l : sc.model.layers) {
    l.stash_bytes = 100;
    l.out_bytes = 10;
    l.params = 1000;
  }
  sc.model.input_bytes = 7;
  sc.training.bytes_per_param = 12.0;
  return sc;
}

// K and M of a parameterised closed-form test, and its name, e.g. "K4M16".
struct KxM {
  int K;
  int M;
};

inline std::string kxm_name(const ::testing::TestParamInfo<KxM>& info) {
  return "K" + std::to_string(info.param.K) + "M" + std::to_string(info.param.M);
}

// A device's op list as text, e.g. "F0 F1 B0 W0 O".
inline std::string ops_text(const std::vector<Op>& ops) {
  std::string out;
  for (const Op& op : ops) {
    if (!out.empty()) out += ' ';
    out += op_letter(op.kind);
    if (op.kind != OpKind::kOptimizer) out += std::to_string(op.micro_batch);
  }
  return out;
}

// The message of the error that reading `text` as the schedule CSV "s.csv"
// raises, or "(accepted)".
inline std::string schedule_csv_error(const std::string& text) {
  try {
    parse_schedule_csv(text, "s.csv");
  } catch (const ScenarioError& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace pipescope::testing
