// The CUDA backend's elementwise, LayerNorm, loss, optimizer and product
// kernels (kernels.h). Each kernel's work is in kernel_bodies.h, where the test
// of the bodies runs it on the CPU; each operation mirrors its CPU reference
// line for line, exec/compute/kernels.h or HostDevice (exec/compute/host_device.cpp).

#include <stdexcept>
#include <string>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/kernel_common.cuh"
#include "exec/cuda/kernels.h"

namespace pipescope::exec::cuda {

namespace {

using detail::DeviceBlock;
using detail::grid_for;
using detail::grid_for_block_rows;
using detail::grid_for_columns;
using detail::kBlock;
using detail::require;
using detail::require_rows;
using detail::require_size;
using detail::this_thread;

// ---------------------------------------------------------------------------
// kernels: each is its body in kernel_bodies.h, run by this thread

__global__ void gelu_forward_kernel(float* out, const float* u, std::int64_t n) {
  detail::gelu_forward_thread(this_thread(), out, u, n);
}

__global__ void gelu_backward_kernel(float* du, const float* dout, const float* u, std::int64_t n) {
  detail::gelu_backward_thread(this_thread(), du, dout, u, n);
}

__global__ void relu_forward_kernel(float* out, const float* u, std::int64_t n) {
  detail::relu_forward_thread(this_thread(), out, u, n);
}

__global__ void relu_backward_kernel(float* du, const float* dout, const float* u, std::int64_t n) {
  detail::relu_backward_thread(this_thread(), du, dout, u, n);
}

// One block per row.
__global__ void layernorm_forward_kernel(float* out, float* stats, const float* x,
                                         const float* gain, const float* bias, int c) {
  detail::layernorm_forward_row(DeviceBlock{}, out, stats, x, gain, bias, blockIdx.x, c);
}

__global__ void layernorm_backward_input_kernel(float* dx, const float* dout, const float* x,
                                                const float* stats, const float* gain, int c) {
  detail::layernorm_backward_input_row(DeviceBlock{}, dx, dout, x, stats, gain, blockIdx.x, c);
}

// One thread per column.
__global__ void layernorm_backward_params_kernel(float* dgain, float* dbias, const float* dout,
                                                 const float* x, const float* stats, int rows,
                                                 int c) {
  detail::layernorm_backward_params_thread(this_thread(), dgain, dbias, dout, x, stats, rows, c);
}

__global__ void add_bias_kernel(float* out, const float* bias, std::int64_t n, int c) {
  detail::add_bias_thread(this_thread(), out, bias, n, c);
}

__global__ void column_sums_add_kernel(float* db, const float* dout, int rows, int c) {
  detail::column_sums_add_thread(this_thread(), db, dout, rows, c);
}

// One block per row.
__global__ void crossentropy_forward_kernel(float* probs, float* losses, const float* logits,
                                            const std::int32_t* targets, int v) {
  detail::crossentropy_forward_row(DeviceBlock{}, probs, losses, logits, targets, blockIdx.x, v);
}

__global__ void crossentropy_backward_kernel(float* dlogits, const float* probs,
                                             const std::int32_t* targets, float scale,
                                             std::int64_t n, int v) {
  detail::crossentropy_backward_thread(this_thread(), dlogits, probs, targets, scale, n, v);
}

__global__ void momentum_kernel(float* w, float* m, const float* g, std::int64_t n, float lr,
                                float mu) {
  detail::momentum_thread(this_thread(), w, m, g, n, lr, mu);
}

__global__ void adam_kernel(float* w, float* m, float* v, const float* g, std::int64_t n, float lr,
                            float b1, float b2, float eps, float correct1, float correct2) {
  detail::adam_thread(this_thread(), w, m, v, g, n, lr, b1, b2, eps, correct1, correct2);
}

__global__ void fill_kernel(float* x, std::int64_t n, float value) {
  detail::fill_thread(this_thread(), x, n, value);
}

__global__ void add_kernel(float* out, const float* a, const float* b, std::int64_t n) {
  detail::add_thread(this_thread(), out, a, b, n);
}

__global__ void axpy_kernel(float* y, float alpha, const float* x, std::int64_t n) {
  detail::axpy_thread(this_thread(), y, alpha, x, n);
}

__global__ void sgd_kernel(float* w, const float* g, std::int64_t n, float lr) {
  detail::sgd_thread(this_thread(), w, g, n, lr);
}

__global__ void rmsprop_kernel(float* w, float* v, const float* g, std::int64_t n, float lr,
                               float b2, float eps) {
  detail::rmsprop_thread(this_thread(), w, v, g, n, lr, b2, eps);
}

__global__ void any_nonfinite_kernel(int* found, const float* x, std::int64_t n) {
  detail::any_nonfinite_thread(this_thread(), found, x, n);
}

}  // namespace

// ---------------------------------------------------------------------------
// launchers

void gelu_forward(float* out, const float* u, std::int64_t n, cudaStream_t stream) {
  require_size("gelu_forward", n);
  if (n == 0) return;
  gelu_forward_kernel<<<grid_for(n), kBlock, 0, stream>>>(out, u, n);
  PS_CUDA_CHECK(cudaGetLastError());
}

void gelu_backward(float* du, const float* dout, const float* u, std::int64_t n,
                   cudaStream_t stream) {
  require_size("gelu_backward", n);
  if (n == 0) return;
  gelu_backward_kernel<<<grid_for(n), kBlock, 0, stream>>>(du, dout, u, n);
  PS_CUDA_CHECK(cudaGetLastError());
}

void relu_forward(float* out, const float* u, std::int64_t n, cudaStream_t stream) {
  require_size("relu_forward", n);
  if (n == 0) return;
  relu_forward_kernel<<<grid_for(n), kBlock, 0, stream>>>(out, u, n);
  PS_CUDA_CHECK(cudaGetLastError());
}

void relu_backward(float* du, const float* dout, const float* u, std::int64_t n,
                   cudaStream_t stream) {
  require_size("relu_backward", n);
  if (n == 0) return;
  relu_backward_kernel<<<grid_for(n), kBlock, 0, stream>>>(du, dout, u, n);
  PS_CUDA_CHECK(cudaGetLastError());
}

void layernorm_forward(float* out, float* stats, const float* x, const float* gain,
                       const float* bias, int rows, int c, cudaStream_t stream) {
  require_rows("layernorm_forward", rows, c);
  layernorm_forward_kernel<<<grid_for_block_rows(rows), kBlock, 0, stream>>>(out, stats, x, gain,
                                                                             bias, c);
  PS_CUDA_CHECK(cudaGetLastError());
}

void layernorm_backward_input(float* dx, const float* dout, const float* x, const float* stats,
                              const float* gain, int rows, int c, cudaStream_t stream) {
  require_rows("layernorm_backward_input", rows, c);
  layernorm_backward_input_kernel<<<grid_for_block_rows(rows), kBlock, 0, stream>>>(dx, dout, x,
                                                                                    stats, gain, c);
  PS_CUDA_CHECK(cudaGetLastError());
}

void layernorm_backward_params(float* dgain, float* dbias, const float* dout, const float* x,
                               const float* stats, int rows, int c, cudaStream_t stream) {
  require_rows("layernorm_backward_params", rows, c);
  layernorm_backward_params_kernel<<<grid_for_columns(c), kBlock, 0, stream>>>(dgain, dbias, dout,
                                                                               x, stats, rows, c);
  PS_CUDA_CHECK(cudaGetLastError());
}

void add_bias(float* out, const float* bias, int rows, int c, cudaStream_t stream) {
  require_rows("add_bias", rows, c);
  const std::int64_t n = static_cast<std::int64_t>(rows) * c;
  add_bias_kernel<<<grid_for(n), kBlock, 0, stream>>>(out, bias, n, c);
  PS_CUDA_CHECK(cudaGetLastError());
}

void column_sums_add(float* db, const float* dout, int rows, int c, cudaStream_t stream) {
  require_rows("column_sums_add", rows, c);
  column_sums_add_kernel<<<grid_for_columns(c), kBlock, 0, stream>>>(db, dout, rows, c);
  PS_CUDA_CHECK(cudaGetLastError());
}

void crossentropy_forward(float* probs, float* losses, const float* logits,
                          const std::int32_t* targets, int rows, int v, cudaStream_t stream) {
  require_rows("crossentropy_forward", rows, v);
  crossentropy_forward_kernel<<<grid_for_block_rows(rows), kBlock, 0, stream>>>(probs, losses,
                                                                                logits, targets, v);
  PS_CUDA_CHECK(cudaGetLastError());
}

void crossentropy_backward(float* dlogits, const float* probs, const std::int32_t* targets,
                           float scale, int rows, int v, cudaStream_t stream) {
  require_rows("crossentropy_backward", rows, v);
  const std::int64_t n = static_cast<std::int64_t>(rows) * v;
  crossentropy_backward_kernel<<<grid_for(n), kBlock, 0, stream>>>(dlogits, probs, targets, scale,
                                                                   n, v);
  PS_CUDA_CHECK(cudaGetLastError());
}

void momentum_update(float* w, float* m, const float* g, std::int64_t n, float lr, float mu,
                     cudaStream_t stream) {
  require_size("momentum_update", n);
  if (n == 0) return;
  momentum_kernel<<<grid_for(n), kBlock, 0, stream>>>(w, m, g, n, lr, mu);
  PS_CUDA_CHECK(cudaGetLastError());
}

void adam_update(float* w, float* m, float* v, const float* g, std::int64_t n, float lr,
                 float beta1, float beta2, float epsilon, float correct1, float correct2,
                 cudaStream_t stream) {
  require_size("adam_update", n);
  require(correct1 > 0.0f && correct2 > 0.0f, "adam_update", "bias corrections must be positive");
  if (n == 0) return;
  adam_kernel<<<grid_for(n), kBlock, 0, stream>>>(w, m, v, g, n, lr, beta1, beta2, epsilon,
                                                  correct1, correct2);
  PS_CUDA_CHECK(cudaGetLastError());
}

// cuBLAS is column-major: a row-major (r, c) matrix is its (c, r) transpose
// there. So row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T,
// computed as gemm(op_b, op_a) on B and A with the dimensions swapped.
void gemm(cublasHandle_t handle, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
          const float* a, const float* b, float beta, float* c) {
  require(m >= 1 && n >= 1 && k >= 1, "gemm",
          "needs m, n, k >= 1, got " + std::to_string(m) + ", " + std::to_string(n) + ", " +
              std::to_string(k));
  PS_CUBLAS_CHECK(cublasSgemm(handle, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                              trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b,
                              trans_b ? k : n, a, trans_a ? m : k, &beta, c, n));
}

// The same swap, matrix i of each operand at its pointer + i * stride (in
// floats).
void gemm_strided_batched(cublasHandle_t handle, bool trans_a, bool trans_b, int m, int n, int k,
                          float alpha, const float* a, std::int64_t stride_a, const float* b,
                          std::int64_t stride_b, float beta, float* c, std::int64_t stride_c,
                          int batch) {
  require(m >= 1 && n >= 1 && k >= 1 && batch >= 1, "gemm_strided_batched",
          "needs m, n, k, batch >= 1, got " + std::to_string(m) + ", " + std::to_string(n) + ", " +
              std::to_string(k) + ", " + std::to_string(batch));
  require(stride_a >= 0 && stride_b >= 0 && stride_c >= 0, "gemm_strided_batched",
          "negative stride");
  PS_CUBLAS_CHECK(cublasSgemmStridedBatched(handle, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                            trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b,
                                            trans_b ? k : n, stride_b, a, trans_a ? m : k, stride_a,
                                            &beta, c, n, stride_c, batch));
}

void fill(float* x, std::int64_t n, float value, cudaStream_t stream) {
  require_size("fill", n);
  if (n == 0) return;
  fill_kernel<<<grid_for(n), kBlock, 0, stream>>>(x, n, value);
  PS_CUDA_CHECK(cudaGetLastError());
}

void add(float* out, const float* a, const float* b, std::int64_t n, cudaStream_t stream) {
  require_size("add", n);
  if (n == 0) return;
  add_kernel<<<grid_for(n), kBlock, 0, stream>>>(out, a, b, n);
  PS_CUDA_CHECK(cudaGetLastError());
}

void axpy(float* y, float alpha, const float* x, std::int64_t n, cudaStream_t stream) {
  require_size("axpy", n);
  if (n == 0) return;
  axpy_kernel<<<grid_for(n), kBlock, 0, stream>>>(y, alpha, x, n);
  PS_CUDA_CHECK(cudaGetLastError());
}

void sgd_update(float* w, const float* g, std::int64_t n, float lr, cudaStream_t stream) {
  require_size("sgd_update", n);
  if (n == 0) return;
  sgd_kernel<<<grid_for(n), kBlock, 0, stream>>>(w, g, n, lr);
  PS_CUDA_CHECK(cudaGetLastError());
}

void rmsprop_update(float* w, float* v, const float* g, std::int64_t n, float lr, float beta2,
                    float epsilon, cudaStream_t stream) {
  require_size("rmsprop_update", n);
  if (n == 0) return;
  rmsprop_kernel<<<grid_for(n), kBlock, 0, stream>>>(w, v, g, n, lr, beta2, epsilon);
  PS_CUDA_CHECK(cudaGetLastError());
}

void any_nonfinite(int* found, const float* x, std::int64_t n, cudaStream_t stream) {
  require(found != nullptr, "any_nonfinite", "no flag to write to");
  require_size("any_nonfinite", n);
  PS_CUDA_CHECK(cudaMemsetAsync(found, 0, sizeof(int), stream));
  if (n == 0) return;
  any_nonfinite_kernel<<<grid_for(n), kBlock, 0, stream>>>(found, x, n);
  PS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace pipescope::exec::cuda
