// The CUDA kernels against the CPU reference (exec/cuda/selftest.h runs every
// check), and what runs without a GPU: shape checks in the launchers, errors
// that name the call, file and line, and a clear reason when no GPU is visible.

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/gpu.h"
#include "exec/cuda/kernels.h"
#include "exec/cuda/selftest.h"

namespace pipescope::exec::cuda {
namespace {

TEST(CudaKernels, MatchTheCpuReference) {
  const GpuAvailability gpus = visible_gpus();
  if (gpus.devices == 0) GTEST_SKIP() << gpus.reason;
  const std::vector<KernelCheck> checks = check_kernels(7);
  EXPECT_GE(checks.size(), 20u);
  for (const KernelCheck& c : checks) {
    EXPECT_LE(c.max_error, c.tolerance) << c.kernel;
  }
}

TEST(CudaKernels, LaunchersRefuseImpossibleShapes) {
  // Checked before anything reaches the GPU, so these run everywhere.
  EXPECT_THROW(layernorm_forward(nullptr, nullptr, nullptr, nullptr, nullptr, 0, 8, nullptr),
               std::invalid_argument);
  EXPECT_THROW(crossentropy_forward(nullptr, nullptr, nullptr, nullptr, 4, 0, nullptr),
               std::invalid_argument);
  EXPECT_THROW(gelu_forward(nullptr, nullptr, -1, nullptr), std::invalid_argument);
  EXPECT_THROW(adam_update(nullptr, nullptr, nullptr, nullptr, 4, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f,
                           1.0f, nullptr),
               std::invalid_argument);
  try {
    gemm(nullptr, false, false, 3, 0, 2, 1.0f, nullptr, nullptr, 0.0f, nullptr);
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "gemm: needs m, n, k >= 1, got 3, 0, 2");
  }
  // Empty elementwise work launches nothing and succeeds.
  EXPECT_NO_THROW(relu_forward(nullptr, nullptr, 0, nullptr));
}

TEST(CudaCheck, NamesTheCallFileAndLine) {
  try {
    PS_CUDA_CHECK(cudaErrorInvalidValue);
    ADD_FAILURE() << "no error";
  } catch (const CudaError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("kernels_test.cpp:"), std::string::npos) << what;
    EXPECT_NE(what.find("cudaErrorInvalidValue failed: invalid argument (cudaErrorInvalidValue)"),
              std::string::npos)
        << what;
  }
  try {
    PS_CUBLAS_CHECK(CUBLAS_STATUS_NOT_INITIALIZED);
    ADD_FAILURE() << "no error";
  } catch (const CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("(CUBLAS_STATUS_NOT_INITIALIZED)"), std::string::npos)
        << e.what();
  }
}

TEST(Gpu, NoneVisibleComesWithAReason) {
  const GpuAvailability gpus = visible_gpus();
  if (gpus.devices > 0) {
    EXPECT_TRUE(gpus.reason.empty()) << gpus.reason;
  } else {
    EXPECT_EQ(gpus.reason.rfind("no CUDA GPU visible: ", 0), 0u) << gpus.reason;
    EXPECT_GT(gpus.reason.size(), std::string("no CUDA GPU visible: ").size());
  }
}

}  // namespace
}  // namespace pipescope::exec::cuda
