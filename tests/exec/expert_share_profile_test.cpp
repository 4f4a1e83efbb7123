// The profile of expert ranks of context shares (E x C): the gradient sum
// over all of them, and a plan's slowdown of the group from its op lists.
// Times are checked for being measured at all, never for their size.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <memory>

#include "../tiny_models.h"
#include "exec/affinity.h"
#include "exec/op_list_profile.h"
#include "exec/profiler.h"
#include "sim/engine/schedule.h"
#include "sim/formats/profile_io.h"

namespace pipescope::exec {
namespace {

// Expert ranks of context shares: their gradient sum over all E x C threads
// is measured whatever the cores (time-sliced where fewer, as the run sums
// it); the shares' and the expert ranks' own figures are left out.
TEST(Profiler, MeasuresTheGradientSumOfExpertRanksOfShares) {
  TransformerParams p = testing::tiny_executor_transformer_params(2);
  p.seq_len = 8;
  ProfileOptions o;
  o.repeats = 1;
  o.batch_sizes = {2};
  o.context_ranks = 2;
  o.expert_ranks = 2;
  const Profile both = profile_model(testing::experts_of_shares(p), o);
  EXPECT_EQ(both.gradient_sum.ranks, 4);
  EXPECT_GT(both.gradient_sum.latency_s, 0.0);
  EXPECT_GT(both.gradient_sum.bandwidth, 0.0);
  EXPECT_EQ(both.group_slowdown.ranks, 0);
  EXPECT_EQ(both.context_ring.ranks, 0);
  EXPECT_EQ(both.routed_load(2, 1, 2), nullptr);
}

// A plan's profile of E = 2 expert ranks of C = 2 shares takes the four
// ranks' slowdown together from its op lists, whatever the cores (where
// they outnumber them, time-sliced as a step runs them); their ring,
// all-to-alls and routed load stay unmeasured.
TEST(Profiler, APlansProfileTakesTheSlowdownOfExpertRanksOfShares) {
  const ModelSpec m = testing::wide_experts_of_shares();
  ProfileOptions o;
  o.repeats = 1;
  o.batch_sizes = {2};
  o.context_ranks = 2;
  o.expert_ranks = 2;
  o.stages = std::make_shared<PlanStages>(
      PlanStages{build_1f1b(1, 2, Remat::kNever), {{0, m.layers.size()}}});
  // As above: up to three profiles for one whose slowdown is plausible.
  Profile both = profile_model(m, o);
  for (int tries = 1; tries < 3 && both.group_slowdown.ranks == 0; ++tries) {
    both = profile_model(m, o);
  }
  EXPECT_EQ(both.group_slowdown.ranks, 4);
  EXPECT_TRUE(both.group_slowdown.experts);
  EXPECT_EQ(both.group_slowdown.shares, 2);
  EXPECT_TRUE(both.group_slowdown.op_lists);
  // Time-sliced where the four outnumber the cores.
  const auto cores = std::min<std::size_t>(both.cores, allowed_cpus().size());
  EXPECT_EQ(both.group_slowdown.time_sliced, cores < 4);
  EXPECT_EQ(both.group_slowdown.micro_batch, 2);
  EXPECT_EQ(both.context_ring.ranks, 0);
  EXPECT_EQ(both.routed_load(2, 1, 2), nullptr);
  // Written and read back as it was measured.
  const Profile again = profile_from_json(profile_to_json(both), "p.json");
  EXPECT_EQ(again.group_slowdown.shares, 2);
  EXPECT_EQ(again.group_slowdown.time_sliced, both.group_slowdown.time_sliced);
  EXPECT_EQ(again.group_slowdown.ranks, 4);
}

}  // namespace
}  // namespace pipescope::exec
