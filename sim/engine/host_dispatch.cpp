#include "sim/engine/host_dispatch.h"

#include <algorithm>

namespace pipescope {

bool ops_start_drained(const Framework& fw, bool chunked, int stages) {
  if (stages <= 1) return false;
  return chunked ? fw.sync_after_p2p_interleaved : fw.sync_after_p2p;
}

HostPace leading_pace(const Framework& fw, bool drained) {
  if (fw.launch_blocking) return HostPace::kBlocking;
  return drained ? HostPace::kDrained : HostPace::kAhead;
}

HostPace following_pace(const Framework& fw) {
  return fw.launch_blocking ? HostPace::kBlocking : HostPace::kAhead;
}

SimTime host_wait(SimTime device, SimTime host, SimTime launch, HostPace pace) {
  if (pace == HostPace::kBlocking) return host;
  const SimTime start = pace == HostPace::kDrained ? launch : 0;
  return std::max(device + start, host) - device;
}

namespace {

// What the host spends on a stage's ops: its layers' kernels and the
// collectives of tensor parallelism (the cut's gathers included), a launch
// each.
struct StageHost {
  SimTime forward = 0;
  SimTime backward = 0;
  SimTime weight = 0;
};

StageHost stage_host(const ModelSpec& model, const CostModel& cost, const StageCost& c,
                     std::int64_t micro_batch, Remat remat, SimTime launch) {
  StageHost h;
  for (int l = c.layers.first_layer; l <= c.layers.last_layer; ++l) {
    const LayerSpec& layer = model.layers[static_cast<std::size_t>(l)];
    const OpTimes t = under_remat(remat, cost.op_times(layer, micro_batch));
    h.forward += t.host_forward + launch * layer.tp_fwd_allreduces;
    h.backward += t.host_backward + launch * layer.tp_bwd_allreduces;
    h.weight += t.host_weight;
  }
  if (c.tp_input_gather > 0) h.forward += launch;
  if (c.tp_grad_gather > 0) h.backward += launch;
  return h;
}

}  // namespace

void add_host_waits(const ModelSpec& model, const CostModel& cost, const Framework& fw,
                    std::int64_t micro_batch, Remat remat, bool drained,
                    std::vector<StageCost>& stages) {
  const SimTime launch = seconds_to_simtime(fw.host_launch_s);
  if (launch <= 0) return;
  const HostPace lead = leading_pace(fw, drained);
  const HostPace follow = following_pace(fw);
  for (StageCost& c : stages) {
    const StageHost h = stage_host(model, cost, c, micro_batch, remat, launch);
    const SimTime fwd_exchange = c.tp_forward + c.ep_forward + c.cp_forward;
    const SimTime fwd_device = c.forward + fwd_exchange + c.tp_input_gather;
    const SimTime bwd_exchange = c.tp_backward + c.tp_grad_gather + c.ep_backward + c.cp_backward;
    c.host_wait_forward = host_wait(fwd_device, h.forward, launch, lead);
    c.host_wait_recompute = host_wait(c.recompute + fwd_exchange, h.forward, launch, follow);
    c.host_wait_backward = host_wait(c.backward + bwd_exchange, h.backward, launch, lead);
    c.host_wait_input = host_wait(c.input + bwd_exchange, h.backward - h.weight, launch, lead);
    c.host_wait_weight = host_wait(c.weight, h.weight, launch, follow);
    c.forward += c.host_wait_forward;
    if (c.forward_kept) *c.forward_kept += c.host_wait_forward;
    if (reruns_forwards(remat)) c.recompute += c.host_wait_recompute;
    c.backward += c.host_wait_backward;
    c.input += c.host_wait_input;
    if (c.weight > 0) c.weight += c.host_wait_weight;
  }
}

}  // namespace pipescope
