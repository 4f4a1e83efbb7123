#pragma once
// ZeRO (Rajbhandari et al. 2020) over D data-parallel replicas: which of a
// parameter's bytes each replica keeps whole and which it keeps 1/D of.
//   stage 0: weights, gradients and optimizer state whole (plain data parallelism);
//   stage 1: the optimizer state sharded (Megatron-LM's distributed optimizer);
//   stage 2: the gradients too;
//   stage 3: the weights too, gathered whole for every op that computes with
//            them (docs/models.md, "ZeRO").
// Under stages 1 to 3 each replica steps the optimizer on its shard. Stage 1
// reduces a stage's gradients once a step: a reduce-scatter and the updated
// weights' all-gather, together what an all-reduce moves. Stages 2 and 3 keep
// no whole gradients between micro-batches, so every backward reduce-scatters
// its stage's gradients; stage 2 all-gathers the updated weights after the
// optimizer step, stage 3 all-gathers the stage's weights before every
// forward, recompute and backward (sim/engine.h).

#include <vector>

#include "costmodels/dtype.h"
#include "sim/scenario.h"
#include "sim/stage_costs.h"

namespace pipescope {

// The highest stage modelled.
inline constexpr int kMaxZeroStage = 3;

// A parameter's bytes: weights and gradients in the model's dtype, the rest
// of bytes_per_param the optimizer's (fp32 master weights and slots; none
// when bytes_per_param leaves nothing).
struct ParamBytes {
  double weights = 0.0;
  double gradients = 0.0;
  double optimizer = 0.0;
};
ParamBytes param_bytes(double bytes_per_param, DType dtype);

// What one of `replicas` keeps per parameter under `stage`. Stage 3 counts
// the weights' shard and, beside it, the whole weights the stage gathers
// while an op of it runs: weights + (weights + gradients + optimizer) / D
// (all of bytes_per_param when D = 1: nothing to shard or gather).
double zero_bytes_per_param(double bytes_per_param, DType dtype, int stage, int replicas);

// What a device of the scenario keeps per parameter: its training.zero stage
// over its training.zero_replicas (set by replica_scenario).
double device_bytes_per_param(const Scenario& sc);

// Splits each stage's static_bytes into its weights, gradients and
// optimizer state as the scenario's device keeps them (under stage 3 the
// weights are the shard and the gathered copy); the optimizer's part takes
// the rounding, so the three add up to static_bytes.
void split_static_bytes(const Scenario& sc, std::vector<StageCost>& stages);

}  // namespace pipescope
