#pragma once
// The host that feeds the device. A framework in eager PyTorch issues every
// kernel and collective from the CPU (Framework::host_launch_s each); the
// device runs them in order as they arrive. While the host is ahead, the
// device's time is the op's; where the host issues an op's kernels more
// slowly than the device runs them (small kernels: tensor parallelism over a
// micro-batch of one), the device waits for it. And where the framework
// waits for the device after every exchange between stages
// (Framework::sync_after_p2p), the queue is empty when the next op begins,
// so that op waits for its first kernel to be issued too.
//
// Over an op of device time G (its compute and its tensor-parallel
// collectives) and host time H: max(G, H), or max(G + h, H) when it starts
// after such a wait (h: one launch). Where every launch blocks until its
// kernel has finished (Framework::launch_blocking, CUDA_LAUNCH_BLOCKING=1),
// the host issues nothing while the device runs and the device nothing while
// the host issues: G + H. The difference is the device's wait, added to the
// op's duration (StageCost::host_wait_*) and shown apart in the stage table.

#include <cstdint>
#include <vector>

#include "costmodels/cost_model.h"
#include "costmodels/framework.h"
#include "costmodels/model.h"
#include "sim/engine/stage_costs.h"
#include "sim/scenario/scenario.h"

namespace pipescope {

// Whether each forward and each backward starts after the host waited for the
// device: the framework synchronises after every exchange between stages of
// a schedule of this kind (`chunked`: several stages a device), and there are
// exchanges (more than one stage).
bool ops_start_drained(const Framework& fw, bool chunked, int stages);

// How the host keeps up with the device over an op: running ahead of it,
// starting with an empty queue (after a wait for the device), or waiting for
// every kernel it launches.
enum class HostPace { kAhead, kDrained, kBlocking };

// The pace of a stage's ops that begin after an exchange (`drained`: the
// framework waited for the device there) and of those that follow other work
// (a recompute, a weight gradient).
HostPace leading_pace(const Framework& fw, bool drained);
HostPace following_pace(const Framework& fw);

// The device's wait for the host over an op of device time `device` and host
// time `host` (`launch`: one launch's) at `pace`.
SimTime host_wait(SimTime device, SimTime host, SimTime launch, HostPace pace);

// Adds each stage's waits for the host to its op times (forward, forward_kept,
// backward, input, weight, recompute), from its layers' host times under
// `cost` and the collectives of tensor parallelism (one launch each), after
// add_tensor_collectives. Nothing where the framework's host_launch_s is 0.
void add_host_waits(const ModelSpec& model, const CostModel& cost, const Framework& fw,
                    std::int64_t micro_batch, Remat remat, bool drained,
                    std::vector<StageCost>& stages);

}  // namespace pipescope
