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

}  // namespace pipescope::exec::cuda
