#include "cli/gpu_stages.h"

#include <stdexcept>
#include <string>

#include "exec/backends.h"
#include "exec/plan_runner.h"

namespace pipescope::cli {

GpuStages gpu_stages() {
  try {
    const exec::GpuPlacement p = exec::cuda_backend().place_on_gpus();
    return {p.gpus, p.stage_device};
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string("--backend cuda: ") + e.what());
  }
}

void check_plan_fits_gpus(const Plan& plan, const std::string& plan_file, int gpus) {
  const exec::CudaBackend& cuda = exec::cuda_backend();
  exec::check_plan_fits(plan, plan_file, exec::gpu_memory_pools(plan.stages, gpus, [&](int gpu) {
                          return cuda.free_gpu_memory(gpu);
                        }));
}

}  // namespace pipescope::cli
