#pragma once
// `pipescope selftest --backend cuda`: every CUDA kernel against its CPU
// reference (exec/compute/kernels.h, exec/compute/optimizer.cpp), and every Device operation of
// CudaDevice against HostDevice (exec/compute/host_device.h), on random data. The
// GoogleTest wrappers run the same checks.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "exec/backends.h"

namespace pipescope::exec::cuda {

// fp32 elementwise work differs from the CPU only by the last bits of the
// transcendental functions and fused multiply-adds; reductions and products
// also by their summation order (atomicAdd scatters included).
inline constexpr double kElementwiseTolerance = 1e-5;
inline constexpr double kReductionTolerance = 1e-4;

using exec::KernelCheck;  // exec/backends.h

// The check of `got` against the reference `want`: max_error as above, infinite
// when the sizes differ or an entry of either is NaN or infinite.
KernelCheck compare_to_reference(std::string kernel, std::span<const float> want,
                                 std::span<const float> got, double tolerance);

// Runs every kernel check on GPU 0. Throws CudaError when there is none or a
// CUDA call fails.
std::vector<KernelCheck> check_kernels(std::uint64_t seed);

// Runs every Device operation on a CudaDevice on GPU 0 and on a HostDevice with
// the same inputs, and copy_from between CudaDevices on GPU 0 (and GPU 1 when
// there is one). Throws CudaError when there is no GPU or a CUDA call fails.
std::vector<KernelCheck> check_device_ops(std::uint64_t seed);

}  // namespace pipescope::exec::cuda
