#pragma once
// What a PipelineRuntime (runtime.h) owns across its steps and each step's parts
// use (step_run.h), and how the runtime names an op in its messages. Internal to
// the executor.

#include <string>
#include <vector>

#include "exec/compute/layer.h"
#include "exec/compute/optimizer.h"
#include "exec/runtime.h"
#include "sim/engine/schedule.h"

namespace pipescope::exec {

struct RuntimeCore {
  // ranks[r][s]: tensor rank r's layers of stage s; one rank without tensor
  // parallelism.
  std::vector<std::vector<LayerList>> ranks;
  Schedule schedule;
  RuntimeOptions options;
  std::vector<std::vector<ParamOptimizer>> optimizers;  // [rank][stage]
  std::vector<Device*> devices;  // per stage: its layers' device, null on the host

  int tensor_parallel() const { return static_cast<int>(ranks.size()); }
};

// "F(1,2)", or "O(1)" for the optimizer op of stage 1.
std::string op_name(const Op& op);

}  // namespace pipescope::exec
