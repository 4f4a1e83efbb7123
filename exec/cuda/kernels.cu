// The CUDA backend's elementwise, LayerNorm, loss, optimizer and product
// kernels (kernels.h). Each operation mirrors its CPU reference line for line,
// exec/kernels.h or HostDevice (exec/host_device.cpp); the formulas are there.

#include <cmath>
#include <stdexcept>
#include <string>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/kernel_common.cuh"
#include "exec/cuda/kernels.h"

namespace pipescope::exec::cuda {

namespace {

using detail::block_reduce;
using detail::grid_for;
using detail::grid_for_columns;
using detail::grid_start;
using detail::grid_stride;
using detail::kBlock;
using detail::require;
using detail::require_rows;
using detail::require_size;

constexpr float kLayerNormEps = 1e-5f;
constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)

// ---------------------------------------------------------------------------
// kernels

__device__ float gelu(float x) {
  return 0.5f * x * (1.0f + tanhf(kGeluK * (x + 0.044715f * x * x * x)));
}

__device__ float gelu_slope(float x) {
  const float t = tanhf(kGeluK * (x + 0.044715f * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kGeluK * (1.0f + 3.0f * 0.044715f * x * x);
}

__global__ void gelu_forward_kernel(float* out, const float* u, std::int64_t n) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) {
    out[i] = gelu(u[i]);
  }
}

__global__ void gelu_backward_kernel(float* du, const float* dout, const float* u, std::int64_t n) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) {
    du[i] = dout[i] * gelu_slope(u[i]);
  }
}

__global__ void relu_forward_kernel(float* out, const float* u, std::int64_t n) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) {
    out[i] = u[i] < 0.0f ? 0.0f : u[i];  // a NaN stays NaN, as on the CPU (fmaxf would hide it)
  }
}

__global__ void relu_backward_kernel(float* du, const float* dout, const float* u, std::int64_t n) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) {
    du[i] = u[i] > 0.0f ? dout[i] : 0.0f;
  }
}

// One block per row: the mean, then the variance about it (two passes, as the
// reference), then the normalised row.
__global__ void layernorm_forward_kernel(float* out, float* stats, const float* x,
                                         const float* gain, const float* bias, int c) {
  const float* row = x + static_cast<std::int64_t>(blockIdx.x) * c;
  float* out_row = out + static_cast<std::int64_t>(blockIdx.x) * c;
  float s = 0.0f;
  for (int j = threadIdx.x; j < c; j += blockDim.x) s += row[j];
  const float mean = block_reduce<false>(s) / static_cast<float>(c);
  float q = 0.0f;
  for (int j = threadIdx.x; j < c; j += blockDim.x) q += (row[j] - mean) * (row[j] - mean);
  const float var = block_reduce<false>(q) / static_cast<float>(c);
  const float rstd = 1.0f / sqrtf(var + kLayerNormEps);
  for (int j = threadIdx.x; j < c; j += blockDim.x) {
    out_row[j] = (row[j] - mean) * rstd * gain[j] + bias[j];
  }
  if (threadIdx.x == 0) {
    stats[2 * blockIdx.x] = mean;
    stats[2 * blockIdx.x + 1] = rstd;
  }
}

// One block per row: dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)),
// dxhat = dout * gain.
__global__ void layernorm_backward_input_kernel(float* dx, const float* dout, const float* x,
                                                const float* stats, const float* gain, int c) {
  const std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * c;
  const float mean = stats[2 * blockIdx.x];
  const float rstd = stats[2 * blockIdx.x + 1];
  float s = 0.0f;
  float sx = 0.0f;
  for (int j = threadIdx.x; j < c; j += blockDim.x) {
    const float xhat = (x[base + j] - mean) * rstd;
    const float dxhat = dout[base + j] * gain[j];
    s += dxhat;
    sx += dxhat * xhat;
  }
  const float mean_dxhat = block_reduce<false>(s) / static_cast<float>(c);
  const float mean_dxhat_xhat = block_reduce<false>(sx) / static_cast<float>(c);
  for (int j = threadIdx.x; j < c; j += blockDim.x) {
    const float xhat = (x[base + j] - mean) * rstd;
    const float dxhat = dout[base + j] * gain[j];
    dx[base + j] = rstd * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat);
  }
}

// One thread per column, rows in order: deterministic sums.
__global__ void layernorm_backward_params_kernel(float* dgain, float* dbias, const float* dout,
                                                 const float* x, const float* stats, int rows,
                                                 int c) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
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

