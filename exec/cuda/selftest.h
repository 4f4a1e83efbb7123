#pragma once
// `pipescope selftest --backend cuda`: every CUDA kernel against its CPU
// reference (exec/kernels.h, exec/optimizer.cpp) on random data. The
// GoogleTest wrappers run the same checks.

#include <cstdint>
#include <string>
#include <vector>

namespace pipescope::exec::cuda {

struct KernelCheck {
  std::string kernel;    // "layernorm_forward", "gemm (A^T B)"
  double max_error = 0;  // max |gpu - cpu| / max(1, max |cpu|)
  double tolerance = 0;  // fp32 with a different summation order
  bool ok() const { return max_error <= tolerance; }
};

// Runs every check on the current GPU. Throws CudaError when there is none or
// a CUDA call fails.
std::vector<KernelCheck> check_kernels(std::uint64_t seed);

}  // namespace pipescope::exec::cuda
