#include "cli/gpu_stages.h"

#include <stdexcept>
#include <string>

#ifdef PIPESCOPE_HAVE_CUDA
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cuda_device.h"
#endif

namespace pipescope::cli {

GpuStages gpu_stages() {
#ifdef PIPESCOPE_HAVE_CUDA
  try {
    const exec::cuda::GpuPlacement p = exec::cuda::place_on_gpus();
    return {p.gpus, p.stage_device};
  } catch (const exec::cuda::CudaError& e) {
    throw std::runtime_error(std::string("--backend cuda: ") + e.what());
  }
#else
  throw std::runtime_error(
      "--backend cuda: this pipescope was built without CUDA (configure with the CUDA toolkit "
      "and -DPIPESCOPE_WITH_CUDA=ON)");
#endif
}

}  // namespace pipescope::cli
