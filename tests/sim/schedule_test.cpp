#include "sim/schedule.h"

#include <gtest/gtest.h>

namespace pipescope {
namespace {

std::string letters(const std::vector<Op>& ops) {
  std::string s;
  for (const Op& op : ops) {
    if (!s.empty()) s += ' ';
    s += op_letter(op.kind);
    if (op.kind != OpKind::kOptimizer) s += std::to_string(op.micro_batch);
  }
  return s;
}

TEST(GpipeSchedule, FillThenDrainInReverse) {
  const Schedule s = build_gpipe(2, 3, false);
  ASSERT_EQ(s.devices(), 2);
  EXPECT_EQ(letters(s.device_ops[0]), "F0 F1 F2 B2 B1 B0 O");
  EXPECT_EQ(letters(s.device_ops[1]), "F0 F1 F2 B2 B1 B0 O");
  for (const Op& op : s.device_ops[1]) EXPECT_EQ(op.stage, 1);
  EXPECT_EQ(check_schedule(s), "");
}

TEST(GpipeSchedule, RematRecomputesBeforeEachBackward) {
  const Schedule s = build_gpipe(3, 2, true);
  EXPECT_EQ(letters(s.device_ops[2]), "F0 F1 R1 B1 R0 B0 O");
  EXPECT_EQ(s.stage_device, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(check_schedule(s), "");
}

TEST(CheckSchedule, FindsMissingDuplicateAndMisorderedOps) {
  Schedule s = build_gpipe(2, 2, true);
  Schedule missing = s;
  missing.device_ops[1].erase(missing.device_ops[1].begin());
  EXPECT_EQ(check_schedule(missing), "stage 1 micro-batch 0: missing forward");

  Schedule dup = s;
  dup.device_ops[0].insert(dup.device_ops[0].begin(), Op{OpKind::kForward, 0, 1});
  EXPECT_EQ(check_schedule(dup), "device 0 op 2: duplicate forward");

  Schedule order = build_gpipe(1, 1, false);
  std::swap(order.device_ops[0][0], order.device_ops[0][1]);
  EXPECT_EQ(check_schedule(order), "stage 0 micro-batch 0: backward before forward");

  Schedule wrong_device = s;
  wrong_device.device_ops[0][0].stage = 1;
  EXPECT_EQ(check_schedule(wrong_device), "device 0 op 0: stage 1 does not run on this device");

  Schedule no_remat = s;
  no_remat.remat = false;
  EXPECT_EQ(check_schedule(no_remat), "stage 0 micro-batch 0: recompute without remat");
}

}  // namespace
}  // namespace pipescope
