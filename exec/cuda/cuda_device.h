#pragma once
// The Device interface (exec/compute/device.h) on one GPU. Each CudaDevice owns a
// compute stream, with a cuBLAS handle bound to it, and a copy stream for
// copy_from: two stages on one GPU are two CudaDevices, two streams. Memory
// comes from the GPU's stream-ordered pool (cudaMallocAsync on the compute
// stream, kept for reuse); every operation is the HostDevice reference's
// (exec/compute/host_device.cpp) on the kernels of exec/cuda/kernels.h, enqueued on the
// compute stream. Shapes are checked by the checks HostDevice makes
// (exec/compute/device_checks.h, std::invalid_argument); CUDA failures are CudaError.
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

#include "exec/backends.h"
#include "exec/compute/device.h"

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

  // crossentropy_forward: a target outside [0, v) gives a NaN loss here
  // (HostDevice throws): the targets are on the GPU, and reading them back
  // would stall the stream.
  PIPESCOPE_DEVICE_KERNEL_OVERRIDES

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

// Where the stages of a run go on the visible GPUs (exec/backends.h), each
// stage on its own CudaDevice. Throws CudaError with the reason when no GPU is
// visible.
GpuPlacement place_on_gpus();

}  // namespace pipescope::exec::cuda
