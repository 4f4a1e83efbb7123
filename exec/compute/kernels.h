#pragma once
// The math of the reference executor's layers, llm.c style: every operation is a
// *_forward / *_backward pair, here function templates over the scalar type so the
// layers run them in float and the gradient checks run the very same code in
// double. Matrices are row-major; n is the number of rows (b*s tokens, or b
// samples for the mlp family). A layer with parameters has two backward halves:
// *_backward_input returns the input's gradient, *_backward_params adds to the
// parameters' gradients, so that zero-bubble schedules can run them apart.

#include <cmath>
#include <cstdint>
#include <numbers>
#include <stdexcept>
#include <string>
#include <vector>

#include <Eigen/Core>

namespace pipescope::exec {

template <typename T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Eigen::Index;

// PyTorch's default LayerNorm epsilon.
inline constexpr double kLayerNormEps = 1e-5;

// x is (n, c), gain and bias (1, c); out is (n, c), stats (n, 2) gets each row's
// mean and 1 / sqrt(variance + eps) for the backward.
template <typename T>
Mat<T> layernorm_forward(const Mat<T>& x, const Mat<T>& gain, const Mat<T>& bias, Mat<T>& stats) {
  const Index n = x.rows();
  const auto c = static_cast<T>(x.cols());
  Mat<T> out(n, x.cols());
  stats.resize(n, 2);
  for (Index r = 0; r < n; ++r) {
    const T mean = x.row(r).sum() / c;
    const T var = (x.row(r).array() - mean).square().sum() / c;
    const T rstd = T(1) / std::sqrt(var + T(kLayerNormEps));
    stats(r, 0) = mean;
    stats(r, 1) = rstd;
    out.row(r) = ((x.row(r).array() - mean) * rstd * gain.array() + bias.array()).matrix();
  }
  return out;
}

// dout, x are (n, c), stats (n, 2) from the forward; returns dx (n, c).
template <typename T>
Mat<T> layernorm_backward_input(const Mat<T>& dout, const Mat<T>& x, const Mat<T>& stats,
                                const Mat<T>& gain) {
  const Index n = x.rows();
  const auto c = static_cast<T>(x.cols());
  Mat<T> dx(n, x.cols());
  for (Index r = 0; r < n; ++r) {
    const auto xhat = ((x.row(r).array() - stats(r, 0)) * stats(r, 1)).eval();
    const auto dxhat = (dout.row(r).array() * gain.array()).eval();
    const T mean_dxhat = dxhat.sum() / c;
    const T mean_dxhat_xhat = (dxhat * xhat).sum() / c;
    dx.row(r) = (stats(r, 1) * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat)).matrix();
  }
  return dx;
}

// Adds the gain's and the bias's gradients, sum(dout * xhat) and sum(dout) over
// the rows, to dgain and dbias (1, c).
template <typename T>
void layernorm_backward_params(const Mat<T>& dout, const Mat<T>& x, const Mat<T>& stats,
                               Mat<T>& dgain, Mat<T>& dbias) {
  for (Index r = 0; r < x.rows(); ++r) {
    dgain.array() += dout.row(r).array() * ((x.row(r).array() - stats(r, 0)) * stats(r, 1));
    dbias += dout.row(r);
  }
}

// x is (n, in), w (in, out), b (1, out); out is (n, out) = x w + b.
template <typename T>
Mat<T> linear_forward(const Mat<T>& x, const Mat<T>& w, const Mat<T>& b) {
  Mat<T> out = x * w;
  out.rowwise() += b.row(0);
  return out;
}

// dout is (n, out); returns dx (n, in) = dout w^T.
template <typename T>
Mat<T> linear_backward_input(const Mat<T>& dout, const Mat<T>& w) {
  return dout * w.transpose();
}

// dout is (n, out), x (n, in); adds x^T dout to dw (in, out) and, unless db is
// null, the column sums of dout to db (1, out).
template <typename T>
void linear_backward_params(const Mat<T>& dout, const Mat<T>& x, Mat<T>& dw, Mat<T>* db) {
  dw.noalias() += x.transpose() * dout;
  if (db != nullptr) *db += dout.colwise().sum();
}

// GeLU, tanh approximation (Hendrycks & Gimpel 2016, as GPT-2):
// 0.5 u (1 + tanh(sqrt(2/pi) (u + 0.044715 u^3))). u and out are (n, f).
// tanh is Eigen's array tanh: vectorized for float, and as fast whatever the
// values (the C library's scalar tanhf takes twice as long on the inputs of a
// trained model as on those of a fresh one, and would make a run slow down as
// it learns).
template <typename T>
Mat<T> gelu_forward(const Mat<T>& u) {
  const T k = std::sqrt(T(2) / std::numbers::pi_v<T>);
  const auto x = u.array();
  const Mat<T> t = (k * (x + T(0.044715) * x.cube())).tanh().matrix();
  return (T(0.5) * x * (T(1) + t.array())).matrix();
}

