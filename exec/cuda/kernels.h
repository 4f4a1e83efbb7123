#pragma once
// The CUDA backend's kernels, one launcher per operation of exec/compute/kernels.h and
// of the Device interface (exec/compute/device.h); their CPU references are
// exec/compute/kernels.h and HostDevice (exec/compute/host_device.cpp), which the tests and
// `pipescope selftest --backend cuda` hold these to. Every launcher takes
// device pointers, the shapes and a stream, checks the shapes
// (std::invalid_argument) and the launch (CudaError), and returns without
// waiting for the kernel. Matrices are row-major fp32; rows is the number of
// tokens (b*s) or samples. kernels.cu holds the elementwise, LayerNorm, loss,
// optimizer and product launchers; sequence_kernels.cu those on (batch,
// sequence) layouts: attention heads, causal softmax and the embedding. The
// kernels' work is in kernel_bodies.h.

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "exec/cuda/kernel_bodies.h"

namespace pipescope::exec::cuda {

// x (n) = value.
void fill(float* x, std::int64_t n, float value, cudaStream_t stream);
// out = a + b on n entries; out may be a or b.
void add(float* out, const float* a, const float* b, std::int64_t n, cudaStream_t stream);
// y += alpha x on n entries.
void axpy(float* y, float alpha, const float* x, std::int64_t n, cudaStream_t stream);

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

// The optimizers of exec/compute/optimizer.cpp on n parameters, in place; the
// gradient is left as it is (the caller zeroes it).
void momentum_update(float* w, float* m, const float* g, std::int64_t n, float lr, float mu,
                     cudaStream_t stream);
// correct1 = 1 - beta1^t, correct2 = 1 - beta2^t for step t.
void adam_update(float* w, float* m, float* v, const float* g, std::int64_t n, float lr,
                 float beta1, float beta2, float epsilon, float correct1, float correct2,
                 cudaStream_t stream);

// w -= lr g.
void sgd_update(float* w, const float* g, std::int64_t n, float lr, cudaStream_t stream);
// v = beta2 v + (1 - beta2) g^2; w -= lr g / (sqrt(v) + epsilon).
void rmsprop_update(float* w, float* v, const float* g, std::int64_t n, float lr, float beta2,
                    float epsilon, cudaStream_t stream);

// *found (one int on the device) = 1 when one of x (n) is NaN or infinite, else
// 0; the caller reads it back after the stream has run it.
void any_nonfinite(int* found, const float* x, std::int64_t n, cudaStream_t stream);

// Row-major C (m, n) = alpha op(A) op(B) + beta C on cuBLAS, op(X) = X^T when
// trans_x: A is (m, k), or (k, m) transposed; B (k, n), or (n, k) transposed.
// The handle's stream is used.
void gemm(cublasHandle_t handle, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
          const float* a, const float* b, float beta, float* c);
// gemm `batch` times, matrix i of A, B and C at a + i stride_a, b + i stride_b,
// c + i stride_c (strides in floats, >= 0).
void gemm_strided_batched(cublasHandle_t handle, bool trans_a, bool trans_b, int m, int n, int k,
                          float alpha, const float* a, std::int64_t stride_a, const float* b,
                          std::int64_t stride_b, float beta, float* c, std::int64_t stride_c,
                          int batch);

// ---- sequence_kernels.cu

// HeadShape, the shape of causal self-attention, is in kernel_bodies.h.

// qkv -> q, k, v; a key/value head is repeated for the query heads that read it.
void split_qkv(float* q, float* k, float* v, const float* qkv, const HeadShape& shape,
               cudaStream_t stream);
// dqkv = [dq | dk | dv] from the head-major gradients, a key/value head's
// gradient summed over the query heads that read it (in head order, no atomics).
void merge_qkv_grad(float* dqkv, const float* dq, const float* dk, const float* dv,
                    const HeadShape& shape, cudaStream_t stream);
// o (b, heads, s, dh) -> out (b*s, h), head j in columns j dh ..; and back.
void merge_heads(float* out, const float* o, const HeadShape& shape, cudaStream_t stream);
void split_heads(float* o, const float* out, const HeadShape& shape, cudaStream_t stream);

// scores, probs are `rows` rows of s in s x s blocks (rows a multiple of s); row
// r is position t = r mod s: probs = softmax(scale scores) over 0..t, 0 after.
// probs may be scores.
void causal_softmax_forward(float* probs, const float* scores, float scale, int rows, int s,
                            cudaStream_t stream);
// dscores = scale P (dP - rowsum(P dP)) from probs P and their gradient dP.
void causal_softmax_backward(float* dscores, const float* probs, const float* dprobs, float scale,
                             int rows, int s, cudaStream_t stream);

// out (rows, d) = table[ids[r]] + positions[r mod seq]; ids must be rows of the
// table (the kernel cannot check: it is not told the table's size).
void embedding_forward(float* out, const std::int32_t* ids, const float* table,
                       const float* positions, int rows, int seq, int d, cudaStream_t stream);
// dtable[ids[r]] += dout[r] and, unless dpositions is null, dpositions[r mod
// seq] += dout[r], with atomicAdd: the order of the sums varies from run to run.
void embedding_backward(float* dtable, float* dpositions, const std::int32_t* ids,
                        const float* dout, int rows, int seq, int d, cudaStream_t stream);

}  // namespace pipescope::exec::cuda
