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
  // ranks[r][s]: rank r's layers of stage s, r = (e C + c) T + t for expert
  // rank e of E (its own samples of each micro-batch), share c of C of each
  // sequence (context parallelism) and tensor rank t of T; one rank without
  // any.
  std::vector<std::vector<LayerList>> ranks;
  int context_parallel = 1;  // C
  int expert_parallel = 1;   // E
  Schedule schedule;
  RuntimeOptions options;
  std::vector<std::vector<ParamOptimizer>> optimizers;  // [rank][stage]
  // Under context or expert parallelism the E C ranks of a tensor rank t and
  // a stage hold the same parameters (but an expert rank's experts): their
  // gradients are summed over this group before each optimizer step
  // ([t][stage]; empty for E C = 1).
  std::vector<std::vector<std::shared_ptr<TensorGroup>>> gradient_groups;
  // Under both, the C shares of expert rank e hold its experts: theirs are
  // summed over this group ([e][stage]; empty unless E > 1 and C > 1).
  std::vector<std::vector<std::shared_ptr<TensorGroup>>> expert_gradient_groups;
  std::vector<Device*> devices;  // per stage: its layers' device, null on the host

  // The threads of each device: E x C x T.
  int group_ranks() const { return static_cast<int>(ranks.size()); }
  // The parts each micro-batch is cut into, E x C: share k = e C + c.
  int shares() const { return expert_parallel * context_parallel; }
  int tensor_parallel() const { return group_ranks() / shares(); }
  // " (expert rank 1, share 0, tensor rank 1)" for rank r, what it is of
  // each parallelism used; empty for one rank.
  std::string rank_name(int r) const;
};

// "F(1,2)", or "O(1)" for the optimizer op of stage 1.
std::string op_name(const Op& op);

}  // namespace pipescope::exec
