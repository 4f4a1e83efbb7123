#pragma once
// The discrete-event engine: runs each device's op list in order, starting an op
// once the device is free and its inputs have arrived, and moves activations and
// gradients over the cluster's links. Time is integer ns; ties break in push
// order, so the same input gives the same run. When the cluster's devices share
// fewer cores than there are devices (Cluster::shared_cores), a compute op also
// needs a free core and waits for one in FIFO order.

#include <cstdint>
#include <vector>

#include "costmodels/cluster.h"
#include "sim/engine/schedule.h"
#include "sim/engine/sim_listener.h"
#include "sim/engine/stage_costs.h"

namespace pipescope {

struct EngineResult {
  SimTime step_time = 0;             // when the last op of any device ended
  std::vector<SimTime> device_busy;  // compute time per device
  std::vector<SimTime> device_end;   // when each device finished its list
  SimTime recompute_time = 0;        // sum over devices
  SimTime comm_time = 0;             // link occupancy, summed over the links of each route
  SimTime allreduce_time = 0;        // the stages' gradient all-reduces, summed
  SimTime tensor_time = 0;           // tensor- and expert-parallel collectives within ops, summed
  std::int64_t compute_ops = 0;
  std::int64_t transfers = 0;
};

// With data-parallel replicas (StageCost::allreduce > 0) a stage's gradients are
// all-reduced once its last backward (W when split) ends, on its device's link
// to the replicas, one all-reduce at a time per device, concurrently with
// compute and the pipeline's transfers; the stage's optimizer step waits for it.
// Under ZeRO-2/3 (StageCost::zero_reduce_scatter > 0) each backward (W when
// split) instead books a reduce-scatter of the stage's gradients on that link
// as it ends, while the device computes on, and the optimizer step waits for
// all of them; ZeRO-2's all-gather of the updated weights follows the step on
// the link (the device's list ends with it); ZeRO-3's all-gathers of an op's
// layers' weights are booked on the link, their span (GatherFlow::link), when
// the device reaches a forward, recompute or backward (B when split); the op
// computes once the first layer's has ended (GatherFlow::lead) and the op's
// input has arrived, and stalls beyond its compute while the later layers'
// arrive (GatherFlow::stall, idle time, within the op's slice). One
// collective at a time per device's link, in the order booked.
// An op of a stage with tensor- or expert-parallel collectives
// (StageCost::tp_forward, tp_backward, ep_forward, ep_backward) runs its
// compute and then its collectives, the device busy for both (of a DualPipe
// pair's all-to-alls, under Framework::pair_alltoall_overlap, only what its
// partner's compute does not hide); `listener`
// hears of the tensor-parallel ones through on_tensor_collective and of the
// expert-parallel all-to-alls, which follow them, through on_expert_exchange.
// With Cluster::p2p blocking, a device whose send is in flight starts no
// compute until it has arrived (a ZeRO-3 gather still starts); a send to a
// stage on the same device moves nothing and holds nothing.
// `listener` may be null. Throws InternalError if the schedule deadlocks (an op
// waits for data that never comes), which check_schedule'd GPipe lists cannot do.
EngineResult run_engine(const Schedule& schedule, const std::vector<StageCost>& stages,
                        const Cluster& cluster, SimListener* listener);

}  // namespace pipescope
