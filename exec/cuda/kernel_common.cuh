#pragma once
// What the CUDA backend's .cu files share beyond the kernels' bodies
// (kernel_bodies.h): who a thread is, block- and warp-wide reductions, and the
// launchers' shape checks. Included by .cu files only.

#include <cstdint>
#include <stdexcept>
#include <string>

#include "exec/cuda/kernel_bodies.h"

namespace pipescope::exec::cuda::detail {

// ---------------------------------------------------------------------------
// kernels

__device__ inline ThreadIndex this_thread() {
  return {blockIdx.x, threadIdx.x, blockDim.x, gridDim.x};
}

// The sum (or max) over the warp of every lane's v; every lane gets it.
template <bool kMax>
__device__ inline float warp_reduce(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    v = combine<kMax>(v, __shfl_xor_sync(0xffffffffu, v, offset));
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
    v = combine<kMax>(v, __shfl_down_sync(0xffffffffu, v, offset));
  }
  if (lane == 0) warp_part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kBlock / kWarp ? warp_part[lane] : identity<kMax>();
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      v = combine<kMax>(v, __shfl_down_sync(0xffffffffu, v, offset));
    }
    if (lane == 0) total = v;
  }
  __syncthreads();
  const float result = total;
  __syncthreads();  // warp_part and total may be reused by the next call
  return result;
}

// The groups of kernel_bodies.h's *_row bodies on the GPU: this thread's share,
// combined with the other threads' by shuffles (and shared memory).
struct DeviceBlock {
  __device__ static int rank() { return static_cast<int>(threadIdx.x); }
  __device__ static int size() { return static_cast<int>(blockDim.x); }
  template <bool kMax, class F>
  __device__ float reduce(int begin, int end, F f) const {
    return block_reduce<kMax>(strided_partial<kMax>(rank(), size(), begin, end, f));
  }
  template <class F>
  __device__ void each(int begin, int end, F f) const {
    for_strided(rank(), size(), begin, end, f);
  }
  template <class F>
  __device__ void once(F f) const {
    if (rank() == 0) f();
  }
};

struct DeviceWarp {
  __device__ static int rank() { return static_cast<int>(threadIdx.x % kWarp); }
  template <bool kMax, class F>
  __device__ float reduce(int begin, int end, F f) const {
    return warp_reduce<kMax>(strided_partial<kMax>(rank(), kWarp, begin, end, f));
  }
  template <class F>
  __device__ void each(int begin, int end, F f) const {
    for_strided(rank(), kWarp, begin, end, f);
  }
};

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

}  // namespace pipescope::exec::cuda::detail
