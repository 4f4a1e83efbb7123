// The CUDA backend's kernels on (batch, sequence) layouts (kernels.h): the
// attention heads' layout changes, the causal softmax and the embedding. Each
// mirrors its CPU reference in HostDevice (exec/host_device.cpp).

#include <cmath>
#include <stdexcept>
#include <string>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/kernel_common.cuh"
#include "exec/cuda/kernels.h"

namespace pipescope::exec::cuda {

namespace {

using detail::grid_for;
using detail::grid_for_warp_rows;
using detail::grid_start;
using detail::grid_stride;
using detail::kBlock;
using detail::kWarp;
using detail::require;
using detail::warp_reduce;

// ---------------------------------------------------------------------------
// kernels

// Where a (sequence i, head j, position t) row of a head-major tensor starts,
// and which key/value head query head j reads.
struct Heads {
  HeadShape sh;
  __device__ std::int64_t width() const { return std::int64_t{sh.heads} * sh.head_dim; }
  __device__ std::int64_t kv_width() const { return std::int64_t{sh.kv_heads} * sh.head_dim; }
  __device__ std::int64_t qkv_width() const { return width() + 2 * kv_width(); }
  __device__ std::int64_t head_row(std::int64_t i, std::int64_t j, std::int64_t t) const {
    return ((i * sh.heads + j) * sh.seq + t) * sh.head_dim;
  }
  __device__ int kv_head(int j) const { return j / (sh.heads / sh.kv_heads); }
};

// One thread per entry of q (= of k and v, head-major), n = b heads s dh.
__global__ void split_qkv_kernel(float* q, float* k, float* v, const float* qkv, Heads h,
                                 std::int64_t n) {
  const int dh = h.sh.head_dim;
  for (std::int64_t at = grid_start(); at < n; at += grid_stride()) {
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
}

// One thread per entry of dqkv, n = b s (h + 2 d_kv). A key/value entry sums
// the query heads of its group from 0 in head order, as the reference does.
__global__ void merge_qkv_grad_kernel(float* dqkv, const float* dq, const float* dk,
                                      const float* dv, Heads h, std::int64_t n) {
  const int dh = h.sh.head_dim;
  const int group = h.sh.heads / h.sh.kv_heads;
  for (std::int64_t at = grid_start(); at < n; at += grid_stride()) {
    const std::int64_t col = at % h.qkv_width();
    const std::int64_t token = at / h.qkv_width();
    const std::int64_t i = token / h.sh.seq;
    const std::int64_t t = token % h.sh.seq;
    if (col < h.width()) {
      dqkv[at] = dq[h.head_row(i, col / dh, t) + col % dh];
      continue;
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
}

// Where entry `at` of out (b*s, h) lives in o (b, heads, s, dh).
__device__ std::int64_t head_entry(const Heads& h, std::int64_t at) {
  const int dh = h.sh.head_dim;
  const std::int64_t col = at % h.width();
  const std::int64_t token = at / h.width();
  return h.head_row(token / h.sh.seq, col / dh, token % h.sh.seq) + col % dh;
}

// One thread per entry of out, n = b s h (both directions).
__global__ void merge_heads_kernel(float* out, const float* o, Heads h, std::int64_t n) {
  for (std::int64_t at = grid_start(); at < n; at += grid_stride()) out[at] = o[head_entry(h, at)];
}

__global__ void split_heads_kernel(float* o, const float* out, Heads h, std::int64_t n) {
  for (std::int64_t at = grid_start(); at < n; at += grid_stride()) o[head_entry(h, at)] = out[at];
}

// One warp per row; lane l handles columns l, l + 32, ... in every pass, so an
// entry is read before it is written by the same thread (probs may be scores).
__global__ void causal_softmax_forward_kernel(float* probs, const float* scores, float scale,
                                              int rows, int s) {
  const std::int64_t r = blockIdx.x * std::int64_t{kBlock / kWarp} + threadIdx.x / kWarp;
  if (r >= rows) return;  // a whole warp leaves together: the shuffles stay full
  const int lane = threadIdx.x % kWarp;
  const int t = static_cast<int>(r % s);
  const float* in = scores + r * s;
  float* out = probs + r * s;
  float m = -INFINITY;
  for (int c = lane; c <= t; c += kWarp) m = fmaxf(m, in[c] * scale);
  const float max = warp_reduce<true>(m);
  float partial = 0.0f;
  for (int c = lane; c <= t; c += kWarp) {
    const float e = expf(in[c] * scale - max);
    out[c] = e;
    partial += e;
  }
  const float sum = warp_reduce<false>(partial);
  for (int c = lane; c <= t; c += kWarp) out[c] /= sum;
  for (int c = t + 1 + lane; c < s; c += kWarp) out[c] = 0.0f;
}

// One warp per row: dot = rowsum(P dP), then dscores = P (dP - dot) scale.
__global__ void causal_softmax_backward_kernel(float* dscores, const float* probs,
                                               const float* dprobs, float scale, int rows, int s) {
  const std::int64_t r = blockIdx.x * std::int64_t{kBlock / kWarp} + threadIdx.x / kWarp;
  if (r >= rows) return;
  const int lane = threadIdx.x % kWarp;
  const std::int64_t at = r * s;
  float partial = 0.0f;
  for (int c = lane; c < s; c += kWarp) partial += probs[at + c] * dprobs[at + c];
  const float dot = warp_reduce<false>(partial);
  for (int c = lane; c < s; c += kWarp) {
    dscores[at + c] = probs[at + c] * (dprobs[at + c] - dot) * scale;
  }
}

// One thread per entry of out (rows, d), n = rows d.
__global__ void embedding_forward_kernel(float* out, const std::int32_t* ids, const float* table,
                                         const float* positions, int seq, int d, std::int64_t n) {
  for (std::int64_t at = grid_start(); at < n; at += grid_stride()) {
    const std::int64_t r = at / d;
    const std::int64_t e = at % d;
    out[at] = table[std::int64_t{ids[r]} * d + e] + positions[(r % seq) * d + e];
  }
}

// One thread per entry of dout; rows with the same id (and every sequence's
// position t) add into the same entry, hence atomicAdd.
__global__ void embedding_backward_kernel(float* dtable, float* dpositions, const std::int32_t* ids,
                                          const float* dout, int seq, int d, std::int64_t n) {
  for (std::int64_t at = grid_start(); at < n; at += grid_stride()) {
    const std::int64_t r = at / d;
    const std::int64_t e = at % d;
    atomicAdd(dtable + std::int64_t{ids[r]} * d + e, dout[at]);
    if (dpositions != nullptr) atomicAdd(dpositions + (r % seq) * d + e, dout[at]);
  }
}

// ---------------------------------------------------------------------------
// launchers

void require_heads(const char* launcher, const HeadShape& sh) {
  require(sh.batch >= 1 && sh.seq >= 1 && sh.heads >= 1 && sh.kv_heads >= 1 && sh.head_dim >= 1,
          launcher,
          "needs batch, seq, heads, kv_heads, head_dim >= 1, got " + std::to_string(sh.batch) +
              ", " + std::to_string(sh.seq) + ", " + std::to_string(sh.heads) + ", " +
              std::to_string(sh.kv_heads) + ", " + std::to_string(sh.head_dim));
  require(sh.heads % sh.kv_heads == 0, launcher,
          std::to_string(sh.heads) + " query heads do not split into " +
              std::to_string(sh.kv_heads) + " key/value groups");
}

// Entries of a head-major tensor (b, heads, s, dh), which is also b s h.
std::int64_t head_entries(const HeadShape& sh) {
  return std::int64_t{sh.batch} * sh.heads * sh.seq * sh.head_dim;
}

void require_blocks(const char* launcher, int rows, int s) {
  require(
      rows >= 1 && s >= 1 && rows % s == 0, launcher,
      "needs whole s x s blocks, got " + std::to_string(rows) + " rows of " + std::to_string(s));
}

void require_embedding(const char* launcher, int rows, int seq, int d) {
  require(rows >= 1 && seq >= 1 && d >= 1, launcher,
          "needs rows, seq, d >= 1, got " + std::to_string(rows) + ", " + std::to_string(seq) +
              ", " + std::to_string(d));
}

}  // namespace

void split_qkv(float* q, float* k, float* v, const float* qkv, const HeadShape& shape,
               cudaStream_t stream) {
  require_heads("split_qkv", shape);
  const std::int64_t n = head_entries(shape);
  split_qkv_kernel<<<grid_for(n), kBlock, 0, stream>>>(q, k, v, qkv, Heads{shape}, n);
  PS_CUDA_CHECK(cudaGetLastError());
}

void merge_qkv_grad(float* dqkv, const float* dq, const float* dk, const float* dv,
                    const HeadShape& shape, cudaStream_t stream) {
  require_heads("merge_qkv_grad", shape);
  const std::int64_t n = std::int64_t{shape.batch} * shape.seq *
                         (std::int64_t{shape.heads} + 2 * shape.kv_heads) * shape.head_dim;
  merge_qkv_grad_kernel<<<grid_for(n), kBlock, 0, stream>>>(dqkv, dq, dk, dv, Heads{shape}, n);
  PS_CUDA_CHECK(cudaGetLastError());
}

void merge_heads(float* out, const float* o, const HeadShape& shape, cudaStream_t stream) {
  require_heads("merge_heads", shape);
  const std::int64_t n = head_entries(shape);
  merge_heads_kernel<<<grid_for(n), kBlock, 0, stream>>>(out, o, Heads{shape}, n);
  PS_CUDA_CHECK(cudaGetLastError());
}

void split_heads(float* o, const float* out, const HeadShape& shape, cudaStream_t stream) {
  require_heads("split_heads", shape);
  const std::int64_t n = head_entries(shape);
  split_heads_kernel<<<grid_for(n), kBlock, 0, stream>>>(o, out, Heads{shape}, n);
  PS_CUDA_CHECK(cudaGetLastError());
}

void causal_softmax_forward(float* probs, const float* scores, float scale, int rows, int s,
                            cudaStream_t stream) {
  require_blocks("causal_softmax_forward", rows, s);
  causal_softmax_forward_kernel<<<grid_for_warp_rows(rows), kBlock, 0, stream>>>(probs, scores,
                                                                                 scale, rows, s);
  PS_CUDA_CHECK(cudaGetLastError());
}

void causal_softmax_backward(float* dscores, const float* probs, const float* dprobs, float scale,
                             int rows, int s, cudaStream_t stream) {
  require_blocks("causal_softmax_backward", rows, s);
  causal_softmax_backward_kernel<<<grid_for_warp_rows(rows), kBlock, 0, stream>>>(
      dscores, probs, dprobs, scale, rows, s);
  PS_CUDA_CHECK(cudaGetLastError());
}

void embedding_forward(float* out, const std::int32_t* ids, const float* table,
                       const float* positions, int rows, int seq, int d, cudaStream_t stream) {
  require_embedding("embedding_forward", rows, seq, d);
  const std::int64_t n = std::int64_t{rows} * d;
  embedding_forward_kernel<<<grid_for(n), kBlock, 0, stream>>>(out, ids, table, positions, seq, d,
                                                               n);
  PS_CUDA_CHECK(cudaGetLastError());
}

void embedding_backward(float* dtable, float* dpositions, const std::int32_t* ids,
                        const float* dout, int rows, int seq, int d, cudaStream_t stream) {
  require_embedding("embedding_backward", rows, seq, d);
  const std::int64_t n = std::int64_t{rows} * d;
  embedding_backward_kernel<<<grid_for(n), kBlock, 0, stream>>>(dtable, dpositions, ids, dout, seq,
                                                                d, n);
  PS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace pipescope::exec::cuda
