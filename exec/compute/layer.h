#pragma once
// A layer with a real forward and backward. The runtime treats layers as black
// boxes: forward fills a Stash with what backward needs; backward turns the
// output's gradient into the input's and adds to the parameters' gradients.
// Rematerialization drops the stash after forward and calls forward again (with
// the same input) before backward.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "exec/compute/tensor.h"

namespace pipescope::exec {

// A parameter with its gradient (accumulated over micro-batches) and the
// optimizer's state (allocated by the optimizer): on the host, or for a device
// layer in its device's memory (the d_ fields; the host ones stay empty).
struct Param {
  std::string name;
  Matrix value;
  Matrix grad;  // same shape as value, zeroed by the optimizer step
  Matrix m;     // momentum / Adam first moment (empty until used)
  Matrix v;     // Adam second moment / RMSProp (empty until used)
  DeviceMatrix d_value, d_grad, d_m, d_v;
  // One expert-parallel rank's alone (ParamShape::expert).
  bool expert = false;

  bool on_device() const { return !d_value.empty(); }
};

// Context parallelism: the position in its whole sequence of row t (0 <= t
// < seq) of share `share` of `shares` of the sequence, seq rows: chunks share
// and 2 shares - 1 - share of 2 shares (the causal load balance), half of
// the rows from each.
inline std::int64_t share_position(std::int64_t t, std::int64_t seq, int share, int shares) {
  if (shares == 1) return t;
  const std::int64_t half = seq / 2;
  return t < half ? share * half + t : (2 * shares - 1 - share) * half + (t - half);
}

// What a micro-batch brings besides its activations.
struct Context {
  int batch = 1;  // sequences (samples) in the micro-batch
  int seq = 1;    // positions per sequence (1 for the mlp family)
  // Next-token targets (or class labels), batch*seq entries; read by the loss.
  const std::vector<std::int32_t>* targets = nullptr;
  // The loss of a micro-batch is sum(token losses) * loss_scale. With
  // loss_scale = 1 / (tokens in the whole mini-batch), the gradients summed over
  // micro-batches are those of the mini-batch's mean loss, whatever M is.
  double loss_scale = 1.0;
  // Context parallelism: the micro-batch is share `share` of `shares` of each
  // sequence, its chunks `share` and 2 shares - 1 - share of 2 shares (the
  // causal load balance); seq is the share's length, half of it from each.
  int share = 0;
  int shares = 1;
  // The position in its whole sequence of the share's row t (0 <= t < seq).
  std::int64_t position(std::int64_t t) const { return share_position(t, seq, share, shares); }
  // Positions in the whole sequence.
  std::int64_t whole_seq() const { return std::int64_t{seq} * shares; }
};

// Whatever a layer keeps between forward and backward: host matrices, or a
// device layer's device buffers.
struct Stash {
  std::vector<Matrix> tensors;
  std::vector<std::int32_t> ints;
  std::vector<DeviceMatrix> device;
  std::vector<DeviceArray<std::int32_t>> device_ints;
  void clear() {
    tensors.clear();
    ints.clear();
    device.clear();
    device_ints.clear();
  }
};

// The weight-gradient work a split backward leaves for the W op: closures that
// add to Param::grad, reading the layer's stash, which must live until they run.
using WeightGradQueue = std::vector<std::function<void()>>;

class Layer {
 public:
  virtual ~Layer() = default;
  virtual const std::string& name() const = 0;
  // Where it computes: null for the host (Eigen), else the device its
  // parameters and outputs live on.
  virtual Device* device() const { return nullptr; }
  // x: the layer's input (for the embedding, token ids as floats, (b*s, 1), on
  // the host for every backend). Returns the output; the loss head returns its
  // loss as a (1, 1) host matrix.
  virtual Tensor forward(const Tensor& x, const Context& ctx, Stash& stash) const = 0;
  // dy: the gradient of the loss with respect to the output (for the loss head,
  // (1, 1) on the host, holding 1). Returns the gradient with respect to x
  // (empty for the embedding, whose input is token ids) and adds to each
  // Param's gradient.
  virtual Tensor backward(const Tensor& dy, const Context& ctx, const Stash& stash) = 0;
  // B of a split backward (zero-bubble schedules): returns backward's dx and
  // appends to `deferred` the work that adds the parameters' gradients, for the
  // W op to run later, the stash still alive. Running it adds exactly what
  // backward adds. The default, for layers without parameters, is backward.
  virtual Tensor backward_input(const Tensor& dy, const Context& ctx, const Stash& stash,
                                WeightGradQueue& /*deferred*/) {
    return backward(dy, ctx, stash);
  }
  virtual std::vector<Param*> params() = 0;
  std::int64_t param_count();
  // Drops what a failed step left in the layer's exchanges with other ranks
  // (a context-parallel ring's blocks posted and never taken), once no rank
  // runs; the next step starts clean. Default: nothing to drop.
  virtual void reset_exchanges() {}
};

using LayerList = std::vector<std::unique_ptr<Layer>>;

// Sets the parameter's gradient to 0, where it lives.
void zero_grad(Param& p);
// The parameter's value on the host (a copy from its device).
Matrix host_value(const Param& p);

}  // namespace pipescope::exec
