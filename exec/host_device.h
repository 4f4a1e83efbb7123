#pragma once
// The host standing in for a GPU: every Device operation run at once on the
// CPU with the reference math (exec/kernels.h, exec/optimizer.cpp), fences
// complete when made and timed by the steady clock. The tests run the device
// layers and the runtime's device path on it; `selftest --backend cuda` holds
// CudaDevice to it operation by operation.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "exec/device.h"

namespace pipescope::exec {

class HostDevice : public Device {
 public:
  // `label` names it ("host", "gpu 1" for a test's second device).
  explicit HostDevice(std::string label = "host") : label_(std::move(label)) {}

  std::string name() const override { return label_; }
  void upload(const float* src, std::int64_t n, float* dst) override;
  void upload(const std::int32_t* src, std::int64_t n, std::int32_t* dst) override;
  void download(const float* src, std::int64_t n, float* dst) override;
  void copy_from(const DeviceMatrix& src, DeviceMatrix& dst) override;

  std::shared_ptr<Fence> fence() override;
  void wait(const Fence& fence) override;
  void synchronize() override {}
  SimTime elapsed_ns(const Fence& from, const Fence& to) const override;

  void fill(float* x, std::int64_t n, float value) override;
  void add(float* out, const float* a, const float* b, std::int64_t n) override;
  void axpy(float* y, float alpha, const float* x, std::int64_t n) override;
  void gelu_forward(float* out, const float* u, std::int64_t n) override;
  void gelu_backward(float* du, const float* dout, const float* u, std::int64_t n) override;
  void relu_forward(float* out, const float* u, std::int64_t n) override;
  void relu_backward(float* du, const float* dout, const float* u, std::int64_t n) override;

  void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
            const float* b, float beta, float* c) override;
  void gemm_strided_batched(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                            const float* a, std::int64_t stride_a, const float* b,
                            std::int64_t stride_b, float beta, float* c, std::int64_t stride_c,
                            int batch) override;
  void add_bias(float* out, const float* bias, int rows, int c) override;
  void column_sums_add(float* db, const float* dout, int rows, int c) override;

  void layernorm_forward(float* out, float* stats, const float* x, const float* gain,
                         const float* bias, int rows, int c) override;
  void layernorm_backward_input(float* dx, const float* dout, const float* x, const float* stats,
                                const float* gain, int rows, int c) override;
  void layernorm_backward_params(float* dgain, float* dbias, const float* dout, const float* x,
                                 const float* stats, int rows, int c) override;

  void split_qkv(float* q, float* k, float* v, const float* qkv,
                 const AttentionShape& shape) override;
  void merge_qkv_grad(float* dqkv, const float* dq, const float* dk, const float* dv,
                      const AttentionShape& shape) override;
  void merge_heads(float* out, const float* o, const AttentionShape& shape) override;
  void split_heads(float* o, const float* out, const AttentionShape& shape) override;
  void causal_softmax_forward(float* probs, const float* scores, float scale, int rows,
                              int s) override;
  void causal_softmax_backward(float* dscores, const float* probs, const float* dprobs, float scale,
                               int rows, int s) override;

  void crossentropy_forward(float* probs, float* losses, const float* logits,
                            const std::int32_t* targets, int rows, int v) override;
  void crossentropy_backward(float* dlogits, const float* probs, const std::int32_t* targets,
                             float scale, int rows, int v) override;

  void embedding_forward(float* out, const std::int32_t* ids, const float* table,
                         const float* positions, int rows, int seq, int d) override;
  void embedding_backward(float* dtable, float* dpositions, const std::int32_t* ids,
                          const float* dout, int rows, int seq, int d) override;

  void sgd_update(float* w, const float* g, std::int64_t n, float lr) override;
  void momentum_update(float* w, float* m, const float* g, std::int64_t n, float lr,
                       float mu) override;
  void rmsprop_update(float* w, float* v, const float* g, std::int64_t n, float lr, float beta2,
                      float epsilon) override;
  void adam_update(float* w, float* m, float* v, const float* g, std::int64_t n, float lr,
                   float beta1, float beta2, float epsilon, float correct1,
                   float correct2) override;

  bool all_finite(const float* x, std::int64_t n) override;

  // Bytes allocated and not yet released (for the tests).
  std::int64_t bytes_in_use() const { return bytes_in_use_.load(); }

 protected:
  void* allocate(std::int64_t bytes) override;
  void release(void* p) noexcept override;

 private:
  std::string label_;
  std::atomic<std::int64_t> bytes_in_use_{0};  // arrays are freed from any thread
};

}  // namespace pipescope::exec
