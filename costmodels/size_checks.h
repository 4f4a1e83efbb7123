#pragma once
// Overflow guards shared by the model families, and the one conversion of a
// size to the floating point their formulas use (internal to costmodels).

#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace pipescope {

// A size as the double of a cost formula.
inline double f64(std::int64_t x) {
  return static_cast<double>(x);
}

// Sizes are 64-bit integers. Dimensions whose products would not fit are rejected
// before any integer arithmetic can wrap; 2^62 leaves room for the sums over layers
// and the micro-batch factors applied later.
inline void require_fits(double value, const std::string& what) {
  if (!(value < 0x1p62)) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g", value);
    throw std::overflow_error(what + " come to " + buf + ", too many for 64-bit sizes");
  }
}

}  // namespace pipescope
