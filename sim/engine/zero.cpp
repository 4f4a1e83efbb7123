#include "sim/engine/zero.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "costmodels/check.h"
#include "sim/engine/expert_parallel.h"

namespace pipescope {

bool zero1_all_reduces(const Scenario& sc) {
  return sc.training.framework.zero1_allreduce &&
         !(sc.model.transformer && sc.model.transformer->moe.experts > 1);
}

ParamBytes param_bytes(double bytes_per_param, DType dtype, Bytes gradient_element) {
  ParamBytes b;
  const double e = static_cast<double>(dtype_bytes(dtype));
  const double g = gradient_element > 0 ? static_cast<double>(gradient_element) : e;
  b.weights = std::min(bytes_per_param, e);
  b.gradients = std::min(bytes_per_param - b.weights, g);
  b.optimizer = bytes_per_param - b.weights - b.gradients;
  return b;
}

double zero_bytes_per_param(double bytes_per_param, DType dtype, int stage, int replicas,
                            Bytes gradient_element) {
  PS_CHECK(stage >= 0 && stage <= kMaxZeroStage && replicas >= 1, "a ZeRO stage and replicas");
  const ParamBytes b = param_bytes(bytes_per_param, dtype, gradient_element);
  const double d = replicas;
  switch (stage) {
    case 0:
      return bytes_per_param;
    case 1:
      return b.weights + b.gradients + b.optimizer / d;
    case 2:
      return b.weights + (b.gradients + b.optimizer) / d;
    default:
      if (replicas == 1) return bytes_per_param;
      return (b.weights + b.gradients + b.optimizer) / d;
  }
}

double gathered_bytes_per_param(const Scenario& sc) {
  if (sc.training.zero < 3 || sc.training.zero_replicas <= 1) return 0.0;
  return param_bytes(sc.training.bytes_per_param, sc.model.dtype).weights;
}

std::int64_t gathered_params(const ModelSpec& model, StageRange range) {
  std::int64_t most = 0;
  for (int l = range.first_layer; l <= range.last_layer; ++l) {
    std::int64_t p = model.layers[static_cast<std::size_t>(l)].params;
    if (l > range.first_layer) p += model.layers[static_cast<std::size_t>(l) - 1].params;
    most = std::max(most, p);
  }
  return most;
}

void add_gathered_weights(const Scenario& sc, std::vector<StageCost>& stages) {
  const double per_param = gathered_bytes_per_param(sc);
  if (per_param == 0.0) return;
  for (StageCost& c : stages) {
    c.gathered_bytes = static_cast<Bytes>(
        std::llround(static_cast<double>(gathered_params(sc.model, c.layers)) * per_param));
    c.static_bytes += c.gathered_bytes;
  }
}

GatherFlow gather_flow(const std::vector<SimTime>& compute, const std::vector<SimTime>& gather) {
  PS_CHECK(compute.size() == gather.size() && !compute.empty(), "a time of each kind a layer");
  SimTime gathered = gather[0];  // the link's end of the last gather
  SimTime started = gather[0];   // when the last layer started computing
  SimTime done = gather[0] + compute[0];
  SimTime computing = compute[0];
  for (std::size_t i = 1; i < compute.size(); ++i) {
    gathered = std::max(gathered, started) + gather[i];
    started = std::max(gathered, done);
    done = started + compute[i];
    computing += compute[i];
  }
  return {gather[0], done - gather[0] - computing, gathered};
}

namespace {

// Scales `times` to sum to `total` (they stay as they are when they sum to 0).
void scale_to(std::vector<SimTime>& times, SimTime total) {
  SimTime sum = 0;
  for (const SimTime t : times) sum += t;
  if (sum == 0 || sum == total) return;
  const double f = static_cast<double>(total) / static_cast<double>(sum);
  for (SimTime& t : times) t = static_cast<SimTime>(std::llround(static_cast<double>(t) * f));
}

}  // namespace

std::vector<SimTime> layer_gathers(const ModelSpec& model,
                                   const std::function<SimTime(Bytes)>& gather_time) {
  const auto weight_bytes = static_cast<double>(dtype_bytes(model.dtype));
  std::vector<SimTime> out;
  for (const LayerSpec& layer : model.layers) {
    out.push_back(gather_time(
        static_cast<Bytes>(std::llround(static_cast<double>(layer.params) * weight_bytes))));
  }
  return out;
}

void add_gather_flows(const Scenario& sc, const CostModel& cost, std::int64_t micro_batch,
                      Remat remat, bool split, const std::function<SimTime(Bytes)>& gather_time,
                      std::vector<StageCost>& stages) {
  const std::vector<SimTime> gathers = layer_gathers(sc.model, gather_time);
  for (StageCost& c : stages) {
    std::vector<SimTime> forward, kept, recompute, backward, gather;
    c.zero_op_gather = 0;
    for (int l = c.layers.first_layer; l <= c.layers.last_layer; ++l) {
      const LayerSpec& layer = sc.model.layers[static_cast<std::size_t>(l)];
      const OpTimes t = under_remat(remat, cost.op_times(layer, micro_batch));
      forward.push_back(t.forward);
      kept.push_back(t.forward_kept);
      recompute.push_back(t.recompute);
      backward.push_back(split ? t.input : t.backward);
      gather.push_back(gathers[static_cast<std::size_t>(l)]);
      c.zero_op_gather += gather.back();
    }
    // The layers' times as the stage's ops run them (a concurrency slowdown
    // scales the stage's times after its layers').
    scale_to(forward, c.forward);
    scale_to(kept, c.forward_kept.value_or(c.forward));
    scale_to(recompute, c.recompute);
    scale_to(backward, split ? c.input : c.backward);
    c.zero_forward_flow = gather_flow(forward, gather);
    c.zero_forward_kept_flow = gather_flow(kept, gather);
    c.zero_recompute_flow = gather_flow(recompute, gather);
    // The backward runs the layers last to first.
    std::reverse(backward.begin(), backward.end());
    std::reverse(gather.begin(), gather.end());
    c.zero_backward_flow = gather_flow(backward, gather);
  }
}

void split_static_bytes(const Scenario& sc, std::vector<StageCost>& stages) {
  const ParamBytes b =
      param_bytes(sc.training.bytes_per_param, sc.model.dtype, sc.training.gradient_bytes);
  // A parameter's weights and gradients as one of `d` replicas keeps them.
  const auto kept = [&](double d) {
    const double gradients = sc.training.zero >= 2 ? b.gradients / d : b.gradients;
    // Stage 3: the shard of the weights and the layers gathered beside it.
    const double weights = sc.training.zero >= 3 && d > 1 ? b.weights / d : b.weights;
    return std::pair{weights, gradients};
  };
  const auto [weights, gradients] = kept(sc.training.zero_replicas);
  const auto [expert_weights, expert_gradients] = kept(expert_replicas(sc));
  for (StageCost& c : stages) {
    const double dense = static_cast<double>(c.params - c.expert_params);
    const double experts = static_cast<double>(c.expert_params);
    const auto bytes = [&](double per_param, double per_expert_param) {
      return static_cast<Bytes>(std::llround(dense * per_param + experts * per_expert_param));
    };
    c.weight_bytes = std::min(bytes(weights, expert_weights) + c.gathered_bytes, c.static_bytes);
    c.gradient_bytes =
        std::min(bytes(gradients, expert_gradients), c.static_bytes - c.weight_bytes);
    c.optimizer_bytes = c.static_bytes - c.weight_bytes - c.gradient_bytes;
  }
}

double device_bytes_per_param(const Scenario& sc) {
  return zero_bytes_per_param(sc.training.bytes_per_param, sc.model.dtype, sc.training.zero,
                              sc.training.zero_replicas, sc.training.gradient_bytes);
}

int expert_replicas(const Scenario& sc) {
  return expert_holders(sc.training.zero_replicas * sc.cluster.expert_fold,
                        sc.training.expert_parallel);
}

double expert_bytes_per_param(const Scenario& sc) {
  return zero_bytes_per_param(sc.training.bytes_per_param, sc.model.dtype, sc.training.zero,
                              expert_replicas(sc), sc.training.gradient_bytes);
}

std::int64_t dense_equivalent_params(double dense, double expert, std::int64_t params,
                                     std::int64_t expert_params) {
  if (expert_params == 0 || !(dense > 0.0)) return params;
  const double extra = expert / dense - 1.0;
  return params + std::llround(static_cast<double>(expert_params) * extra);
}

std::int64_t dense_equivalent_params(const Scenario& sc, std::int64_t params,
                                     std::int64_t expert_params) {
  return dense_equivalent_params(device_bytes_per_param(sc), expert_bytes_per_param(sc), params,
                                 expert_params);
}

Bytes reduced_gradient_bytes(const Scenario& sc) {
  const bool fp32 = sc.model.dtype == DType::kBf16 && sc.training.framework.fp32_grad_reduce;
  return fp32 ? 4 : dtype_bytes(sc.model.dtype);
}

}  // namespace pipescope
