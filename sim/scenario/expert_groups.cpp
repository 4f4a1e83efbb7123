#include "sim/scenario/expert_groups.h"

#include "costmodels/check.h"
#include "costmodels/model_families.h"

namespace pipescope {

std::string whole_experts_problem(int fold, int E) {
  if (fold <= 1 || E % fold == 0) return "";
  return "whole experts beside T=" + std::to_string(fold) + " need expert_parallel a multiple of " +
         std::to_string(fold) + " (got " + std::to_string(E) +
         "): the T devices of a replica are expert ranks of their own, and fewer E would have "
         "them sum the same experts' gradients among themselves, which is not modelled";
}

std::string expert_parallel_problem(const Scenario& sc, int E) {
  // The E the planner tries under whole experts; a scenario's E at its key.
  const int fold = applied_split(sc).expert_fold();
  if (sc.model.transformer && sc.model.transformer->moe.enabled() &&
      (E > 1 || sc.training.expert_parallel_given)) {
    if (std::string problem = whole_experts_problem(fold, E); !problem.empty()) return problem;
  }
  if (E == 1) return "";
  if (!sc.model.transformer || !sc.model.transformer->moe.enabled()) {
    return "expert parallelism spreads a mixture's experts; model '" + sc.model.name +
           "' has none (expected 1)";
  }
  const TransformerParams& p = *sc.model.transformer;
  TensorSplit split = applied_split(sc);
  split.experts = E;
  if (std::string problem = tensor_split_problem(p, split); !problem.empty()) return problem;
  if (sc.training.zero == 3) {
    return "ZeRO-3 with expert parallelism is not modelled (its gathers of experts sharded "
           "over D / E replicas): expected training.zero 0 to 2, or expert_parallel 1";
  }
  return "";
}

std::string expert_tensor_parallel_problem(const Scenario& sc) {
  if (sc.training.expert_tensor_parallel == 0) return "";
  if (!sc.model.transformer || !sc.model.transformer->moe.enabled()) {
    return "expert tensor parallelism splits a mixture's experts; model '" + sc.model.name +
           "' has none (leave the field out)";
  }
  const int T = sc.training.tensor_parallel;
  if (T > 1 && !sc.training.sequence_parallel) {
    return "whole experts (1) beside tensor_parallel " + std::to_string(T) +
           " route each device's own tokens: they need training.sequence_parallel true "
           "(megatron-core asks it of every mixture under tensor parallelism)";
  }
  return "";
}

std::string moe_dispatcher_problem(const Scenario& sc) {
  if (sc.training.moe_dispatcher == MoeDispatcher::kAllToAll) return "";
  if (!sc.model.transformer || !sc.model.transformer->moe.enabled()) {
    return "deepep dispatches a mixture's tokens to their experts; model '" + sc.model.name +
           "' has none (expected alltoall)";
  }
  if (!sc.cluster.nccl()) {
    return "deepep runs on GPUs' NVLink and RDMA, timed kernel by kernel; cluster '" +
           sc.cluster.name + "' times its collectives otherwise (expected alltoall)";
  }
  if (sc.cluster.interconnect.topology == TopologyKind::kPcieHost) {
    return "deepep runs on GPUs' NVLink and RDMA; cluster '" + sc.cluster.name +
           "' links its GPUs over PCIe (expected alltoall)";
  }
  return "";
}

std::vector<int> expert_parallel_choices(const Scenario& sc) {
  const bool mixture = sc.model.transformer && sc.model.transformer->moe.enabled();
  if (sc.training.expert_parallel_given || !mixture) return {sc.training.expert_parallel};
  std::vector<int> out;
  const int experts = sc.model.transformer->moe.experts;
  const int fold = applied_split(sc).expert_fold();
  for (int E = 1; E <= experts; ++E) {
    if (experts % E == 0 && whole_experts_problem(fold, E).empty() &&
        expert_parallel_problem(sc, E).empty()) {
      out.push_back(E);
    }
  }
  return out;
}

Scenario with_expert_parallel(const Scenario& sc, int E) {
  const std::string problem = expert_parallel_problem(sc, E);
  PS_CHECK(problem.empty(), problem);
  Scenario out = sc;
  out.training.expert_parallel = E;
  if (sc.model.expert_parallel == E) return out;
  out.model = make_transformer(*sc.model.transformer, sc.model.name, applied_split(out));
  return out;
}

}  // namespace pipescope
