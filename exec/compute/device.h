#pragma once
// Where a device stage computes: a GPU, or the host standing in for one. The
// device layers (device_layers.h) and the runtime's device path are written once
// against this interface. HostDevice (host_device.h) runs it on the CPU with the
// reference math of exec/compute/kernels.h, which is how the tests exercise all of it
// but the CUDA kernels themselves; CudaDevice (cuda/cuda_device.h) runs it on a
// GPU, one stream per Device object, so two stages on one GPU are two Devices.
//
// The model is llm.c's: raw row-major fp32 buffers and their shapes. Every
// operation is ordered on the device's stream of work and may return before it
// has run (CudaDevice); download(), all_finite() and Fence::synchronize() wait.
// Shapes are checked (std::invalid_argument) before anything is enqueued.

#include <cstdint>
#include <memory>
#include <string>

#include "costmodels/units.h"
#include "exec/compute/kernels.h"
#include "exec/compute/tensor.h"

namespace pipescope::exec {

// A point in a device's stream of work: complete once everything enqueued
// before it has run.
class Fence {
 public:
  virtual ~Fence() = default;
  // Waits on the host until the fence is complete.
  virtual void synchronize() const = 0;
};

// Devices are made with std::make_shared: their arrays keep them alive.
class Device : public std::enable_shared_from_this<Device> {
 public:
  virtual ~Device() = default;
  // "host", "cuda:0 (NVIDIA H100 80GB HBM3), stream 2"
  virtual std::string name() const = 0;

  // ---- memory: contents undefined until written
  DeviceMatrix matrix(Index rows, Index cols);
  DeviceArray<std::int32_t> ints(std::int64_t n);
  // Host to device; the host memory may be reused once the call returns.
  virtual void upload(const float* src, std::int64_t n, float* dst) = 0;
  virtual void upload(const std::int32_t* src, std::int64_t n, std::int32_t* dst) = 0;
  // Device to host, after the work enqueued before it.
  virtual void download(const float* src, std::int64_t n, float* dst) = 0;
  // dst (on this device) = src, which may live on another device; the caller
  // makes this device wait for src's producer first (wait(fence)).
  virtual void copy_from(const DeviceMatrix& src, DeviceMatrix& dst) = 0;

  // ---- order and time
  // A fence after the work enqueued so far.
  virtual std::shared_ptr<Fence> fence() = 0;
  // This device's later work waits for `fence`, which may be another device's.
  virtual void wait(const Fence& fence) = 0;
  virtual void synchronize() = 0;
  // ns from `from` to `to`, two completed fences of this device.
  virtual SimTime elapsed_ns(const Fence& from, const Fence& to) const = 0;

  // ---- elementwise
  virtual void fill(float* x, std::int64_t n, float value) = 0;
  // out = a + b; out may be a or b.
  virtual void add(float* out, const float* a, const float* b, std::int64_t n) = 0;
  // y += alpha x
  virtual void axpy(float* y, float alpha, const float* x, std::int64_t n) = 0;
  virtual void gelu_forward(float* out, const float* u, std::int64_t n) = 0;
  virtual void gelu_backward(float* du, const float* dout, const float* u, std::int64_t n) = 0;
  virtual void relu_forward(float* out, const float* u, std::int64_t n) = 0;
  virtual void relu_backward(float* du, const float* dout, const float* u, std::int64_t n) = 0;

  // ---- matrix products, row-major: C (m, n) = alpha op(A) op(B) + beta C, A
  // (m, k) or (k, m) transposed, B (k, n) or (n, k) transposed; the batched form
  // repeats it `batch` times, matrix i at a + i stride_a (and b, c likewise).
  virtual void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                    const float* b, float beta, float* c) = 0;
  virtual void gemm_strided_batched(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                                    const float* a, std::int64_t stride_a, const float* b,
                                    std::int64_t stride_b, float beta, float* c,
                                    std::int64_t stride_c, int batch) = 0;
  // out (rows, c) += bias (c) on every row; db (c) += the column sums of dout.
  virtual void add_bias(float* out, const float* bias, int rows, int c) = 0;
  virtual void column_sums_add(float* db, const float* dout, int rows, int c) = 0;

