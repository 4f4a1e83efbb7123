#pragma once
// ZeRO (Rajbhandari et al. 2020) over D data-parallel replicas: which of a
// parameter's bytes each replica keeps whole and which it keeps 1/D of.
//   stage 0: weights, gradients and optimizer state whole (plain data parallelism);
//   stage 1: the optimizer state sharded (Megatron-LM's distributed optimizer);
//   stage 2: the gradients too.
// Under stages 1 and 2 each replica steps the optimizer on its shard, and the
// gradients' reduce-scatter and the updated weights' all-gather together
// move what an all-reduce moves. Stage 3 (the weights too, gathered for every
// forward and backward) is not modelled.

#include <vector>

#include "costmodels/dtype.h"
#include "sim/scenario.h"
#include "sim/stage_costs.h"

namespace pipescope {

// The highest stage modelled.
inline constexpr int kMaxZeroStage = 2;

// A parameter's bytes: weights and gradients in the model's dtype, the rest
// of bytes_per_param the optimizer's (fp32 master weights and slots; none
// when bytes_per_param leaves nothing).
struct ParamBytes {
  double weights = 0.0;
  double gradients = 0.0;
  double optimizer = 0.0;
};
ParamBytes param_bytes(double bytes_per_param, DType dtype);

// What one of `replicas` keeps per parameter under `stage`.
double zero_bytes_per_param(double bytes_per_param, DType dtype, int stage, int replicas);

// What a device of the scenario keeps per parameter: its training.zero stage
// over its training.zero_replicas (set by replica_scenario).
double device_bytes_per_param(const Scenario& sc);

// Splits each stage's static_bytes into its weights, gradients and
// optimizer state as the scenario's device keeps them; the optimizer's part
// takes the rounding, so the three add up to static_bytes.
void split_static_bytes(const Scenario& sc, std::vector<StageCost>& stages);

}  // namespace pipescope
