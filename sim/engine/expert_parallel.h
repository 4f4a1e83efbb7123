#pragma once
// The exchanges of expert parallelism (Megatron-LM's, Lepikhin et al. 2020):
// each of E data-parallel replicas (under context parallelism E of the
// D x C devices that hold a stage's weights, the shares first, as
// megatron-core carves its expert groups) holds experts / E of a mixture's
// routed experts (ModelSpec::expert_parallel), so every mixture layer sends
// each of its tokens' copies to the devices that hold their experts and
// brings the outputs back, two all-to-alls among the E in a forward (and in
// a recompute) and two of the gradients in a backward, within the op and
// not overlapped with its compute (megatron-core's all-to-all dispatcher
// without its overlap options). The experts' gradients reduce over the
// D x C / E devices that hold the same experts.

#include <cstdint>
#include <vector>

#include "costmodels/model.h"
#include "sim/engine/simulator.h"
#include "sim/engine/stage_costs.h"

namespace pipescope {

// One all-to-all in which each device of dp.experts sends `bytes` (its own
// share included): nccl_alltoall_seconds on NCCL's clusters, else one step's
// latency and the slower of the node's and the network's shares at their
// bandwidths. 0 without expert parallelism.
SimTime alltoall_time(const DataParallel& dp, Bytes bytes);
// One of a mixture layer's all-to-alls of `bytes` a device (its tokens' k
// copies): alltoall_time, or on NCCL's clusters with dp.deepep DeepEP's
// dispatch of the same tokens (deepep_alltoall_seconds, costmodels/
// collective.h: each token once to each node and GPU that holds any of its
// experts), the model's own experts and top-k.
SimTime expert_alltoall_time(const ModelSpec& model, const DataParallel& dp, Bytes bytes);

// dp with its all-to-all group priced as a CPU profile measured it
// (dp.measured_alltoall) when that was a group of as many ranks (or of any
// size, within_ops) at `micro_batch_size`: the ranks' own exchange (threads through shared
// memory, or the MPI backend's processes over their communicator), where
// the cluster's links are the profile's transport, a payload handed
// between two stages. The measurement counts each rank's whole buffer,
// alltoall_wire_seconds (n - 1) / n of it. Otherwise (NCCL's clusters, a
// group across nodes, another size) dp unchanged.
DataParallel measured_alltoalls(DataParallel dp, std::int64_t micro_batch_size);
// The figures measured_alltoalls prices dp's group by at `micro_batch_size`,
// or null where it keeps dp's links.
const GroupAllToAllFigures* measured_group(const DataParallel& dp, std::int64_t micro_batch_size);

// Each layer's all-to-alls in a forward of a micro-batch of
// `micro_batch_size` samples (LayerSpec::ep_alltoalls of them; a backward's
// are as many again, a layer without a mixture has none), priced by
// measured_alltoalls; empty without expert parallelism.
std::vector<SimTime> layer_alltoalls(const ModelSpec& model, const DataParallel& dp,
                                     std::int64_t micro_batch_size);

// Fills each stage's ep_forward, ep_backward and ep_bytes from its layers'
// all-to-alls (layer_alltoalls) for a micro-batch of `micro_batch_size`
// samples; nothing without expert parallelism.
// `pair_overlap`: Framework::pair_alltoall_overlap (StageCost::ep_pair_overlap).
void add_expert_collectives(const ModelSpec& model, const DataParallel& dp,
                            std::int64_t micro_batch_size, std::vector<StageCost>& stages,
                            bool pair_overlap = false);

// The replicas that hold the same experts among `replicas` under E-way expert
// parallelism: replicas / E, at least 1.
int expert_holders(int replicas, int expert_parallel);

// The devices that reduce an expert's gradients: D x C x fold / E of dp's
// D x C (DataParallel::reducers) x fold (DataParallel::expert_fold: the T
// devices of a share each an expert rank where they hold whole experts),
// over the nodes they span
// (DataParallel::expert_ring_nodes) and at dp's bandwidth (the ring through
// peers E slots apart crosses the same kind of link as dp's, the network
// where dp spans nodes).
DataParallel expert_reduction_ring(const DataParallel& dp);

// Throws ConfigError (at training.expert_parallel) where the run cannot
// spread sc's experts over E: whole experts with E not a multiple of T
// (whole_experts_problem), or an all-to-all group that data_parallel_ring
// did not give E ranks (E of the run's D replicas, of its D x C devices
// under context parallelism, of its T x D x C with whole experts).
void check_expert_group(const Scenario& sc, const SimConfig& cfg);

}  // namespace pipescope
