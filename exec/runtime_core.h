#pragma once
// What a PipelineRuntime (runtime.h) owns across its steps and each step's parts
// use (step_run.h), and how the runtime names an op in its messages. Internal to
// the executor.

#include <memory>
#include <string>
#include <vector>

#include "exec/compute/layer.h"
#include "exec/compute/optimizer.h"
#include "exec/compute/tensor_group.h"
#include "exec/runtime.h"
#include "sim/engine/schedule.h"

namespace pipescope::exec {

struct RuntimeCore {
  // ranks[r][s]: rank r's layers of stage s, r = c T + t for share c of C of
  // each sequence (context parallelism) and tensor rank t of T; one rank
  // without either.
  std::vector<std::vector<LayerList>> ranks;
  int context_parallel = 1;  // C
  Schedule schedule;
  RuntimeOptions options;
  std::vector<std::vector<ParamOptimizer>> optimizers;  // [rank][stage]
  // Under context parallelism the C ranks of a tensor rank t and a stage hold
  // the same parameters: their gradients are summed over this group before
  // each optimizer step ([t][stage]; empty for C = 1).
  std::vector<std::vector<std::shared_ptr<TensorGroup>>> gradient_groups;
  std::vector<Device*> devices;  // per stage: its layers' device, null on the host

  // The threads of each device: T x C.
  int group_ranks() const { return static_cast<int>(ranks.size()); }
  int tensor_parallel() const { return group_ranks() / context_parallel; }
};

// "F(1,2)", or "O(1)" for the optimizer op of stage 1.
std::string op_name(const Op& op);

}  // namespace pipescope::exec
