// The expert ranks' routed load (exec/expert_load_profile.h): the busiest
// rank's rows beyond the mean at the time a further row takes, measured as
// the ranks' layers run; and the profiled cost model, which adds that to each
// mixture's ops of a balanced rank.

#include "exec/expert_load_profile.h"

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "../tiny_models.h"
#include "compare_helpers.h"
#include "costmodels/model_families.h"
#include "exec/compare.h"
#include "exec/data.h"
#include "exec/models.h"
#include "exec/op_list_profile.h"
#include "exec/profile_passes.h"
#include "exec/profiler.h"
#include "exec/shared_cores_note.h"
#include "sim/engine/schedule.h"
#include "sim/engine/simulator.h"

namespace pipescope::exec {
namespace {

using Call = ExpertTally::Call;
using namespace compare_helpers;

// Two ranks, two mixtures: rank 0 receives 10 then 30 rows, rank 1 30 then
// 10. A forward's experts take 1 us + 100 ns a row, a backward's 0.5 us +
// 200 ns a row. Each call's busiest rank has 10 rows beyond the mean of 20:
// 1 us more in a forward at 100 ns a row (not the 150 ns a row of the
// calls' mean, which counts what does not grow with the rows), 2 us in a
// backward; 30 rows over a mean of 20.
TEST(ExpertLoad, TheBusiestRanksRowsBeyondTheMeanAtTheTimeOfAFurtherRow) {
  const auto f = [](Index rows) { return Call{false, rows, 1000 + 100 * rows}; };
  const auto b = [](Index rows) { return Call{true, rows, 500 + 200 * rows}; };
  const std::vector<std::vector<Call>> calls{{f(10), f(30), b(30), b(10)},
                                             {f(30), f(10), b(10), b(30)}};
  const ExpertLoadFigures load = expert_load_of(calls);
  EXPECT_EQ(load.ranks, 2);
  EXPECT_DOUBLE_EQ(load.imbalance, 1.5);
  EXPECT_NEAR(load.forward_s, 1e-6, 1e-15);
  EXPECT_NEAR(load.backward_s, 2e-6, 1e-15);
  EXPECT_EQ(load.micro_batch, 0);
}

// Ranks of equal rows wait for nobody; calls that do not pair up, or one
// rank, are refused.
TEST(ExpertLoad, BalancedRanksTakeNothingMore) {
  const std::vector<std::vector<Call>> even{{{false, 20, 3000}, {true, 20, 5000}},
                                            {{false, 20, 2000}, {true, 20, 6000}}};
  const ExpertLoadFigures load = expert_load_of(even);
  EXPECT_DOUBLE_EQ(load.imbalance, 1.0);
  EXPECT_EQ(load.forward_s, 0.0);
  EXPECT_EQ(load.backward_s, 0.0);
  EXPECT_THROW(expert_load_of({even[0], {even[1][0]}}), std::invalid_argument);
  EXPECT_THROW(expert_load_of({even[0], {even[1][1], even[1][0]}}), std::invalid_argument);
  EXPECT_THROW(expert_load_of({even[0]}), std::invalid_argument);
}

// The tiny transformer with four experts of width 12, `top_k` a token,
// block 0 dense, as one of two expert ranks.
ModelSpec expert_rank(int top_k) {
  TransformerParams p = testing::tiny_executor_transformer_params(3);
  p.moe = {4, top_k, 12, 0, 1, 1.0};
  TensorSplit split;
  split.experts = 2;
  return make_transformer(p, "tiny", split);
}

// Two ranks' passes as processes report them (expert_rank_passes): in each
// pass rank 0 receives 30 rows and rank 1 10, in a forward and a backward
// call whose times grow by 100 and 200 ns a row times the pass's scale (1,
// 3, 2 after the warm-up), and each rank's all-to-alls take 30, 50, 10 us.
// The load is the median pass's by its extra time, the one of scale 2: 10
// rows beyond the mean at 200 and 400 ns. The all-to-alls are the median
// pass's by their time beyond the ranks' waits for the busiest (2 x the
// busiest's extra, 6, 18 and 12 us): 54, 82 and 8 us, so the first timed
// pass's, both ranks' 60 us and its 6 us of waits. Passes that do not pair
// up, and one rank, are refused.
TEST(ExpertLoad, TheRanksPassesCombineAtTheMedianPass) {
  const auto rank = [](Index rows) {
    std::vector<GroupRun> r;
    for (const auto& [scale, alltoalls] :
         {std::pair<SimTime, SimTime>{9, 90000}, {1, 30000}, {3, 50000}, {2, 10000}}) {
      // Compute: in the passes after the first, the ranks' (rows 30 and 10)
      // mean forward 20 000 x (1, 3, 2) ns and backward 25 000 x (3, 1, 2).
      r.push_back({{{false, rows, scale * 100 * rows}, {true, rows, scale * 200 * rows}},
                   {4, alltoalls, 800},
                   {scale * 1000 * rows, (scale == 1   ? 3
                                          : scale == 3 ? 1
                                                       : scale) *
                                             1250 * rows}});
    }
    return r;
  };
  const ExpertLoadTiming t = expert_load_timing({rank(30), rank(10)}, 4);
  EXPECT_EQ(t.load.ranks, 2);
  EXPECT_EQ(t.load.micro_batch, 4);
  EXPECT_DOUBLE_EQ(t.load.imbalance, 1.5);
  EXPECT_NEAR(t.load.forward_s, 2e-6, 1e-15);
  EXPECT_NEAR(t.load.backward_s, 4e-6, 1e-15);
  EXPECT_EQ(t.alltoalls.count, 8);
  EXPECT_EQ(t.alltoalls.wall, 60000);
  EXPECT_EQ(t.alltoalls.bytes, 1600);
  EXPECT_NEAR(t.load_waits_s, 2 * (1e-6 + 2e-6), 1e-15);
  // Each direction's median over the passes of the ranks' mean compute,
  // apart from the passes the load and the all-to-alls came from.
  EXPECT_EQ(t.forward_compute, 2 * 20000);
  EXPECT_EQ(t.backward_compute, 2 * 25000);
  std::vector<GroupRun> short_of_one = rank(10);
  short_of_one.pop_back();
  EXPECT_THROW(expert_load_timing({rank(30), short_of_one}, 4), std::invalid_argument);
  EXPECT_THROW(expert_load_timing({rank(30)}, 4), std::invalid_argument);
}

// Measured as the ranks' layers run: with every token sent to every expert
// each rank receives the same rows and none waits; a top-2 router loads
// the busiest rank between the mean and all of the rows. Other models are
// refused.
TEST(ExpertLoad, TheRanksLayersMeasureTheirRouter) {
  const ExpertLoadTiming every = time_expert_load(expert_rank(4), 4, 1, 3);
  const ExpertLoadFigures& all = every.load;
  EXPECT_EQ(all.ranks, 2);
  EXPECT_EQ(all.micro_batch, 4);
  EXPECT_DOUBLE_EQ(all.imbalance, 1.0);
  EXPECT_EQ(all.forward_s, 0.0);
  EXPECT_EQ(all.backward_s, 0.0);
  // The all-to-alls: 2 mixtures (block 0 is dense), each two in a forward
  // and two in a backward, on each of the 2 ranks; each brings a rank the
  // other's 4 x 5 tokens for its 2 experts, or their outputs or gradients:
  // 40 rows of 16 floats (the forward's first 17, the row's expert first).
  EXPECT_EQ(every.alltoalls.count, 16);
  EXPECT_EQ(every.alltoalls.bytes, 2 * 2 * 40 * (17 + 3 * 16) * Bytes{sizeof(float)});
  EXPECT_GT(every.alltoalls.wall, 0);
  EXPECT_EQ(every.load_waits_s, 0.0);
  // The seed fixes the routing: on these weights and samples one rank's
  // experts receive more of the rows (whatever the timing).
  const ExpertLoadTiming routed = time_expert_load(expert_rank(2), 4, 1, 3);
  const ExpertLoadFigures& top2 = routed.load;
  EXPECT_GT(top2.imbalance, 1.0);
  EXPECT_LE(top2.imbalance, 2.0);
  EXPECT_GE(top2.forward_s, 0.0);
  // (The waits for the busiest, by hand: TheRanksPassesCombineAtTheMedianPass.)
  EXPECT_GE(routed.load_waits_s, 0.0);
  EXPECT_EQ(routed.alltoalls.count, 16);
  EXPECT_THROW(time_expert_load(expert_rank(2), 4, 1, 0), std::invalid_argument);
  EXPECT_THROW(time_expert_load(testing::tiny_transformer(2), 4, 1, 1), std::invalid_argument);
}

// The profiler measures the load when asked for the model's E (at its
// largest batch size), and not otherwise.
TEST(ExpertLoad, TheProfilerMeasuresItWhenAsked) {
  ProfileOptions o;
  o.repeats = 1;
  o.batch_sizes = {2, 4};
  o.expert_ranks = 2;
  // Wide enough (128) that the ranks' compute, not their all-to-alls'
  // waits, fills their passes (Profiler.MeasuresTheSharesExchangesWhenAsked).
  ModelSpec wide = expert_rank(2);
  {
    TransformerParams p = *wide.transformer;
    p.d_model = 128;
    p.d_ff = 256;
    p.moe.expert_d_ff = 128;
    TensorSplit split;
    split.experts = 2;
    wide = make_transformer(p, "wide", split);
  }
  // As for the shares (Profiler.MeasuresTheSharesExchangesWhenAsked): a busy
  // machine can make the ranks' compute slowdown implausible, which the
  // profile refuses; up to three profiles for one that keeps it.
  Profile asked = profile_model(wide, o);
  for (int tries = 1; tries < 3 && asked.cores >= 2 && asked.group_slowdown.ranks == 0; ++tries) {
    asked = profile_model(wide, o);
  }
  if (asked.cores >= 2) {
    EXPECT_EQ(asked.expert_load.ranks, 2);
    EXPECT_EQ(asked.expert_load.micro_batch, 4);
    EXPECT_GE(asked.expert_load.imbalance, 1.0);
    // and the ranks' all-to-all as their layers ran it, for the prediction.
    EXPECT_EQ(asked.alltoall_group.ranks, 2);
    EXPECT_EQ(asked.alltoall_group.micro_batch, 4);
    EXPECT_GT(asked.alltoall_group.latency_s, 0.0);
    EXPECT_GT(asked.alltoall_group.bandwidth, 0.0);
    // and their gradient sum before the step.
    EXPECT_EQ(asked.gradient_sum.ranks, 2);
    EXPECT_GT(asked.gradient_sum.bandwidth, 0.0);
    // and their compute among each other.
    EXPECT_EQ(asked.group_slowdown.ranks, 2);
    EXPECT_TRUE(asked.group_slowdown.experts);
    EXPECT_EQ(asked.group_slowdown.micro_batch, 4);
  }
  o.expert_ranks = 0;
  const Profile not_asked = profile_model(expert_rank(2), o);
  EXPECT_EQ(not_asked.group_slowdown.ranks, 0);
  EXPECT_EQ(not_asked.expert_load.ranks, 0);
  EXPECT_EQ(not_asked.alltoall_group.ranks, 0);
  EXPECT_EQ(not_asked.gradient_sum.ranks, 0);
}

// A plan's op lists, every device's two ranks at once (or one device's
// after another's), each run after an untimed one: every op's all-to-alls
// between them counted and taken out of its time, in a forward two a
// mixture (dispatch and combine) and in a backward two. Two mixtures (block
// 0 is dense), three micro-batches each forward, recomputed and backward
// under remat: 2 x 3 x (2 + 2 + 2) a rank, and as many mixture calls.
TEST(ExpertLoad, TheRanksRunAPlansOpListsTogether) {
  const ModelSpec m = expert_rank(2);
  const std::size_t L = m.layers.size();
  LayerList alone = build_layers(m, 1);
  const MicroBatch mb = whole_batch(task_shape(m), 4, 0, 1);
  const Context ctx = last_share_context(mb, 1);
  const std::vector<Tensor> inputs = layer_inputs(alone, mb.input, ctx);
  const PlanStages two{build_1f1b(2, 3, Remat::kAlways), {{0, 2}, {2, L}}};
  const std::vector<std::vector<GroupRun>> runs =
      group_op_list_runs(m, {two, 4, 1, inputs, host_op_clock(), 2});
  ASSERT_EQ(runs.size(), 2u);
  for (const std::vector<GroupRun>& rank : runs) {
    ASSERT_EQ(rank.size(), 2u);
    for (std::size_t r = 0; r < 2; ++r) {
      EXPECT_EQ(rank[r].exchanges.count, 2 * 3 * (2 + 2 + 2)) << r;
      EXPECT_EQ(rank[r].calls.size(), 2u * 3 * 3) << r;
      EXPECT_GT(rank[r].compute[0], 0) << r;
      EXPECT_GT(rank[r].compute[1], 0) << r;
    }
  }
  // One device's ranks after another's: the same all-to-alls.
  EXPECT_EQ(group_op_list_runs(m, {two, 4, 1, inputs, host_op_clock(), 1}, false)
                .back()
                .front()
                .exchanges.count,
            2 * 3 * (2 + 2 + 2));
  // Without remat, split: B trades the gradients, W nothing.
  const PlanStages split{build_zb_h1(1, 3, Remat::kNever), {{0, L}}};
  EXPECT_EQ(group_op_list_runs(m, {split, 4, 1, inputs, host_op_clock(), 1})
                .front()
                .front()
                .exchanges.count,
            2 * 3 * (2 + 2));
}

// A profile of a plan with E = 2 takes the ranks' load, all-to-all and
// slowdown from its op lists, at its micro-batch size.
TEST(ExpertLoad, APlansProfileTakesTheRanksSlowdownFromItsOpLists) {
  const ModelSpec m = expert_rank(2);
  ProfileOptions o;
  o.repeats = 1;
  o.batch_sizes = {2};
  o.expert_ranks = 2;
  o.stages = std::make_shared<PlanStages>(
      PlanStages{build_1f1b(1, 2, Remat::kNever), {{0, m.layers.size()}}});
  // As above: up to three profiles for one whose slowdown is plausible.
  Profile p = profile_model(m, o);
  for (int tries = 1; tries < 3 && p.cores >= 2 && p.group_slowdown.ranks == 0; ++tries) {
    p = profile_model(m, o);
  }
  if (p.cores < 2) GTEST_SKIP() << "one core: the ranks cannot compute at once";
  EXPECT_EQ(p.group_slowdown.ranks, 2);
  EXPECT_TRUE(p.group_slowdown.experts);
  EXPECT_TRUE(p.group_slowdown.op_lists);
  EXPECT_EQ(p.group_slowdown.micro_batch, 2);
  EXPECT_EQ(p.expert_load.micro_batch, 2);
  EXPECT_GE(p.expert_load.imbalance, 1.0);
  EXPECT_EQ(p.alltoall_group.micro_batch, 2);
  EXPECT_GT(p.alltoall_group.latency_s, 0.0);
}

// A plan of one stage of E = 2 expert ranks of `m` (one rank's model).
Plan expert_plan(const ModelSpec& m) {
  Plan plan = plan_of(m, 1, 2, Remat::kNever);
  plan.expert_parallel = 2;
  plan.devices = 2;
  return plan;
}

// The E ranks sum the gradients of their shared layers (not the experts')
// before the step, timed by the profile's gradient sum of E threads.
TEST(ExpertLoad, TheRanksSumTheirSharedGradientsAsTheProfileMeasured) {
  const ModelSpec m = expert_rank(2);
  const Plan plan = expert_plan(m);
  auto p = std::make_shared<Profile>(*known_profile(m, 4));
  p->gradient_sum = {2, 30e-6, 2e9};
  const Scenario sc = cpu_scenario(plan, m, p, "known.json");
  const StageCost c = simulate(sc, cpu_sim_config(plan, sc)).stage_costs.front();
  ASSERT_GT(c.expert_params, 0);
  const double shared = static_cast<double>(c.params - c.expert_params) * sizeof(float);
  EXPECT_NEAR(simtime_to_seconds(c.allreduce), 30e-6 + shared / 2e9, 1e-8);
}

// The ranks compute as slowly among each other as the profile measured
// them at the plan's micro-batch size: forwards and recomputes its forward
// figure, backwards its backward. The shares' figure, or one measured at
// another size, leaves the ops at the cores' slowdown.
TEST(ExpertLoad, TheRanksTakeTheSlowdownTheirPassesMeasured) {
  const ModelSpec m = expert_rank(2);
  const Plan plan = expert_plan(m);
  auto p = std::make_shared<Profile>(*known_profile(m, 4));
  p->concurrency_slowdown = {1.0, 1.25};
  const LayerProfile& alone = p->layers.back();
  const auto first = [](const std::vector<SimTime>& t) { return static_cast<double>(t.front()); };
  const double forward = first(alone.forward), recompute = first(alone.recompute),
               backward = first(alone.backward);
  const auto layer = [&](const GroupSlowdownFigures& g) {
    p->group_slowdown = g;
    return cpu_scenario(plan, m, p, "known.json").cluster.profile->layers.back();
  };
  const LayerProfile measured = layer({2, 1.4, 1.6, plan.micro_batch_size, true});
  EXPECT_NEAR(first(measured.forward), 1.4 * forward, 1.0);
  EXPECT_NEAR(first(measured.recompute), 1.4 * recompute, 1.0);
  EXPECT_NEAR(first(measured.backward), 1.6 * backward, 1.0);
  for (const GroupSlowdownFigures& other :
       {GroupSlowdownFigures{2, 1.4, 1.6, plan.micro_batch_size, false},
        GroupSlowdownFigures{2, 1.4, 1.6, 2 * plan.micro_batch_size, true}}) {
    const LayerProfile cores = layer(other);
    EXPECT_NEAR(first(cores.forward), 1.25 * forward, 1.0);
    EXPECT_NEAR(first(cores.backward), 1.25 * backward, 1.0);
  }
}

// E = 2 expert ranks of C = 2 shares take the slowdown measured for such a
// group (its shares 2); an E = 4 group's, with as many ranks, is not theirs.
// Unmeasured, four ranks on a profile of two cores take the two cores'
// slowdown twice (time-sliced); the measured one holds the slicing already.
TEST(ExpertLoad, ExpertRanksOfSharesTakeTheSlowdownMeasuredForThem) {
  const ModelSpec m = expert_rank(2);
  Plan plan = expert_plan(m);
  plan.context_parallel = 2;
  plan.devices = 4;
  auto p = std::make_shared<Profile>(*known_profile(m, 2));
  p->concurrency_slowdown = {1.0, 1.25};
  const auto first = [](const std::vector<SimTime>& t) { return static_cast<double>(t.front()); };
  const double forward = first(p->layers.back().forward),
               backward = first(p->layers.back().backward);
  const auto layer = [&](const GroupSlowdownFigures& g) {
    p->group_slowdown = g;
    return cpu_scenario(plan, m, p, "known.json").cluster.profile->layers.back();
  };
  const LayerProfile measured = layer({4, 1.4, 3.6, plan.micro_batch_size, true, true, false, 2});
  EXPECT_NEAR(first(measured.forward), 1.4 * forward, 1.0);
  EXPECT_NEAR(first(measured.backward), 3.6 * backward, 1.0);
  const LayerProfile sliced = layer({4, 1.4, 3.6, plan.micro_batch_size, true, true, false, 1});
  EXPECT_NEAR(first(sliced.forward), 2.5 * forward, 1.0);
  EXPECT_NEAR(first(sliced.backward), 2.5 * backward, 1.0);
}

// The prediction of an E plan's replica, its timeline kept.
SimResult expert_run(const Scenario& sc, const Plan& plan) {
  SimConfig c = cpu_sim_config(plan, sc);
  c.record_timeline = true;
  return simulate(sc, c);
}

// E = 2 expert ranks of C = 2 shares of the tiny transformer on sequences
// of 8 (the shares trading heads where `heads`, passing keys and values
// round a ring otherwise), on a profile of 2 cores whose slow transport
// makes every exchange outlast the ops it overlaps.
struct SlicedGroup {
  ModelSpec m;
  Plan plan;
  std::shared_ptr<Profile> p;

