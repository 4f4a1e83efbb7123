#include "exec/compute/device_layers.h"

#include <cmath>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "exec/compute/layers.h"

namespace pipescope::exec {

namespace {

std::string str(Index i) {
  return std::to_string(i);
}

int as_int(Index i) {
  return static_cast<int>(i);
}

// ---------------------------------------------------------------- building blocks

// out (rows, out) = x (rows, in) w (in, out) [+ b (1, out)]
DeviceMatrix linear(Device& dev, const DeviceMatrix& x, const DeviceMatrix& w,
                    const DeviceMatrix* b) {
  DeviceMatrix out = dev.matrix(x.rows, w.cols);
  dev.gemm(false, false, as_int(x.rows), as_int(w.cols), as_int(x.cols), 1.0f, x.data(), w.data(),
           0.0f, out.data());
  if (b != nullptr) dev.add_bias(out.data(), b->data(), as_int(out.rows), as_int(out.cols));
  return out;
}

// dx (rows, in) = dout (rows, out) w^T
DeviceMatrix linear_input(Device& dev, const DeviceMatrix& dout, const DeviceMatrix& w) {
  DeviceMatrix dx = dev.matrix(dout.rows, w.rows);
  dev.gemm(false, true, as_int(dout.rows), as_int(w.rows), as_int(dout.cols), 1.0f, dout.data(),
           w.data(), 0.0f, dx.data());
  return dx;
}

// dw (in, out) += x^T dout; db (1, out) += the column sums of dout.
void linear_params(Device& dev, const DeviceMatrix& dout, const DeviceMatrix& x, DeviceMatrix& dw,
                   DeviceMatrix* db) {
  dev.gemm(true, false, as_int(x.cols), as_int(dout.cols), as_int(x.rows), 1.0f, x.data(),
           dout.data(), 1.0f, dw.data());
  if (db != nullptr) {
    dev.column_sums_add(db->data(), dout.data(), as_int(dout.rows), as_int(dout.cols));
  }
}

DeviceMatrix layernorm(Device& dev, const DeviceMatrix& x, const DeviceMatrix& gain,
                       const DeviceMatrix& bias, DeviceMatrix& stats) {
  DeviceMatrix out = dev.matrix(x.rows, x.cols);
  stats = dev.matrix(x.rows, 2);
  dev.layernorm_forward(out.data(), stats.data(), x.data(), gain.data(), bias.data(),
                        as_int(x.rows), as_int(x.cols));
  return out;
}

DeviceMatrix layernorm_input(Device& dev, const DeviceMatrix& dout, const DeviceMatrix& x,
                             const DeviceMatrix& stats, const DeviceMatrix& gain) {
  DeviceMatrix dx = dev.matrix(x.rows, x.cols);
  dev.layernorm_backward_input(dx.data(), dout.data(), x.data(), stats.data(), gain.data(),
                               as_int(x.rows), as_int(x.cols));
  return dx;
}

DeviceMatrix sum(Device& dev, const DeviceMatrix& a, const DeviceMatrix& b) {
  DeviceMatrix out = dev.matrix(a.rows, a.cols);
  dev.add(out.data(), a.data(), b.data(), a.size());
  return out;
}

// A layer input as this device's matrix: a host tensor is uploaded; one of
// another device is an error (the runtime copies payloads across devices).
// Throws std::invalid_argument unless it is (ctx.batch * ctx.seq, cols).
DeviceMatrix device_input(Device& dev, const Tensor& x, const Context& ctx, Index cols,
                          const std::string& layer) {
  const Index rows = Index{ctx.batch} * Index{ctx.seq};
  if (ctx.batch < 1 || ctx.seq < 1 || x.rows() != rows || x.cols() != cols) {
    throw std::invalid_argument(layer + ": expected a (" + str(rows) + ", " + str(cols) +
                                ") input for batch " + str(ctx.batch) + " x seq " + str(ctx.seq) +
                                ", got (" + str(x.rows()) + ", " + str(x.cols()) + ")");
  }
  if (!x.on_device()) return upload(dev, x.host());
  if (x.device().device() != &dev) {
    throw std::invalid_argument(layer + ": its input is on " + x.device().device()->name() +
                                ", the layer on " + dev.name());
  }
  return x.device();
}

// Targets (rows entries in [0, classes)) on the device.
DeviceArray<std::int32_t> device_targets(Device& dev, const Context& ctx, Index rows,
                                         Index classes) {
  check_targets(ctx.targets, rows, classes);
  DeviceArray<std::int32_t> t = dev.ints(rows);
  dev.upload(ctx.targets->data(), rows, t.data());
  return t;
}

// ---------------------------------------------------------------- the base

// Parameters uploaded from a host layer, gradients zeroed; forward and the two
// backwards in terms of run_backward, which gets the W queue or null.
class DeviceLayer : public Layer {
 public:
  DeviceLayer(std::string name, std::shared_ptr<Device> device, Layer& host)
      : name_(std::move(name)), dev_(std::move(device)) {
    for (const Param* p : host.params()) {
      Param q;
      q.name = p->name;
      q.d_value = upload(*dev_, p->value);
      q.d_grad = dev_->matrix(p->value.rows(), p->value.cols());
      dev_->fill(q.d_grad.data(), q.d_grad.size(), 0.0f);
      params_.push_back(std::move(q));
    }
  }
  const std::string& name() const override { return name_; }
  Device* device() const override { return dev_.get(); }
  std::vector<Param*> params() override {
    std::vector<Param*> out;
    for (Param& p : params_) out.push_back(&p);
    return out;
  }
  Tensor backward(const Tensor& dy, const Context& ctx, const Stash& stash) override {
    return run_backward(dy, ctx, stash, nullptr);
  }
  Tensor backward_input(const Tensor& dy, const Context& ctx, const Stash& stash,
                        WeightGradQueue& deferred) override {
    return run_backward(dy, ctx, stash, &deferred);
  }