  // ---- LayerNorm (exec/compute/kernels.h): stats (rows, 2) holds mean and 1/std
  virtual void layernorm_forward(float* out, float* stats, const float* x, const float* gain,
                                 const float* bias, int rows, int c) = 0;
  virtual void layernorm_backward_input(float* dx, const float* dout, const float* x,
                                        const float* stats, const float* gain, int rows, int c) = 0;
  // Adds the gain's and bias's gradients.
  virtual void layernorm_backward_params(float* dgain, float* dbias, const float* dout,
                                         const float* x, const float* stats, int rows, int c) = 0;

  // ---- causal self-attention in head-major form: q, k, v, o are (b, a, s,
  // dh), one s x dh block per sequence and query head (key/value heads repeated
  // for the query heads that read them, grouped-query attention)
  // qkv (b*s, h + 2 d_kv), [Q | K | V] per token -> q, k, v.
  virtual void split_qkv(float* q, float* k, float* v, const float* qkv,
                         const AttentionShape& shape) = 0;
  // The reverse for the gradients: dqkv = [dq | dk | dv], a key/value head's
  // gradient summed over the query heads that read it.
  virtual void merge_qkv_grad(float* dqkv, const float* dq, const float* dk, const float* dv,
                              const AttentionShape& shape) = 0;
  // o (b, a, s, dh) -> out (b*s, h), head j in columns j dh ..; and back.
  virtual void merge_heads(float* out, const float* o, const AttentionShape& shape) = 0;
  virtual void split_heads(float* o, const float* out, const AttentionShape& shape) = 0;
  // scores and probs are `rows` rows of s, in s x s blocks: row r is position
  // t = r mod s, which attends to 0..t: probs = softmax(scale * scores) over
  // 0..t, 0 after t. probs may be scores.
  virtual void causal_softmax_forward(float* probs, const float* scores, float scale, int rows,
                                      int s) = 0;
  // dscores = scale * P * (dP - rowsum(P * dP)) from probs P and their gradient dP.
  virtual void causal_softmax_backward(float* dscores, const float* probs, const float* dprobs,
                                       float scale, int rows, int s) = 0;

  // ---- loss (exec/compute/kernels.h): probs gets the softmax, losses each row's
  // -log softmax[target]; dlogits = (probs - onehot) * scale
  virtual void crossentropy_forward(float* probs, float* losses, const float* logits,
                                    const std::int32_t* targets, int rows, int v) = 0;
  virtual void crossentropy_backward(float* dlogits, const float* probs,
                                     const std::int32_t* targets, float scale, int rows, int v) = 0;

  // ---- embedding: out[r] = table[ids[r]] + positions[r mod seq], rows of d;
  // the backward adds dout[r] to dtable[ids[r]] and, unless dpositions is null,
  // to dpositions[r mod seq]. ids are in [0, table rows) (checked on the host).
  virtual void embedding_forward(float* out, const std::int32_t* ids, const float* table,
                                 const float* positions, int rows, int seq, int d) = 0;
  virtual void embedding_backward(float* dtable, float* dpositions, const std::int32_t* ids,
                                  const float* dout, int rows, int seq, int d) = 0;

  // ---- optimizers (exec/compute/optimizer.cpp), in place; g is left as it is
  virtual void sgd_update(float* w, const float* g, std::int64_t n, float lr) = 0;
  virtual void momentum_update(float* w, float* m, const float* g, std::int64_t n, float lr,
                               float mu) = 0;
  virtual void rmsprop_update(float* w, float* v, const float* g, std::int64_t n, float lr,
                              float beta2, float epsilon) = 0;
  // correct1 = 1 - beta1^t, correct2 = 1 - beta2^t at step t.
  virtual void adam_update(float* w, float* m, float* v, const float* g, std::int64_t n, float lr,
                           float beta1, float beta2, float epsilon, float correct1,
                           float correct2) = 0;

  // ---- checks, after the work enqueued before them
  virtual bool all_finite(const float* x, std::int64_t n) = 0;

 protected:
  virtual void* allocate(std::int64_t bytes) = 0;
  // Ordered after the work enqueued so far; never throws.
  virtual void release(void* p) noexcept = 0;

 private:
  template <typename T>
  DeviceArray<T> array(std::int64_t n);
};

