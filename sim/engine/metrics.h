#pragma once
// Step-level results of a run (docs/models.md, "What the models assume", Metrics).

#include <cstdint>
#include <vector>

#include "costmodels/units.h"
#include "sim/engine/engine.h"

namespace pipescope {

struct DeviceMetrics {
  Bytes peak_memory = 0;
  Bytes memory_capacity = 0;
  SimTime busy = 0;              // ns of ops: compute and tensor-parallel collectives
  double bubble_fraction = 0.0;  // 1 - busy / step time
  bool fits() const { return peak_memory <= memory_capacity; }
};

struct Metrics {
  SimTime step_time = 0;  // ns
  double samples_per_s = 0.0;
  double tokens_per_s = 0.0;
  double bubble_fraction = 0.0;  // over all devices: 1 - sum(busy) / (devices * step)
  // Model FLOPs utilization (Chowdhery et al. 2022, PaLM, appendix B): model FLOPs
  // of the step (forward + backward, no recompute) / (step * peak * devices).
  double mfu = 0.0;
  SimTime comm_time = 0;       // link occupancy, summed over hops
  SimTime recompute_time = 0;  // summed over devices
  SimTime allreduce_time = 0;  // the stages' data-parallel gradient all-reduces, summed
  // tensor-parallel all-reduces (and expert-parallel all-to-alls and
  // context-parallel exchanges) within ops, what the ops wait for of them,
  // summed over devices
  SimTime tensor_time = 0;
  std::vector<DeviceMetrics> devices;

  bool fits() const;
  double step_time_s() const { return simtime_to_seconds(step_time); }
};

struct MetricsInput {
  std::int64_t samples = 0;  // per step
  std::int64_t tokens_per_sample = 1;
  Flops model_flops = 0.0;    // forward + backward of the step
  double peak_flops = 0.0;    // per device, FLOP/s
  Bytes memory_capacity = 0;  // per device
};

Metrics compute_metrics(const EngineResult& run, const std::vector<Bytes>& peak_memory,
                        const MetricsInput& in);

}  // namespace pipescope
