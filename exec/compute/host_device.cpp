#include "exec/compute/host_device.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>

#include "exec/compute/device_checks.h"

namespace pipescope::exec {

namespace {

using Map = Eigen::Map<Matrix>;
using ConstMap = Eigen::Map<const Matrix>;
using Clock = std::chrono::steady_clock;

class HostFence final : public Fence {
 public:
  HostFence() : time(Clock::now()) {}
  void synchronize() const override {}
  const Clock::time_point time;
};

const HostFence& host_fence(const Fence& f) {
  const auto* h = dynamic_cast<const HostFence*>(&f);
  if (h == nullptr) throw std::invalid_argument("HostDevice: a fence of another kind of device");
  return *h;
}

constexpr DeviceChecks check("HostDevice");

// Allocations carry their size in a header of one alignment unit.
constexpr std::size_t kAlign = 64;

}  // namespace

void* HostDevice::allocate(std::int64_t bytes) {
  check.allocation(bytes);
  const std::size_t total = (static_cast<std::size_t>(bytes) + 2 * kAlign - 1) / kAlign * kAlign;
  void* base = std::aligned_alloc(kAlign, total);
  if (base == nullptr) throw std::bad_alloc();
  *static_cast<std::int64_t*>(base) = bytes;
  bytes_in_use_.fetch_add(bytes);
  return static_cast<char*>(base) + kAlign;
}

void HostDevice::release(void* p) noexcept {
  if (p == nullptr) return;
  void* base = static_cast<char*>(p) - kAlign;
  bytes_in_use_.fetch_sub(*static_cast<std::int64_t*>(base));
  std::free(base);
}

void HostDevice::upload(const float* src, std::int64_t n, float* dst) {
  check.size(n, "upload");
  if (n > 0) std::memcpy(dst, src, static_cast<std::size_t>(n) * sizeof(float));
}

void HostDevice::upload(const std::int32_t* src, std::int64_t n, std::int32_t* dst) {
  check.size(n, "upload");
  if (n > 0) std::memcpy(dst, src, static_cast<std::size_t>(n) * sizeof(std::int32_t));
}

void HostDevice::download(const float* src, std::int64_t n, float* dst) {
  check.size(n, "download");
  if (n > 0) std::memcpy(dst, src, static_cast<std::size_t>(n) * sizeof(float));
}

void HostDevice::copy_from(const DeviceMatrix& src, DeviceMatrix& dst) {
  check.require(src.rows == dst.rows && src.cols == dst.cols, "copy_from", "shapes differ");
  check.require(dynamic_cast<HostDevice*>(src.device()) != nullptr || src.empty(), "copy_from",
                "the source is not host memory");
  if (src.size() > 0) {
    std::memcpy(dst.data(), src.data(), static_cast<std::size_t>(src.size()) * sizeof(float));
  }
}

std::shared_ptr<Fence> HostDevice::fence() {
  return std::make_shared<HostFence>();
}

void HostDevice::wait(const Fence& fence) {
  fence.synchronize();  // a fence of another device: wait for it here
}

SimTime HostDevice::elapsed_ns(const Fence& from, const Fence& to) const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(host_fence(to).time -
                                                              host_fence(from).time)
      .count();
}

// ---------------------------------------------------------------- elementwise

void HostDevice::fill(float* x, std::int64_t n, float value) {
  check.size(n, "fill");
  std::fill(x, x + n, value);
}