__global__ void add_bias_kernel(float* out, const float* bias, std::int64_t n, int c) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) {
    out[i] += bias[i % c];
  }
}

__global__ void column_sums_add_kernel(float* db, const float* dout, int rows, int c) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= c) return;
  float s = 0.0f;
  for (int r = 0; r < rows; ++r) s += dout[static_cast<std::int64_t>(r) * c + j];
  db[j] += s;
}

// One block per row. A target outside [0, v) gives a NaN loss (the CPU path
// checks targets before it runs; a kernel cannot throw).
__global__ void crossentropy_forward_kernel(float* probs, float* losses, const float* logits,
                                            const std::int32_t* targets, int v) {
  const std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * v;
  float m = -INFINITY;
  for (int j = threadIdx.x; j < v; j += blockDim.x) m = fmaxf(m, logits[base + j]);
  const float max = block_reduce<true>(m);
  float s = 0.0f;
  for (int j = threadIdx.x; j < v; j += blockDim.x) {
    const float e = expf(logits[base + j] - max);
    probs[base + j] = e;
    s += e;
  }
  const float sum = block_reduce<false>(s);
  for (int j = threadIdx.x; j < v; j += blockDim.x) probs[base + j] /= sum;
  if (threadIdx.x == 0) {
    const std::int32_t t = targets[blockIdx.x];
    losses[blockIdx.x] = t >= 0 && t < v ? logf(sum) + max - logits[base + t] : NAN;
  }
}

__global__ void crossentropy_backward_kernel(float* dlogits, const float* probs,
                                             const std::int32_t* targets, float scale,
                                             std::int64_t n, int v) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) {
    const std::int64_t r = i / v;
    const float hot = targets[r] == static_cast<std::int32_t>(i % v) ? 1.0f : 0.0f;
    dlogits[i] = (probs[i] - hot) * scale;
  }
}

__global__ void momentum_kernel(float* w, float* m, const float* g, std::int64_t n, float lr,
                                float mu) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) {
    m[i] = mu * m[i] + g[i];
    w[i] -= lr * m[i];
  }
}

__global__ void adam_kernel(float* w, float* m, float* v, const float* g, std::int64_t n, float lr,
                            float b1, float b2, float eps, float correct1, float correct2) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) {
    m[i] = b1 * m[i] + (1.0f - b1) * g[i];
    v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    w[i] -= lr * (m[i] / correct1) / (sqrtf(v[i] / correct2) + eps);
  }
}

__global__ void fill_kernel(float* x, std::int64_t n, float value) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) x[i] = value;
}

// out may be a or b: each element is read before it is written, by one thread.
__global__ void add_kernel(float* out, const float* a, const float* b, std::int64_t n) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) out[i] = a[i] + b[i];
}

__global__ void axpy_kernel(float* y, float alpha, const float* x, std::int64_t n) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) y[i] += alpha * x[i];
}

__global__ void sgd_kernel(float* w, const float* g, std::int64_t n, float lr) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) w[i] -= lr * g[i];
}

__global__ void rmsprop_kernel(float* w, float* v, const float* g, std::int64_t n, float lr,
                               float b2, float eps) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) {
    v[i] = b2 * v[i] + (1.0f - b2) * (g[i] * g[i]);
    w[i] -= lr * g[i] / (sqrtf(v[i]) + eps);
  }
}

// *found = 1 when some x[i] is NaN or infinite. Every thread writes the same
// value, so the racing stores agree; *found is zeroed before the launch.
__global__ void any_nonfinite_kernel(int* found, const float* x, std::int64_t n) {
  bool bad = false;
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) bad = bad || !isfinite(x[i]);
  if (bad) *found = 1;
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
  layernorm_forward_kernel<<<static_cast<unsigned>(rows), kBlock, 0, stream>>>(out, stats, x, gain,
                                                                               bias, c);
  PS_CUDA_CHECK(cudaGetLastError());
}

void layernorm_backward_input(float* dx, const float* dout, const float* x, const float* stats,
                              const float* gain, int rows, int c, cudaStream_t stream) {
  require_rows("layernorm_backward_input", rows, c);
  layernorm_backward_input_kernel<<<static_cast<unsigned>(rows), kBlock, 0, stream>>>(
      dx, dout, x, stats, gain, c);
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
  crossentropy_forward_kernel<<<static_cast<unsigned>(rows), kBlock, 0, stream>>>(
      probs, losses, logits, targets, v);
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
