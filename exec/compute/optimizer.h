#pragma once
// Optimizers applied once per mini-batch to the gradients accumulated over its
// micro-batches.

#include <memory>
#include <vector>

#include "costmodels/optimizer.h"
#include "exec/compute/layer.h"

namespace pipescope::exec {

struct OptimizerConfig {
  Optimizer kind = Optimizer::kAdam;
  double learning_rate = 1e-3;
  double momentum = 0.9;  // SGD with momentum
  double beta1 = 0.9;     // Adam
  double beta2 = 0.999;   // Adam, RMSProp decay
  double epsilon = 1e-8;
};

// Updates each parameter from its gradient, then zeroes the gradient. Keeps a
// step count (Adam's bias correction), so one instance serves one set of
// parameters.
class ParamOptimizer {
 public:
  explicit ParamOptimizer(OptimizerConfig config) : config_(config) {}
  // Parameters on a device are updated there, with the same arithmetic.
  void step(const std::vector<Param*>& params);

 private:
  void device_step(Param& p, float lr, float mu, float b1, float b2, float eps, float correct1,
                   float correct2) const;
  OptimizerConfig config_;
  long steps_ = 0;
};

}  // namespace pipescope::exec
