#pragma once
// The collectives of tensor parallelism (Megatron-LM's): a stage's ops run on
// a group of T devices that each hold a share of every layer
// (ModelSpec::tensor_parallel) and sum partial results with ring all-reduces
// over the links between them, within the op, not overlapped with its compute.

#include <cstdint>
#include <vector>

#include <string>
#include "costmodels/cluster.h"
#include "costmodels/model.h"

#include "sim/engine/simulator.h"
#include "sim/engine/stage_costs.h"
#include "sim/scenario/scenario.h"
#include "sim/scenario/tensor_groups.h"

namespace pipescope {

// The ring among the physical devices `members` of `cluster` (replicas: their
// count), each sending to the next over its route, all at once, so a step
// takes the longest route's latency and the least bandwidth any link gives
// each route that crosses it (achievable bandwidth, shared by the routes on
// it). Inside a node on NVSwitch that is one device's link; across nodes,
// the slower network's. Throws ConfigError naming `what` where a link has
// no bandwidth.
DataParallel physical_ring(const Cluster& cluster, const std::vector<int>& members,
                           const std::string& what);
// Rings of the same size that run at once (the context-parallel rings of a
// group's T tensor ranks): every hop of each loads the links on its route,
// so a link the rings share (a NIC several GPUs reach the network through)
// gives each its share. The first ring's figures, with the others' load.
DataParallel concurrent_rings(const Cluster& cluster, const std::vector<std::vector<int>>& rings,
                              const std::string& what);

// The ring among a group's T devices (physical_ring of devices 0 to T - 1);
// replicas = 1 without tensor parallelism.
DataParallel tensor_ring(const Cluster& cluster);

// The time of a layer's all-reduces for a micro-batch of `batch` samples:
// allreduce_time over `ring` of its bytes, one latency per collective.
struct TensorCollectives {
  SimTime forward = 0;
  SimTime backward = 0;
};
TensorCollectives tensor_collectives(const LayerSpec& layer, std::int64_t batch,
                                     const DataParallel& ring);

// How many ways each device's share of a cut is split for sending: T where
// the cluster splits cuts (Cluster::p2p_split) that every device of a group
// holds whole (no sequence parallelism), else 1.
int cut_split(const ModelSpec& model, const Cluster& cluster);

// Fills each stage's tp_forward, tp_backward and their bytes from its layers;
// where the cuts are split (cut_split > 1), each device's share of the output
// (output_bytes) and the group's all-gathers of the stage's input and output
// gradient (tp_input_gather, tp_grad_gather) where its neighbour runs on
// another device (stage_device: the schedule's placement; a cut inside a
// device moves nothing).
//
// What the framework overlaps (Framework::tp_backward_overlap,
// tp_forward_overlap) leaves of each layer's collectives only what outlasts
// the compute it hides behind: a backward's collective the layer's weight
// gradients (not under a split backward, whose W runs apart), a forward's
// the layer's forward.
void add_tensor_collectives(const ModelSpec& model, const Cluster& cluster,
                            const std::vector<int>& stage_device, std::int64_t micro_batch_size,
                            std::vector<StageCost>& stages, const CostModel& cost,
                            const Framework& framework, bool backward_split);

// A layer's collectives less what `framework` hides of them behind the
// layer's compute `times`, plus what Transformer Engine's userbuffers cost
// the GEMMs beside them (costmodels/userbuffers.h).
TensorCollectives exposed_collectives(TensorCollectives collectives, const OpTimes& times,
                                      const Framework& framework, bool split);

}  // namespace pipescope
