#include "sim/engine/stage_costs.h"

#include <algorithm>
#include <cmath>

#include "costmodels/check.h"

namespace pipescope {

OpTimes under_remat(Remat remat, OpTimes t) {
  if (remat != Remat::kSelective) return t;
  t.forward = t.forward_kept;
  t.backward += t.core;
  t.input += t.core;
  t.recompute = t.core;  // what a stage reports as recomputed; no R op runs it
  return t;
}

Bytes stash_under_remat(Remat remat, const LayerSpec& layer) {
  return remat == Remat::kSelective ? layer.stash_bytes - layer.core_stash_bytes
                                    : layer.stash_bytes;
}

std::vector<StageCost> compute_stage_costs(const ModelSpec& model,
                                           const std::vector<StageRange>& stages,
                                           const CostModel& cost, std::int64_t micro_batch_size,
                                           double bytes_per_param, Remat remat,
                                           Checkpoint checkpoint, bool backward_split) {
  const std::int64_t b = micro_batch_size;
  std::vector<StageCost> out;
  out.reserve(stages.size());
  for (const StageRange& range : stages) {
    PS_CHECK(range.first_layer >= 0 && range.last_layer < static_cast<int>(model.layers.size()) &&
                 range.first_layer <= range.last_layer,
             "stage range outside the model");
    StageCost c;
    c.layers = range;
    for (int l = range.first_layer; l <= range.last_layer; ++l) {
      const LayerSpec& layer = model.layers[static_cast<std::size_t>(l)];
      const OpTimes t = under_remat(remat, cost.op_times(layer, b));
      c.forward += t.forward;
      c.forward_kept = c.forward_kept.value_or(0) + t.forward_kept;
      c.backward += t.backward;
      c.weight += t.weight;
      c.input += t.input;
      c.recompute += t.recompute;
      c.params += layer.params;
      c.expert_params += layer.expert_params;
      const Bytes stash = stash_under_remat(remat, layer) * b;
      c.stash_bytes += stash;
      if (checkpoint == Checkpoint::kLayer) {
        c.checkpoint_bytes += model.input_bytes_of(l) * b;
        c.rebuilt_bytes = std::max(c.rebuilt_bytes, stash);
      }
    }
    c.optimizer = cost.optimizer_step(c.params);
    c.static_bytes =
        static_cast<Bytes>(std::llround(static_cast<double>(c.params) * bytes_per_param));
    c.input_bytes = model.input_bytes_of(range.first_layer) * b;
    c.output_bytes = model.input_bytes_of(range.last_layer + 1) * b;
    if (checkpoint == Checkpoint::kStage) c.checkpoint_bytes = c.input_bytes;
    if (checkpoint == Checkpoint::kStage || backward_split) c.rebuilt_bytes = c.stash_bytes;
    out.push_back(c);
  }
  return out;
}

OpCollectives op_collectives(const StageCost& c, OpKind kind) {
  switch (kind) {
    case OpKind::kForward:
      return {c.tp_forward + c.tp_input_gather,
              c.tp_forward_bytes + c.tp_input_gather_bytes,
              c.ep_forward,
              c.ep_bytes,
              c.cp_forward,
              c.cp_bytes};
    case OpKind::kRecompute:
      return {c.tp_forward, c.tp_forward_bytes, c.ep_forward, c.ep_bytes, c.cp_forward, c.cp_bytes};
    case OpKind::kBackward:
      return {c.tp_backward + c.tp_grad_gather,
              c.tp_backward_bytes + c.tp_grad_gather_bytes,
              c.ep_backward,
              c.ep_bytes,
              c.cp_backward,
              c.cp_backward_bytes};
    case OpKind::kOptimizer: {
      // A tied head's table sum comes with the step, and the CPU ranks' sum.
      OpCollectives step{c.tied_allreduce, c.tied_allreduce_bytes, 0, 0, 0, 0};
      if (c.allreduce_in_step) {
        step.tensor += c.allreduce;
        step.tensor_bytes += c.grad_bytes;
      }
      return step;
    }
    case OpKind::kWeight:
      break;
  }
  return {};
}

}  // namespace pipescope
