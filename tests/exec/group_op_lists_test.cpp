// A plan's op lists run by a group of ranks (exec/group_op_lists.h): the
// context shares' exchanges counted op by op as a step's ops make them, the
// group's compute over a rank alone's, and the slowdown of paired runs.
// The expert ranks' runs are checked in expert_load_test.cpp. Times are
// checked for being measured at all (positive), never for their size.

#include "exec/group_op_lists.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "../tiny_models.h"
#include "costmodels/model_families.h"
#include "exec/data.h"
#include "exec/models.h"
#include "exec/profile_passes.h"
#include "sim/engine/schedule.h"

namespace pipescope::exec {
namespace {

// The inputs a rank alone keeps at micro-batch 4 (the profiler's: the last
// share's rows).
std::vector<Tensor> share_inputs(const ModelSpec& m) {
  LayerList alone = build_layers(m, 1);
  const MicroBatch mb = last_share(whole_batch(task_shape(m), 4, 0, 1), 2);
  return layer_inputs(alone, mb.input, last_share_context(mb, 2));
}

// Two shares running 1F1B with remat over two devices (the embedding and
// block 0 on one, block 1 and the head on the other), three micro-batches of
// 4 sequences, each share 4 x 4 rows of them. Round the ring, a block's
// forward takes the other share's keys and values once (32 floats a row),
// and so does its recompute, and its backward three times: 2 x 3 x (1 + 1 +
// 3) takes a share. Trading heads, four all-to-alls in each attention's
// forward, recompute and backward (8 floats a row): 2 x 3 x (4 + 4 + 4).
TEST(GroupOpLists, TheSharesRunAPlansOpListsTogether) {
  for (const bool heads : {false, true}) {
    const ModelSpec m = testing::tiny_context_share(heads);
    const PlanStages two{build_1f1b(2, 3, Remat::kAlways), {{0, 2}, {2, m.layers.size()}}};
    const std::vector<std::vector<GroupRun>> runs =
        group_op_list_runs(m, {two, 4, 1, share_inputs(m), host_op_clock(), 2});
    ASSERT_EQ(runs.size(), 2u) << heads;
    const int count = heads ? 2 * 3 * (4 + 4 + 4) : 2 * 3 * (1 + 1 + 3);
    const Bytes row = heads ? 8 * 4 : 32 * 4;
    for (const std::vector<GroupRun>& share : runs) {
      ASSERT_EQ(share.size(), 2u);
      for (const GroupRun& run : share) {
        EXPECT_EQ(run.exchanges.count, count) << heads;
        EXPECT_EQ(run.exchanges.bytes, Bytes{count} * 4 * 4 * row) << heads;
        EXPECT_TRUE(run.calls.empty());
        EXPECT_GT(run.compute[0], 0);
        EXPECT_GT(run.compute[1], 0);
      }
    }
  }
}

// E = 2 expert ranks of C = 2 shares (two blocks, block 1 a mixture) under
// 1F1B on one device, three micro-batches of 2 sequences an expert rank:
// each block's attention takes the other share's keys and values once in a
// forward and three times in a backward, and the mixture makes two
// all-to-alls in each: 3 x (2 x (1 + 3) + (2 + 2)) exchanges a rank, the
// same where the ranks are crowded onto the cores, whose ops then keep
// their exchanges' waits (each op's wall time holds its exchanges').
TEST(GroupOpLists, ExpertRanksOfSharesRunAPlansOpListsTogether) {
  TransformerParams p = testing::tiny_executor_transformer_params(2);
  p.seq_len = 8;
  const ModelSpec m = testing::experts_of_shares(p);
  LayerList alone = build_layers(m, 1);
  const MicroBatch mb = last_share(whole_batch(task_shape(m), 2, 0, 1), 2);
  const std::vector<Tensor> inputs = layer_inputs(alone, mb.input, last_share_context(mb, 2));
  const PlanStages one{build_1f1b(1, 3, Remat::kNever), {{0, m.layers.size()}}};
  for (const bool crowded : {false, true}) {
    const std::vector<std::vector<GroupRun>> runs =
        group_op_list_runs(m, {one, 2, 1, inputs, host_op_clock(), 1, crowded});
    ASSERT_EQ(runs.size(), 4u) << crowded;
    for (const std::vector<GroupRun>& rank : runs) {
      ASSERT_EQ(rank.size(), 1u);
      const GroupRun& run = rank.front();
      EXPECT_EQ(run.exchanges.count, 3 * (2 * (1 + 3) + (2 + 2))) << crowded;
      EXPECT_EQ(run.calls.size(), 3u * 2) << crowded;
      EXPECT_GT(run.compute[0], 0);
      EXPECT_GT(run.compute[1], 0);
      if (crowded) {
        EXPECT_GE(run.compute[0] + run.compute[1], run.exchanges.wall);
      }
    }
  }
}

// A group (shares, expert ranks or both) of a transformer at T = 1, and at
// least one run.
TEST(GroupOpLists, RefusesOtherModelsAndNoRuns) {
  const ModelSpec m = testing::tiny_context_share(false);
  const std::vector<Tensor> inputs = share_inputs(m);
  const PlanStages one{build_1f1b(1, 2, Remat::kNever), {{0, m.layers.size()}}};
  EXPECT_THROW(group_op_list_runs(m, {one, 4, 1, inputs, host_op_clock(), 0}),
               std::invalid_argument);
  EXPECT_THROW(
      group_op_list_runs(testing::tiny_transformer(2), {one, 4, 1, inputs, host_op_clock(), 1}),
      std::invalid_argument);
}

// A run's group compute is the ranks' mean over the rank alone's totals in
// each direction: forwards 300 and 100 ns over 100 (kept 60 and recomputed
// 40), backwards 500 and 700 over 300 (a fused 200, B 50 and W 50). Nothing
// where the rank alone timed nothing in a direction.
TEST(GroupOpLists, TheGroupsComputeIsTheRanksMeanOverTheRankAlone) {
  std::vector<std::vector<GroupRun>> ranks(2, std::vector<GroupRun>(1));
  ranks[0][0].compute = {300, 500};
  ranks[1][0].compute = {100, 700};
  OpListTimes alone(2);
  alone.kept.add(0, 60);
  alone.recompute.add(1, 40);
  alone.backward.add(0, 200);
  alone.input.add(1, 50);
  alone.weight.add(1, 50);
  const ComputeRatio r = group_over_alone(ranks, 0, alone);
  EXPECT_DOUBLE_EQ(r.forward, 2.0);
  EXPECT_DOUBLE_EQ(r.backward, 2.0);
  const OpListTimes forward_only = [] {
    OpListTimes t(2);
    t.kept.add(0, 100);
    return t;
  }();
  EXPECT_EQ(group_over_alone(ranks, 0, forward_only).forward, 0.0);
  EXPECT_EQ(group_over_alone({}, 0, alone).forward, 0.0);
}

// The slowdown of paired runs: each direction's median ratio (forwards 1, 2,
// 4: 2; backwards 3, 1, 2: 2), measured over op lists; none without two
// ranks or a ratio.
TEST(GroupOpLists, TheSlowdownIsEachDirectionsMedianRatio) {
  PairedGroupRuns pairs;
  pairs.ratios = {{1.0, 3.0}, {2.0, 1.0}, {4.0, 2.0}};
  const GroupSlowdownFigures g = paired_slowdown(pairs, 2, 4, false);
  EXPECT_EQ(g.ranks, 2);
  EXPECT_DOUBLE_EQ(g.forward, 2.0);
  EXPECT_DOUBLE_EQ(g.backward, 2.0);
  EXPECT_EQ(g.micro_batch, 4);
  EXPECT_FALSE(g.experts);
  EXPECT_TRUE(g.op_lists);
  EXPECT_TRUE(paired_slowdown(pairs, 2, 4, true).experts);
  EXPECT_EQ(paired_slowdown(pairs, 1, 4, false).ranks, 0);
  EXPECT_EQ(paired_slowdown(PairedGroupRuns{}, 2, 4, false).ranks, 0);
}

}  // namespace
}  // namespace pipescope::exec
