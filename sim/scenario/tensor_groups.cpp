#include "sim/scenario/tensor_groups.h"

#include "costmodels/check.h"
#include "costmodels/model_families.h"

namespace pipescope {

std::string tensor_parallel_problem(const Scenario& sc, int T, bool sequence) {
  PS_CHECK(sc.cluster.tensor_parallel == 1, "the scenario's layers are whole");
  if (T == 1 && !sequence) return "";
  if (!sc.model.transformer) {
    return "tensor parallelism splits a transformer's layers; model '" + sc.model.name +
           "' is of family " + sc.model.family + " (expected 1)";
  }
  // With the sequence split the scenario has made (its C), whose chunks T
  // must divide under sequence parallelism; E is checked at its own key.
  TensorSplit split;
  split.ways = T;
  split.sequence = sequence;
  split.context = sc.cluster.context_parallel;
  split.heads_over_context = sc.training.split().heads_over_context;
  split.expert_ways = sc.training.expert_tensor_parallel;
  if (std::string problem = tensor_split_problem(*sc.model.transformer, split); !problem.empty()) {
    return problem;
  }
  if (sc.cluster.devices % T != 0) {
    return std::to_string(T) + " does not divide the cluster's " +
           std::to_string(sc.cluster.devices) +
           " devices: they form groups of tensor_parallel devices";
  }
  return "";
}

Scenario with_tensor_parallel(const Scenario& sc, int T, bool sequence) {
  const std::string problem = tensor_parallel_problem(sc, T, sequence);
  PS_CHECK(problem.empty(), problem);
  Scenario out = sc;
  out.training.tensor_parallel = T;
  out.training.sequence_parallel = sequence;
  if (T == 1) return out;
  out.model = make_transformer(*sc.model.transformer, sc.model.name, applied_split(out));
  out.cluster.devices /= T;
  out.cluster.tensor_parallel = T;
  out.cluster.expert_fold = out.training.split().expert_fold();
  return out;
}

bool sequence_parallel_choice(const Scenario& sc, int T) {
  if (T == 1) return false;
  if (sc.training.sequence_parallel_given) return sc.training.sequence_parallel;
  return tensor_parallel_problem(sc, T, true).empty();
}

std::vector<int> tensor_parallel_choices(const Scenario& sc) {
  std::vector<int> out{1};
  const Interconnect& ic = sc.cluster.interconnect;
  if (sc.cluster.profile || ic.topology != TopologyKind::kNodes) return out;
  for (int T = 2; T <= ic.devices_per_node; ++T) {
    if (ic.devices_per_node % T == 0 &&
        tensor_parallel_problem(sc, T, sequence_parallel_choice(sc, T)).empty()) {
      out.push_back(T);
    }
  }
  return out;
}

}  // namespace pipescope
