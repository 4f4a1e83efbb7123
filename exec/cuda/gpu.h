#pragma once
// Which GPUs this process sees. A machine with the CUDA toolkit and no GPU (or
// no driver) has none, and says why.

#include <cstdint>
#include <optional>
#include <string>

#include "exec/backends.h"

namespace pipescope::exec::cuda {

using exec::GpuAvailability;  // exec/backends.h

// Never throws: a missing driver or GPU is an answer, not an error.
GpuAvailability visible_gpus();

// The free memory of GPU `gpu` (cudaMemGetInfo), in bytes; empty when it cannot
// be asked (no driver, no such GPU).
std::optional<std::int64_t> free_gpu_memory(int gpu);

}  // namespace pipescope::exec::cuda
