#include "sim/formats/result_json.h"

#include <nlohmann/json.hpp>

#include "sim/engine/custom_schedule.h"

namespace pipescope {

nlohmann::json to_json(const SimResult& r) {
  using nlohmann::json;
  const Metrics& m = r.metrics;
  json devices = json::array();
  const std::vector<MemorySplit> splits = memory_splits(r);
  for (std::size_t i = 0; i < m.devices.size(); ++i) {
    const DeviceMetrics& d = m.devices[i];
    const MemorySplit& split = splits[i];
    devices.push_back({{"peak_memory_bytes", d.peak_memory},
                       {"memory_capacity_bytes", d.memory_capacity},
                       {"weights_bytes", split.weights},
                       {"gradients_bytes", split.gradients},
                       {"optimizer_bytes", split.optimizer},
                       {"activations_bytes", split.activations},
                       {"busy_s", simtime_to_seconds(d.busy)}});
  }
  json stages = json::array();
  for (std::size_t i = 0; i < r.stage_costs.size(); ++i) {
    const StageCost& s = r.stage_costs[i];
    stages.push_back(
        {{"device", placed_device(r.schedule, r.custom.get(), static_cast<int>(i), r.stages)},
         {"first_layer", s.layers.first_layer},
         {"last_layer", s.layers.last_layer},
         {"fwd_s", simtime_to_seconds(s.forward)},
         {"bwd_s", simtime_to_seconds(s.backward_time(r.split_backward()))},
         {"recompute_s", r.remat != Remat::kNever ? simtime_to_seconds(s.recompute) : 0.0},
         {"tp_fwd_s", simtime_to_seconds(s.tp_forward + s.tp_input_gather)},
         {"tp_bwd_s", simtime_to_seconds(s.tp_backward + s.tp_grad_gather)},
         {"ep_fwd_s", simtime_to_seconds(s.ep_forward)},
         {"ep_bwd_s", simtime_to_seconds(s.ep_backward)},
         {"cp_fwd_s", simtime_to_seconds(s.cp_forward)},
         {"cp_bwd_s", simtime_to_seconds(s.cp_backward)},
         {"host_wait_fwd_s", simtime_to_seconds(s.host_wait_forward)},
         {"host_wait_bwd_s",
          simtime_to_seconds(r.split_backward() ? s.host_wait_input + s.host_wait_weight
                                                : s.host_wait_backward)}});
  }
  return json{{"K", r.stages},
              {"T", r.tensor_parallel},
              {"sequence_parallel", r.sequence_parallel},
              {"E", r.expert_parallel},
              {"C", r.context_parallel},
              {"zero", r.zero},
              {"M", r.micro_batches},
              {"schedule", std::string(to_string(r.schedule))},
              {"chunks", r.chunks},
              {"remat", r.remat != Remat::kNever},
              {"remat_mode", std::string(to_string(r.remat))},
              {"checkpoint", std::string(to_string(r.checkpoint))},
              {"micro_batch_size", r.micro_batch_size},
              {"step_time_s", m.step_time_s()},
              {"throughput_samples_per_s", m.samples_per_s},
              {"bubble_fraction", m.bubble_fraction},
              {"mfu", m.mfu},
              {"tensor_allreduce_s", simtime_to_seconds(m.tensor_time)},
              {"fits", m.fits()},
              {"devices", devices},
              {"stages", stages}};
}

}  // namespace pipescope
