#include "costmodels/dtype.h"

namespace pipescope {

std::string_view to_string(DType t) {
  switch (t) {
    case DType::kFp32:
      return "fp32";
    case DType::kBf16:
      return "bf16";
    case DType::kFp16:
      return "fp16";
  }
  return "unknown";
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (DType t : {DType::kFp32, DType::kBf16, DType::kFp16}) {
    if (name == to_string(t)) return t;
  }
  return std::nullopt;
}

}  // namespace pipescope
