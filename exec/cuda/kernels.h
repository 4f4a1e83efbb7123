#pragma once
// The CUDA backend's kernels, one launcher per operation of exec/kernels.h (the
// CPU reference, which the tests and `pipescope selftest --backend cuda` hold
// these to). Every launcher takes device pointers, the shapes and a stream,
// checks the shapes (std::invalid_argument) and the launch (CudaError), and
// returns without waiting for the kernel. Matrices are row-major fp32; rows is
// the number of tokens (b*s) or samples.

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace pipescope::exec::cuda {

// out = GeLU(u) (tanh approximation, as gelu_forward); u, out have n entries.
void gelu_forward(float* out, const float* u, std::int64_t n, cudaStream_t stream);
// du = dout * GeLU'(u); n entries each.
void gelu_backward(float* du, const float* dout, const float* u, std::int64_t n,
                   cudaStream_t stream);
void relu_forward(float* out, const float* u, std::int64_t n, cudaStream_t stream);
void relu_backward(float* du, const float* dout, const float* u, std::int64_t n,
                   cudaStream_t stream);

// x, out are (rows, c), gain and bias (c); stats (rows, 2) gets each row's mean
// and 1 / sqrt(variance + 1e-5).
void layernorm_forward(float* out, float* stats, const float* x, const float* gain,
                       const float* bias, int rows, int c, cudaStream_t stream);
// dx (rows, c) from dout, x (rows, c), stats (rows, 2) and gain (c).
void layernorm_backward_input(float* dx, const float* dout, const float* x, const float* stats,
                              const float* gain, int rows, int c, cudaStream_t stream);
// Adds sum over rows of dout * xhat to dgain (c) and of dout to dbias (c).
void layernorm_backward_params(float* dgain, float* dbias, const float* dout, const float* x,
                               const float* stats, int rows, int c, cudaStream_t stream);

// out (rows, c) += bias (c) on every row.
void add_bias(float* out, const float* bias, int rows, int c, cudaStream_t stream);
// db (c) += the column sums of dout (rows, c).
void column_sums_add(float* db, const float* dout, int rows, int c, cudaStream_t stream);

// logits, probs are (rows, v), targets rows entries in [0, v); probs gets the
// softmax and losses (rows) each row's -log softmax[target].
void crossentropy_forward(float* probs, float* losses, const float* logits,
                          const std::int32_t* targets, int rows, int v, cudaStream_t stream);
// dlogits (rows, v) = (probs - onehot(targets)) * scale.
void crossentropy_backward(float* dlogits, const float* probs, const std::int32_t* targets,
                           float scale, int rows, int v, cudaStream_t stream);

// The optimizers of exec/optimizer.cpp on n parameters, in place; the
// gradient is left as it is (the caller zeroes it).
void momentum_update(float* w, float* m, const float* g, std::int64_t n, float lr, float mu,
                     cudaStream_t stream);
// correct1 = 1 - beta1^t, correct2 = 1 - beta2^t for step t.
void adam_update(float* w, float* m, float* v, const float* g, std::int64_t n, float lr,
                 float beta1, float beta2, float epsilon, float correct1, float correct2,
                 cudaStream_t stream);

// Row-major C (m, n) = alpha op(A) op(B) + beta C on cuBLAS, op(X) = X^T when
// trans_x: A is (m, k), or (k, m) transposed; B (k, n), or (n, k) transposed.
// The handle's stream is used.
void gemm(cublasHandle_t handle, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
          const float* a, const float* b, float beta, float* c);

}  // namespace pipescope::exec::cuda
