#pragma once
// Element types of weights and activations.

#include <optional>
#include <string>
#include <string_view>

#include "costmodels/units.h"

namespace pipescope {

enum class DType { kFp32, kBf16, kFp16 };

inline Bytes dtype_bytes(DType t) {
  return t == DType::kFp32 ? 4 : 2;
}
inline bool is_16bit(DType t) {
  return t != DType::kFp32;
}
std::string_view to_string(DType t);
std::optional<DType> parse_dtype(std::string_view name);  // "fp32", "bf16", "fp16"

}  // namespace pipescope
