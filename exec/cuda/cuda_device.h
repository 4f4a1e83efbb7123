#pragma once
// The Device interface (exec/device.h) on one GPU. Each CudaDevice owns a
// compute stream, with a cuBLAS handle bound to it, and a copy stream for
// copy_from: two stages on one GPU are two CudaDevices, two streams. Memory
// comes from the GPU's stream-ordered pool (cudaMallocAsync on the compute
// stream, kept for reuse); every operation is the HostDevice reference's
// (exec/host_device.cpp) on the kernels of exec/cuda/kernels.h, enqueued on the
// compute stream. Shapes are checked by the checks HostDevice makes
// (exec/device_checks.h, std::invalid_argument); CUDA failures are CudaError.
//
// Threads: one host thread makes the compute calls of a CudaDevice; copy_from
// may come from another, and arrays may be released from any. Every call makes
// the GPU current on its thread first.

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "exec/device.h"

namespace pipescope::exec::cuda {

class CudaDevice final : public Device {
 public:
  // GPU `gpu` of those visible; `label` ends the name ("stage 2"). Throws
  // CudaError when no GPU is visible (with the reason) or a CUDA call fails,
  // std::invalid_argument for an index out of range.
  explicit CudaDevice(int gpu, std::string label = "");
  ~CudaDevice() override;
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  int gpu() const { return gpu_; }
  cudaStream_t stream() const { return compute_; }

  // "cuda:0 (NVIDIA H100 80GB HBM3), stage 2"
  std::string name() const override { return name_; }
  void upload(const float* src, std::int64_t n, float* dst) override;
  void upload(const std::int32_t* src, std::int64_t n, std::int32_t* dst) override;
  void download(const float* src, std::int64_t n, float* dst) override;
  void copy_from(const DeviceMatrix& src, DeviceMatrix& dst) override;

  std::shared_ptr<Fence> fence() override;
  void wait(const Fence& fence) override;
  void synchronize() override;
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

  // A target outside [0, v) gives a NaN loss here (HostDevice throws): the
  // targets are on the GPU, and reading them back would stall the stream.
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

 protected:
  void* allocate(std::int64_t bytes) override;
  void release(void* p) noexcept override;

 private:
  void open();                // the streams, the handle, the pool; may throw
  void close() noexcept;      // whatever open() made
  void make_current() const;  // cudaSetDevice(gpu_) on the calling thread
  void upload_bytes(void* dst, const void* src, std::size_t bytes);

  int gpu_ = 0;
  std::string name_;
  cudaStream_t compute_ = nullptr;
  cudaStream_t copy_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  int* nonfinite_ = nullptr;  // all_finite's flag, one int on the GPU
};

// Where the stages of a run go on the visible GPUs: model stage s of pipeline
// device d on GPU d mod G, each stage on its own CudaDevice (stream). With one
// GPU every stage is on it; the stages then share it, as compare models.
// Throws CudaError with the reason when no GPU is visible.
struct GpuPlacement {
  int gpus = 0;  // visible
  std::function<std::shared_ptr<Device>(int stage, int device)> stage_device;
};
GpuPlacement place_on_gpus();

}  // namespace pipescope::exec::cuda