void HostDevice::add(float* out, const float* a, const float* b, std::int64_t n) {
  check.size(n, "add");
  for (std::int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void HostDevice::axpy(float* y, float alpha, const float* x, std::int64_t n) {
  check.size(n, "axpy");
  for (std::int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void HostDevice::gelu_forward(float* out, const float* u, std::int64_t n) {
  check.size(n, "gelu_forward");
  Map(out, 1, n) = exec::gelu_forward<float>(ConstMap(u, 1, n));
}

void HostDevice::gelu_backward(float* du, const float* dout, const float* u, std::int64_t n) {
  check.size(n, "gelu_backward");
  Map(du, 1, n) = exec::gelu_backward<float>(ConstMap(dout, 1, n), ConstMap(u, 1, n));
}

void HostDevice::relu_forward(float* out, const float* u, std::int64_t n) {
  check.size(n, "relu_forward");
  Map(out, 1, n) = exec::relu_forward<float>(ConstMap(u, 1, n));
}

void HostDevice::relu_backward(float* du, const float* dout, const float* u, std::int64_t n) {
  check.size(n, "relu_backward");
  Map(du, 1, n) = exec::relu_backward<float>(ConstMap(dout, 1, n), ConstMap(u, 1, n));
}

// ---------------------------------------------------------------- products

void HostDevice::gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                      const float* b, float beta, float* c) {
  gemm_strided_batched(trans_a, trans_b, m, n, k, alpha, a, 0, b, 0, beta, c, 0, 1);
}

void HostDevice::gemm_strided_batched(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                                      const float* a, std::int64_t stride_a, const float* b,
                                      std::int64_t stride_b, float beta, float* c,
                                      std::int64_t stride_c, int batch) {
  check.gemm(m, n, k, batch);
  for (int i = 0; i < batch; ++i) {
    const ConstMap A(a + i * stride_a, trans_a ? k : m, trans_a ? m : k);
    const ConstMap B(b + i * stride_b, trans_b ? n : k, trans_b ? k : n);
    Map C(c + i * stride_c, m, n);
    Matrix product(m, n);
    if (trans_a && trans_b) {
      product.noalias() = A.transpose() * B.transpose();
    } else if (trans_a) {
      product.noalias() = A.transpose() * B;
    } else if (trans_b) {
      product.noalias() = A * B.transpose();
    } else {
      product.noalias() = A * B;
    }
    // beta = 0 does not read C (it may hold anything), as in BLAS.
    if (beta == 0.0f) {
      C = alpha * product;
    } else {
      C = alpha * product + beta * C;
    }
  }
}

void HostDevice::add_bias(float* out, const float* bias, int rows, int c) {
  check.rows(rows, c, "add_bias");
  Map(out, rows, c).rowwise() += ConstMap(bias, 1, c).row(0);
}

void HostDevice::column_sums_add(float* db, const float* dout, int rows, int c) {
  check.rows(rows, c, "column_sums_add");
  Map(db, 1, c) += ConstMap(dout, rows, c).colwise().sum();
}

// ---------------------------------------------------------------- LayerNorm

void HostDevice::layernorm_forward(float* out, float* stats, const float* x, const float* gain,
                                   const float* bias, int rows, int c) {
  check.rows(rows, c, "layernorm_forward");
  Matrix s;
  Map(out, rows, c) = exec::layernorm_forward<float>(ConstMap(x, rows, c), ConstMap(gain, 1, c),
                                                     ConstMap(bias, 1, c), s);
  Map(stats, rows, 2) = s;
}

void HostDevice::layernorm_backward_input(float* dx, const float* dout, const float* x,
                                          const float* stats, const float* gain, int rows, int c) {
  check.rows(rows, c, "layernorm_backward_input");
  Map(dx, rows, c) =
      exec::layernorm_backward_input<float>(ConstMap(dout, rows, c), ConstMap(x, rows, c),
                                            ConstMap(stats, rows, 2), ConstMap(gain, 1, c));
}

void HostDevice::layernorm_backward_params(float* dgain, float* dbias, const float* dout,
                                           const float* x, const float* stats, int rows, int c) {
  check.rows(rows, c, "layernorm_backward_params");
  Matrix g = ConstMap(dgain, 1, c);
  Matrix b = ConstMap(dbias, 1, c);
  exec::layernorm_backward_params<float>(ConstMap(dout, rows, c), ConstMap(x, rows, c),
                                         ConstMap(stats, rows, 2), g, b);
  Map(dgain, 1, c) = g;
  Map(dbias, 1, c) = b;
}

// ---------------------------------------------------------------- attention

namespace {

// Offsets of one token's row in qkv and of one (sequence, head, position) row
// of the head-major tensors.
struct Heads {
  const AttentionShape& sh;
  Index width() const { return sh.width() + 2 * sh.kv_width(); }
  Index token(Index i, Index t) const { return (i * sh.seq + t) * width(); }
  Index head_row(Index i, Index j, Index t) const {
    return ((i * sh.heads + j) * sh.seq + t) * sh.head_dim;
  }
  Index kv_head(Index j) const { return j / (sh.heads / sh.kv_heads); }
};

}  // namespace

void HostDevice::split_qkv(float* q, float* k, float* v, const float* qkv,
                           const AttentionShape& sh) {
  check.attention(sh, "split_qkv");
  const Heads h{sh};
  const Index dh = sh.head_dim;
  for (Index i = 0; i < sh.batch; ++i) {
    for (Index j = 0; j < sh.heads; ++j) {
      const Index g = h.kv_head(j);
      for (Index t = 0; t < sh.seq; ++t) {
        const float* row = qkv + h.token(i, t);
        const Index to = h.head_row(i, j, t);
        std::copy_n(row + j * dh, dh, q + to);
        std::copy_n(row + sh.width() + g * dh, dh, k + to);
        std::copy_n(row + sh.width() + sh.kv_width() + g * dh, dh, v + to);
      }
    }
  }
}

void HostDevice::merge_qkv_grad(float* dqkv, const float* dq, const float* dk, const float* dv,
                                const AttentionShape& sh) {
  check.attention(sh, "merge_qkv_grad");
  const Heads h{sh};
  const Index dh = sh.head_dim;
  std::fill(dqkv, dqkv + sh.batch * sh.seq * h.width(), 0.0f);
  for (Index i = 0; i < sh.batch; ++i) {
    for (Index j = 0; j < sh.heads; ++j) {
      const Index g = h.kv_head(j);
      for (Index t = 0; t < sh.seq; ++t) {
        float* row = dqkv + h.token(i, t);
        const Index from = h.head_row(i, j, t);
        for (Index e = 0; e < dh; ++e) {
          row[j * dh + e] = dq[from + e];
          row[sh.width() + g * dh + e] += dk[from + e];
          row[sh.width() + sh.kv_width() + g * dh + e] += dv[from + e];
        }
      }
    }
  }
}

void HostDevice::merge_heads(float* out, const float* o, const AttentionShape& sh) {
  check.attention(sh, "merge_heads");
  const Heads h{sh};
  for (Index i = 0; i < sh.batch; ++i) {
    for (Index j = 0; j < sh.heads; ++j) {
      for (Index t = 0; t < sh.seq; ++t) {
        std::copy_n(o + h.head_row(i, j, t), sh.head_dim,
                    out + (i * sh.seq + t) * sh.width() + j * sh.head_dim);
      }
    }
  }
}

void HostDevice::split_heads(float* o, const float* out, const AttentionShape& sh) {
  check.attention(sh, "split_heads");
  const Heads h{sh};
  for (Index i = 0; i < sh.batch; ++i) {
    for (Index j = 0; j < sh.heads; ++j) {
      for (Index t = 0; t < sh.seq; ++t) {
        std::copy_n(out + (i * sh.seq + t) * sh.width() + j * sh.head_dim, sh.head_dim,
                    o + h.head_row(i, j, t));
      }
    }
  }
}

void HostDevice::causal_softmax_forward(float* probs, const float* scores, float scale, int rows,
                                        int s) {
  check.square_blocks(rows, s, "causal_softmax_forward");
  for (int r = 0; r < rows; ++r) {
    const int t = r % s;
    const float* in = scores + static_cast<std::int64_t>(r) * s;
    float* out = probs + static_cast<std::int64_t>(r) * s;
    float max = -std::numeric_limits<float>::infinity();
    for (int c = 0; c <= t; ++c) max = std::max(max, in[c] * scale);
    float sum = 0.0f;
    for (int c = 0; c <= t; ++c) {
      out[c] = std::exp(in[c] * scale - max);
      sum += out[c];
    }
    for (int c = 0; c <= t; ++c) out[c] /= sum;
    for (int c = t + 1; c < s; ++c) out[c] = 0.0f;
  }
}

void HostDevice::causal_softmax_backward(float* dscores, const float* probs, const float* dprobs,
                                         float scale, int rows, int s) {
  check.square_blocks(rows, s, "causal_softmax_backward");
  for (int r = 0; r < rows; ++r) {
    const std::int64_t at = static_cast<std::int64_t>(r) * s;
    float dot = 0.0f;
    for (int c = 0; c < s; ++c) dot += probs[at + c] * dprobs[at + c];
    for (int c = 0; c < s; ++c) dscores[at + c] = probs[at + c] * (dprobs[at + c] - dot) * scale;
  }
}

// ---------------------------------------------------------------- loss

void HostDevice::crossentropy_forward(float* probs, float* losses, const float* logits,
                                      const std::int32_t* targets, int rows, int v) {
  check.rows(rows, v, "crossentropy_forward");
  for (int r = 0; r < rows; ++r) {
    const std::int32_t target = targets[r];
    check.require(target >= 0 && target < v, "crossentropy_forward",
                  "target " + std::to_string(target) + " outside [0, " + std::to_string(v) + ")");
    const ConstMap logit(logits + static_cast<std::int64_t>(r) * v, 1, v);
    Map p(probs + static_cast<std::int64_t>(r) * v, 1, v);
    const float max = logit.maxCoeff();
    p = (logit.array() - max).exp().matrix();
    const float sum = p.sum();
    p /= sum;
    losses[r] = std::log(sum) + max - logit(0, target);
  }
}

void HostDevice::crossentropy_backward(float* dlogits, const float* probs,
                                       const std::int32_t* targets, float scale, int rows, int v) {
  check.rows(rows, v, "crossentropy_backward");
  for (int r = 0; r < rows; ++r) {
    const std::int64_t at = static_cast<std::int64_t>(r) * v;
    for (int c = 0; c < v; ++c) dlogits[at + c] = probs[at + c];
    dlogits[at + targets[r]] -= 1.0f;
    for (int c = 0; c < v; ++c) dlogits[at + c] *= scale;
  }
}

// ---------------------------------------------------------------- embedding

void HostDevice::embedding_forward(float* out, const std::int32_t* ids, const float* table,
                                   const float* positions, int rows, int seq, int d) {
  check.embedding(rows, seq, d, "embedding_forward");
  for (int r = 0; r < rows; ++r) {
    const float* token = table + static_cast<std::int64_t>(ids[r]) * d;
    const float* pos = positions + static_cast<std::int64_t>(r % seq) * d;
    float* o = out + static_cast<std::int64_t>(r) * d;
    for (int e = 0; e < d; ++e) o[e] = token[e] + pos[e];
  }
}

void HostDevice::embedding_backward(float* dtable, float* dpositions, const std::int32_t* ids,
                                    const float* dout, int rows, int seq, int d) {
  check.embedding(rows, seq, d, "embedding_backward");
  for (int r = 0; r < rows; ++r) {
    const float* g = dout + static_cast<std::int64_t>(r) * d;
    float* token = dtable + static_cast<std::int64_t>(ids[r]) * d;
    for (int e = 0; e < d; ++e) token[e] += g[e];
    if (dpositions != nullptr) {
      float* pos = dpositions + static_cast<std::int64_t>(r % seq) * d;
      for (int e = 0; e < d; ++e) pos[e] += g[e];
    }
  }
}

// ---------------------------------------------------------------- optimizers

// The same float arithmetic, in the same order, as ParamOptimizer::step.
void HostDevice::sgd_update(float* w, const float* g, std::int64_t n, float lr) {
  check.size(n, "sgd_update");
  for (std::int64_t i = 0; i < n; ++i) w[i] -= lr * g[i];
}

void HostDevice::momentum_update(float* w, float* m, const float* g, std::int64_t n, float lr,
                                 float mu) {
  check.size(n, "momentum_update");
  for (std::int64_t i = 0; i < n; ++i) {
    m[i] = mu * m[i] + g[i];
    w[i] -= lr * m[i];
  }
}

void HostDevice::rmsprop_update(float* w, float* v, const float* g, std::int64_t n, float lr,
                                float beta2, float epsilon) {
  check.size(n, "rmsprop_update");
  for (std::int64_t i = 0; i < n; ++i) {
    v[i] = beta2 * v[i] + (1.0f - beta2) * (g[i] * g[i]);
    w[i] -= lr * g[i] / (std::sqrt(v[i]) + epsilon);
  }
}

void HostDevice::adam_update(float* w, float* m, float* v, const float* g, std::int64_t n, float lr,
                             float beta1, float beta2, float epsilon, float correct1,
                             float correct2) {
  check.size(n, "adam_update");
  for (std::int64_t i = 0; i < n; ++i) {
    m[i] = beta1 * m[i] + (1.0f - beta1) * g[i];
    v[i] = beta2 * v[i] + (1.0f - beta2) * (g[i] * g[i]);
    w[i] -= lr * (m[i] / correct1) / (std::sqrt(v[i] / correct2) + epsilon);
  }
}

bool HostDevice::all_finite(const float* x, std::int64_t n) {
  check.size(n, "all_finite");
  for (std::int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) return false;
  }
  return true;
}

}  // namespace pipescope::exec
