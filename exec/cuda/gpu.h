#pragma once
// Which GPUs this process sees. A machine with the CUDA toolkit and no GPU (or
// no driver) has none, and says why.

#include <string>

namespace pipescope::exec::cuda {

struct GpuAvailability {
  int devices = 0;
  std::string reason;  // why there are none, when devices == 0
};

// Never throws: a missing driver or GPU is an answer, not an error.
GpuAvailability visible_gpus();

}  // namespace pipescope::exec::cuda