 protected:
  virtual Tensor run_backward(const Tensor& dy, const Context& ctx, const Stash& stash,
                              WeightGradQueue* deferred) = 0;
  Device& dev() const { return *dev_; }
  const DeviceMatrix& w(std::size_t i) const { return params_[i].d_value; }
  DeviceMatrix& g(std::size_t i) { return params_[i].d_grad; }
  // Weight-gradient work: now, or queued for the W op of a split backward. The
  // work holds handles to the buffers it reads, which live until it has run.
  static void weight_work(WeightGradQueue* deferred, std::function<void()> work) {
    if (deferred == nullptr) {
      work();
    } else {
      deferred->push_back(std::move(work));
    }
  }
  // The linear and LayerNorm parameter halves, now or in W.
  void linear_params_of(WeightGradQueue* deferred, const DeviceMatrix& dout, const DeviceMatrix& x,
                        std::size_t weight, std::optional<std::size_t> bias) {
    weight_work(deferred, [this, dout, x, weight, bias] {
      linear_params(dev(), dout, x, g(weight), bias ? &g(*bias) : nullptr);
    });
  }
  void layernorm_params_of(WeightGradQueue* deferred, const DeviceMatrix& dout,
                           const DeviceMatrix& x, const DeviceMatrix& stats, std::size_t gain,
                           std::size_t bias) {
    weight_work(deferred, [this, dout, x, stats, gain, bias] {
      dev().layernorm_backward_params(g(gain).data(), g(bias).data(), dout.data(), x.data(),
                                      stats.data(), as_int(x.rows), as_int(x.cols));
    });
  }

 private:
  std::string name_;
  std::shared_ptr<Device> dev_;
  std::vector<Param> params_;
};

// ---------------------------------------------------------------- embedding

class DeviceEmbedding final : public DeviceLayer {
 public:
  DeviceEmbedding(Embedding& host, std::shared_ptr<Device> device)
      : DeviceLayer(host.name(), std::move(device), host), math_(host.math()) {
    if (!math_.learned_positions()) {
      sinusoid_ = upload(dev(), math_.sinusoid().cast<float>());
    }
  }

