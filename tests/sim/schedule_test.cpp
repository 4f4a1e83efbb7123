#include "sim/engine/schedule.h"

#include <gtest/gtest.h>

#include "sim_fixtures.h"

namespace pipescope {
namespace {

using testing::ops_text;

TEST(GpipeSchedule, FillThenDrainInReverse) {
  const Schedule s = build_gpipe(2, 3, Remat::kNever);
  ASSERT_EQ(s.devices(), 2);
  EXPECT_EQ(ops_text(s.device_ops[0]), "F0 F1 F2 B2 B1 B0 O");
  EXPECT_EQ(ops_text(s.device_ops[1]), "F0 F1 F2 B2 B1 B0 O");
  for (const Op& op : s.device_ops[1]) EXPECT_EQ(op.stage, 1);
  EXPECT_EQ(check_schedule(s), "");
}

TEST(GpipeSchedule, RematRecomputesBeforeEachBackward) {
  const Schedule s = build_gpipe(3, 2, Remat::kAlways);
  EXPECT_EQ(ops_text(s.device_ops[2]), "F0 F1 R1 B1 R0 B0 O");
  EXPECT_EQ(s.stage_device, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(check_schedule(s), "");
}

TEST(CheckSchedule, FindsMissingDuplicateAndMisorderedOps) {
  Schedule s = build_gpipe(2, 2, Remat::kAlways);
  Schedule missing = s;
  missing.device_ops[1].erase(missing.device_ops[1].begin());
  EXPECT_EQ(check_schedule(missing), "stage 1 micro-batch 0: missing forward");

  Schedule dup = s;
  dup.device_ops[0].insert(dup.device_ops[0].begin(), Op{OpKind::kForward, 0, 1});
  EXPECT_EQ(check_schedule(dup), "device 0 op 2: duplicate forward");

  Schedule order = build_gpipe(1, 1, Remat::kNever);
  std::swap(order.device_ops[0][0], order.device_ops[0][1]);
  EXPECT_EQ(check_schedule(order), "stage 0 micro-batch 0: backward before forward");

  Schedule wrong_device = s;
  wrong_device.device_ops[0][0].stage = 1;
  EXPECT_EQ(check_schedule(wrong_device), "device 0 op 0: stage 1 does not run on this device");

  Schedule no_remat = s;
  no_remat.remat = Remat::kNever;
  EXPECT_EQ(check_schedule(no_remat),
            "stage 0 micro-batch 0: recompute that remat never does not ask for");

  Schedule no_recompute = s;
  no_recompute.device_ops[0].erase(no_recompute.device_ops[0].begin() + 2);  // R1
  EXPECT_EQ(check_schedule(no_recompute), "stage 0 micro-batch 1: missing recompute");

  Schedule late_recompute = s;  // F0 F1 R1 B1 R0 B0 O -> F0 F1 R1 B1 B0 R0 O
  std::swap(late_recompute.device_ops[0][4], late_recompute.device_ops[0][5]);
  EXPECT_EQ(check_schedule(late_recompute),
            "stage 0 micro-batch 0: recompute not between forward and backward");

  Schedule early_step = s;
  std::swap(early_step.device_ops[1][5], early_step.device_ops[1][6]);
  EXPECT_EQ(check_schedule(early_step), "stage 1 micro-batch 0: optimizer step before backward");

  Schedule no_step = s;
  no_step.device_ops[1].pop_back();
  EXPECT_EQ(check_schedule(no_step), "stage 1: missing optimizer step");

  Schedule two_steps = s;
  two_steps.device_ops[1].push_back(Op{OpKind::kOptimizer, 1, 0});
  EXPECT_EQ(check_schedule(two_steps), "device 1 op 7: second optimizer step");
}

}  // namespace
}  // namespace pipescope
