#pragma once
// What every CUDA kernel of kernels.cu and sequence_kernels.cu computes, one
// thread's (or one row's) share at a time, and the geometry of their launches.
// nvcc compiles it for the kernels, the host compiler for the test that runs
// every launch on the CPU, block by block and thread by thread
// (tests/exec/cuda_kernel_bodies_test.cpp), in every build, CUDA or not. So it
// names no CUDA type or header: a kernel says which thread it is
// (this_thread(), DeviceBlock and DeviceWarp in kernel_common.cuh) and calls
// its body here.
//
// Two kinds of body:
// - *_thread(ThreadIndex, ...): the work of one thread, which knows its place
//   in the launch (blockIdx, threadIdx, blockDim, gridDim), mostly a
//   grid-stride loop over the elements.
// - *_row(group, row, ...): one row worked on by a group of threads, a block
//   or a warp, which reduce together. The group type offers
//     reduce<kMax>(begin, end, f): the sum (kMax: the max) of f(j) over j in
//       [begin, end), the threads taking j = begin + rank, + size, ... and the
//       group combining their partials (every thread gets the result);
//     each(begin, end, f): f(j) over [begin, end), split the same way;
//     once(f): f() on the group's first thread.
//   The threads' share (for_strided, strided_partial) and the combining
//   operation (combine) are here, for both the GPU's groups and the test's.

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define PS_HD __host__ __device__
#else
#define PS_HD
#endif

