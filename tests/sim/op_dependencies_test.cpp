// The dependency rules of a schedule's ops (sim/engine/op_dependencies.h), checked
// against the rules written out by hand, and what the engine and the schedule
// checker read off them.

#include "sim/engine/op_dependencies.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace pipescope {
namespace {

// "F-1 activation", "B0 same-stage (recomputed)", ... for each dependency of k.
std::vector<std::string> written(OpKind k) {
  std::vector<std::string> out;
  for (const Dependency& d : op_dependencies(k)) {
    std::string s(1, op_letter(d.on));
    s += (d.stage_offset > 0 ? "+" : "") + std::to_string(d.stage_offset);
    s += d.via == Via::kSameStage    ? " same-stage"
         : d.via == Via::kActivation ? " activation"
         : d.via == Via::kGradient   ? " gradient"
                                     : " all-reduce";
    if (d.when == When::kRecomputed) s += " (recomputed)";
    if (d.when == When::kSplit) s += " (split)";
    if (d.every_micro_batch) s += " (every micro-batch)";
    out.push_back(s);
  }
  return out;
}

TEST(OpDependencies, AreTheScheduleRules) {
  using V = std::vector<std::string>;
  EXPECT_EQ(written(OpKind::kForward), (V{"F-1 activation"}));
  EXPECT_EQ(written(OpKind::kRecompute), (V{"F0 same-stage"}));
  EXPECT_EQ(written(OpKind::kBackward),
            (V{"B+1 gradient", "F0 same-stage", "R0 same-stage (recomputed)"}));
  EXPECT_EQ(written(OpKind::kWeight), (V{"B0 same-stage (split)"}));
  EXPECT_EQ(written(OpKind::kOptimizer),
            (V{"B0 all-reduce (every micro-batch)", "W0 all-reduce (split) (every micro-batch)"}));
}

TEST(OpDependencies, ApplyOnlyWhereTheNeighbourAndTheConditionExist) {
  const Dependency& from_previous = op_dependencies(OpKind::kForward)[0];
  EXPECT_FALSE(applies(from_previous, 0, 4, false, false));  // the first stage reads the input
  EXPECT_TRUE(applies(from_previous, 3, 4, false, false));
  const Dependency& from_next = op_dependencies(OpKind::kBackward)[0];
  EXPECT_TRUE(applies(from_next, 2, 4, false, false));
  EXPECT_FALSE(applies(from_next, 3, 4, false, false));  // the last stage starts from the loss
  const Dependency& recompute = op_dependencies(OpKind::kBackward)[2];
  EXPECT_FALSE(applies(recompute, 1, 4, false, false));
  EXPECT_TRUE(applies(recompute, 1, 4, false, true));
  const Dependency& weight = op_dependencies(OpKind::kOptimizer)[1];
  EXPECT_FALSE(applies(weight, 1, 4, false, true));
  EXPECT_TRUE(applies(weight, 1, 4, true, false));
}

TEST(OpDependencies, SayWhatEachOpSendsAndWhatCompletesTheAllReduce) {
  EXPECT_EQ(sends_after(OpKind::kForward).via, Via::kActivation);
  EXPECT_EQ(sends_after(OpKind::kForward).direction, +1);
  EXPECT_EQ(sends_after(OpKind::kBackward).via, Via::kGradient);
  EXPECT_EQ(sends_after(OpKind::kBackward).direction, -1);
  for (const OpKind k : {OpKind::kRecompute, OpKind::kWeight, OpKind::kOptimizer}) {
    EXPECT_EQ(sends_after(k).via, Via::kSameStage) << op_letter(k);
  }
  EXPECT_TRUE(feeds_all_reduce(OpKind::kBackward));
  EXPECT_TRUE(feeds_all_reduce(OpKind::kWeight));
  EXPECT_FALSE(feeds_all_reduce(OpKind::kForward));
  EXPECT_FALSE(feeds_all_reduce(OpKind::kRecompute));
  EXPECT_FALSE(feeds_all_reduce(OpKind::kOptimizer));
}

// check_schedule names the rule that the device's order breaks.
TEST(OpDependencies, CheckScheduleReportsABrokenSameStageRule) {
  Schedule s = build_schedule(ScheduleKind::kZbH1, 2, 2, Remat::kAlways);
  ASSERT_EQ(check_schedule(s), "");
  auto& ops = s.device_ops[1];
  // Move stage 1's optimizer step to the front of its device.
  const Op step = ops.back();
  ops.pop_back();
  ops.insert(ops.begin(), step);
  EXPECT_EQ(check_schedule(s), "stage 1 micro-batch 0: optimizer step before backward");
}

}  // namespace
}  // namespace pipescope
