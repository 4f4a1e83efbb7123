#pragma once
// Errors of the CUDA runtime and cuBLAS as exceptions that name the call, the
// file and the line: "exec/cuda/kernels.cu:120: cudaMalloc(&p, bytes) failed:
// out of memory (cudaErrorMemoryAllocation)". Library code throws; the command
// line prints the sentence.

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <stdexcept>

namespace pipescope::exec::cuda {

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] void throw_cuda_error(cudaError_t error, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file,
                                     int line);

}  // namespace pipescope::exec::cuda

#define PS_CUDA_CHECK(call)                                                                 \
  do {                                                                                      \
    const cudaError_t ps_cuda_error_ = (call);                                              \
    if (ps_cuda_error_ != cudaSuccess) {                                                    \
      ::pipescope::exec::cuda::throw_cuda_error(ps_cuda_error_, #call, __FILE__, __LINE__); \
    }                                                                                       \
  } while (false)

#define PS_CUBLAS_CHECK(call)                                                                    \
  do {                                                                                           \
    const cublasStatus_t ps_cublas_status_ = (call);                                             \
    if (ps_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                            \
      ::pipescope::exec::cuda::throw_cublas_error(ps_cublas_status_, #call, __FILE__, __LINE__); \
    }                                                                                            \
  } while (false)