namespace pipescope::exec::cuda {

// The shape of causal self-attention (exec::AttentionShape, without Eigen): b
// sequences of s positions, `heads` query heads reading `kv_heads` key/value
// heads (heads a multiple of kv_heads), each head_dim wide. Head-major tensors
// q, k, v, o are (b, heads, s, head_dim); qkv is (b*s, h + 2 d_kv) with
// h = heads head_dim and d_kv = kv_heads head_dim.
struct HeadShape {
  int batch = 1;
  int seq = 1;
  int heads = 1;
  int kv_heads = 1;
  int head_dim = 1;
};

namespace detail {

// ---------------------------------------------------------------------------
// launch geometry

inline constexpr int kBlock = 256;  // threads per block; a multiple of the warp size
inline constexpr int kWarp = 32;
inline constexpr int kRowsPerBlock = kBlock / kWarp;  // of the one-warp-per-row kernels
inline constexpr unsigned kMaxGrid = 4096;            // blocks of a grid-stride loop

// Blocks for a grid-stride loop over n elements: enough to fill a large GPU,
// never more than the work.
inline unsigned grid_for(std::int64_t n) {
  const std::int64_t blocks = (n + kBlock - 1) / kBlock;
  return blocks < kMaxGrid ? static_cast<unsigned>(blocks) : kMaxGrid;
}

// Blocks for one thread per column.
inline unsigned grid_for_columns(int c) {
  return static_cast<unsigned>((std::int64_t{c} + kBlock - 1) / kBlock);
}

// Blocks for one block per row.
inline unsigned grid_for_block_rows(int rows) {
  return static_cast<unsigned>(rows);
}

// Blocks for one warp per row.
inline unsigned grid_for_warp_rows(int rows) {
  return static_cast<unsigned>((std::int64_t{rows} + kRowsPerBlock - 1) / kRowsPerBlock);
}

// Entries of a head-major tensor (b, heads, s, dh), which is also b s h; and of
// qkv (b*s, h + 2 d_kv).
inline std::int64_t head_entries(const HeadShape& sh) {
  return std::int64_t{sh.batch} * sh.heads * sh.seq * sh.head_dim;
}
inline std::int64_t qkv_entries(const HeadShape& sh) {
  return std::int64_t{sh.batch} * sh.seq * (std::int64_t{sh.heads} + 2 * sh.kv_heads) * sh.head_dim;
}

// A thread's place in its launch: blockIdx.x, threadIdx.x, blockDim.x, gridDim.x.
struct ThreadIndex {
  unsigned block = 0;
  unsigned thread = 0;
  unsigned block_dim = kBlock;
  unsigned grid_dim = 1;
  // Its index in the grid: its first element in a grid-stride loop, or its column.
  PS_HD std::int64_t global() const { return std::int64_t{block} * block_dim + thread; }
  PS_HD std::int64_t stride() const { return std::int64_t{grid_dim} * block_dim; }
};

// The row of a one-warp-per-row kernel's thread.
PS_HD inline std::int64_t warp_row(const ThreadIndex& th) {
  return std::int64_t{th.block} * kRowsPerBlock + th.thread / kWarp;
}

// ---------------------------------------------------------------------------
// shared pieces

template <class F>
PS_HD inline void for_grid_stride(const ThreadIndex& th, std::int64_t n, F f) {
  for (std::int64_t i = th.global(); i < n; i += th.stride()) f(i);
}

// j = begin + rank, begin + rank + size, ... below end: one thread's share of a
// row split among `size` threads.
template <class F>
PS_HD inline void for_strided(int rank, int size, int begin, int end, F f) {
  for (int j = begin + rank; j < end; j += size) f(j);
}

// What a reduction starts from, and how it takes in a value.
template <bool kMax>
PS_HD inline float identity() {
  return kMax ? -INFINITY : 0.0f;
}
template <bool kMax>
PS_HD inline float combine(float a, float b) {
  return kMax ? fmaxf(a, b) : a + b;
}

// One thread's partial sum (max) of f(j) over its share of [begin, end).
template <bool kMax, class F>
PS_HD inline float strided_partial(int rank, int size, int begin, int end, F f) {
  float v = identity<kMax>();
  for_strided(rank, size, begin, end, [&](int j) { v = combine<kMax>(v, f(j)); });
  return v;
}

// *p += v: atomic on the GPU, where threads race for p; the test runs the
// threads one after another.
PS_HD inline void add_to(float* p, float v) {
#if defined(__CUDA_ARCH__)
  atomicAdd(p, v);
#else
  *p += v;
#endif
}

PS_HD inline bool is_finite(float x) {
#if defined(__CUDA_ARCH__)
  return isfinite(x);
#else
  return std::isfinite(x);
#endif
}

// ---------------------------------------------------------------------------
// elementwise (kernels.cu), mirroring exec/compute/kernels.h and HostDevice

inline constexpr float kLayerNormEps = 1e-5f;         // exec::kLayerNormEps
inline constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)

PS_HD inline float gelu(float x) {
  return 0.5f * x * (1.0f + tanhf(kGeluK * (x + 0.044715f * x * x * x)));
}

PS_HD inline float gelu_slope(float x) {
  const float t = tanhf(kGeluK * (x + 0.044715f * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kGeluK * (1.0f + 3.0f * 0.044715f * x * x);
}

PS_HD inline void gelu_forward_thread(const ThreadIndex& th, float* out, const float* u,
                                      std::int64_t n) {
  for_grid_stride(th, n, [=](std::int64_t i) { out[i] = gelu(u[i]); });
}

PS_HD inline void gelu_backward_thread(const ThreadIndex& th, float* du, const float* dout,
                                       const float* u, std::int64_t n) {
  for_grid_stride(th, n, [=](std::int64_t i) { du[i] = dout[i] * gelu_slope(u[i]); });
}

// A NaN stays NaN, as on the CPU (fmaxf would hide it).
PS_HD inline void relu_forward_thread(const ThreadIndex& th, float* out, const float* u,
                                      std::int64_t n) {
  for_grid_stride(th, n, [=](std::int64_t i) { out[i] = u[i] < 0.0f ? 0.0f : u[i]; });
}

PS_HD inline void relu_backward_thread(const ThreadIndex& th, float* du, const float* dout,
                                       const float* u, std::int64_t n) {
  for_grid_stride(th, n, [=](std::int64_t i) { du[i] = u[i] > 0.0f ? dout[i] : 0.0f; });
}

PS_HD inline void add_bias_thread(const ThreadIndex& th, float* out, const float* bias,
                                  std::int64_t n, int c) {
  for_grid_stride(th, n, [=](std::int64_t i) { out[i] += bias[i % c]; });
}

// One thread per column, rows in order: deterministic sums.
PS_HD inline void column_sums_add_thread(const ThreadIndex& th, float* db, const float* dout,
                                         int rows, int c) {
  const std::int64_t j = th.global();
  if (j >= c) return;
  float s = 0.0f;
  for (std::int64_t r = 0; r < rows; ++r) s += dout[r * c + j];
  db[j] += s;
}

PS_HD inline void crossentropy_backward_thread(const ThreadIndex& th, float* dlogits,
                                               const float* probs, const std::int32_t* targets,
                                               float scale, std::int64_t n, int v) {
  for_grid_stride(th, n, [=](std::int64_t i) {
    const float hot = targets[i / v] == static_cast<std::int32_t>(i % v) ? 1.0f : 0.0f;
    dlogits[i] = (probs[i] - hot) * scale;
  });
}

PS_HD inline void fill_thread(const ThreadIndex& th, float* x, std::int64_t n, float value) {
  for_grid_stride(th, n, [=](std::int64_t i) { x[i] = value; });
}

// out may be a or b: each element is read before it is written, by one thread.
PS_HD inline void add_thread(const ThreadIndex& th, float* out, const float* a, const float* b,
                             std::int64_t n) {
  for_grid_stride(th, n, [=](std::int64_t i) { out[i] = a[i] + b[i]; });
}

PS_HD inline void axpy_thread(const ThreadIndex& th, float* y, float alpha, const float* x,
                              std::int64_t n) {
  for_grid_stride(th, n, [=](std::int64_t i) { y[i] += alpha * x[i]; });
}

// The optimizers: the float arithmetic of HostDevice (exec/compute/host_device.cpp).
PS_HD inline void sgd_thread(const ThreadIndex& th, float* w, const float* g, std::int64_t n,
                             float lr) {
  for_grid_stride(th, n, [=](std::int64_t i) { w[i] -= lr * g[i]; });
}

PS_HD inline void momentum_thread(const ThreadIndex& th, float* w, float* m, const float* g,
                                  std::int64_t n, float lr, float mu) {
  for_grid_stride(th, n, [=](std::int64_t i) {
    m[i] = mu * m[i] + g[i];
    w[i] -= lr * m[i];
  });
}

PS_HD inline void rmsprop_thread(const ThreadIndex& th, float* w, float* v, const float* g,
                                 std::int64_t n, float lr, float b2, float eps) {
  for_grid_stride(th, n, [=](std::int64_t i) {
    v[i] = b2 * v[i] + (1.0f - b2) * (g[i] * g[i]);
    w[i] -= lr * g[i] / (sqrtf(v[i]) + eps);
  });
}

PS_HD inline void adam_thread(const ThreadIndex& th, float* w, float* m, float* v, const float* g,
                              std::int64_t n, float lr, float b1, float b2, float eps,
                              float correct1, float correct2) {
  for_grid_stride(th, n, [=](std::int64_t i) {
    m[i] = b1 * m[i] + (1.0f - b1) * g[i];
    v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    w[i] -= lr * (m[i] / correct1) / (sqrtf(v[i] / correct2) + eps);
  });
}

// *found = 1 when some x[i] is NaN or infinite. Every thread writes the same
// value, so the racing stores agree; *found is zeroed before the launch.
PS_HD inline void any_nonfinite_thread(const ThreadIndex& th, int* found, const float* x,
                                       std::int64_t n) {
  bool bad = false;
  for_grid_stride(th, n, [&](std::int64_t i) { bad = bad || !is_finite(x[i]); });
  if (bad) *found = 1;
}

// ---------------------------------------------------------------------------
// rows: LayerNorm and the loss (kernels.cu)

// One block per row: the mean, then the variance about it (two passes, as the
// reference), then the normalised row; stats gets mean and 1 / std.
template <class Group>
PS_HD void layernorm_forward_row(const Group& g, float* out, float* stats, const float* x,
                                 const float* gain, const float* bias, std::int64_t row, int c) {
  const float* in = x + row * c;
  float* o = out + row * c;
  const float mean =
      g.template reduce<false>(0, c, [=](int j) { return in[j]; }) / static_cast<float>(c);
  const float var = g.template reduce<false>(0, c, [=](int j) {
    return (in[j] - mean) * (in[j] - mean);
  }) / static_cast<float>(c);
  const float rstd = 1.0f / sqrtf(var + kLayerNormEps);
  g.each(0, c, [=](int j) { o[j] = (in[j] - mean) * rstd * gain[j] + bias[j]; });
  g.once([=] {
    stats[2 * row] = mean;
    stats[2 * row + 1] = rstd;
  });
}

// One block per row: dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)),
// dxhat = dout * gain.
template <class Group>
PS_HD void layernorm_backward_input_row(const Group& g, float* dx, const float* dout,
                                        const float* x, const float* stats, const float* gain,
                                        std::int64_t row, int c) {
  const std::int64_t base = row * c;
  const float mean = stats[2 * row];
  const float rstd = stats[2 * row + 1];
  const auto xhat = [=](int j) { return (x[base + j] - mean) * rstd; };
  const auto dxhat = [=](int j) { return dout[base + j] * gain[j]; };
  const float mean_dxhat = g.template reduce<false>(0, c, dxhat) / static_cast<float>(c);
  const float mean_dxhat_xhat = g.template reduce<false>(0, c, [=](int j) {
    return dxhat(j) * xhat(j);
  }) / static_cast<float>(c);
  g.each(0, c,
         [=](int j) { dx[base + j] = rstd * (dxhat(j) - mean_dxhat - xhat(j) * mean_dxhat_xhat); });
}

// One thread per column, rows in order: deterministic sums.
PS_HD inline void layernorm_backward_params_thread(const ThreadIndex& th, float* dgain,
                                                   float* dbias, const float* dout, const float* x,
                                                   const float* stats, int rows, int c) {
  const std::int64_t j = th.global();
  if (j >= c) return;
  float g = 0.0f;
  float b = 0.0f;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t at = r * c + j;
    g += dout[at] * ((x[at] - stats[2 * r]) * stats[2 * r + 1]);
    b += dout[at];
  }
  dgain[j] += g;
  dbias[j] += b;
}

// One block per row. A target outside [0, v) gives a NaN loss (the CPU path
// checks targets before it runs; a kernel cannot throw).
template <class Group>
PS_HD void crossentropy_forward_row(const Group& g, float* probs, float* losses,
                                    const float* logits, const std::int32_t* targets,
                                    std::int64_t row, int v) {
  const float* in = logits + row * v;
  float* p = probs + row * v;
  const float max = g.template reduce<true>(0, v, [=](int j) { return in[j]; });
  const float sum = g.template reduce<false>(0, v, [=](int j) {
    const float e = expf(in[j] - max);
    p[j] = e;
    return e;
  });
  g.each(0, v, [=](int j) { p[j] /= sum; });
  g.once([=] {
    const std::int32_t t = targets[row];
    losses[row] = t >= 0 && t < v ? logf(sum) + max - in[t] : NAN;
  });
}

// ---------------------------------------------------------------------------
// (batch, sequence) layouts (sequence_kernels.cu), mirroring HostDevice

// Where a (sequence i, head j, position t) row of a head-major tensor starts,
// and which key/value head query head j reads.
struct Heads {
  HeadShape sh;
  PS_HD std::int64_t width() const { return std::int64_t{sh.heads} * sh.head_dim; }
  PS_HD std::int64_t kv_width() const { return std::int64_t{sh.kv_heads} * sh.head_dim; }
  PS_HD std::int64_t qkv_width() const { return width() + 2 * kv_width(); }
  PS_HD std::int64_t head_row(std::int64_t i, std::int64_t j, std::int64_t t) const {
    return ((i * sh.heads + j) * sh.seq + t) * sh.head_dim;
  }
  PS_HD int kv_head(int j) const { return j / (sh.heads / sh.kv_heads); }
  // Where entry `at` of out (b*s, h) lives in o (b, heads, s, dh).
  PS_HD std::int64_t head_entry(std::int64_t at) const {
    const int dh = sh.head_dim;
    const std::int64_t col = at % width();
    const std::int64_t token = at / width();
    return head_row(token / sh.seq, col / dh, token % sh.seq) + col % dh;
  }
};

// Entry `at` of q (= of k and v, head-major) from qkv.
PS_HD inline void split_qkv_at(const Heads& h, std::int64_t at, float* q, float* k, float* v,
                               const float* qkv) {
  const int dh = h.sh.head_dim;
  const std::int64_t e = at % dh;
  std::int64_t rest = at / dh;
  const std::int64_t t = rest % h.sh.seq;
  rest /= h.sh.seq;
  const int j = static_cast<int>(rest % h.sh.heads);
  const std::int64_t i = rest / h.sh.heads;
  const float* row = qkv + (i * h.sh.seq + t) * h.qkv_width();
  const std::int64_t g = h.kv_head(j);
  q[at] = row[j * std::int64_t{dh} + e];
  k[at] = row[h.width() + g * dh + e];
  v[at] = row[h.width() + h.kv_width() + g * dh + e];
}

// One thread per entry of q, n = b heads s dh.
PS_HD inline void split_qkv_thread(const ThreadIndex& th, float* q, float* k, float* v,
                                   const float* qkv, Heads h, std::int64_t n) {
  for_grid_stride(th, n, [=](std::int64_t at) { split_qkv_at(h, at, q, k, v, qkv); });
}

// Entry `at` of dqkv. A key/value entry sums the query heads of its group from
// 0 in head order, as the reference does.
PS_HD inline void merge_qkv_grad_at(const Heads& h, std::int64_t at, float* dqkv, const float* dq,
                                    const float* dk, const float* dv) {
  const int dh = h.sh.head_dim;
  const int group = h.sh.heads / h.sh.kv_heads;
  const std::int64_t col = at % h.qkv_width();
  const std::int64_t token = at / h.qkv_width();
  const std::int64_t i = token / h.sh.seq;
  const std::int64_t t = token % h.sh.seq;
  if (col < h.width()) {
    dqkv[at] = dq[h.head_row(i, col / dh, t) + col % dh];
    return;
  }
  const bool is_k = col < h.width() + h.kv_width();
  const std::int64_t c = col - h.width() - (is_k ? 0 : h.kv_width());
  const std::int64_t g = c / dh;
  const float* from = is_k ? dk : dv;
  float sum = 0.0f;
  for (std::int64_t j = g * group; j < (g + 1) * group; ++j) {
    sum += from[h.head_row(i, j, t) + c % dh];
  }
  dqkv[at] = sum;
}

// One thread per entry of dqkv, n = b s (h + 2 d_kv).
PS_HD inline void merge_qkv_grad_thread(const ThreadIndex& th, float* dqkv, const float* dq,
                                        const float* dk, const float* dv, Heads h, std::int64_t n) {
  for_grid_stride(th, n, [=](std::int64_t at) { merge_qkv_grad_at(h, at, dqkv, dq, dk, dv); });
}

// One thread per entry of out, n = b s h (both directions).
PS_HD inline void merge_heads_thread(const ThreadIndex& th, float* out, const float* o, Heads h,
                                     std::int64_t n) {
  for_grid_stride(th, n, [=](std::int64_t at) { out[at] = o[h.head_entry(at)]; });
}

PS_HD inline void split_heads_thread(const ThreadIndex& th, float* o, const float* out, Heads h,
                                     std::int64_t n) {
  for_grid_stride(th, n, [=](std::int64_t at) { o[h.head_entry(at)] = out[at]; });
}

// One warp per row (row r of `rows`, position t = r mod s); lane l handles
// columns l, l + 32, ... in every pass, so an entry is read before it is
// written by the same thread (probs may be scores). A warp past the last row
// does nothing.
template <class Warp>
PS_HD void causal_softmax_forward_row(const Warp& w, float* probs, const float* scores, float scale,
                                      std::int64_t r, int rows, int s) {
  if (r >= rows) return;  // a whole warp leaves together: the shuffles stay full
  const int t = static_cast<int>(r % s);
  const float* in = scores + r * s;
  float* out = probs + r * s;
  const float max = w.template reduce<true>(0, t + 1, [=](int c) { return in[c] * scale; });
  const float sum = w.template reduce<false>(0, t + 1, [=](int c) {
    const float e = expf(in[c] * scale - max);
    out[c] = e;
    return e;
  });
  w.each(0, t + 1, [=](int c) { out[c] /= sum; });
  w.each(t + 1, s, [=](int c) { out[c] = 0.0f; });
}

// One warp per row: dot = rowsum(P dP), then dscores = P (dP - dot) scale.
template <class Warp>
PS_HD void causal_softmax_backward_row(const Warp& w, float* dscores, const float* probs,
                                       const float* dprobs, float scale, std::int64_t r, int rows,
                                       int s) {
  if (r >= rows) return;
  const std::int64_t at = r * s;
  const float dot =
      w.template reduce<false>(0, s, [=](int c) { return probs[at + c] * dprobs[at + c]; });
  w.each(0, s, [=](int c) { dscores[at + c] = probs[at + c] * (dprobs[at + c] - dot) * scale; });
}

// One thread per entry of out (rows, d), n = rows d.
PS_HD inline void embedding_forward_thread(const ThreadIndex& th, float* out,
                                           const std::int32_t* ids, const float* table,
                                           const float* positions, int seq, int d, std::int64_t n) {
  for_grid_stride(th, n, [=](std::int64_t at) {
    const std::int64_t r = at / d;
    const std::int64_t e = at % d;
    out[at] = table[std::int64_t{ids[r]} * d + e] + positions[(r % seq) * d + e];
  });
}

// One thread per entry of dout; rows with the same id (and every sequence's
// position t) add into the same entry, hence add_to (atomicAdd).
PS_HD inline void embedding_backward_thread(const ThreadIndex& th, float* dtable, float* dpositions,
                                            const std::int32_t* ids, const float* dout, int seq,
                                            int d, std::int64_t n) {
  for_grid_stride(th, n, [=](std::int64_t at) {
    const std::int64_t r = at / d;
    const std::int64_t e = at % d;
    add_to(dtable + std::int64_t{ids[r]} * d + e, dout[at]);
    if (dpositions != nullptr) add_to(dpositions + (r % seq) * d + e, dout[at]);
  });
}

}  // namespace detail
}  // namespace pipescope::exec::cuda