  Tensor forward(const Tensor& x, const Context& ctx, Stash& stash) const override {
    const Index rows = Index{ctx.batch} * Index{ctx.seq};
    if (ctx.batch < 1 || ctx.seq < 1 || x.rows() != rows || x.cols() != 1) {
      throw std::invalid_argument("embed: expected a (" + str(rows) + ", 1) input of token ids");
    }
    if (ctx.seq > math_.seq_len()) {
      throw std::invalid_argument("embed: sequences of " + str(ctx.seq) +
                                  " positions are longer than seq_len " + str(math_.seq_len()));
    }
    const Matrix host = to_host(x);
    std::vector<std::int32_t> ids(static_cast<std::size_t>(rows));
    for (Index r = 0; r < rows; ++r) {
      const double id = static_cast<double>(host(r, 0));
      if (!(id >= 0.0 && id < static_cast<double>(math_.vocab()) && id == std::floor(id))) {
        throw std::invalid_argument("embed: token id " + std::to_string(id) +
                                    " is not an integer in [0, " + str(math_.vocab()) + ")");
      }
      ids[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(id);
    }
    stash.clear();
    DeviceArray<std::int32_t> d_ids = dev().ints(rows);
    dev().upload(ids.data(), rows, d_ids.data());
    DeviceMatrix out = dev().matrix(rows, math_.d_model());
    const float* positions = math_.learned_positions() ? w(1).data() : sinusoid_.data();
    dev().embedding_forward(out.data(), d_ids.data(), w(0).data(), positions, as_int(rows), ctx.seq,
                            as_int(math_.d_model()));
    stash.device_ints = {std::move(d_ids)};
    return out;
  }

 protected:
  // All of it is weight gradient: the input is token ids.
  Tensor run_backward(const Tensor& dy, const Context& ctx, const Stash& stash,
                      WeightGradQueue* deferred) override {
    const DeviceMatrix d = device_input(dev(), dy, ctx, math_.d_model(), "embed");
    const DeviceArray<std::int32_t> ids = stash.device_ints.at(0);
    weight_work(deferred, [this, d, ids, seq = ctx.seq] {
      dev().embedding_backward(g(0).data(), math_.learned_positions() ? g(1).data() : nullptr,
                               ids.data(), d.data(), as_int(d.rows), seq, as_int(d.cols));
    });
    return Matrix();
  }

 private:
  EmbeddingMath math_;
  DeviceMatrix sinusoid_;  // (seq_len, h) when the positions are not learned
};

// ---------------------------------------------------------------- transformer block

// Stash order of the device block.
enum BlockStash : std::size_t {
  kX,
  kLn1Stats,
  kLn1Out,
  kQ,
  kK,
  kV,
  kProbs,
  kAttn,
  kX2,
  kLn2Stats,
  kLn2Out,
  kFc1Out,
  kGeluOut,
  kBlockStashSize,
};

class DeviceTransformerBlock final : public DeviceLayer {
 public:
  DeviceTransformerBlock(TransformerBlock& host, std::shared_ptr<Device> device)
      : DeviceLayer(host.name(), std::move(device), host), math_(host.math()) {}

  // x is (b*s, h); so is the output.
  Tensor forward(const Tensor& in, const Context& ctx, Stash& stash) const override {
    Device& d = dev();
    const AttentionShape sh = math_.attention(ctx);
    const DeviceMatrix x = device_input(d, in, ctx, math_.d_model(), "transformer block");
    stash.clear();
    std::vector<DeviceMatrix>& st = stash.device;
    st.assign(kBlockStashSize, DeviceMatrix());
    st[kX] = x;
    st[kLn1Out] = layernorm(d, x, w(kLn1Gain), w(kLn1Bias), st[kLn1Stats]);
    const DeviceMatrix qkv = linear(d, st[kLn1Out], w(kQkvWeight), &w(kQkvBias));
    const Index heads = sh.batch * sh.heads;  // s x dh blocks
    for (const BlockStash i : {kQ, kK, kV}) st[i] = d.matrix(heads * sh.seq, sh.head_dim);
    d.split_qkv(st[kQ].data(), st[kK].data(), st[kV].data(), qkv.data(), sh);
    // P = causal softmax(Q K^T / sqrt(dh)), then O = P V, per sequence and head.
    const int s = as_int(sh.seq), dh = as_int(sh.head_dim), n = as_int(heads);
    const std::int64_t block = std::int64_t{s} * dh, square = std::int64_t{s} * s;
    st[kProbs] = d.matrix(heads * sh.seq, sh.seq);
    d.gemm_strided_batched(false, true, s, s, dh, 1.0f, st[kQ].data(), block, st[kK].data(), block,
                           0.0f, st[kProbs].data(), square, n);
    d.causal_softmax_forward(st[kProbs].data(), st[kProbs].data(), scale(sh), n * s, s);
    DeviceMatrix o = d.matrix(heads * sh.seq, sh.head_dim);
    d.gemm_strided_batched(false, false, s, dh, s, 1.0f, st[kProbs].data(), square, st[kV].data(),
                           block, 0.0f, o.data(), block, n);
    st[kAttn] = d.matrix(x.rows, sh.width());
    d.merge_heads(st[kAttn].data(), o.data(), sh);
    st[kX2] = sum(d, x, linear(d, st[kAttn], w(kProjWeight), &w(kProjBias)));
    st[kLn2Out] = layernorm(d, st[kX2], w(kLn2Gain), w(kLn2Bias), st[kLn2Stats]);
    st[kFc1Out] = linear(d, st[kLn2Out], w(kFc1Weight), &w(kFc1Bias));
    st[kGeluOut] = d.matrix(st[kFc1Out].rows, st[kFc1Out].cols);
    d.gelu_forward(st[kGeluOut].data(), st[kFc1Out].data(), st[kFc1Out].size());
    return sum(d, st[kX2], linear(d, st[kGeluOut], w(kFc2Weight), &w(kFc2Bias)));
  }

