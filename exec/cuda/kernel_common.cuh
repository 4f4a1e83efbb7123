#pragma once
// What the CUDA backend's .cu files share: the block size, block- and
// warp-wide reductions, grid sizes and the launchers' shape checks. Included by
// .cu files only.

#include <cstdint>
#include <stdexcept>
#include <string>

namespace pipescope::exec::cuda::detail {

inline constexpr int kBlock = 256;  // threads per block; a multiple of the warp size
inline constexpr int kWarp = 32;

// ---------------------------------------------------------------------------
// kernels

// The sum (or max) over the warp of every lane's v; every lane gets it.
template <bool kMax>
__device__ inline float warp_reduce(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, v, offset);
    v = kMax ? fmaxf(v, other) : v + other;
  }
  return v;
}

// The sum (or max) over the block of every thread's v; every thread gets it.
// blockDim.x == kBlock.
template <bool kMax>
__device__ float block_reduce(float v) {
  __shared__ float warp_part[kBlock / kWarp];
  __shared__ float total;
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const float other = __shfl_down_sync(0xffffffffu, v, offset);
    v = kMax ? fmaxf(v, other) : v + other;
  }
  if (lane == 0) warp_part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kBlock / kWarp ? warp_part[lane] : (kMax ? -INFINITY : 0.0f);
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      const float other = __shfl_down_sync(0xffffffffu, v, offset);
      v = kMax ? fmaxf(v, other) : v + other;
    }
    if (lane == 0) total = v;
  }
  __syncthreads();
  const float result = total;
  __syncthreads();  // warp_part and total may be reused by the next call
  return result;
}

// The first index of this thread in a grid-stride loop, and the stride.
__device__ inline std::int64_t grid_start() {
  return blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;
}
__device__ inline std::int64_t grid_stride() {
  return std::int64_t{gridDim.x} * blockDim.x;
}

// ---------------------------------------------------------------------------
// launchers

inline void require(bool ok, const char* launcher, const std::string& what) {
  if (!ok) throw std::invalid_argument(std::string(launcher) + ": " + what);
}

inline void require_rows(const char* launcher, int rows, int c) {
  require(rows >= 1 && c >= 1, launcher,
          "needs rows >= 1 and columns >= 1, got (" + std::to_string(rows) + ", " +
              std::to_string(c) + ")");
}

inline void require_size(const char* launcher, std::int64_t n) {
  require(n >= 0, launcher, "negative size " + std::to_string(n));
}

// Blocks for a grid-stride loop over n elements: enough to fill a large GPU,
// never more than the work.
inline unsigned grid_for(std::int64_t n) {
  const std::int64_t blocks = (n + kBlock - 1) / kBlock;
  return static_cast<unsigned>(blocks < 4096 ? blocks : 4096);
}

inline unsigned grid_for_columns(int c) {
  return static_cast<unsigned>((std::int64_t{c} + kBlock - 1) / kBlock);
}

// Blocks for one warp per row.
inline unsigned grid_for_warp_rows(int rows) {
  constexpr int kRowsPerBlock = kBlock / kWarp;
  return static_cast<unsigned>((std::int64_t{rows} + kRowsPerBlock - 1) / kRowsPerBlock);
}

}  // namespace pipescope::exec::cuda::detail
