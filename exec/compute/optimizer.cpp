#include "exec/compute/optimizer.h"

#include <cmath>
#include <string>

#include "costmodels/check.h"
#include "exec/compute/device.h"

namespace pipescope::exec {
namespace {

// A slot (Param::m or Param::v) starts at zero the first time it is used.
void ensure_slot(Matrix& slot, const Matrix& like) {
  if (slot.rows() != like.rows() || slot.cols() != like.cols()) {
    slot = Matrix::Zero(like.rows(), like.cols());
  }
}

}  // namespace

// Update rules, with g the gradient accumulated over the micro-batches:
//   sgd       w -= lr * g
//   momentum  m = mu * m + g;  w -= lr * m                 (PyTorch's SGD with momentum)
//   rmsprop   v = b2 * v + (1 - b2) * g^2;  w -= lr * g / (sqrt(v) + eps)
//   adam      m = b1 * m + (1 - b1) * g;  v = b2 * v + (1 - b2) * g^2;
//             w -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)   (Kingma & Ba 2015)
void ParamOptimizer::step(const std::vector<Param*>& params) {
  ++steps_;
  const auto lr = static_cast<float>(config_.learning_rate);
  const auto mu = static_cast<float>(config_.momentum);
  const auto b1 = static_cast<float>(config_.beta1);
  const auto b2 = static_cast<float>(config_.beta2);
  const auto eps = static_cast<float>(config_.epsilon);
  const double t = static_cast<double>(steps_);
  const auto correct1 = static_cast<float>(1.0 - std::pow(config_.beta1, t));
  const auto correct2 = static_cast<float>(1.0 - std::pow(config_.beta2, t));
  for (Param* p : params) {
    PS_CHECK(p != nullptr, "null parameter");
    if (p->on_device()) {
      device_step(*p, lr, mu, b1, b2, eps, correct1, correct2);
      continue;
    }
    // A parameter whose gradient was never allocated received no gradient.
    if (p->grad.size() == 0) continue;
    PS_CHECK(p->grad.rows() == p->value.rows() && p->grad.cols() == p->value.cols(),
             "gradient of " + p->name + " has the wrong shape");
    auto w = p->value.array();
    const auto g = p->grad.array();
    switch (config_.kind) {
      case Optimizer::kSgd:
        w -= lr * g;
        break;
      case Optimizer::kMomentum:
        ensure_slot(p->m, p->value);
        p->m.array() = mu * p->m.array() + g;
        w -= lr * p->m.array();
        break;
      case Optimizer::kRmsprop:
        ensure_slot(p->v, p->value);
        p->v.array() = b2 * p->v.array() + (1.0f - b2) * g.square();
        w -= lr * g / (p->v.array().sqrt() + eps);
        break;
      case Optimizer::kAdam:
        ensure_slot(p->m, p->value);
        ensure_slot(p->v, p->value);
        p->m.array() = b1 * p->m.array() + (1.0f - b1) * g;
        p->v.array() = b2 * p->v.array() + (1.0f - b2) * g.square();
        w -= lr * (p->m.array() / correct1) / ((p->v.array() / correct2).sqrt() + eps);
        break;
    }
    p->grad.setZero();
  }
}

// The same rules on the parameter's device (Device's *_update operations).
void ParamOptimizer::device_step(Param& p, float lr, float mu, float b1, float b2, float eps,
                                 float correct1, float correct2) const {
  if (p.d_grad.empty()) return;
  PS_CHECK(p.d_grad.rows == p.d_value.rows && p.d_grad.cols == p.d_value.cols,
           "gradient of " + p.name + " has the wrong shape");
  Device& dev = *p.d_value.device();
  const std::int64_t n = p.d_value.size();
  const auto slot = [&](DeviceMatrix& s) {
    if (s.empty()) {
      s = dev.matrix(p.d_value.rows, p.d_value.cols);
      dev.fill(s.data(), n, 0.0f);
    }
    return s.data();
  };
  float* w = p.d_value.data();
  const float* g = p.d_grad.data();
  switch (config_.kind) {
    case Optimizer::kSgd:
      dev.sgd_update(w, g, n, lr);
      break;
    case Optimizer::kMomentum:
      dev.momentum_update(w, slot(p.d_m), g, n, lr, mu);
      break;
    case Optimizer::kRmsprop:
      dev.rmsprop_update(w, slot(p.d_v), g, n, lr, b2, eps);
      break;
    case Optimizer::kAdam:
      dev.adam_update(w, slot(p.d_m), slot(p.d_v), g, n, lr, b1, b2, eps, correct1, correct2);
      break;
  }
  dev.fill(p.d_grad.data(), n, 0.0f);
}

}  // namespace pipescope::exec