 protected:
  Tensor run_backward(const Tensor& grad, const Context& ctx, const Stash& stash,
                      WeightGradQueue* deferred) override {
    Device& d = dev();
    const AttentionShape sh = math_.attention(ctx);
    const std::vector<DeviceMatrix>& st = stash.device;
    const DeviceMatrix dy = device_input(d, grad, ctx, math_.d_model(), "transformer block");
    // The residuals pass dy straight through to x2 and dx2 to x.
    linear_params_of(deferred, dy, st[kGeluOut], kFc2Weight, kFc2Bias);
    const DeviceMatrix dgelu = linear_input(d, dy, w(kFc2Weight));
    DeviceMatrix dfc1 = d.matrix(dgelu.rows, dgelu.cols);
    d.gelu_backward(dfc1.data(), dgelu.data(), st[kFc1Out].data(), dfc1.size());
    linear_params_of(deferred, dfc1, st[kLn2Out], kFc1Weight, kFc1Bias);
    const DeviceMatrix dln2 = linear_input(d, dfc1, w(kFc1Weight));
    layernorm_params_of(deferred, dln2, st[kX2], st[kLn2Stats], kLn2Gain, kLn2Bias);
    const DeviceMatrix dx2 =
        sum(d, dy, layernorm_input(d, dln2, st[kX2], st[kLn2Stats], w(kLn2Gain)));
    linear_params_of(deferred, dx2, st[kAttn], kProjWeight, kProjBias);
    const DeviceMatrix dattn = linear_input(d, dx2, w(kProjWeight));
    // dV = P^T dO, dP = dO V^T, dS = softmax backward, dQ = dS K, dK = dS^T Q.
    const Index heads = sh.batch * sh.heads;
    const int s = as_int(sh.seq), dh = as_int(sh.head_dim), n = as_int(heads);
    const std::int64_t block = std::int64_t{s} * dh, square = std::int64_t{s} * s;
    DeviceMatrix dout = d.matrix(heads * sh.seq, sh.head_dim);
    d.split_heads(dout.data(), dattn.data(), sh);
    DeviceMatrix dv = d.matrix(heads * sh.seq, sh.head_dim);
    d.gemm_strided_batched(true, false, s, dh, s, 1.0f, st[kProbs].data(), square, dout.data(),
                           block, 0.0f, dv.data(), block, n);
    DeviceMatrix dprobs = d.matrix(heads * sh.seq, sh.seq);
    d.gemm_strided_batched(false, true, s, s, dh, 1.0f, dout.data(), block, st[kV].data(), block,
                           0.0f, dprobs.data(), square, n);
    DeviceMatrix dscores = d.matrix(heads * sh.seq, sh.seq);
    d.causal_softmax_backward(dscores.data(), st[kProbs].data(), dprobs.data(), scale(sh), n * s,
                              s);
    DeviceMatrix dq = d.matrix(heads * sh.seq, sh.head_dim);
    d.gemm_strided_batched(false, false, s, dh, s, 1.0f, dscores.data(), square, st[kK].data(),
                           block, 0.0f, dq.data(), block, n);
    DeviceMatrix dk = d.matrix(heads * sh.seq, sh.head_dim);
    d.gemm_strided_batched(true, false, s, dh, s, 1.0f, dscores.data(), square, st[kQ].data(),
                           block, 0.0f, dk.data(), block, n);
    DeviceMatrix dqkv = d.matrix(dy.rows, sh.width() + 2 * sh.kv_width());
    d.merge_qkv_grad(dqkv.data(), dq.data(), dk.data(), dv.data(), sh);
    linear_params_of(deferred, dqkv, st[kLn1Out], kQkvWeight, kQkvBias);
    const DeviceMatrix dln1 = linear_input(d, dqkv, w(kQkvWeight));
    layernorm_params_of(deferred, dln1, st[kX], st[kLn1Stats], kLn1Gain, kLn1Bias);
    return sum(d, dx2, layernorm_input(d, dln1, st[kX], st[kLn1Stats], w(kLn1Gain)));
  }