  explicit SlicedGroup(bool heads) {
    TransformerParams params = testing::tiny_executor_transformer_params(3);
    params.seq_len = 8;
    params.moe = {4, 2, 12, 0, 1, 1.0};
    TensorSplit split;
    split.context = 2;
    split.experts = 2;
    split.heads_over_context = heads;
    m = make_transformer(params, "moe", split);
    plan = expert_plan(m);
    plan.context_parallel = 2;
    plan.devices = 4;
    plan.cp_comm_type = heads ? ContextExchange::kAllToAll : ContextExchange::kP2p;
    p = std::make_shared<Profile>(*known_profile(m, 2));
    p->concurrency_slowdown = {1.0, 1.25};
    p->transport_latency_s = 5e-3;
    p->transport_bandwidth = 1e9;
  }
  // The stage's costs with the group's slowdown measured time-sliced or not.
  StageCost stage(bool time_sliced) {
    p->group_slowdown = {4, 1.4, 3.6, plan.micro_batch_size, true, true, time_sliced, 2};
    const Scenario sc = cpu_scenario(plan, m, p, "known.json");
    return simulate(sc, cpu_sim_config(plan, sc)).stage_costs.front();
  }
};

// A group measured time-sliced has its exchanges in its slowdown: the
// prediction takes its ring and all-to-alls at nothing beside it; measured
// otherwise, over the transport. The report's note says what it took.
TEST(ExpertLoad, ATimeSlicedGroupsSlowdownHoldsItsExchanges) {
  SlicedGroup g(false);
  const StageCost apart = g.stage(false);
  EXPECT_GT(apart.ep_forward, 0);
  EXPECT_GT(apart.ep_backward, 0);
  EXPECT_GT(apart.cp_forward, 0);
  const StageCost in = g.stage(true);
  // The comparison gives the all-to-alls no figures of their own.
  const Scenario sc = cpu_scenario(g.plan, g.m, g.p, "known.json");
  const Comparison c = compare_run(sc, g.plan, {as_measured(expert_run(sc, g.plan), 1.0, 1.0)}, 0);
  EXPECT_TRUE(c.group_slowdown.time_sliced);
  EXPECT_EQ(c.alltoall_group.ranks, 0);
  EXPECT_EQ(in.ep_forward, 0);
  EXPECT_EQ(in.ep_backward, 0);
  EXPECT_EQ(in.cp_forward, 0);
  EXPECT_EQ(in.cp_backward, 0);
  EXPECT_EQ(in.forward, apart.forward);  // the same slowdown
  const std::string note = shared_cores_note(1, 2, "core", 4, false, &g.p->group_slowdown);
  EXPECT_NE(note.find("ops 1.4 (forwards) and 3.6 (backwards) times as long as alone (as the "
                      "profile measured them time-sliced on the 2 cores, their exchanges in "
                      "them)"),
            std::string::npos)
      << note;
  // Under MPI the profile runs every stage's processes at once: their waits
  // behind each other are in the slowdown, not left out.
  const std::string mpi = shared_cores_note(2, 2, "core", 4, true, &g.p->group_slowdown);
  EXPECT_NE(mpi.find("with every stage's processes at once, over how many stages ran at once; "
                     "their exchanges and their waits behind the other stages' processes in them"),
            std::string::npos)
      << mpi;
  EXPECT_EQ(mpi.find("which the prediction leaves out"), std::string::npos) << mpi;
  EXPECT_NE(shared_cores_note(2, 2, "core", 4, false, &g.p->group_slowdown)
                .find("which the prediction leaves out"),
            std::string::npos);
}

// Where the shares trade heads (cp_comm_type a2a) instead of passing keys
// and values round a ring, their all-to-alls are in the time-sliced
// slowdown too: priced at nothing beside it, as the experts' are.
TEST(ExpertLoad, ATimeSlicedGroupsSlowdownHoldsTheSharesTradedHeads) {
  SlicedGroup g(true);
  ASSERT_TRUE(g.m.context_by_heads);
  const StageCost apart = g.stage(false);
  EXPECT_GT(apart.cp_forward, 0);
  EXPECT_GT(apart.cp_backward, 0);
  EXPECT_GT(apart.ep_forward, 0);
  const StageCost in = g.stage(true);
  EXPECT_EQ(in.cp_forward, 0);
  EXPECT_EQ(in.cp_backward, 0);
  EXPECT_EQ(in.ep_forward, 0);
  EXPECT_EQ(in.ep_backward, 0);
  EXPECT_EQ(in.forward, apart.forward);  // the same slowdown
}

// compare's prediction of E = 2 at the measured micro-batch size (its cost
// model, make_cost_model's): each mixture's forward and recompute take the
// busiest rank's extra forward, its backward the extra backward, a split
// backward's B and W half of it each; the dense layers keep their times, and
// the comparison names the load. Measured at another micro-batch size, it
// scales with the tokens routed; measured for another E, it changes nothing.
TEST(ExpertLoad, ThePredictionAddsItToEachMixture) {
  const ModelSpec m = expert_rank(2);
  const Plan plan = expert_plan(m);
  auto p = std::make_shared<Profile>(*known_profile(m, 4));
  for (LayerProfile& l : p->layers) {
    l.batch_sizes = {plan.micro_batch_size};
    l.input = {1200000};
    l.weight = {900000};
  }
  p->expert_load = {2, 1.3, 300e-6, 500e-6, plan.micro_batch_size};
  const Scenario sc = cpu_scenario(plan, m, p, "known.json");
  const std::unique_ptr<CostModel> cost = make_cost_model(sc);
  const std::int64_t b = plan.micro_batch_size;
  int mixtures = 0;
  for (const LayerSpec& layer : m.layers) {
    const bool mixture = layer.ep_alltoalls > 0;
    mixtures += mixture ? 1 : 0;
    EXPECT_EQ(cost->forward(layer, b), mixture ? 1300000 : 1000000) << layer.name;
    EXPECT_EQ(cost->recompute(layer, b), mixture ? 1800000 : 1500000) << layer.name;
    EXPECT_EQ(cost->backward(layer, b), mixture ? 2500000 : 2000000) << layer.name;
    EXPECT_EQ(cost->input_grad(layer, b), mixture ? 1450000 : 1200000) << layer.name;
    EXPECT_EQ(cost->weight_grad(layer, b), mixture ? 1150000 : 900000) << layer.name;
    // Twice the micro-batch, twice the busiest rank's rows beyond the mean.
    EXPECT_EQ(cost->forward(layer, 2 * b), mixture ? 2600000 : 2000000) << layer.name;
  }
  EXPECT_EQ(mixtures, 2);
  EXPECT_EQ(
      compare_run(sc, plan, {as_measured(expert_run(sc, plan), 1.0, 1.0)}, 0).expert_load.ranks, 2);
  // Measured at twice the plan's micro-batch: half of it, and compare says so.
  p->expert_load.micro_batch = 2 * b;
  const Scenario larger = cpu_scenario(plan, m, p, "known.json");
  const Comparison halved =
      compare_run(larger, plan, {as_measured(expert_run(larger, plan), 1.0, 1.0)}, 0);
  EXPECT_EQ(halved.expert_load.micro_batch, b);
  EXPECT_DOUBLE_EQ(halved.expert_load.forward_s, 150e-6);
  EXPECT_DOUBLE_EQ(halved.expert_load.backward_s, 250e-6);
  for (const LayerSpec& layer : m.layers) {
    EXPECT_EQ(make_cost_model(larger)->forward(layer, b),
              layer.ep_alltoalls > 0 ? 1150000 : 1000000);
  }
  // Measured with four ranks: not this plan's.
  p->expert_load = {4, 1.3, 300e-6, 500e-6, b};
  const Scenario other = cpu_scenario(plan, m, p, "known.json");
  EXPECT_EQ(compare_run(other, plan, {as_measured(expert_run(other, plan), 1.0, 1.0)}, 0)
                .expert_load.ranks,
            0);
  for (const LayerSpec& layer : m.layers) {
    EXPECT_EQ(make_cost_model(other)->forward(layer, b), 1000000) << layer.name;
  }
}

// `simulate` with the profile of an E plan prices the mixtures as compare
// does: the scenario's E expert ranks at T = C = 1 take the load; at another
// E, or with tensor ranks, none.
TEST(ExpertLoad, ASimulationOfTheMeasuredRanksTakesItToo) {
  const ModelSpec m = expert_rank(2);
  auto p = std::make_shared<Profile>(*known_profile(m, 4));
  p->expert_load = {2, 1.5, 200e-6, 400e-6, 1};
  const LayerSpec* mixture = nullptr;
  for (const LayerSpec& layer : m.layers) {
    if (layer.ep_alltoalls > 0) mixture = &layer;
  }
  ASSERT_NE(mixture, nullptr);
  Scenario sc;
  sc.model = m;
  sc.training.expert_parallel = 2;
  sc.cluster.profile = p;
  const SimTime base = p->find(*mixture)->forward.front();
  EXPECT_EQ(make_cost_model(sc)->forward(*mixture, 1), base + 200000);
  // Without a measured B and W, W is half the loaded backward, B the rest.
  const SimTime backward = p->find(*mixture)->backward.front() + 400000;
  EXPECT_EQ(make_cost_model(sc)->weight_grad(*mixture, 1), backward / 2);
  EXPECT_EQ(make_cost_model(sc)->input_grad(*mixture, 1), backward - backward / 2);
  // A selective recompute's attention core waits for no expert: its share of
  // the measured recompute alone.
  ASSERT_GT(mixture->core_fwd_flops, 0.0);
  const double share = mixture->core_fwd_flops / mixture->fwd_flops;
  EXPECT_NEAR(static_cast<double>(make_cost_model(sc)->core_recompute(*mixture, 1)),
              static_cast<double>(p->find(*mixture)->recompute.front()) * share, 1.0);
  sc.training.expert_parallel = 4;
  EXPECT_EQ(make_cost_model(sc)->forward(*mixture, 1), base);
  sc.training.expert_parallel = 2;
  sc.cluster.tensor_parallel = 2;
  EXPECT_EQ(make_cost_model(sc)->forward(*mixture, 1), base);
}

}  // namespace
}  // namespace pipescope::exec
