#pragma once
// Bytes of weights + gradients + optimizer state per parameter.

#include <optional>
#include <string_view>

#include "costmodels/dtype.h"

namespace pipescope {

enum class Optimizer { kSgd, kMomentum, kRmsprop, kAdam };

std::string_view to_string(Optimizer o);
std::optional<Optimizer> parse_optimizer(std::string_view name);  // sgd, momentum, rmsprop, adam

// fp32 training keeps fp32 weights and gradients plus the optimizer's fp32 slots:
// SGD 8, momentum 12, RMSProp 12 (the GPipe paper's figure), Adam 16. Mixed
// precision (16-bit dtype) keeps 16-bit weights and gradients, fp32 master
// weights and fp32 slots: SGD 2+2+4 = 8, momentum 12, RMSProp 12, Adam 16
// (Rajbhandari et al. 2020, ZeRO, section 3.1).
double bytes_per_param(Optimizer o, DType dtype);

}  // namespace pipescope
