#pragma once
// The exchanges of context parallelism (ring attention, Liu et al. 2023, as
// Transformer Engine runs it for Megatron-LM's --context-parallel-size):
// each of C devices holds seq / C of a sample's tokens, and every attention
// layer passes the blocks of keys and values round the ring of the C, C - 1
// steps in a forward (and a recompute), each device sending its current
// block to the next while it computes attention over it; a backward passes
// the blocks and their gradients, twice the bytes in as many steps. A step's
// exchange hides behind its share of the attention (1 / C of it, the causal
// work balanced); what outlasts it the op waits for.
//
// With cp_comm_type all_gather (ContextExchange::kAllGather, Transformer
// Engine's AttnFuncWithCPAndKVAllGather, Llama 3's) a forward all-gathers the
// keys and then the values of the C devices before its attention, and a
// backward gathers them again and reduce-scatters their gradients after it:
// two collectives and four, each as a ring of C - 1 steps of the device's
// block, none hidden behind the attention.
//
// With cp_comm_type a2a (ContextExchange::kAllToAll, DeepSpeed-Ulysses,
// Jacobs et al. 2023; Transformer Engine's AttnFuncWithCPAndQKVOA2A) a
// forward trades its queries, keys and values for whole sequences of
// heads / C heads in three all-to-alls among the C before the attention and
// its output back in a fourth after it; a backward trades the output's
// gradient and then the three inputs' gradients the same way: four
// all-to-alls each way, none hidden behind the attention (Transformer Engine
// 2.8 and later; before, a backward traded the output again beside its
// gradient, five all-to-alls).

#include <cstdint>
#include <vector>

#include "costmodels/cluster.h"
#include "costmodels/cost_model.h"
#include "costmodels/model.h"
#include "costmodels/profile.h"
#include "sim/engine/simulator.h"
#include "sim/engine/stage_costs.h"

namespace pipescope {

// The ring among the C shares of a group (physical devices 0, T, ..., (C - 1)
// T: context rank c of tensor rank 0), loaded by the T - 1 rings of the other
// tensor ranks that run beside it (concurrent_rings: where a node's GPUs
// share NICs, those rings share them); replicas = 1 without context
// parallelism.
DataParallel context_ring(const Cluster& cluster);

// The same ring with the all-to-all group of the C (DataParallel::experts:
// how many share device 0's node, the least bandwidth to a peer there and to
// one on another node, the longest route's latency), for the a2a form.
DataParallel context_alltoall_group(const Cluster& cluster);

// One step of `ring`: every device sends `bytes` to the next at once, one
// latency and the bytes at the ring's bandwidth.
SimTime ring_step_time(const DataParallel& ring, Bytes bytes);

// What a layer's exchanges add to its forward and its backward for a
// micro-batch of `batch` samples. p2p: each step's exchange less the
// attention it hides behind (the core's forward, cost.core_recompute, and
// its backward, cost.core_backward, a step's 1 / C share of each), times the
// layer's steps; 0 where the attention is the longer. all_gather: the
// collectives whole. a2a: the all-to-alls whole (`ring` from
// context_alltoall_group).
struct ContextExchanges {
  SimTime forward = 0;
  SimTime backward = 0;
};
ContextExchanges context_exchanges(const LayerSpec& layer, std::int64_t batch,
                                   const DataParallel& ring, const CostModel& cost,
                                   ContextExchange form = ContextExchange::kP2p);

// A layer's exchanges as a CPU profile measured the ring's takes
// (Profile::context_ring): a take of keys and values each of its cp_steps
// (C - 1) in a forward; in a backward those, as many of the gradients summed
// so far and the share's own coming home; each its measured mean, the
// shares' waits for each other included (the executor's ring,
// exec/compute/ring_attention.h).
ContextExchanges measured_ring_exchanges(const LayerSpec& layer, const ContextRingFigures& ring);

// Fills each stage's cp_forward, cp_backward, cp_bytes and cp_backward_bytes
// (what a device sends in a forward and in a backward) from its layers;
// nothing without context parallelism. When the cluster's CPU profile
// measured the shares' exchanges at T = 1 with C threads at this
// micro-batch size, the ring's exchanges are the measured takes
// (measured_ring_exchanges) and the all-to-alls take the measured group's
// latency and bandwidth (Profile::context_ring, alltoall_group).
void add_context_exchanges(const ModelSpec& model, const Cluster& cluster,
                           std::int64_t micro_batch_size, std::vector<StageCost>& stages,
                           const CostModel& cost, ContextExchange form = ContextExchange::kP2p);

}  // namespace pipescope
