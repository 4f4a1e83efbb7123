#pragma once
// What a PipelineRuntime (runtime.h) owns across its steps and each step's parts
// use (step_run.h), and how the runtime names an op in its messages. Internal to
// the executor.

#include <string>
#include <vector>

#include "exec/layer.h"
#include "exec/optimizer.h"
#include "exec/runtime.h"
#include "sim/schedule.h"

namespace pipescope::exec {

struct RuntimeCore {
  std::vector<LayerList> stages;
  Schedule schedule;
  RuntimeOptions options;
  std::vector<ParamOptimizer> optimizers;  // one per stage
  std::vector<Device*> devices;            // per stage: its layers' device, null on the host
};

// "F(1,2)", or "O(1)" for the optimizer op of stage 1.
std::string op_name(const Op& op);

}  // namespace pipescope::exec
