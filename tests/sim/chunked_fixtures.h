#pragma once
// Helpers of the tests of schedules with several stages a device.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sim/engine/schedule.h"

namespace pipescope::testing {

// A device's op list naming each op's stage: "F0.1" is F of stage 0,
// micro-batch 1, "O2" the optimizer step of stage 2; "F0.1+" an op of an
// overlapped pair that the next op continues (Op::paired).
inline std::string staged_text(const std::vector<Op>& ops) {
  std::string out;
  for (const Op& op : ops) {
    if (!out.empty()) out += ' ';
    out += op_letter(op.kind) + std::to_string(op.stage);
    if (op.kind != OpKind::kOptimizer) out += "." + std::to_string(op.micro_batch);
    if (op.paired) out += '+';
  }
  return out;
}

// K devices, v chunks each and M of a parameterised closed-form test, and its
// name, e.g. "K4V2M8".
struct KxVxM {
  int K;
  int v;
  int M;
};

inline std::string kxvxm_name(const ::testing::TestParamInfo<KxVxM>& info) {
  return "K" + std::to_string(info.param.K) + "V" + std::to_string(info.param.v) + "M" +
         std::to_string(info.param.M);
}

}  // namespace pipescope::testing
