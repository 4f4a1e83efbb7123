#include "costmodels/optimizer.h"

namespace pipescope {

std::string_view to_string(Optimizer o) {
  switch (o) {
    case Optimizer::kSgd:
      return "sgd";
    case Optimizer::kMomentum:
      return "momentum";
    case Optimizer::kRmsprop:
      return "rmsprop";
    case Optimizer::kAdam:
      return "adam";
  }
  return "unknown";
}

std::optional<Optimizer> parse_optimizer(std::string_view name) {
  for (Optimizer o :
       {Optimizer::kSgd, Optimizer::kMomentum, Optimizer::kRmsprop, Optimizer::kAdam}) {
    if (name == to_string(o)) return o;
  }
  return std::nullopt;
}

namespace {

// fp32 slots per parameter: momentum buffer (momentum), mean square (RMSProp),
// first and second moments (Adam).
int state_slots(Optimizer o) {
  switch (o) {
    case Optimizer::kSgd:
      return 0;
    case Optimizer::kMomentum:
      return 1;
    case Optimizer::kRmsprop:
      return 1;
    case Optimizer::kAdam:
      return 2;
  }
  return 0;
}

}  // namespace

double bytes_per_param(Optimizer o, DType dtype) {
  const double slots = 4.0 * state_slots(o);
  if (!is_16bit(dtype)) return 4.0 + 4.0 + slots;  // fp32 weights + fp32 gradients
  return 2.0 + 2.0 + 4.0 + slots;                  // 16-bit weights, gradients; fp32 master copy
}

}  // namespace pipescope
