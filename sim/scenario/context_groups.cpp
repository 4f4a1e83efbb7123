#include "sim/scenario/context_groups.h"

#include "costmodels/check.h"
#include "costmodels/model_families.h"

namespace pipescope {

std::string context_parallel_problem(const Scenario& sc, int C) {
  if (C == 1) return "";
  if (!sc.model.transformer) {
    return "context parallelism splits a transformer's sequence; model '" + sc.model.name +
           "' is of family " + sc.model.family + " (expected 1)";
  }
  TensorSplit split = sc.training.split();
  split.context = C;
  if (std::string problem = tensor_split_problem(*sc.model.transformer, split); !problem.empty()) {
    return problem;
  }
  if (sc.cluster.devices % C != 0) {
    return std::to_string(C) + " does not divide the cluster's " +
           sc.cluster.devices_text(sc.cluster.devices) +
           ": each group holds context_parallel shares of the sequence";
  }
  if (sc.training.zero == 3) {
    return "ZeRO-3 with context parallelism is not modelled: expected training.zero 0 to 2, or "
           "context_parallel 1";
  }
  return "";
}

std::vector<int> context_parallel_choices(const Scenario& sc) {
  if (sc.training.context_parallel_given || !sc.model.transformer) {
    return {sc.training.context_parallel};
  }
  std::vector<int> out{1};
  const std::int64_t seq = sc.model.transformer->seq_len;
  for (int C = 2; seq / C >= kMinContextTokens && C <= sc.cluster.devices; C *= 2) {
    if (context_parallel_problem(sc, C).empty()) out.push_back(C);
  }
  return out;
}

Scenario with_context_parallel(const Scenario& sc, int C) {
  PS_CHECK(sc.cluster.context_parallel == 1, "the scenario's sequence is whole");
  const std::string problem = context_parallel_problem(sc, C);
  PS_CHECK(problem.empty(), problem);
  Scenario out = sc;
  out.training.context_parallel = C;
  if (C == 1) return out;
  out.model = make_transformer(*sc.model.transformer, sc.model.name, out.training.split());
  out.cluster.devices /= C;
  out.cluster.context_parallel = C;
  return out;
}

}  // namespace pipescope
