#include "costmodels/optimizer.h"

#include <gtest/gtest.h>

#include <string>

namespace pipescope {
namespace {

TEST(Optimizer, NamesRoundTrip) {
  for (Optimizer o :
       {Optimizer::kSgd, Optimizer::kMomentum, Optimizer::kRmsprop, Optimizer::kAdam}) {
    EXPECT_EQ(parse_optimizer(to_string(o)), o);
  }
  EXPECT_EQ(to_string(Optimizer::kRmsprop), "rmsprop");
  EXPECT_EQ(parse_optimizer("adam"), Optimizer::kAdam);
  EXPECT_FALSE(parse_optimizer("adagrad").has_value());
  EXPECT_FALSE(parse_optimizer("Adam").has_value());
}

// docs/models.md, "The formulas in more detail", Bytes per parameter: fp32 SGD 8,
// momentum 12, RMSProp 12 (GPipe), Adam 16; mixed precision keeps 2+2 bytes of
// 16-bit weights and gradients plus a 4-byte master copy, so the totals match
// (ZeRO, section 3.1).
TEST(Optimizer, BytesPerParamTable) {
  for (DType t : {DType::kFp32, DType::kBf16, DType::kFp16}) {
    SCOPED_TRACE(std::string(to_string(t)));
    EXPECT_EQ(bytes_per_param(Optimizer::kSgd, t), 8.0);
    EXPECT_EQ(bytes_per_param(Optimizer::kMomentum, t), 12.0);
    EXPECT_EQ(bytes_per_param(Optimizer::kRmsprop, t), 12.0);
    EXPECT_EQ(bytes_per_param(Optimizer::kAdam, t), 16.0);
  }
}

}  // namespace
}  // namespace pipescope
