#include "sim/scenario/scenario_limits.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "sim/scenario/scenario_io.h"

namespace pipescope {
namespace {

// Every size the simulator forms must fit in 64 bits and every time in SimTime
// (int64 ns, 292 years). The largest sizes are all layers' activations for the
// whole batch (a micro-batch may be the whole batch) and the weights with their
// gradients and optimizer state; the longest time is a step in which every op
// and transfer runs one after another. Bounding these at load turns overflow into
// a clear error instead of a wrong answer.
constexpr double kMaxBytes = 0x1p60;     // 1 EiB
constexpr double kMaxStepSeconds = 1e9;  // about 31 years

std::string three_digits(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

}  // namespace

void check_magnitudes(const Scenario& s, const std::string& file) {
  const ModelSpec& m = s.model;
  const Device& d = s.cluster.device;
  const double batch = static_cast<double>(s.training.global_batch);
  const bool listed = m.family == "layers";
  // Explicit layer lists name the layer; families name the model.
  const auto fail_at_layer = [&](std::size_t i, const char* key, const std::string& message) {
    throw ScenarioError(file, listed ? "model.layers[" + std::to_string(i) + "]." + key : "model",
                        message);
  };
  const double rate = d.peak_flops(m.dtype) * d.efficiency.max_efficiency;
  const double hops = std::max(2.0, static_cast<double>(s.cluster.devices));
  // The slower of a nodes topology's two kinds of link bounds every hop.
  const Interconnect& ic = s.cluster.interconnect;
  const bool nodes = ic.topology == TopologyKind::kNodes;
  const double slowest_bandwidth =
      nodes ? std::min(ic.bandwidth, ic.inter_node_bandwidth) : ic.bandwidth;
  const double slowest_latency_s =
      nodes ? std::max(ic.latency_s, ic.inter_node_latency_s) : ic.latency_s;
  double activations = static_cast<double>(m.input_bytes);
  double params = 0.0;
  double step_s = 0.0;
  double worst_layer_s = -1.0;
  std::size_t worst_layer = 0;
  for (std::size_t i = 0; i < m.layers.size(); ++i) {
    const LayerSpec& l = m.layers[i];
    const double act = static_cast<double>(l.out_bytes) + static_cast<double>(l.stash_bytes);
    activations += act;
    if (activations * batch >= kMaxBytes) {
      fail_at_layer(i, "stash_bytes",
                    "the activations of the whole batch of " +
                        std::to_string(s.training.global_batch) + " do not fit in 64-bit sizes (" +
                        three_digits(activations) + " bytes per sample up to this layer)");
    }
    params += static_cast<double>(l.params);
    // Forward, recompute and backward with every sample its own op (M <= batch).
    const double layer_s =
        ((2 * l.fwd_flops + l.bwd_flops) * batch + 3 * batch * d.efficiency.half_flops) / rate +
        4 * act * batch / d.mem_bandwidth + 3 * batch * d.op_overhead_s +
        2 * (static_cast<double>(m.input_bytes_of(static_cast<int>(i) + 1)) * batch /
                 slowest_bandwidth +
             batch * hops * slowest_latency_s);
    if (layer_s > worst_layer_s) {
      worst_layer_s = layer_s;
      worst_layer = i;
    }
    step_s += layer_s;
  }
  const double state_bytes = params * std::max(1.0, s.training.bytes_per_param);
  if (state_bytes >= kMaxBytes) {
    throw ScenarioError(file, "model",
                        "the parameters with their gradients and optimizer state (" +
                            three_digits(state_bytes) + " bytes) do not fit in 64-bit sizes");
  }
  step_s += 2 * state_bytes / d.mem_bandwidth;
  if (!(step_s <= kMaxStepSeconds)) {
    fail_at_layer(worst_layer, "fwd_flops",
                  "a training step could take up to " + three_digits(step_s / 3.15576e7) +
                      " years on " + d.name +
                      ", more than the simulator's nanosecond clock holds; check the "
                      "model's FLOPs and sizes");
  }
}

}  // namespace pipescope
