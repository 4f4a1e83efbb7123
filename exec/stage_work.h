#pragma once
// One stage's part of a step (step_run.h): its F, R, B, W and optimizer ops on
// its layers, and what it keeps between them: each micro-batch's stashes (or,
// under remat, only its input until R rebuilds them), the weight-gradient work a
// split backward defers to W, and the last stage's loss. Only the thread of
// the stage's device touches it; the step reads the loss once the workers have
// returned. The worker (device_worker.h) brings the payloads and sends the
// results.

#include <cstddef>
#include <optional>
#include <vector>

#include "exec/compute/device.h"
#include "exec/compute/layer.h"
#include "exec/compute/optimizer.h"
#include "exec/compute/tensor_group.h"
#include "sim/engine/schedule.h"

namespace pipescope::exec {

// Under context or expert parallelism the ranks that hold a stage's
// parameters for the other shares of each micro-batch: the gradients (but an
// expert rank's experts', Param::expert) are summed over `group` (this rank
// its `share`) before the optimizer step, and the experts' over `experts`,
// the C shares of this expert rank (this one its `context`; under context
// parallelism alone the same group as `group`).
// Null: none.
struct StageGradients {
  TensorGroup* group = nullptr;
  int share = 0;
  TensorGroup* experts = nullptr;
  int context = 0;
};

class StageWork {
 public:
  // `contexts` and `inputs` (stage 0's input of each micro-batch) are the
  // step's, shared by its stages; `device` is where the layers compute (null:
  // the host).
  StageWork(int stage, LayerList& layers, ParamOptimizer& optimizer, Device* device,
            const Schedule& schedule, const std::vector<Context>& contexts,
            const std::vector<Tensor>& inputs, StageGradients gradients = {});

  // Runs `op`, one of this stage's, on its payload `in` (F: the activation
  // received, B: the output's gradient; otherwise empty). Returns what F or B
  // makes (below); the other ops return an empty tensor.
  Tensor run(const Op& op, Tensor in);

  double loss() const { return loss_; }

 private:
  // F(s,m) on `received` (ignored by stage 0, which reads its input): the
  // activation for the next stage, or on the last stage the (1,1) loss, which it
  // adds to loss().
  Tensor forward(int m, Tensor received);
  // R(s,m): the forward again from the kept input, keeping the stashes for B.
  void recompute(int m);
  // B(s,m) on the output's gradient `dy`: the input's gradient for the previous
  // stage. Split, it leaves the parameters' gradients to W.
  Tensor backward(int m, Tensor dy);
  // W(s,m): the weight gradients B(s,m) left, then the micro-batch's stash goes.
  void weight(int m);
  // The stage's optimizer step over its parameters (their gradients summed
  // over the shares first, under context parallelism).
  void optimizer_step();

  bool last() const { return stage_ == stages_ - 1; }
  const Context& context(int m) const { return contexts_[static_cast<std::size_t>(m)]; }
  Tensor run_layers(const Tensor& x, const Context& ctx, std::vector<Stash>* stashes);
  void check_gradient(std::size_t layer, const Tensor& dy) const;
  void release(std::size_t m);

  const int stage_;
  const int stages_;
  LayerList& layers_;
  ParamOptimizer& optimizer_;
  Device* const device_;
  const Schedule& schedule_;
  const bool split_;  // B computes input gradients only; W the weights'
  const std::vector<Context>& contexts_;
  const std::vector<Tensor>& inputs_;
  const StageGradients gradients_;

  std::vector<std::optional<Tensor>> inputs_kept_;  // recomputed, stage > 0: the boundary input
  std::vector<char> input_kept_;                    // recomputed: F ran and B has not yet
  std::vector<std::optional<std::vector<Stash>>> stashes_;  // per micro-batch, per layer
  std::vector<WeightGradQueue> deferred_;                   // split backward: B ran, its W has not
  std::vector<char> awaits_weight_;                         // split backward: B ran and W has not
  double loss_ = 0.0;                                       // last stage only
};

}  // namespace pipescope::exec
