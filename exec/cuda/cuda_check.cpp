#include "exec/cuda/cuda_check.h"

#include <string>

namespace pipescope::exec::cuda {

void throw_cuda_error(cudaError_t error, const char* call, const char* file, int line) {
  throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + call +
                  " failed: " + cudaGetErrorString(error) + " (" + cudaGetErrorName(error) + ")");
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " +
                  cublasGetStatusString(status) + " (" + cublasGetStatusName(status) + ")");
}

}  // namespace pipescope::exec::cuda
