#include "exec/stage_work.h"

#include <stdexcept>
#include <string>
#include <utility>

#include "exec/gradient_sum.h"

namespace pipescope::exec {

StageWork::StageWork(int stage, LayerList& layers, ParamOptimizer& optimizer, Device* device,
                     const Schedule& schedule, const std::vector<Context>& contexts,
                     const std::vector<Tensor>& inputs, StageGradients gradients)
    : stage_(stage),
      stages_(schedule.stages),
      layers_(layers),
      optimizer_(optimizer),
      device_(device),
      schedule_(schedule),
      split_(schedule.split),
      contexts_(contexts),
      inputs_(inputs),
      gradients_(gradients) {
  const auto M = static_cast<std::size_t>(schedule.micro_batches);
  inputs_kept_.resize(M);
  input_kept_.assign(M, 0);
  stashes_.resize(M);
  deferred_.resize(M);
  awaits_weight_.assign(M, 0);
}

Tensor StageWork::run(const Op& op, Tensor in) {
  switch (op.kind) {
    case OpKind::kForward:
      return forward(op.micro_batch, std::move(in));
    case OpKind::kRecompute:
      recompute(op.micro_batch);
      break;
    case OpKind::kBackward:
      return backward(op.micro_batch, std::move(in));
    case OpKind::kWeight:
      weight(op.micro_batch);
      break;
    case OpKind::kOptimizer:
      optimizer_step();
      break;
  }
  return {};
}

// Runs the stage's layers on x and checks that every output is finite so the
// error names the layer that went wrong. With `stashes` each layer's stash is
// kept there; without, one scratch stash is reused, each layer's dropped as the
// next one starts (a forward under remat keeps only the stage's input).
Tensor StageWork::run_layers(const Tensor& x, const Context& ctx, std::vector<Stash>* stashes) {
  if (stashes != nullptr) stashes->resize(layers_.size());
  Stash scratch;
  Tensor out;
  // On a device each check waits for the work: one per op, which names the
  // stage; on the host one per layer, which names the layer.
  const bool per_layer = device_ == nullptr;
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    Stash& stash = stashes != nullptr ? (*stashes)[l] : scratch;
    out = layers_[l]->forward(l == 0 ? x : out, ctx, stash);
    const bool last_layer = l + 1 == layers_.size();
    if ((per_layer || last_layer) && !all_finite(out)) {
      if (last() && last_layer) throw std::runtime_error("NaN or inf in loss");
      throw std::runtime_error(per_layer ? "layer '" + layers_[l]->name() + "' produced NaN or inf"
                                         : "a layer produced NaN or inf");
    }
  }
  return out;
}

Tensor StageWork::forward(int m, Tensor received) {
  const auto i = static_cast<std::size_t>(m);
  const Tensor& x = stage_ == 0 ? inputs_[i] : received;
  // Under remat only the boundary input stays live until R rebuilds the
  // stashes; otherwise every layer's stash stays for B.
  const bool recomputed = schedule_.recomputes(m);
  std::vector<Stash> stashes;
  Tensor y = run_layers(x, context(m), recomputed ? nullptr : &stashes);
  if (recomputed) {
    if (stage_ > 0) inputs_kept_[i] = std::move(received);
    input_kept_[i] = 1;
  } else {
    stashes_[i] = std::move(stashes);
  }
  if (last()) {
    if (y.rows() != 1 || y.cols() != 1) {
      throw std::runtime_error("the last layer must return a (1,1) loss, not (" +
                               std::to_string(y.rows()) + "," + std::to_string(y.cols()) + ")");
    }
    loss_ += static_cast<double>(y.host()(0, 0));
  }
  return y;
}

void StageWork::recompute(int m) {
  const auto i = static_cast<std::size_t>(m);
  if (input_kept_[i] == 0) {
    throw std::runtime_error(schedule_.recomputes(m) ? "no kept input: F must run before R"
                                                     : "R of a micro-batch that remat " +
                                                           std::string(to_string(schedule_.remat)) +
                                                           " does not recompute");
  }
  const Tensor& x = stage_ == 0 ? inputs_[i] : *inputs_kept_[i];
  std::vector<Stash> stashes;
  run_layers(x, context(m), &stashes);
  stashes_[i] = std::move(stashes);
}

Tensor StageWork::backward(int m, Tensor dy) {
  const auto i = static_cast<std::size_t>(m);
  if (!stashes_[i]) {
    throw std::runtime_error(schedule_.recomputes(m) ? "no stash: R must run before B"
                                                     : "no stash: F must run before B");
  }
  if (awaits_weight_[i] != 0) throw std::runtime_error("second B before its W");
  const std::vector<Stash>& stashes = *stashes_[i];
  for (std::size_t l = layers_.size(); l-- > 0;) {
    // A split backward leaves the parameters' gradients to W; the stash stays.
    dy = split_ ? layers_[l]->backward_input(dy, context(m), stashes[l], deferred_[i])
                : layers_[l]->backward(dy, context(m), stashes[l]);
    check_gradient(l, dy);
  }
  if (split_) {
    awaits_weight_[i] = 1;
  } else {
    release(i);
  }
  return dy;
}

// Names the layer whose input gradient is not finite (on a device, where each
// check waits for the work, the op's first layer only checks) or missing.
void StageWork::check_gradient(std::size_t layer, const Tensor& dy) const {
  const bool per_layer = device_ == nullptr;
  if ((per_layer || layer == 0) && !all_finite(dy)) {
    throw std::runtime_error(per_layer ? "layer '" + layers_[layer]->name() +
                                             "' produced a NaN or inf gradient"
                                       : "a layer produced a NaN or inf gradient");
  }
  if (dy.size() == 0 && (layer > 0 || stage_ > 0)) {
    throw std::runtime_error("layer '" + layers_[layer]->name() + "' returned no input gradient");
  }
}

void StageWork::weight(int m) {
  const auto i = static_cast<std::size_t>(m);
  if (!split_) throw std::runtime_error("W needs a schedule that splits the backward");
  if (awaits_weight_[i] == 0) throw std::runtime_error("no input gradient: B must run before W");
  for (const auto& work : deferred_[i]) work();
  deferred_[i].clear();
  awaits_weight_[i] = 0;
  release(i);
}

void StageWork::optimizer_step() {
  // Experts summed over the same group as the rest (one expert rank of
  // several shares) go in the same sum.
  const bool together = gradients_.experts == gradients_.group;
  std::vector<Param*> params, shared, experts;
  for (auto& layer : layers_) {
    for (Param* p : layer->params()) {
      params.push_back(p);
      (p->expert && !together ? experts : shared).push_back(p);
    }
  }
  if (gradients_.group != nullptr) sum_gradients(*gradients_.group, gradients_.share, shared);
  if (gradients_.experts != nullptr && !together && !experts.empty()) {
    sum_gradients(*gradients_.experts, gradients_.context, experts);
  }
  optimizer_.step(params);
}

void StageWork::release(std::size_t m) {
  stashes_[m].reset();
  inputs_kept_[m].reset();
  input_kept_[m] = 0;
}

}  // namespace pipescope::exec