 private:
  static float scale(const AttentionShape& sh) {
    return 1.0f / std::sqrt(static_cast<float>(sh.head_dim));
  }
  TransformerBlockMath math_;
};

// ---------------------------------------------------------------- loss heads

// The loss of rows of logits against ctx.targets: the softmax into probs, the
// per-row losses summed on the host in double and scaled, as the host heads do.
double crossentropy(Device& d, const DeviceMatrix& logits, const DeviceArray<std::int32_t>& t,
                    DeviceMatrix& probs, double loss_scale) {
  probs = d.matrix(logits.rows, logits.cols);
  DeviceMatrix losses = d.matrix(logits.rows, 1);
  d.crossentropy_forward(probs.data(), losses.data(), logits.data(), t.data(), as_int(logits.rows),
                         as_int(logits.cols));
  const Matrix host = download(losses);
  double loss = 0.0;
  for (Index r = 0; r < host.rows(); ++r) loss += static_cast<double>(host(r, 0));
  return loss * loss_scale;
}

DeviceMatrix crossentropy_grad(Device& d, const DeviceMatrix& probs,
                               const DeviceArray<std::int32_t>& t, const Tensor& dy,
                               const Context& ctx) {
  const auto scale = static_cast<float>(ctx.loss_scale * static_cast<double>(to_host(dy)(0, 0)));
  DeviceMatrix dlogits = d.matrix(probs.rows, probs.cols);
  d.crossentropy_backward(dlogits.data(), probs.data(), t.data(), scale, as_int(probs.rows),
                          as_int(probs.cols));
  return dlogits;
}

// Final LayerNorm, projection h -> V without bias, cross-entropy.
// Stash: input, LayerNorm stats, LayerNorm output, softmax; the targets.
class DeviceLmHead final : public DeviceLayer {
 public:
  DeviceLmHead(LmHead& host, std::shared_ptr<Device> device)
      : DeviceLayer(host.name(), std::move(device), host), math_(host.math()) {}

  Tensor forward(const Tensor& in, const Context& ctx, Stash& stash) const override {
    Device& d = dev();
    const DeviceMatrix x = device_input(d, in, ctx, math_.d_model(), "head");
    DeviceArray<std::int32_t> targets = device_targets(d, ctx, x.rows, math_.vocab());
    stash.clear();
    std::vector<DeviceMatrix>& st = stash.device;
    st.assign(4, DeviceMatrix());
    st[0] = x;
    st[2] = layernorm(d, x, w(0), w(1), st[1]);
    const DeviceMatrix logits = linear(d, st[2], w(2), nullptr);
    const double loss = crossentropy(d, logits, targets, st[3], ctx.loss_scale);
    stash.device_ints = {std::move(targets)};
    return Matrix::Constant(1, 1, static_cast<float>(loss));
  }

 protected:
  Tensor run_backward(const Tensor& dy, const Context& ctx, const Stash& stash,
                      WeightGradQueue* deferred) override {
    Device& d = dev();
    const std::vector<DeviceMatrix>& st = stash.device;
    const DeviceMatrix dlogits = crossentropy_grad(d, st[3], stash.device_ints.at(0), dy, ctx);
    linear_params_of(deferred, dlogits, st[2], 2, std::nullopt);
    const DeviceMatrix dln = linear_input(d, dlogits, w(2));
    layernorm_params_of(deferred, dln, st[0], st[1], 0, 1);
    return layernorm_input(d, dln, st[0], st[1], w(0));
  }

 private:
  LmHeadMath math_;
};

// Residual MLP block x + W2 relu(W1 LN(x) + b1) + b2.
// Stash: input, LayerNorm stats, LayerNorm output, fc1 output, relu output.
class DeviceMlpBlock final : public DeviceLayer {
 public:
  DeviceMlpBlock(MlpBlock& host, std::shared_ptr<Device> device)
      : DeviceLayer(host.name(), std::move(device), host), math_(host.math()) {}

  Tensor forward(const Tensor& in, const Context& ctx, Stash& stash) const override {
    Device& d = dev();
    const DeviceMatrix x = device_input(d, in, ctx, math_.d_model(), "mlp block");
    stash.clear();
    std::vector<DeviceMatrix>& st = stash.device;
    st.assign(5, DeviceMatrix());
    st[0] = x;
    st[2] = layernorm(d, x, w(0), w(1), st[1]);
    st[3] = linear(d, st[2], w(2), &w(3));
    st[4] = d.matrix(st[3].rows, st[3].cols);
    d.relu_forward(st[4].data(), st[3].data(), st[3].size());
    return sum(d, x, linear(d, st[4], w(4), &w(5)));
  }

