// compare_run with C = 2 shares of each sequence a stage: the CPU scenario's
// groups of T x C cores, the shares' all-to-alls and ring takes timed as the
// profile measured them, and the replay of measured collectives, which
// stand for every kind the prediction has.

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <utility>

#include "../tiny_models.h"
#include "compare_helpers.h"
#include "costmodels/model_families.h"
#include "exec/compare.h"
#include "exec/shared_cores_note.h"
#include "sim/engine/simulator.h"

namespace pipescope::exec {
namespace {

using namespace compare_helpers;

constexpr int kC = 2;

// One share of the tiny transformer (sequences of 8, two heads): the ring's,
// or the all-to-all form's (`heads`).
ModelSpec share(bool heads) {
  TransformerParams p = testing::tiny_executor_transformer_params(2);
  p.seq_len = 8;
  TensorSplit split;
  split.context = kC;
  split.heads_over_context = heads;
  return make_transformer(p, "tiny", split);
}

Plan context_plan(const ModelSpec& m, bool heads) {
  Plan plan = plan_of(m, 1, 2, Remat::kNever);
  plan.context_parallel = kC;
  plan.devices = kC;
  plan.cp_comm_type = heads ? ContextExchange::kAllToAll : ContextExchange::kP2p;
  return plan;
}

// known_profile on 4 cores whose ops run 1.25 x as long on two at once, 1.5 x
// on three, 1.6 x on four.
std::shared_ptr<Profile> slowing_profile(const ModelSpec& m) {
  auto p = std::make_shared<Profile>(*known_profile(m, 4));
  p->concurrency_slowdown = {1.0, 1.25, 1.5, 1.6};
  p->transport_latency_s = 20e-6;
  p->transport_bandwidth = 1e9;
  return p;
}

// The C shares of a stage compute at once: each op takes the slowdown of two
// cores, the 4 cores hold two groups, and two groups at once are 4 cores.
TEST(ContextParallelCompare, TheSharesOfAStageComputeAtOnce) {
  const ModelSpec m = share(false);
  const Scenario sc = cpu_scenario(context_plan(m, false), m, slowing_profile(m), "known.json");
  ASSERT_NE(sc.cluster.profile, nullptr);
  EXPECT_EQ(sc.cluster.profile->layers.front().forward.front(), 1250000);
  EXPECT_EQ(sc.cluster.profile->layers.front().backward.front(), 2500000);
  EXPECT_EQ(sc.cluster.shared_cores, 2);
  ASSERT_EQ(sc.cluster.concurrency_slowdown.size(), 2u);
  EXPECT_DOUBLE_EQ(sc.cluster.concurrency_slowdown[1], 1.6 / 1.25);
}

// Shares that outnumber the machine's cores run time-sliced: on two cores,
// the 2 shares of each of two stages (4 threads) take the two cores' slowdown
// each, and the 4 shares of one stage twice that (4 threads on 2 cores), one
// stage's group at a time, their optimizer steps twice the profile's; on a
// GPU profile the streams are not cores.
TEST(ContextParallelCompare, SharesOutnumberingTheCoresRunTimeSliced) {
  const ModelSpec m = share(false);
  auto p = std::make_shared<Profile>(*known_profile(m, 2));
  p->concurrency_slowdown = {1.0, 1.25};
  p->optimizer_overhead = 1000;
  p->optimizer_ns_per_param = 0.5;
  const Scenario fits = cpu_scenario(context_plan(m, false), m, p, "known.json");
  EXPECT_EQ(fits.cluster.profile->layers.front().forward.front(), 1250000);
  Plan four = context_plan(m, false);
  four.context_parallel = 4;
  four.devices = 4;
  const Scenario sliced = cpu_scenario(four, m, p, "known.json");
  EXPECT_EQ(sliced.cluster.profile->layers.front().forward.front(), 2500000);
  EXPECT_EQ(sliced.cluster.profile->layers.front().backward.front(), 5000000);
  EXPECT_EQ(sliced.cluster.shared_cores, 1);
  // Their optimizer steps too: twice the profile's.
  EXPECT_EQ(sliced.cluster.profile->optimizer_overhead, 2 * p->optimizer_overhead);
  EXPECT_DOUBLE_EQ(sliced.cluster.profile->optimizer_ns_per_param, 2 * p->optimizer_ns_per_param);
  EXPECT_NE(shared_cores_note(2, 2, "core", 4)
                .find("2 stages of 4 ranks each (8 threads) share 2 cores: predicted with each "
                      "stage's 4 ranks' ops 2 times as long as alone (time-sliced on the 2 "
                      "cores), one stage's ops at a time"),
            std::string::npos)
      << shared_cores_note(2, 2, "core", 4);
  p->backend = "cuda";
  EXPECT_EQ(cpu_scenario(four, m, p, "known.json").cluster.profile->layers.front().forward.front(),
            1250000);
}

// Where the profile measured the shares' compute among each other at the
// plan's micro-batch size, their ops take that instead: forwards and
// recomputes its forward figure, backwards its backward; measured at another
// size, the cores' slowdown. Two groups at once stay the cores' ratio.
TEST(ContextParallelCompare, TheSharesTakeTheSlowdownTheirPassesMeasured) {
  const ModelSpec m = share(false);
  const Plan plan = context_plan(m, false);
  auto p = slowing_profile(m);
  p->group_slowdown = {kC, 1.4, 1.6, plan.micro_batch_size};
  const Scenario sc = cpu_scenario(plan, m, p, "known.json");
  const LayerProfile& l = sc.cluster.profile->layers.front();
  EXPECT_EQ(l.forward.front(), 1400000);
  EXPECT_EQ(l.recompute.front(), 2100000);
  EXPECT_EQ(l.backward.front(), 3200000);
  ASSERT_EQ(sc.cluster.concurrency_slowdown.size(), 2u);
  EXPECT_DOUBLE_EQ(sc.cluster.concurrency_slowdown[1], 1.6 / 1.25);
  p->group_slowdown.micro_batch = 2 * plan.micro_batch_size;
  EXPECT_EQ(cpu_scenario(plan, m, p, "known.json").cluster.profile->layers.front().forward.front(),
            1250000);
}

// The shares' gradient sum is the optimizer op's, after its compute, in the
// prediction as the runtime records it: its own row against the predicted
// reduction, and the replay takes the measured one in place of it.
TEST(ContextParallelCompare, TheOptimizersCollectivesAreTheSharesGradientSum) {
  const ModelSpec m = share(false);
  const Plan plan = context_plan(m, false);
  auto p = slowing_profile(m);
  p->gradient_sum = {kC, 30e-6, 2e9};
  const Scenario sc = cpu_scenario(plan, m, p, "known.json");
  const SimResult r = predicted(sc, plan);
  const SimTime reduce = r.stage_costs.front().allreduce;
  ASSERT_GT(reduce, 0);
  EXPECT_TRUE(r.stage_costs.front().allreduce_in_step);
  StepResult step = as_measured(r, 1.0, 1.0);
  const auto optimizer =
      std::find_if(step.timeline.events.begin(), step.timeline.events.end(),
                   [](const TimelineEvent& e) { return e.kind == EventKind::kOptimizer; });
  ASSERT_NE(optimizer, step.timeline.events.end());
  const auto sum = std::find_if(
      step.timeline.events.begin(), step.timeline.events.end(), [&](const TimelineEvent& e) {
        return e.lane == Lane::kTensor && e.stage == optimizer->stage && e.start == optimizer->end;
      });
  ASSERT_NE(sum, step.timeline.events.end());
  EXPECT_EQ(sum->end - sum->start, reduce);
  sum->end = sum->start + 3 * reduce;  // measured three times as long
  const Comparison c = compare_run(sc, plan, {step}, 0);
  const auto row = std::find_if(c.per_op.begin(), c.per_op.end(), [](const OpComparison& op) {
    return op.kind == "optimizer collectives";
  });
  ASSERT_NE(row, c.per_op.end());
  EXPECT_NEAR(row->predicted_s, simtime_to_seconds(reduce), 1e-9);
  EXPECT_NEAR(row->measured_s, simtime_to_seconds(3 * reduce), 1e-9);
  EXPECT_EQ(c.gradient_sum.ranks, kC);
  // The replay's reduction is the measured one, three times as long, and
  // lies on the step's path (the optimizer waits for it).
  EXPECT_NEAR(c.replayed_step_s - c.predicted_step_s, simtime_to_seconds(2 * reduce), 1e-8);
}

// Beside T = 2 the ops take the slowdown of the T x C = 4 cores, and the
// optimizer the slowdown the profile measured with the T tensor ranks
// stepping at once.
TEST(ContextParallelCompare, BesideTensorRanksTheOptimizerTakesTheTensorGroups) {
  TransformerParams params = testing::tiny_executor_transformer_params(2);
  params.seq_len = 8;
  TensorSplit split;
  split.ways = 2;
  split.context = kC;
  const ModelSpec m = make_transformer(params, "tiny", split);
  Plan plan = context_plan(m, false);
  plan.tensor_parallel = 2;
  plan.devices = 2 * kC;
  auto p = slowing_profile(m);
  p->optimizer_ns_per_param = 2.0;
  p->tensor_group = {2, 1e-5, 1e9, 1.5};
  const Scenario sc = cpu_scenario(plan, m, p, "known.json");
  EXPECT_EQ(sc.cluster.profile->layers.front().forward.front(), 1600000);
  EXPECT_DOUBLE_EQ(sc.cluster.profile->optimizer_ns_per_param, 3.0);
}

// The exposed all-to-alls of one micro-batch of the stage: two of the
// queries' bytes, two of half the keys' and values', each `latency` + the
// whole buffer's bytes / `bandwidth`.
double alltoalls_s(const ModelSpec& m, std::int64_t batch, double latency, double bandwidth) {
  double s = 0.0;
  for (const LayerSpec& l : m.layers) {
    if (l.cp_steps <= 0) continue;
    const double q = static_cast<double>(l.cp_q_bytes * batch);
    const double kv = static_cast<double>(l.cp_bytes * batch) / 2;
    s += 2 * (latency + q / bandwidth) + 2 * (latency + kv / bandwidth);
  }
  return s;
}

// The C shares sum their gradients before the step: the prediction has that
// reduction over the shares, and times it by the profile's gradient sum of C
// threads (latency + the stage's gradient bytes over its bandwidth) where it
// measured one; not at another C.
TEST(ContextParallelCompare, TheSharesSumTheirGradientsAsTheProfileMeasured) {
  const ModelSpec m = share(false);
  const Plan plan = context_plan(m, false);
  auto p = slowing_profile(m);
  const auto reduction = [&] {
    const Scenario sc = cpu_scenario(plan, m, p, "known.json");
    return simulate(sc, cpu_sim_config(plan, sc)).stage_costs.front();
  };
  const StageCost transport = reduction();
  ASSERT_GT(transport.grad_bytes, 0);
  EXPECT_GT(transport.allreduce, 0);
  p->gradient_sum = {kC, 30e-6, 2e9};
  const StageCost measured = reduction();
  EXPECT_NEAR(simtime_to_seconds(measured.allreduce),
              30e-6 + static_cast<double>(measured.grad_bytes) / 2e9, 1e-8);
  p->gradient_sum.ranks = 4;
  EXPECT_EQ(reduction().allreduce, transport.allreduce);
}

// A profile that measured the group's all-to-all of two threads at the
// plan's micro-batch size times the shares' all-to-alls by it; one of
// another group size or micro-batch size leaves them to the transport
// between two stages' threads.
TEST(ContextParallelCompare, TheMeasuredGroupTimesTheSharesAllToAlls) {
  const ModelSpec m = share(true);
  const Plan plan = context_plan(m, true);
  auto p = slowing_profile(m);
  p->alltoall_group = {false, kC, 5e-6, 4e9, plan.micro_batch_size};
  const SimResult measured =
      simulate(cpu_scenario(plan, m, p, "known.json"), plan_sim_config(plan));
  const double want = alltoalls_s(m, plan.micro_batch_size, 5e-6, 4e9);
  ASSERT_GT(want, 0.0);
  EXPECT_NEAR(simtime_to_seconds(measured.stage_costs.front().cp_forward), want, 1e-8);
  EXPECT_NEAR(simtime_to_seconds(measured.stage_costs.front().cp_backward), want, 1e-8);
  // Another group's figures: the transport's latency, (C - 1) / C of each
  // buffer over its bandwidth.
  const double transport = alltoalls_s(m, plan.micro_batch_size, 20e-6, 1e9 / 0.5);
  for (const auto& [ranks, batch] :
       {std::pair{4, plan.micro_batch_size}, std::pair{kC, 2 * plan.micro_batch_size}}) {
    p->alltoall_group.ranks = ranks;
    p->alltoall_group.micro_batch = batch;
    const SimResult other = simulate(cpu_scenario(plan, m, p, "known.json"), plan_sim_config(plan));
    EXPECT_NEAR(simtime_to_seconds(other.stage_costs.front().cp_forward), transport, 1e-8);
  }
  // The expert ranks' group of as many, measured at this micro-batch size,
  // is not the shares'.
  p->alltoall_group = {true, kC, 5e-6, 4e9, plan.micro_batch_size};
  const SimResult experts = simulate(cpu_scenario(plan, m, p, "known.json"), plan_sim_config(plan));
  EXPECT_NEAR(simtime_to_seconds(experts.stage_costs.front().cp_forward), transport, 1e-8);
}

// A profile that measured the ring's takes with two threads at the plan's
// micro-batch size: each layer's exchanges are its takes at their measured
// means, C - 1 in a forward and 2 (C - 1) + 1 in a backward; measured for
// another C or micro-batch size, the model's ring (context_exchanges).
TEST(ContextParallelCompare, TheMeasuredTakesAreTheRingsExchanges) {
  const ModelSpec m = share(false);
  const Plan plan = context_plan(m, false);
  auto p = slowing_profile(m);
  p->context_ring = {kC, 30e-6, 50e-6, plan.micro_batch_size};
  const SimResult r = simulate(cpu_scenario(plan, m, p, "known.json"), plan_sim_config(plan));
  int layers = 0;
  for (const LayerSpec& l : m.layers) {
    if (l.cp_steps <= 0) continue;
    EXPECT_EQ(l.cp_steps, kC - 1);
    ++layers;
  }
  ASSERT_GT(layers, 0);
  EXPECT_EQ(r.stage_costs.front().cp_forward, layers * (kC - 1) * 30000);
  EXPECT_EQ(r.stage_costs.front().cp_backward, layers * (2 * (kC - 1) + 1) * 50000);
  const Scenario model_sc = cpu_scenario(plan, m, slowing_profile(m), "known.json");
  const SimResult model = simulate(model_sc, plan_sim_config(plan));
  ASSERT_NE(model.stage_costs.front().cp_backward, r.stage_costs.front().cp_backward);
  for (const auto& [ranks, batch] :
       {std::pair{4, plan.micro_batch_size}, std::pair{kC, 2 * plan.micro_batch_size}}) {
    SCOPED_TRACE(std::to_string(ranks) + " " + std::to_string(batch));
    p->context_ring.ranks = ranks;
    p->context_ring.micro_batch = batch;
    const SimResult other = simulate(cpu_scenario(plan, m, p, "known.json"), plan_sim_config(plan));
    EXPECT_EQ(other.stage_costs.front().cp_forward, model.stage_costs.front().cp_forward);
    EXPECT_EQ(other.stage_costs.front().cp_backward, model.stage_costs.front().cp_backward);
  }
}

// The simulator's step passed off as measured, its context exchanges
// recorded as the executor records them (collectives after their op): the
// replay takes the measured rows in place of the predicted exchanges, not
// beside them, and is the step itself.
TEST(ContextParallelCompare, TheReplayTakesTheMeasuredExchangesOnce) {
  for (const bool heads : {false, true}) {
    SCOPED_TRACE(heads ? "a2a" : "ring");
    const ModelSpec m = share(heads);
    const Plan plan = context_plan(m, heads);
    auto p = slowing_profile(m);
    p->transport_latency_s = 2e-3;  // exchanges that show
    const Scenario sc = cpu_scenario(plan, m, p, "known.json");
    const SimResult r = predicted(sc, plan);
    StepResult step = as_measured(r, 1.0, 1.0);
    int exchanges = 0;
    for (TimelineEvent& e : step.timeline.events) {
      if (e.lane != Lane::kContext) continue;
      e.lane = Lane::kTensor;
      ++exchanges;
    }
    ASSERT_GT(exchanges, 0);
    const Comparison c = compare_run(sc, plan, {step}, 0);
    EXPECT_NEAR(c.relative_error, 0.0, 1e-9);
    EXPECT_NEAR(c.runtime_overhead, 0.0, 1e-6);
    EXPECT_EQ(c.alltoall_group.ranks, 0);  // the transport priced them
  }
}

// compare says which figures priced the shares' all-to-alls: the profile's
// group where the simulation took it (trading heads, C = ranks, the plan's
// micro-batch size, the context group's), none for the ring.
TEST(ContextParallelCompare, TheComparisonNamesTheGroupThatPricedTheAllToAlls) {
  for (const bool heads : {false, true}) {
    SCOPED_TRACE(heads ? "a2a" : "ring");
    const ModelSpec m = share(heads);
    const Plan plan = context_plan(m, heads);
    auto p = slowing_profile(m);
    p->alltoall_group = {false, kC, 5e-6, 4e9, plan.micro_batch_size};
    const Scenario sc = cpu_scenario(plan, m, p, "known.json");
    const Comparison c = compare_run(sc, plan, {as_measured(predicted(sc, plan), 1.0, 1.0)}, 0);
    EXPECT_EQ(c.alltoall_group.ranks, heads ? kC : 0);
    if (heads) {
      EXPECT_DOUBLE_EQ(c.alltoall_group.latency_s, 5e-6);
    }
    p->alltoall_group.experts = true;
    const Scenario other = cpu_scenario(plan, m, p, "known.json");
    EXPECT_EQ(compare_run(other, plan, {as_measured(predicted(other, plan), 1.0, 1.0)}, 0)
                  .alltoall_group.ranks,
              0);
  }
}

}  // namespace
}  // namespace pipescope::exec
