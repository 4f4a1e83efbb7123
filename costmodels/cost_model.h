#pragma once
// Cost models turn a layer and a micro-batch size into durations. The simulator
// sees a layer's times only through a CostModel (sim/engine/stage_costs.h sums them per
// stage); there are three: the analytic roofline below, the kernel-level model
// (costmodels/kernel_cost_model.h) and a measured profile (costmodels/profile.h).
// make_cost_model (sim/engine/simulator.h) picks one for a scenario: its profile if it
// carries one, else the cluster's cost_model ("kernels" or "analytic"; see
// docs/models.md, "What the models assume").

#include <cstdint>
#include <string_view>

#include "costmodels/device.h"
#include "costmodels/model.h"
#include "costmodels/units.h"
#include "costmodels/userbuffers.h"

namespace pipescope {

// Every time of one layer on one micro-batch, as the stage costs need them.
struct OpTimes {
  SimTime forward = 0;
  SimTime forward_kept = 0;  // forward_keeping_stash
  SimTime backward = 0;
  SimTime weight = 0;  // weight_grad
  SimTime recompute = 0;
  SimTime input = 0;          // input_grad
  SimTime core = 0;           // core_recompute
  SimTime core_backward = 0;  // core_backward
  // The times of the GEMMs beside which Transformer Engine's userbuffers
  // run the layer's tensor-parallel collectives (the kernel-level model;
  // zero elsewhere), which the engine prices (costmodels/userbuffers.h).
  TeGemmTimes te_gemms{};
  // What the host spends launching the forward's (and a recompute's), the
  // backward's and its weight gradients' kernels (the kernel-level model
  // with a framework that pays per launch; 0 otherwise). Where it exceeds
  // the device's time the device waits for the host (sim/engine/host_dispatch.h).
  SimTime host_forward = 0;
  SimTime host_backward = 0;
  SimTime host_weight = 0;
};

class CostModel {
 public:
  virtual ~CostModel() = default;
  virtual std::string_view name() const = 0;
  virtual std::string_view description() const = 0;
  // Time of one layer's forward, backward and recompute on a micro-batch of
  // `batch` samples.
  virtual SimTime forward(const LayerSpec& layer, std::int64_t batch) const = 0;
  virtual SimTime backward(const LayerSpec& layer, std::int64_t batch) const = 0;
  virtual SimTime recompute(const LayerSpec& layer, std::int64_t batch) const = 0;
  // A forward whose stash stays for the backward (a micro-batch that is not
  // rematerialized). forward() is one whose stash is dropped as it goes (the
  // stage keeps only its input). On a device where writing the stash to fresh
  // memory costs extra (a CPU's caches and page faults) the two differ;
  // forward() by default.
  virtual SimTime forward_keeping_stash(const LayerSpec& layer, std::int64_t batch) const {
    return forward(layer, batch);
  }
  // The part of backward() that computes the weight gradients, which schedules
  // that split the backward run as a separate W op. Half the backward by default:
  // for a layer of matrix products the input and the weight gradients are
  // products of the same size; a layer without parameters has no W.
  virtual SimTime weight_grad(const LayerSpec& layer, std::int64_t batch) const {
    return layer.params == 0 ? 0 : backward(layer, batch) / 2;
  }
  // The B op of a split backward: the input gradients, with the weight
  // gradients left for W. The rest of the backward by default; a measured
  // profile may say more, since a deferred W finds its operands out of the
  // caches and the two halves then cost more than the whole.
  virtual SimTime input_grad(const LayerSpec& layer, std::int64_t batch) const {
    return backward(layer, batch) - weight_grad(layer, batch);
  }
  // The forward of the layer's attention core alone (LayerSpec::
  // core_fwd_flops), which selective recomputation reruns before the
  // backward. By default the recompute's share by FLOPs.
  virtual SimTime core_recompute(const LayerSpec& layer, std::int64_t batch) const;
  // The attention core's share by FLOPs of `recompute`, a forward of
  // `layer`: what core_recompute takes of it; 0 without a core.
  static SimTime core_share_of(const LayerSpec& layer, SimTime recompute);
  // The backward of the layer's attention core alone (which context
  // parallelism's ring exchanges hide behind). By default twice its forward,
  // as the backward's FLOPs are.
  virtual SimTime core_backward(const LayerSpec& layer, std::int64_t batch) const {
    return 2 * core_recompute(layer, batch);
  }
  // The optimizer step over `params` parameters.
  virtual SimTime optimizer_step(std::int64_t params) const = 0;
  // All of the above for one layer at once; models that derive them together
  // answer in one call.
  virtual OpTimes op_times(const LayerSpec& layer, std::int64_t batch) const {
    return {forward(layer, batch),       forward_keeping_stash(layer, batch),
            backward(layer, batch),      weight_grad(layer, batch),
            recompute(layer, batch),     input_grad(layer, batch),
            core_recompute(layer, batch)};
  }
};

// Roofline with a per-op overhead:
//   t = op_overhead + max(F / (peak(dtype) * efficiency(F)), bytes / mem_bandwidth)
// (Williams, Waterman & Patterson, "Roofline", CACM 2009). Bytes moved by a layer's
// forward: its weights read once plus its input, output and stash written or read
// once per sample; the backward moves twice that (weights and activations read,
// weight and input gradients written). Recompute costs one forward. The optimizer
// step reads and writes the weights, gradients and state: 2 * params *
// bytes_per_param bytes, memory-bound.
class AnalyticCostModel final : public CostModel {
 public:
  AnalyticCostModel(Device device, DType dtype, double bytes_per_param);
  std::string_view name() const override { return "analytic"; }
  std::string_view description() const override;
  SimTime forward(const LayerSpec& layer, std::int64_t batch) const override;
  SimTime backward(const LayerSpec& layer, std::int64_t batch) const override;
  SimTime recompute(const LayerSpec& layer, std::int64_t batch) const override;
  SimTime optimizer_step(std::int64_t params) const override;

  // One roofline op of `flops` FLOPs that moves `bytes` bytes.
  SimTime op_time(Flops flops, double bytes) const;

 private:
  Device device_;
  DType dtype_;
  double bytes_per_param_;
};

}  // namespace pipescope
