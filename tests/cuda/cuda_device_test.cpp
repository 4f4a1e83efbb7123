// CudaDevice: every Device operation against HostDevice on a GPU
// (check_device_ops), and what runs without one: a clear error instead of a
// device, and the comparison the self-test judges by.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cuda_device.h"
#include "exec/cuda/gpu.h"
#include "exec/cuda/selftest.h"

namespace pipescope::exec::cuda {
namespace {

TEST(CudaDevice, MatchesTheHostDeviceOperationByOperation) {
  const GpuAvailability gpus = visible_gpus();
  if (gpus.devices == 0) GTEST_SKIP() << gpus.reason;
  const std::vector<KernelCheck> checks = check_device_ops(7);
  EXPECT_GE(checks.size(), 60u);
  for (const KernelCheck& c : checks) {
    EXPECT_EQ(c.kernel.rfind("device ", 0), 0u) << c.kernel;
    EXPECT_LE(c.max_error, c.tolerance) << c.kernel;
  }
}

TEST(CudaDevice, WithoutAGpuConstructionSaysWhy) {
  const GpuAvailability gpus = visible_gpus();
  if (gpus.devices > 0) {
    const auto device = std::make_shared<CudaDevice>(0, "stage 1");
    const std::string name = device->name();
    EXPECT_EQ(name.rfind("cuda:0 (", 0), 0u) << name;
    EXPECT_EQ(name.substr(name.size() - std::string("), stage 1").size()), "), stage 1") << name;
    EXPECT_EQ(device->gpu(), 0);
    return;
  }
  try {
    (void)std::make_shared<CudaDevice>(0, "stage 1");
    ADD_FAILURE() << "no error";
  } catch (const CudaError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what, "CudaDevice: cannot use GPU 0: " + gpus.reason);
    EXPECT_NE(what.find("no CUDA GPU visible: "), std::string::npos) << what;
  }
}

TEST(CudaDevice, RefusesANegativeGpuIndexEverywhere) {
  try {
    (void)std::make_shared<CudaDevice>(-1);
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "CudaDevice: no GPU -1");
  }
}

TEST(CudaSelftest, ComparesRelativeToTheLargerOfOneAndTheReference) {
  const std::vector<float> want{1.0f, -4.0f, 2.0f};
  // 0.5 off an entry of a reference whose largest magnitude is 4: 0.125.
  KernelCheck c = compare_to_reference("x", want, std::vector<float>{1.0f, -4.5f, 2.0f}, 0.2);
  EXPECT_EQ(c.kernel, "x");
  EXPECT_DOUBLE_EQ(c.max_error, 0.125);
  EXPECT_DOUBLE_EQ(c.tolerance, 0.2);
  EXPECT_TRUE(c.ok());
  // Small references are judged absolutely: 0.25 off, over max(1, 0.5).
  c = compare_to_reference("small", std::vector<float>{0.5f}, std::vector<float>{0.75f}, 0.1);
  EXPECT_DOUBLE_EQ(c.max_error, 0.25);
  EXPECT_FALSE(c.ok());
  // Exact agreement passes a zero tolerance.
  c = compare_to_reference("exact", want, want, 0.0);
  EXPECT_EQ(c.max_error, 0.0);
  EXPECT_TRUE(c.ok());
}

TEST(CudaSelftest, AMissingOrNonFiniteResultFails) {
  const std::vector<float> want{1.0f, 2.0f};
  const KernelCheck short_result =
      compare_to_reference("short", want, std::vector<float>{1.0f}, 1.0);
  EXPECT_TRUE(std::isinf(short_result.max_error));
  EXPECT_FALSE(short_result.ok());
  const KernelCheck nan = compare_to_reference(
      "nan", want, std::vector<float>{1.0f, std::numeric_limits<float>::quiet_NaN()}, 1.0);
  EXPECT_TRUE(std::isinf(nan.max_error));
  EXPECT_FALSE(nan.ok());
}

}  // namespace
}  // namespace pipescope::exec::cuda