// Copies between a device matrix and a host one (blocking).
Matrix download(const DeviceMatrix& m);
DeviceMatrix upload(Device& device, const Matrix& m);

// Whether every entry is finite (on a device: after the work enqueued before).
bool all_finite(const Tensor& t);
// The tensor's values on the host (a copy from a device, after its work).
Matrix to_host(const Tensor& t);

// The kernels every backend overrides, declared once: HostDevice and
// CudaDevice each write PIPESCOPE_DEVICE_KERNEL_OVERRIDES in their class, and
// the compiler holds every line to Device's pure virtual of that name above,
// where each kernel's contract is written.
#define PIPESCOPE_DEVICE_KERNEL_OVERRIDES                                                         \
  void fill(float* x, std::int64_t n, float value) override;                                      \
  void add(float* out, const float* a, const float* b, std::int64_t n) override;                  \
  void axpy(float* y, float alpha, const float* x, std::int64_t n) override;                      \
  void gelu_forward(float* out, const float* u, std::int64_t n) override;                         \
  void gelu_backward(float* du, const float* dout, const float* u, std::int64_t n) override;      \
  void relu_forward(float* out, const float* u, std::int64_t n) override;                         \
  void relu_backward(float* du, const float* dout, const float* u, std::int64_t n) override;      \
  void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,         \
            const float* b, float beta, float* c) override;                                       \
  void gemm_strided_batched(bool trans_a, bool trans_b, int m, int n, int k, float alpha,         \
                            const float* a, std::int64_t stride_a, const float* b,                \
                            std::int64_t stride_b, float beta, float* c, std::int64_t stride_c,   \
                            int batch) override;                                                  \
  void add_bias(float* out, const float* bias, int rows, int c) override;                         \
  void column_sums_add(float* db, const float* dout, int rows, int c) override;                   \
  void layernorm_forward(float* out, float* stats, const float* x, const float* gain,             \
                         const float* bias, int rows, int c) override;                            \
  void layernorm_backward_input(float* dx, const float* dout, const float* x, const float* stats, \
                                const float* gain, int rows, int c) override;                     \
  void layernorm_backward_params(float* dgain, float* dbias, const float* dout, const float* x,   \
                                 const float* stats, int rows, int c) override;                   \
  void split_qkv(float* q, float* k, float* v, const float* qkv, const AttentionShape& shape)     \
      override;                                                                                   \
  void merge_qkv_grad(float* dqkv, const float* dq, const float* dk, const float* dv,             \
                      const AttentionShape& shape) override;                                      \
  void merge_heads(float* out, const float* o, const AttentionShape& shape) override;             \
  void split_heads(float* o, const float* out, const AttentionShape& shape) override;             \
  void causal_softmax_forward(float* probs, const float* scores, float scale, int rows, int s)    \
      override;                                                                                   \
  void causal_softmax_backward(float* dscores, const float* probs, const float* dprobs,           \
                               float scale, int rows, int s) override;                            \
  void crossentropy_forward(float* probs, float* losses, const float* logits,                     \
                            const std::int32_t* targets, int rows, int v) override;               \
  void crossentropy_backward(float* dlogits, const float* probs, const std::int32_t* targets,     \
                             float scale, int rows, int v) override;                              \
  void embedding_forward(float* out, const std::int32_t* ids, const float* table,                 \
                         const float* positions, int rows, int seq, int d) override;              \
  void embedding_backward(float* dtable, float* dpositions, const std::int32_t* ids,              \
                          const float* dout, int rows, int seq, int d) override;                  \
  void sgd_update(float* w, const float* g, std::int64_t n, float lr) override;                   \
  void momentum_update(float* w, float* m, const float* g, std::int64_t n, float lr, float mu)    \
      override;                                                                                   \
  void rmsprop_update(float* w, float* v, const float* g, std::int64_t n, float lr, float beta2,  \
                      float epsilon) override;                                                    \
  void adam_update(float* w, float* m, float* v, const float* g, std::int64_t n, float lr,        \
                   float beta1, float beta2, float epsilon, float correct1, float correct2)       \
      override;                                                                                   \
  bool all_finite(const float* x, std::int64_t n) override;

}  // namespace pipescope::exec
