#pragma once
// What `--backend cuda` commands share: each model stage on its own stream of
// a visible GPU (exec/backends.h, place_on_gpus).

#include <functional>
#include <memory>
#include <string>

#include "sim/plan/plan.h"

namespace pipescope::exec {
class Device;
}

namespace pipescope::cli {

struct GpuStages {
  int gpus = 0;
  std::function<std::shared_ptr<exec::Device>(int stage, int device)> stage_device;
};

// Throws std::invalid_argument naming plan_file when a GPU cannot hold what the
// plan's devices placed on it need (exec/plan_runner.h), device d on GPU d mod
// `gpus`. A GPU whose free memory cannot be read is not checked.
void check_plan_fits_gpus(const Plan& plan, const std::string& plan_file, int gpus);

// Throws std::runtime_error saying why there are none: no GPU visible (with
// the driver's reason), the CUDA backend cannot be loaded (the library
// missing), or this pipescope built without CUDA.
GpuStages gpu_stages();

}  // namespace pipescope::cli
