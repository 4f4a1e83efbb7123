#include "cli/gpu_stages.h"

#include <stdexcept>
#include <string>

#include "exec/plan_runner.h"
#ifdef PIPESCOPE_HAVE_CUDA
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cuda_device.h"
#include "exec/cuda/gpu.h"
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

void check_plan_fits_gpus(const Plan& plan, const std::string& plan_file, int gpus) {
#ifdef PIPESCOPE_HAVE_CUDA
  exec::check_plan_fits(plan, plan_file,
                        exec::gpu_memory_pools(plan.stages, gpus, exec::cuda::free_gpu_memory));
#else
  (void)plan;
  (void)plan_file;
  (void)gpus;
#endif
}

}  // namespace pipescope::cli