 protected:
  Tensor run_backward(const Tensor& grad, const Context& ctx, const Stash& stash,
                      WeightGradQueue* deferred) override {
    Device& d = dev();
    const std::vector<DeviceMatrix>& st = stash.device;
    const DeviceMatrix dy = device_input(d, grad, ctx, math_.d_model(), "mlp block");
    linear_params_of(deferred, dy, st[4], 4, 5);
    const DeviceMatrix drelu = linear_input(d, dy, w(4));
    DeviceMatrix dfc1 = d.matrix(drelu.rows, drelu.cols);
    d.relu_backward(dfc1.data(), drelu.data(), st[3].data(), dfc1.size());
    linear_params_of(deferred, dfc1, st[2], 2, 3);
    const DeviceMatrix dln = linear_input(d, dfc1, w(2));
    layernorm_params_of(deferred, dln, st[0], st[1], 0, 1);
    return sum(d, dy, layernorm_input(d, dln, st[0], st[1], w(0)));
  }

 private:
  MlpBlockMath math_;
};

// Linear d -> classes with bias, cross-entropy. Stash: input, softmax; the targets.
class DeviceClassifierHead final : public DeviceLayer {
 public:
  DeviceClassifierHead(ClassifierHead& host, std::shared_ptr<Device> device)
      : DeviceLayer(host.name(), std::move(device), host), math_(host.math()) {}

  Tensor forward(const Tensor& in, const Context& ctx, Stash& stash) const override {
    Device& d = dev();
    const DeviceMatrix x = device_input(d, in, ctx, math_.d_model(), "head");
    DeviceArray<std::int32_t> targets = device_targets(d, ctx, x.rows, math_.classes());
    stash.clear();
    stash.device.assign(2, DeviceMatrix());
    stash.device[0] = x;
    const DeviceMatrix logits = linear(d, x, w(0), &w(1));
    const double loss = crossentropy(d, logits, targets, stash.device[1], ctx.loss_scale);
    stash.device_ints = {std::move(targets)};
    return Matrix::Constant(1, 1, static_cast<float>(loss));
  }

 protected:
  Tensor run_backward(const Tensor& dy, const Context& ctx, const Stash& stash,
                      WeightGradQueue* deferred) override {
    Device& d = dev();
    const DeviceMatrix dlogits =
        crossentropy_grad(d, stash.device[1], stash.device_ints.at(0), dy, ctx);
    linear_params_of(deferred, dlogits, stash.device[0], 0, 1);
    return linear_input(d, dlogits, w(0));
  }

 private:
  ClassifierHeadMath math_;
};

template <class Host, class DeviceForm>
std::unique_ptr<Layer> convert(Layer& layer, const std::shared_ptr<Device>& device) {
  if (auto* host = dynamic_cast<Host*>(&layer)) {
    return std::make_unique<DeviceForm>(*host, device);
  }
  return nullptr;
}

}  // namespace

LayerList to_device(LayerList host_layers, const std::shared_ptr<Device>& device) {
  if (!device) throw std::invalid_argument("to_device: no device");
  LayerList out;
  for (auto& layer : host_layers) {
    std::unique_ptr<Layer> d = convert<Embedding, DeviceEmbedding>(*layer, device);
    if (!d) d = convert<TransformerBlock, DeviceTransformerBlock>(*layer, device);
    if (!d) d = convert<LmHead, DeviceLmHead>(*layer, device);
    if (!d) d = convert<MlpBlock, DeviceMlpBlock>(*layer, device);
    if (!d) d = convert<ClassifierHead, DeviceClassifierHead>(*layer, device);
    if (!d) {
      throw std::invalid_argument("layer '" + layer->name() + "' has no device form");
    }
    out.push_back(std::move(d));
  }
  return out;
}

Device* stage_device(const LayerList& layers) {
  if (layers.empty()) return nullptr;
  Device* first = layers.front()->device();
  for (const auto& layer : layers) {
    if (layer->device() != first) {
      throw std::invalid_argument("layer '" + layer->name() + "' is on " +
                                  (layer->device() ? layer->device()->name() : "the host") +
                                  ", the stage's first layer on " +
                                  (first ? first->name() : "the host"));
    }
  }
  return first;
}

}  // namespace pipescope::exec
