#pragma once
// ZeRO (Rajbhandari et al. 2020) over D data-parallel replicas: which of a
// parameter's bytes each replica keeps whole and which it keeps 1/D of.
//   stage 0: weights, gradients and optimizer state whole (plain data parallelism);
//   stage 1: the optimizer state sharded (Megatron-LM's distributed optimizer);
//   stage 2: the gradients too;
//   stage 3: the weights too, gathered layer by layer for every op that
//            computes with them, the next layer's while one computes, and
//            freed after it (docs/models.md, "ZeRO").
// Under stages 1 to 3 each replica steps the optimizer on its shard. Stage 1
// reduces a stage's gradients once a step: a reduce-scatter and the updated
// weights' all-gather, together what an all-reduce moves. Stages 2 and 3 keep
// no whole gradients between micro-batches, so every backward reduce-scatters
// its stage's gradients; stage 2 all-gathers the updated weights after the
// optimizer step, stage 3 all-gathers each layer's weights before the layer
// computes in every forward, recompute and backward (sim/engine/engine.h).

#include <cstdint>
#include <functional>
#include <vector>

#include "costmodels/cost_model.h"
#include "costmodels/dtype.h"
#include "sim/engine/stage_costs.h"
#include "sim/scenario/scenario.h"

namespace pipescope {

// Whether stage 1 sums the gradients by a whole all-reduce before each
// replica steps its 1/D (Framework::zero1_allreduce), not a reduce-scatter:
// not for a mixture of experts, whose contiguous gradients DeepSpeed keeps.
bool zero1_all_reduces(const Scenario& sc);

// A parameter's bytes: weights and gradients in the model's dtype, the rest
// of bytes_per_param the optimizer's (fp32 master weights and slots; none
// when bytes_per_param leaves nothing).
struct ParamBytes {
  double weights = 0.0;
  double gradients = 0.0;
  double optimizer = 0.0;
};
// `gradient_element`: the bytes of a gradient (0: the dtype's; 4 where a
// bf16 run keeps fp32 gradients, TrainingConfig::gradient_bytes).
ParamBytes param_bytes(double bytes_per_param, DType dtype, Bytes gradient_element = 0);

// What one of `replicas` keeps per parameter under `stage`. Stage 3 keeps
// the shard alone, (weights + gradients + optimizer) / D, the layers it
// gathers counted apart (gathered_params); all of bytes_per_param when D = 1
// (nothing to shard or gather).
double zero_bytes_per_param(double bytes_per_param, DType dtype, int stage, int replicas,
                            Bytes gradient_element = 0);

// Under stage 3 a device gathers a layer's weights whole before the layer
// computes and the next layer's while it does, and frees each after its
// layer: a stage holds at most two adjacent layers whole at once (counted
// for each of a device's stages under chunked schedules, where only one op
// gathers at a time: a bound). Their weight bytes per parameter: the
// dtype's under stage 3 with replicas, else 0.
double gathered_bytes_per_param(const Scenario& sc);
// The most parameters of one layer, or of two adjacent layers, of `range`.
std::int64_t gathered_params(const ModelSpec& model, StageRange range);
// Sets each stage's gathered_bytes and adds them to its static_bytes.
void add_gathered_weights(const Scenario& sc, std::vector<StageCost>& stages);

// One op's layers in order under stage 3: layer i's all-gather
// (gather[i]) runs on the link after layer i - 1's, and once layer i - 1
// has started computing (a prefetch of one layer); layer i computes
// (compute[i]) after its gather and after layer i - 1. The first gather is
// the op's lead, and what the op ends later than lead + its compute, its
// stall.
GatherFlow gather_flow(const std::vector<SimTime>& compute, const std::vector<SimTime>& gather);

// Stage 3: each layer's all-gather of its weights, `gather_time` of their
// bytes in the model's dtype.
std::vector<SimTime> layer_gathers(const ModelSpec& model,
                                   const std::function<SimTime(Bytes)>& gather_time);

// Stage 3: each stage's zero_op_gather and its ops' flows, its layers'
// times from `cost` at `micro_batch` under `remat` (B alone when `split`),
// `gather_time` the time of an all-gather of so many bytes.
void add_gather_flows(const Scenario& sc, const CostModel& cost, std::int64_t micro_batch,
                      Remat remat, bool split, const std::function<SimTime(Bytes)>& gather_time,
                      std::vector<StageCost>& stages);

// What a device of the scenario keeps per parameter: its training.zero stage
// over its training.zero_replicas (set by replica_scenario).
double device_bytes_per_param(const Scenario& sc);
// Under expert parallelism, the replicas that hold the same routed experts
// and shard them: zero_replicas x Cluster::expert_fold / expert_parallel (1
// at least; the fold counts a share's T devices where each holds whole
// experts); and what a
// device keeps per parameter of those experts, its stage over them.
int expert_replicas(const Scenario& sc);
double expert_bytes_per_param(const Scenario& sc);
// `params`, of which `expert_params` are routed experts', counted as the
// parameters at device_bytes_per_param that take as many bytes: what a
// partitioner that prices every parameter alike weighs a layer at.
std::int64_t dense_equivalent_params(const Scenario& sc, std::int64_t params,
                                     std::int64_t expert_params);
// The same with the device's bytes a parameter, `dense`, and an expert's,
// `expert`, worked out once (device_bytes_per_param, expert_bytes_per_param).
std::int64_t dense_equivalent_params(double dense, double expert, std::int64_t params,
                                     std::int64_t expert_params);
// Bytes of a gradient element as the replicas reduce it: 4 where a bf16 run's
// framework reduces its fp32 gradients (Framework::fp32_grad_reduce), else
// the dtype's.
Bytes reduced_gradient_bytes(const Scenario& sc);

// Splits each stage's static_bytes into its weights, gradients and
// optimizer state as the scenario's device keeps them (under stage 3 the
// weights are the shard and the gathered copy; the routed experts' over
// expert_replicas); the optimizer's part takes the rounding, so the three add
// up to static_bytes.
void split_static_bytes(const Scenario& sc, std::vector<StageCost>& stages);

}  // namespace pipescope
