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

TEST(CudaKernels, DeviceLaunchersRefuseImpossibleShapes) {
  // The launchers behind CudaDevice, checked before anything reaches the GPU.
  EXPECT_THROW(fill(nullptr, -1, 0.0f, nullptr), std::invalid_argument);
  EXPECT_THROW(add(nullptr, nullptr, nullptr, -2, nullptr), std::invalid_argument);
  EXPECT_THROW(axpy(nullptr, 1.0f, nullptr, -1, nullptr), std::invalid_argument);
  EXPECT_THROW(sgd_update(nullptr, nullptr, -1, 0.1f, nullptr), std::invalid_argument);
  EXPECT_THROW(rmsprop_update(nullptr, nullptr, nullptr, -1, 0.1f, 0.99f, 1e-8f, nullptr),
               std::invalid_argument);
  try {
    any_nonfinite(nullptr, nullptr, 4, nullptr);
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "any_nonfinite: no flag to write to");
  }
  try {
    gemm_strided_batched(nullptr, false, true, 4, 5, 6, 1.0f, nullptr, 24, nullptr, 30, 0.0f,
                         nullptr, 20, 0);
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "gemm_strided_batched: needs m, n, k, batch >= 1, got 4, 5, 6, 0");
  }
  EXPECT_THROW(gemm_strided_batched(nullptr, false, false, 4, 5, 6, 1.0f, nullptr, -24, nullptr, 30,
                                    0.0f, nullptr, 20, 2),
               std::invalid_argument);

  // Four query heads do not share three key/value heads.
  HeadShape gqa{2, 8, 4, 3, 16};
  try {
    split_qkv(nullptr, nullptr, nullptr, nullptr, gqa, nullptr);
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "split_qkv: 4 query heads do not split into 3 key/value groups");
  }
  EXPECT_THROW(merge_qkv_grad(nullptr, nullptr, nullptr, nullptr, gqa, nullptr),
               std::invalid_argument);
  const HeadShape no_width{2, 8, 4, 2, 0};
  EXPECT_THROW(merge_heads(nullptr, nullptr, no_width, nullptr), std::invalid_argument);
  EXPECT_THROW(split_heads(nullptr, nullptr, no_width, nullptr), std::invalid_argument);

  // 10 rows are not whole 4 x 4 blocks.
  try {
    causal_softmax_forward(nullptr, nullptr, 0.5f, 10, 4, nullptr);
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "causal_softmax_forward: needs whole s x s blocks, got 10 rows of 4");
  }
  EXPECT_THROW(causal_softmax_backward(nullptr, nullptr, nullptr, 0.5f, 8, 0, nullptr),
               std::invalid_argument);
  EXPECT_THROW(embedding_forward(nullptr, nullptr, nullptr, nullptr, 12, 6, 0, nullptr),
               std::invalid_argument);
  try {
    embedding_backward(nullptr, nullptr, nullptr, nullptr, 12, 0, 32, nullptr);
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "embedding_backward: needs rows, seq, d >= 1, got 12, 0, 32");
  }

  // Empty elementwise work launches nothing and succeeds.
  EXPECT_NO_THROW(fill(nullptr, 0, 1.0f, nullptr));
  EXPECT_NO_THROW(sgd_update(nullptr, nullptr, 0, 0.1f, nullptr));
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
