#pragma once
// The host standing in for a GPU: every Device operation run at once on the
// CPU with the reference math (exec/compute/kernels.h, exec/compute/optimizer.cpp), fences
// complete when made and timed by the steady clock. The tests run the device
// layers and the runtime's device path on it; `selftest --backend cuda` holds
// CudaDevice to it operation by operation.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "exec/compute/device.h"

namespace pipescope::exec {

class HostDevice : public Device {
 public:
  // `label` names it ("host", "gpu 1" for a test's second device).
  explicit HostDevice(std::string label = "host") : label_(std::move(label)) {}

  std::string name() const override { return label_; }
  void upload(const float* src, std::int64_t n, float* dst) override;
  void upload(const std::int32_t* src, std::int64_t n, std::int32_t* dst) override;
  void download(const float* src, std::int64_t n, float* dst) override;
  void copy_from(const DeviceMatrix& src, DeviceMatrix& dst) override;

  std::shared_ptr<Fence> fence() override;
  void wait(const Fence& fence) override;
  void synchronize() override {}
  SimTime elapsed_ns(const Fence& from, const Fence& to) const override;

  PIPESCOPE_DEVICE_KERNEL_OVERRIDES

  // Bytes allocated and not yet released (for the tests).
  std::int64_t bytes_in_use() const { return bytes_in_use_.load(); }

 protected:
  void* allocate(std::int64_t bytes) override;
  void release(void* p) noexcept override;

 private:
  std::string label_;
  std::atomic<std::int64_t> bytes_in_use_{0};  // arrays are freed from any thread
};

}  // namespace pipescope::exec