// dout and u (the GeLU input) are (n, f); returns du (n, f).
template <typename T>
Mat<T> gelu_backward(const Mat<T>& dout, const Mat<T>& u) {
  const T k = std::sqrt(T(2) / std::numbers::pi_v<T>);
  const auto x = u.array();
  const Mat<T> t = (k * (x + T(0.044715) * x.cube())).tanh().matrix();
  const auto slope = T(0.5) * (T(1) + t.array()) + T(0.5) * x * (T(1) - t.array().square()) * k *
                                                       (T(1) + T(3 * 0.044715) * x.square());
  return (dout.array() * slope).matrix();
}

// u and out are (n, f).
template <typename T>
Mat<T> relu_forward(const Mat<T>& u) {
  return u.cwiseMax(T(0));
}

// dout and u (the relu input) are (n, f); returns du (n, f).
template <typename T>
Mat<T> relu_backward(const Mat<T>& dout, const Mat<T>& u) {
  return (u.array() > T(0)).select(dout, T(0));
}

// Causal self-attention over b sequences of s positions. Query head j (of a) reads
// key/value head j / (a / kv) (grouped-query attention; kv = a is multi-head
// attention). Head width dh = h / a; the K and V projections are kv*dh wide.
struct AttentionShape {
  Index batch = 1;
  Index seq = 1;
  Index heads = 1;
  Index kv_heads = 1;
  Index head_dim = 1;
  Index width() const { return heads * head_dim; }
  Index kv_width() const { return kv_heads * head_dim; }
};

// One head's two products, on column blocks of [Q | K | V] starting at `row`:
// the scores (s, s) = q k^T / sqrt(dh), and the context out[row.., out_col..]
// (s, dh) = p v with p the (s, s) block of probs starting at `p_row`.
template <typename T>
Mat<T> head_scores(const Mat<T>& qkv, Index row, Index q_col, Index k_col, Index s, Index dh) {
  // The product first, then the scale: Eigen evaluates (q k^T) * scale through
  // a path half as fast (bench/gemm_bench.cpp's scores rows).
  Mat<T> scores(s, s);
  scores.noalias() = qkv.block(row, q_col, s, dh) * qkv.block(row, k_col, s, dh).transpose();
  scores *= T(1) / std::sqrt(static_cast<T>(dh));
  return scores;
}

template <typename T>
void head_context(const Mat<T>& probs, Index p_row, const Mat<T>& qkv, Index row, Index v_col,
                  Index s, Index dh, Mat<T>& out, Index out_col) {
  out.block(row, out_col, s, dh).noalias() =
      probs.block(p_row, 0, s, s) * qkv.block(row, v_col, s, dh);
}

// qkv is (b*s, h + 2 d_kv): [Q | K | V] per token; out is (b*s, h) with head j in
// columns j*dh..; probs (b*a*s, s) gets softmax(Q K^T / sqrt(dh)) with the causal
// mask, the s x s block of sequence i and head j at row (i*a + j)*s.
template <typename T>
Mat<T> attention_forward(const Mat<T>& qkv, const AttentionShape& sh, Mat<T>& probs) {
  const Index s = sh.seq, dh = sh.head_dim, h = sh.width(), dkv = sh.kv_width();
  const Index group = sh.heads / sh.kv_heads;
  Mat<T> out(sh.batch * s, h);
  probs.setZero(sh.batch * sh.heads * s, s);
  for (Index i = 0; i < sh.batch; ++i) {
    for (Index j = 0; j < sh.heads; ++j) {
      const Index g = j / group;
      const Mat<T> scores = head_scores(qkv, i * s, j * dh, h + g * dh, s, dh);
      const Index p_row = (i * sh.heads + j) * s;
      auto p = probs.block(p_row, 0, s, s);
      // Position t attends to positions 0..t; the masked entries stay exactly 0.
      for (Index t = 0; t < s; ++t) {
        const T max = scores.row(t).head(t + 1).maxCoeff();
        p.row(t).head(t + 1) = (scores.row(t).head(t + 1).array() - max).exp().matrix();
        p.row(t).head(t + 1) /= p.row(t).head(t + 1).sum();
      }
      head_context(probs, p_row, qkv, i * s, h + dkv + g * dh, s, dh, out, j * dh);
    }
  }
  return out;
}

// dout is (b*s, h), qkv and probs as the forward's; returns dqkv (b*s, h + 2 d_kv).
// With P the probabilities and dO the output's gradient: dV = P^T dO,
// dP = dO V^T, dS = P * (dP - rowsum(P * dP)), dQ = dS K / sqrt(dh),
// dK = dS^T Q / sqrt(dh); key/value heads sum over the query heads sharing them.
template <typename T>
Mat<T> attention_backward(const Mat<T>& dout, const Mat<T>& qkv, const Mat<T>& probs,
                          const AttentionShape& sh) {
  const Index s = sh.seq, dh = sh.head_dim, h = sh.width(), dkv = sh.kv_width();
  const Index group = sh.heads / sh.kv_heads;
  const T scale = T(1) / std::sqrt(static_cast<T>(dh));
  Mat<T> dqkv = Mat<T>::Zero(qkv.rows(), qkv.cols());
  for (Index i = 0; i < sh.batch; ++i) {
    for (Index j = 0; j < sh.heads; ++j) {
      const Index g = j / group;
      const auto q = qkv.block(i * s, j * dh, s, dh);
      const auto k = qkv.block(i * s, h + g * dh, s, dh);
      const auto v = qkv.block(i * s, h + dkv + g * dh, s, dh);
      const auto p = probs.block((i * sh.heads + j) * s, 0, s, s);
      const auto dout_head = dout.block(i * s, j * dh, s, dh);
      dqkv.block(i * s, h + dkv + g * dh, s, dh).noalias() += p.transpose() * dout_head;
      const Mat<T> dp = dout_head * v.transpose();
      const Mat<T> rowdot = p.cwiseProduct(dp).rowwise().sum();
      const Mat<T> ds = p.cwiseProduct(dp - rowdot.replicate(1, s)) * scale;
      dqkv.block(i * s, j * dh, s, dh).noalias() += ds * k;
      dqkv.block(i * s, h + g * dh, s, dh).noalias() += ds.transpose() * q;
    }
  }
  return dqkv;
}

