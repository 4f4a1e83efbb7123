#include "exec/cuda/gpu.h"

#include <cuda_runtime_api.h>

namespace pipescope::exec::cuda {

GpuAvailability visible_gpus() {
  GpuAvailability a;
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    a.reason = std::string("no CUDA GPU visible: ") + cudaGetErrorString(e) + " (" +
               cudaGetErrorName(e) + ")";
    return a;
  }
  a.devices = count;
  if (count == 0) a.reason = "no CUDA GPU visible: the driver reports none";
  return a;
}

std::optional<std::int64_t> free_gpu_memory(int gpu) {
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess || cudaSetDevice(gpu) != cudaSuccess) return {};
  std::size_t free = 0;
  std::size_t total = 0;
  const bool known = cudaMemGetInfo(&free, &total) == cudaSuccess;
  cudaSetDevice(previous);
  if (!known) return {};
  return static_cast<std::int64_t>(free);
}

}  // namespace pipescope::exec::cuda
