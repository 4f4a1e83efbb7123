#pragma once
// `pipescope selftest --backend cuda`: every CUDA kernel against the CPU
// reference, and every CudaDevice operation against HostDevice's, on random
// data (exec/cuda/selftest.h).

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

namespace pipescope::cli {

// The status of a selftest on a machine without the hardware it checks: not a
// failure of the code, and not a pass either.
inline constexpr int kExitNoDevice = 4;

struct SelftestOptions {
  std::string backend = "cuda";
  std::uint64_t seed = 1;
  bool json = false;
};

CLI::App* add_selftest_command(CLI::App& app, SelftestOptions& options);
// 0 when every check passes, 1 when one fails, kExitNoDevice when no GPU is
// visible. Throws std::invalid_argument when built without CUDA.
int run_selftest(const SelftestOptions& options);

}  // namespace pipescope::cli
