#pragma once
// A scenario under expert parallelism: each of E data-parallel replicas (of
// the D x C devices under context parallelism) holds
// experts / E of every mixture layer's routed experts (the model becomes one
// device's share of them, as under tensor parallelism of its layers). What
// the E exchange is priced in sim/engine/expert_parallel.h.

#include <cstdint>
#include <string>
#include <vector>

#include "sim/scenario/scenario.h"

namespace pipescope {

// Why the mixture of `sc` cannot spread over E devices: a model without
// experts, an E that does not divide them or is less than the stated
// imbalance, ZeRO-3 (whose layer-by-layer gathers of experts sharded over
// D / E replicas are not modelled). Empty when it can, and for E = 1.
std::string expert_parallel_problem(const Scenario& sc, int E);

// The E the planner tries for `sc` (one T's scenario), smallest first: the
// scenario's own when it gives one (TrainingConfig::expert_parallel_given) or
// has no experts; otherwise 1 and every E that divides the routed experts and
// that expert_parallel_problem allows (with whole experts beside T, the
// multiples of T: whole_experts_problem).
std::vector<int> expert_parallel_choices(const Scenario& sc);

// Whether E expert-parallel devices divide the D replicas x C context
// shares that hold a stage's weights (x T, `fold`, where each device holds
// whole experts: Cluster::expert_fold), from which megatron-core carves its
// expert groups (the tensor ranks of whole experts first, then the shares):
// E of them hold all the experts, D x C x fold / E of them the same ones.
inline bool experts_divide(int expert_parallel, int replicas, int context_parallel, int fold) {
  return (std::int64_t{replicas} * context_parallel * fold) % expert_parallel == 0;
}

// Why whole experts beside T (Cluster::expert_fold = T > 1) cannot spread
// over E expert ranks: E not a multiple of T. With E a multiple of T the
// devices that hold the same experts are tensor rank 0 of distinct replicas
// (or shares), whose ring the model prices; below it the T of a replica
// would sum their experts' gradients among themselves, which it does not.
// Empty when they can, and for fold 1.
std::string whole_experts_problem(int fold, int E);

// Why `sc` cannot keep its experts whole beside its T
// (TrainingConfig::expert_tensor_parallel 1): a model without experts, or T
// > 1 without sequence parallelism. Empty when it can, and where the experts
// split over T.
std::string expert_tensor_parallel_problem(const Scenario& sc);

// Why `sc` cannot exchange its experts' tokens by DeepEP
// (TrainingConfig::moe_dispatcher): a model without experts, or a cluster
// whose collectives are not NCCL's or whose GPUs meet over PCIe (DeepEP's
// kernels run on NVLink and RDMA). Empty when it can, and for the
// all-to-all; with E = 1 there is nothing to exchange and it prices nothing.
std::string moe_dispatcher_problem(const Scenario& sc);

// `sc` with its model one device's share of the routed experts under E
// (TrainingConfig::expert_parallel), its tensor split kept.
// expert_parallel_problem must be empty.
Scenario with_expert_parallel(const Scenario& sc, int E);

}  // namespace pipescope
