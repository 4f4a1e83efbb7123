#include "costmodels/cost_model.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "costmodels/check.h"

namespace pipescope {

namespace {

// Weights read once plus, per sample, the output and the stash written; the layer's
// input is part of its stash (model.h), so it is not counted again.
double forward_bytes(const LayerSpec& layer, std::int64_t batch, DType dtype) {
  return static_cast<double>(layer.params * dtype_bytes(dtype)) +
         static_cast<double>(batch) * static_cast<double>(layer.out_bytes + layer.stash_bytes);
}

}  // namespace

AnalyticCostModel::AnalyticCostModel(Device device, DType dtype, double bytes_per_param)
    : device_(std::move(device)), dtype_(dtype), bytes_per_param_(bytes_per_param) {
  PS_CHECK(device_.peak_flops(dtype_) > 0.0, "device " + device_.name + " has no peak FLOP/s");
  PS_CHECK(device_.mem_bandwidth > 0.0, "device " + device_.name + " has no memory bandwidth");
  PS_CHECK(device_.efficiency.max_efficiency > 0.0,
           "device " + device_.name + " has zero efficiency");
  PS_CHECK(bytes_per_param_ >= 0.0, "negative bytes per parameter");
}

std::string_view AnalyticCostModel::description() const {
  return "roofline with per-op overhead: overhead + max(FLOPs / (peak x efficiency(FLOPs)), "
         "bytes / bandwidth) (Williams, Waterman & Patterson, \"Roofline\", CACM 2009)";
}

SimTime AnalyticCostModel::op_time(Flops flops, double bytes) const {
  const double compute_s =
      flops > 0.0 ? flops / (device_.peak_flops(dtype_) * device_.efficiency.at(flops)) : 0.0;
  const double memory_s = bytes / device_.mem_bandwidth;
  return seconds_to_simtime(device_.op_overhead_s + std::max(compute_s, memory_s));
}

SimTime CostModel::core_share_of(const LayerSpec& layer, SimTime recompute) {
  if (layer.core_fwd_flops <= 0.0 || layer.fwd_flops <= 0.0) return 0;
  const double share = std::min(1.0, layer.core_fwd_flops / layer.fwd_flops);
  return static_cast<SimTime>(std::llround(static_cast<double>(recompute) * share));
}

SimTime CostModel::core_recompute(const LayerSpec& layer, std::int64_t batch) const {
  return core_share_of(layer, recompute(layer, batch));
}

SimTime AnalyticCostModel::forward(const LayerSpec& layer, std::int64_t batch) const {
  return op_time(layer.fwd_flops * static_cast<double>(batch), forward_bytes(layer, batch, dtype_));
}

SimTime AnalyticCostModel::backward(const LayerSpec& layer, std::int64_t batch) const {
  return op_time(layer.bwd_flops * static_cast<double>(batch),
                 2.0 * forward_bytes(layer, batch, dtype_));
}

SimTime AnalyticCostModel::recompute(const LayerSpec& layer, std::int64_t batch) const {
  return forward(layer, batch);
}

SimTime AnalyticCostModel::optimizer_step(std::int64_t params) const {
  return op_time(0.0, 2.0 * static_cast<double>(params) * bytes_per_param_);
}

}  // namespace pipescope
