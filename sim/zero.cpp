#include "sim/zero.h"

#include <algorithm>
#include <cmath>

#include "costmodels/check.h"

namespace pipescope {

ParamBytes param_bytes(double bytes_per_param, DType dtype) {
  ParamBytes b;
  const double e = static_cast<double>(dtype_bytes(dtype));
  b.weights = std::min(bytes_per_param, e);
  b.gradients = std::min(bytes_per_param - b.weights, e);
  b.optimizer = bytes_per_param - b.weights - b.gradients;
  return b;
}

double zero_bytes_per_param(double bytes_per_param, DType dtype, int stage, int replicas) {
  PS_CHECK(stage >= 0 && stage <= kMaxZeroStage && replicas >= 1, "a ZeRO stage and replicas");
  const ParamBytes b = param_bytes(bytes_per_param, dtype);
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
      return b.weights + (b.weights + b.gradients + b.optimizer) / d;
  }
}

void split_static_bytes(const Scenario& sc, std::vector<StageCost>& stages) {
  const ParamBytes b = param_bytes(sc.training.bytes_per_param, sc.model.dtype);
  const double d = sc.training.zero_replicas;
  const double gradients = sc.training.zero >= 2 ? b.gradients / d : b.gradients;
  // Stage 3: the shard of the weights and the whole copy gathered beside it.
  const double weights = sc.training.zero >= 3 && d > 1 ? b.weights + b.weights / d : b.weights;
  for (StageCost& c : stages) {
    const auto bytes = [&](double per_param) {
      return static_cast<Bytes>(std::llround(static_cast<double>(c.params) * per_param));
    };
    c.weight_bytes = std::min(bytes(weights), c.static_bytes);
    c.gradient_bytes = std::min(bytes(gradients), c.static_bytes - c.weight_bytes);
    c.optimizer_bytes = c.static_bytes - c.weight_bytes - c.gradient_bytes;
  }
}

double device_bytes_per_param(const Scenario& sc) {
  return zero_bytes_per_param(sc.training.bytes_per_param, sc.model.dtype, sc.training.zero,
                              sc.training.zero_replicas);
}

}  // namespace pipescope
