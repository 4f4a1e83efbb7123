// Rematerialization modes (docs/schedules.md, "Rematerialization: `--remat`"; their
// memory in docs/models.md, "The partitioner"): always, except-last and
// never. except-last keeps the last micro-batch's whole stash instead of
// recomputing it: one recompute fewer per stage, the step shorter by one
// recompute under GPipe, and memory of n - 1 inputs and one stash (two where a
// recompute can run while the last stash lives, as under 1F1B).

#include <gtest/gtest.h>

#include "costmodels/cost_model.h"
#include "sim/engine/partition.h"
#include "sim/engine/schedule.h"
#include "sim/engine/simulator.h"
#include "sim/plan/planner.h"
#include "sim_fixtures.h"

namespace pipescope {
namespace {

using testing::ops_text;

TEST(RematModes, NamesParseAndPrint) {
  EXPECT_EQ(parse_remat("always"), Remat::kAlways);
  EXPECT_EQ(parse_remat("on"), Remat::kAlways);
  EXPECT_EQ(parse_remat("never"), Remat::kNever);
  EXPECT_EQ(parse_remat("off"), Remat::kNever);
  EXPECT_EQ(parse_remat("except-last"), Remat::kExceptLast);
  EXPECT_EQ(parse_remat("except_last"), std::nullopt);
  EXPECT_EQ(parse_remat("sometimes"), std::nullopt);
  for (const Remat r : kAllRemats) EXPECT_EQ(parse_remat(to_string(r)), r);
  EXPECT_EQ(remat_label(Remat::kExceptLast), "except-last");
  EXPECT_EQ(remat_label(Remat::kAlways), "on");
  EXPECT_EQ(remat_label(Remat::kNever), "off");
}

TEST(RematModes, WhichMicroBatchesAreRecomputed) {
  EXPECT_TRUE(recomputes(Remat::kAlways, 3, 4));
  EXPECT_FALSE(recomputes(Remat::kNever, 0, 4));
  EXPECT_TRUE(recomputes(Remat::kExceptLast, 2, 4));
  EXPECT_FALSE(recomputes(Remat::kExceptLast, 3, 4));
  EXPECT_FALSE(recomputes(Remat::kExceptLast, 0, 1));
  EXPECT_EQ(recomputed_count(Remat::kExceptLast, 4), 3);
  EXPECT_EQ(recomputed_count(Remat::kExceptLast, 1), 0);
  EXPECT_EQ(recomputed_count(Remat::kAlways, 4), 4);
  EXPECT_EQ(recomputed_count(Remat::kNever, 4), 0);
}

TEST(RematModes, ExceptLastSkipsTheLastMicroBatchsRecompute) {
  // GPipe: the last micro-batch's backward comes first, straight after its forward.
  EXPECT_EQ(ops_text(build_gpipe(2, 3, Remat::kExceptLast).device_ops[0]),
            "F0 F1 F2 B2 R1 B1 R0 B0 O");
  EXPECT_EQ(ops_text(build_1f1b(2, 3, Remat::kExceptLast).device_ops[0]),
            "F0 F1 R0 B0 F2 R1 B1 B2 O");
  EXPECT_EQ(ops_text(build_zb_h1(2, 2, Remat::kExceptLast).device_ops[1]),
            "F0 R0 B0 F1 B1 W0 W1 O");
  const Schedule v = build_interleaved_1f1b(2, 2, 2, Remat::kExceptLast);
  EXPECT_EQ(check_schedule(v), "");
  for (const auto& ops : v.device_ops) {
    int recomputes = 0;
    for (const Op& op : ops) {
      if (op.kind == OpKind::kRecompute) {
        ++recomputes;
        EXPECT_NE(op.micro_batch, 1);
      }
    }
    EXPECT_EQ(recomputes, 2);  // two chunks, micro-batch 0 each
  }
}

TEST(RematModes, CheckScheduleHoldsEachMicroBatchToTheMode) {
  const Schedule s = build_gpipe(2, 3, Remat::kExceptLast);
  EXPECT_EQ(check_schedule(s), "");
  Schedule always = s;
  always.remat = Remat::kAlways;
  EXPECT_EQ(check_schedule(always), "stage 0 micro-batch 2: missing recompute");
  Schedule extra = s;
  extra.device_ops[1].insert(extra.device_ops[1].begin() + 3, Op{OpKind::kRecompute, 1, 2});
  EXPECT_EQ(check_schedule(extra),
            "stage 1 micro-batch 2: recompute that remat except-last does not ask for");
}

class GpipeExceptLast : public ::testing::TestWithParam<testing::KxM> {};

TEST_P(GpipeExceptLast, OneRecomputeFewerPerStageThanAlways) {
  const auto [K, M] = GetParam();
  Scenario sc = testing::uniform_scenario(2 * K, K, 1000.0, 3 * M, M, true);
  sc.training.remat = Remat::kExceptLast;
  const SimResult r = simulate(sc, SimConfig{});
  const SimTime tf = 6000;
  const SimTime tb = 2 * tf;
  const SimTime tr = tf;
  EXPECT_EQ(r.remat, Remat::kExceptLast);
  EXPECT_EQ(r.metrics.step_time, (M + K - 1) * (tf + tb) + (M - 1) * tr);
  EXPECT_EQ(r.metrics.recompute_time, K * (M - 1) * tr);
  for (const DeviceMetrics& d : r.metrics.devices) EXPECT_EQ(d.busy, M * (tf + tb) + (M - 1) * tr);
}

INSTANTIATE_TEST_SUITE_P(KxM, GpipeExceptLast,
                         ::testing::Values(testing::KxM{1, 1}, testing::KxM{1, 8},
                                           testing::KxM{2, 1}, testing::KxM{2, 4},
                                           testing::KxM{4, 16}, testing::KxM{3, 7}),
                         testing::kxm_name);

// memory_scenario (sim_fixtures.h) under remat except-last and `schedule`.
Scenario memory_scenario(int M, ScheduleKind schedule) {
  Scenario sc = testing::memory_scenario(M, true);
  sc.training.remat = Remat::kExceptLast;
  sc.training.schedule = schedule;
  return sc;
}

constexpr Bytes kStatics = 2 * 1000 * 12;
constexpr Bytes kStash = 2 * 100 * 2;  // two layers, micro-batch of 2
constexpr Bytes kInput0 = 7 * 2;       // the model input
constexpr Bytes kInput1 = 10 * 2;      // layer 1's output

// The partitioner's formula for the 2 + 2 cut, which the simulated peak of
// stage 0 (the one holding the most micro-batches) must equal.
Bytes formula_peak_of_stage0(const Scenario& sc) {
  const AnalyticCostModel cost(sc.cluster.device, sc.model.dtype, sc.training.bytes_per_param);
  const PartitionProblem p = partition_problem(sc, cost, 2, sc.training.micro_batches,
                                               sc.training.remat, sc.training.schedule);
  return stage_memory(p, 0, 1);
}

TEST(RematModes, ExceptLastUnderGpipeHoldsMMinusOneInputsAndOneStash) {
  const int M = 4;
  const Scenario sc = memory_scenario(M, ScheduleKind::kGpipe);
  const SimResult r = simulate(sc, SimConfig{});
  EXPECT_EQ(r.metrics.devices[0].peak_memory, kStatics + (M - 1) * kInput0 + kStash);
  EXPECT_EQ(r.metrics.devices[1].peak_memory, kStatics + (M - 1) * kInput1 + kStash);
  EXPECT_EQ(formula_peak_of_stage0(sc), r.metrics.devices[0].peak_memory);
}

TEST(RematModes, ExceptLastUnder1F1BCanHoldTwoStashes) {
  // Stage 0 runs F0 F1 R0 B0 F2 R1 B1 F3 R2 B2 B3: while F3's stash lives, R2
  // rebuilds micro-batch 2's, whose input is kept. The last stage runs F B
  // pairs, so it holds one micro-batch at a time.
  const int M = 4;
  const Scenario sc = memory_scenario(M, ScheduleKind::k1F1B);
  const SimResult r = simulate(sc, SimConfig{});
  EXPECT_EQ(r.metrics.devices[0].peak_memory, kStatics + kInput0 + 2 * kStash);
  EXPECT_EQ(r.metrics.devices[1].peak_memory, kStatics + kInput1 + kStash);
  EXPECT_EQ(formula_peak_of_stage0(sc), r.metrics.devices[0].peak_memory);
  // Remat always holds 2 inputs and a stash there: except-last trades an input
  // for a stash.
  Scenario always = sc;
  always.training.remat = Remat::kAlways;
  EXPECT_EQ(simulate(always, SimConfig{}).metrics.devices[0].peak_memory,
            kStatics + 2 * kInput0 + kStash);
}

TEST(RematModes, PlannerTriesExceptLastAndCanBeFixedToIt) {
  Scenario sc = memory_scenario(4, ScheduleKind::kGpipe);
  PlanRequest req;
  req.stages = 2;
  req.micro_batches = 4;
  req.schedule = ScheduleKind::kGpipe;
  const PlanReport all = run_planner(sc, req);
  // Memory to spare: no recompute at all fits and is fastest; except-last and
  // always fit too but recompute, so they are not simulated.
  ASSERT_EQ(all.ranked.size(), 1u);
  EXPECT_EQ(all.ranked[0].remat, Remat::kNever);
  ASSERT_EQ(all.dominated.size(), 2u);
  EXPECT_EQ(all.dominated[0].remat, Remat::kExceptLast);
  EXPECT_EQ(all.dominated[1].remat, Remat::kAlways);
  EXPECT_EQ(all.dominated[0].rejected,
            "K=2 D=1 M=4 remat except-last gpipe: fits, but recomputes what remat off, which "
            "fits at the same shape, keeps (not simulated)");
  // Simulated, each is slower: except-last, then always.
  double previous = all.ranked[0].samples_per_s;
  for (const Remat remat : {Remat::kExceptLast, Remat::kAlways}) {
    PlanRequest one = req;
    one.remat = remat;
    const PlanReport r = run_planner(sc, one);
    ASSERT_EQ(r.ranked.size(), 1u);
    EXPECT_LT(r.ranked[0].samples_per_s, previous) << to_string(remat);
    previous = r.ranked[0].samples_per_s;
  }

  // Room for stage 1's 3 inputs and one stash under GPipe except-last; remat
  // always keeps a fourth input (docs/models.md, "What the models assume", Memory: under remat the
  // input lives from F to B and the rebuilt stash from R to B), never four stashes.
  sc.cluster.device.memory_bytes = kStatics + 3 * kInput1 + kStash;
  const PlanReport tight = run_planner(sc, req);
  ASSERT_EQ(tight.ranked.size(), 1u);
  EXPECT_EQ(tight.ranked[0].remat, Remat::kExceptLast);
  EXPECT_EQ(tight.rejected.size(), 2u);

  req.remat = Remat::kExceptLast;
  const PlanReport fixed = run_planner(sc, req);
  ASSERT_EQ(fixed.ranked.size(), 1u);
  EXPECT_EQ(fixed.ranked[0].remat, Remat::kExceptLast);
}

}  // namespace
}  // namespace pipescope
