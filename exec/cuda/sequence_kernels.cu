// The CUDA backend's kernels on (batch, sequence) layouts (kernels.h): the
// attention heads' layout changes, the causal softmax and the embedding. Each
// kernel's work is in kernel_bodies.h, where the test of the bodies runs it on
// the CPU; each mirrors its CPU reference in HostDevice (exec/compute/host_device.cpp).

#include <stdexcept>
#include <string>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/kernel_common.cuh"
#include "exec/cuda/kernels.h"

namespace pipescope::exec::cuda {

namespace {

using detail::DeviceWarp;
using detail::grid_for;
using detail::grid_for_warp_rows;
using detail::head_entries;
using detail::Heads;
using detail::kBlock;
using detail::qkv_entries;
using detail::require;
using detail::this_thread;
using detail::warp_row;

// ---------------------------------------------------------------------------
// kernels: each is its body in kernel_bodies.h, run by this thread

__global__ void split_qkv_kernel(float* q, float* k, float* v, const float* qkv, Heads h,
                                 std::int64_t n) {
  detail::split_qkv_thread(this_thread(), q, k, v, qkv, h, n);
}

__global__ void merge_qkv_grad_kernel(float* dqkv, const float* dq, const float* dk,
                                      const float* dv, Heads h, std::int64_t n) {
  detail::merge_qkv_grad_thread(this_thread(), dqkv, dq, dk, dv, h, n);
}

__global__ void merge_heads_kernel(float* out, const float* o, Heads h, std::int64_t n) {
  detail::merge_heads_thread(this_thread(), out, o, h, n);
}

__global__ void split_heads_kernel(float* o, const float* out, Heads h, std::int64_t n) {
  detail::split_heads_thread(this_thread(), o, out, h, n);
}

// One warp per row.
__global__ void causal_softmax_forward_kernel(float* probs, const float* scores, float scale,
                                              int rows, int s) {
  detail::causal_softmax_forward_row(DeviceWarp{}, probs, scores, scale, warp_row(this_thread()),
                                     rows, s);
}

__global__ void causal_softmax_backward_kernel(float* dscores, const float* probs,
                                               const float* dprobs, float scale, int rows, int s) {
  detail::causal_softmax_backward_row(DeviceWarp{}, dscores, probs, dprobs, scale,
                                      warp_row(this_thread()), rows, s);
}

__global__ void embedding_forward_kernel(float* out, const std::int32_t* ids, const float* table,
                                         const float* positions, int seq, int d, std::int64_t n) {
  detail::embedding_forward_thread(this_thread(), out, ids, table, positions, seq, d, n);
}

__global__ void embedding_backward_kernel(float* dtable, float* dpositions, const std::int32_t* ids,
                                          const float* dout, int seq, int d, std::int64_t n) {
  detail::embedding_backward_thread(this_thread(), dtable, dpositions, ids, dout, seq, d, n);
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
  const std::int64_t n = qkv_entries(shape);
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
