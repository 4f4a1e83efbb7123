#pragma once
// Units shared by every module. Simulated time is an integer count of
// nanoseconds so that event order is exact and runs are bit-for-bit repeatable;
// sizes are bytes; work is FLOPs.

#include <cmath>
#include <cstdint>

namespace pipescope {

using SimTime = std::int64_t;  // simulated time in ns
using Bytes = std::int64_t;    // a size in bytes
using Flops = double;          // floating-point operations

inline constexpr SimTime kNsPerSecond = 1'000'000'000;

// Seconds (double) to SimTime, rounded to the nearest nanosecond.
inline SimTime seconds_to_simtime(double seconds) {
  return static_cast<SimTime>(std::llround(seconds * 1e9));
}

inline double simtime_to_seconds(SimTime t) {
  return static_cast<double>(t) * 1e-9;
}

inline constexpr Bytes kGiB = Bytes{1} << 30;
inline constexpr Bytes kGB = 1'000'000'000;

}  // namespace pipescope
