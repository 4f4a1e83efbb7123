#pragma once
// What `--backend cuda` commands share: each model stage on its own stream of
// a visible GPU (exec/cuda/cuda_device.h, place_on_gpus).

#include <functional>
#include <memory>

namespace pipescope::exec {
class Device;
}

namespace pipescope::cli {

struct GpuStages {
  int gpus = 0;
  std::function<std::shared_ptr<exec::Device>(int stage, int device)> stage_device;
};

// Throws std::runtime_error saying why there are none: no GPU visible (with
// the driver's reason), or this pipescope built without CUDA.
GpuStages gpu_stages();

}  // namespace pipescope::cli