// Throws std::invalid_argument unless there are n targets, each in [0, classes).
inline void check_targets(const std::vector<std::int32_t>* targets, Index n, Index classes) {
  if (targets == nullptr) throw std::invalid_argument("the loss needs targets, got none");
  if (static_cast<Index>(targets->size()) != n) {
    throw std::invalid_argument("expected " + std::to_string(n) + " targets, got " +
                                std::to_string(targets->size()));
  }
  for (const std::int32_t t : *targets) {
    if (t < 0 || t >= classes) {
      throw std::invalid_argument("target " + std::to_string(t) + " is outside [0, " +
                                  std::to_string(classes) + ")");
    }
  }
}

// logits is (n, V), targets n entries in [0, V); probs (n, V) gets the softmax.
// Returns the sum over rows of -log softmax(logits)[target], accumulated in double.
template <typename T>
double crossentropy_forward(const Mat<T>& logits, const std::vector<std::int32_t>& targets,
                            Mat<T>& probs) {
  probs.resize(logits.rows(), logits.cols());
  double loss = 0.0;
  for (Index r = 0; r < logits.rows(); ++r) {
    const T max = logits.row(r).maxCoeff();
    probs.row(r) = (logits.row(r).array() - max).exp().matrix();
    const T sum = probs.row(r).sum();
    probs.row(r) /= sum;
    const T logit = logits(r, targets[static_cast<std::size_t>(r)]);
    loss += static_cast<double>(std::log(sum) + max - logit);
  }
  return loss;
}

// probs is (n, V) from the forward; returns dlogits (n, V) = (probs - onehot) * scale,
// scale being d(loss) / d(sum of token losses).
template <typename T>
Mat<T> crossentropy_backward(const Mat<T>& probs, const std::vector<std::int32_t>& targets,
                             T scale) {
  Mat<T> dlogits = probs;
  for (Index r = 0; r < probs.rows(); ++r) dlogits(r, targets[static_cast<std::size_t>(r)]) -= T(1);
  return dlogits * scale;
}

// The float kernels are compiled once, in the executor's library
// (kernels.cpp), so that every caller (the layers, the tests, the benches) runs
// the copy built for the processor's level (exec/compute/kernel_level.h) rather than
// its own baseline instantiation; the double ones (the gradient checks) are
// instantiated where they are used.
#define PIPESCOPE_EXEC_FLOAT_KERNELS(PREFIX)                                                     \
  PREFIX Mat<float> layernorm_forward(const Mat<float>&, const Mat<float>&, const Mat<float>&,   \
                                      Mat<float>&);                                              \
  PREFIX Mat<float> layernorm_backward_input(const Mat<float>&, const Mat<float>&,               \
                                             const Mat<float>&, const Mat<float>&);              \
  PREFIX void layernorm_backward_params(const Mat<float>&, const Mat<float>&, const Mat<float>&, \
                                        Mat<float>&, Mat<float>&);                               \
  PREFIX Mat<float> linear_forward(const Mat<float>&, const Mat<float>&, const Mat<float>&);     \
  PREFIX Mat<float> linear_backward_input(const Mat<float>&, const Mat<float>&);                 \
  PREFIX void linear_backward_params(const Mat<float>&, const Mat<float>&, Mat<float>&,          \
                                     Mat<float>*);                                               \
  PREFIX Mat<float> gelu_forward(const Mat<float>&);                                             \
  PREFIX Mat<float> gelu_backward(const Mat<float>&, const Mat<float>&);                         \
  PREFIX Mat<float> head_scores(const Mat<float>&, Index, Index, Index, Index, Index);           \
  PREFIX void head_context(const Mat<float>&, Index, const Mat<float>&, Index, Index, Index,     \
                           Index, Mat<float>&, Index);                                           \
  PREFIX Mat<float> attention_forward(const Mat<float>&, const AttentionShape&, Mat<float>&);    \
  PREFIX Mat<float> attention_backward(const Mat<float>&, const Mat<float>&, const Mat<float>&,  \
                                       const AttentionShape&);

PIPESCOPE_EXEC_FLOAT_KERNELS(extern template)

}  // namespace pipescope::exec
