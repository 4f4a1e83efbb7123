// The CUDA backend as the command opens it (exec/backends.h).

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "exec/backends.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cuda_device.h"
#include "exec/cuda/gpu.h"
#include "exec/cuda/selftest.h"

namespace pipescope::exec::cuda {
namespace {

class Backend final : public CudaBackend {
 public:
  GpuAvailability visible_gpus() const override { return cuda::visible_gpus(); }
  std::optional<std::int64_t> free_gpu_memory(int gpu) const override {
    return cuda::free_gpu_memory(gpu);
  }
  GpuPlacement place_on_gpus() const override { return cuda::place_on_gpus(); }
  std::shared_ptr<Device> stream(int gpu, const std::string& label) const override {
    return std::make_shared<CudaDevice>(gpu, label);
  }
  std::vector<KernelCheck> check_kernels_and_ops(std::uint64_t seed) const override {
    std::vector<KernelCheck> checks = check_kernels(seed);
    for (KernelCheck& c : check_device_ops(seed)) checks.push_back(std::move(c));
    return checks;
  }
};

}  // namespace
}  // namespace pipescope::exec::cuda

extern "C" __attribute__((visibility("default"))) const pipescope::exec::CudaBackend*
pipescope_cuda_backend() {
  static const pipescope::exec::cuda::Backend backend;
  return &backend;
}
