// Custom schedules read from PyTorch pipelining's per-rank action CSV: every
// built-in schedule survives export -> parse -> build_custom unchanged, hand
// written ones simulate to their closed form, and bad files (syntax, placement,
// missing, duplicated, misordered and deadlocking actions) get one error naming
// the file, row and column.

#include "sim/engine/custom_schedule.h"

#include <gtest/gtest.h>

#include <memory>

#include "scenario_docs.h"
#include "sim/engine/simulator.h"
#include "sim/export/plan_export.h"
#include "sim/formats/plan_io.h"
#include "sim/plan/plan.h"
#include "sim/plan/planner.h"
#include "sim/scenario/scenario_io.h"
#include "sim_fixtures.h"

namespace pipescope {
namespace {

using testing::schedule_csv_error;

using testing::ops_text;

// A plan of `sc` simulated with the given schedule, exported to CSV and read back.
CustomSchedule exported(const Scenario& sc, ScheduleKind kind, int K, int M, int chunks,
                        Remat remat) {
  SimConfig c;
  c.stages = K;
  c.micro_batches = M;
  c.schedule = kind;
  c.chunks = chunks;
  c.remat = remat;
  const Plan plan = make_plan(sc, simulate(sc, c), 1, "optimal");
  return parse_schedule_csv(export_plan(plan, ExportFormat::kTorchPipelining), "export.csv");
}

TEST(CustomSchedule, EveryBuiltInScheduleRoundTripsThroughItsExport) {
  const Scenario sc = testing::uniform_scenario(8, 4, 1000.0, 8, 4, true);
  struct Shape {
    ScheduleKind kind;
    int K, M, chunks;
  };
  for (const Shape& s :
       {Shape{ScheduleKind::kGpipe, 3, 4, 1}, Shape{ScheduleKind::k1F1B, 4, 8, 1},
        Shape{ScheduleKind::kZbH1, 3, 4, 1}, Shape{ScheduleKind::kInterleaved1F1B, 2, 4, 2},
        Shape{ScheduleKind::kInterleaved1F1B, 4, 4, 2}, Shape{ScheduleKind::kLoopedBfs, 2, 4, 2},
        Shape{ScheduleKind::kLoopedBfs, 4, 2, 2}, Shape{ScheduleKind::kZbV, 2, 4, 2},
        Shape{ScheduleKind::kZbV, 2, 8, 2}, Shape{ScheduleKind::kInterleavedZb, 2, 4, 2},
        Shape{ScheduleKind::kInterleavedZb, 4, 2, 2}, Shape{ScheduleKind::kDualPipeV, 2, 4, 2},
        Shape{ScheduleKind::kDualPipeV, 4, 8, 2}}) {
    for (const Remat remat : kScheduleRemats) {
      SCOPED_TRACE(std::string(to_string(s.kind)) + " K=" + std::to_string(s.K) + " remat " +
                   std::string(to_string(remat)));
      const CustomSchedule c = exported(sc, s.kind, s.K, s.M, s.chunks, remat);
      EXPECT_EQ(c.devices(), s.K);
      EXPECT_EQ(c.micro_batches, s.M);
      EXPECT_EQ(c.chunks(), s.chunks);
      EXPECT_EQ(c.split, splits_backward(s.kind));
      const Schedule custom = build_custom(c, remat);
      const Schedule built = build_schedule(s.kind, s.K, s.M, remat, s.chunks);
      EXPECT_EQ(custom.device_ops, built.device_ops);
      EXPECT_EQ(custom.stage_device, built.stage_device);
      EXPECT_EQ(check_schedule(custom), "");
      // And the simulator times it the same.
      SimConfig by_kind;
      by_kind.stages = s.K;
      by_kind.micro_batches = s.M;
      by_kind.schedule = s.kind;
      by_kind.chunks = s.chunks;
      by_kind.remat = remat;
      const SimResult a = simulate(sc, by_kind);
      SimConfig by_file;
      by_file.custom = std::make_shared<const CustomSchedule>(c);
      by_file.remat = remat;
      by_file.stage_ranges.emplace();  // the same cut
      for (const StageCost& st : a.stage_costs) by_file.stage_ranges->push_back(st.layers);
      const SimResult b = simulate(sc, by_file);
      EXPECT_EQ(b.schedule, ScheduleKind::kCustom);
      EXPECT_EQ(a.metrics.step_time, b.metrics.step_time);
      ASSERT_EQ(a.metrics.devices.size(), b.metrics.devices.size());
      for (std::size_t d = 0; d < a.metrics.devices.size(); ++d) {
        EXPECT_EQ(a.metrics.devices[d].peak_memory, b.metrics.devices[d].peak_memory);
      }
    }
  }
}

TEST(CustomSchedule, HandWrittenBreadthFirstHitsItsClosedForm) {
  // Both ranks run every forward, then every backward in micro-batch order
  // (GPipe reverses them): with uniform stages the step is still (M+K-1)(tf+tb).
  const CustomSchedule c =
      parse_schedule_csv("0F0,0F1,0F2,,,,0B0,0B1,0B2\n,1F0,1F1,1F2,1B0,1B1,1B2\r\n\n", "bf.csv");
  EXPECT_EQ(c.devices(), 2);
  EXPECT_EQ(c.micro_batches, 3);
  EXPECT_FALSE(c.split);
  const Schedule s = build_custom(c, Remat::kExceptLast);
  EXPECT_EQ(ops_text(s.device_ops[0]), "F0 F1 F2 R0 B0 R1 B1 B2 O");
  EXPECT_EQ(check_schedule(s), "");
  const Scenario sc = testing::uniform_scenario(4, 2, 1000.0, 6, 3, false);
  SimConfig cfg;
  cfg.custom = std::make_shared<const CustomSchedule>(c);
  const SimResult r = simulate(sc, cfg);
  const SimTime tf = 2 * 1000 * 2;  // two layers, micro-batch of 2
  const SimTime tb = 2 * tf;
  EXPECT_EQ(r.metrics.step_time, (3 + 2 - 1) * (tf + tb));
  EXPECT_EQ(r.stages, 2);
  EXPECT_EQ(r.micro_batches, 3);
}

TEST(CustomSchedule, SplitBackwardReadsIAndW) {
  const CustomSchedule c =
      parse_schedule_csv("0F0,0F1,,,0I0,0I1,0W0,0W1\n,1F0,1I0,1F1,1I1,1W0,1W1\n", "zb.csv");
  EXPECT_TRUE(c.split);
  EXPECT_EQ(ops_text(build_custom(c, Remat::kNever).device_ops[1]), "F0 B0 F1 B1 W0 W1 O");
  EXPECT_EQ(action_names(c)[1],
            (std::vector<std::string>{"1F0", "1I0", "1F1", "1I1", "1W0", "1W1"}));
  // FULL_BACKWARD is PyTorch's long name of B.
  EXPECT_EQ(parse_schedule_csv("0F0,0FULL_BACKWARD0\n", "b.csv").ranks[0][1].kind,
            OpKind::kBackward);
}

TEST(CustomSchedule, BadFilesNameRowAndColumn) {
  EXPECT_EQ(schedule_csv_error(""), "s.csv: no ranks: expected one row of actions per device");
  EXPECT_EQ(schedule_csv_error("0F0,x\n"),
            "s.csv: row 1, column 2: 'x' is not an action: expected "
            "<stage><kind>[<micro-batch>], e.g. 0F1 (stages below 65536)");
  EXPECT_EQ(schedule_csv_error("0F0,0Q0\n"),
            "s.csv: row 1, column 2: '0Q0': unknown action kind 'Q' (expected F, B, I, W, "
            "SEND_F, RECV_F, SEND_B, RECV_B, WAIT_SEND_F, WAIT_SEND_B, UNSHARD, RESHARD, "
            "REDUCE_GRAD or WAIT_REDUCE_GRAD)");
  EXPECT_EQ(schedule_csv_error("0F0,0B\n"),
            "s.csv: row 1, column 2: '0B' needs a micro-batch number after its kind, e.g. 0B0 "
            "(below 1048576)");
  EXPECT_EQ(
      schedule_csv_error("0F0,0F99999999\n").rfind("s.csv: row 1, column 2: '0F99999999' needs", 0),
      0u);
  EXPECT_EQ(schedule_csv_error("0F0,1F0\n1B0,0B0\n"),
            "s.csv: row 2, column 1: stage 1 is on rank 1 here but on rank 0 at row 1, column 2: "
            "each stage runs on one rank");
  EXPECT_EQ(schedule_csv_error("0F0,0F0,0B0\n"), "s.csv: row 1, column 2: '0F0' appears twice");
  EXPECT_EQ(schedule_csv_error("0F0,0F1,0B0\n"),
            "s.csv: '0B1' is missing: every stage 0..0 needs F, B for every micro-batch 0..1");
  EXPECT_EQ(schedule_csv_error("0F0,0W0,0I0\n"),
            "s.csv: row 1, column 2: '0W0' comes before '0I0' on its rank");
  EXPECT_EQ(schedule_csv_error("0B0,0F0\n"),
            "s.csv: row 1, column 1: '0B0' comes before '0F0' on its rank");
  EXPECT_EQ(schedule_csv_error("0F0,0B0\n\n1F0,1B0\n"),
            "s.csv: row 2: rank 1 has no compute actions (F, B, I, W)");
  // Stages 0..2 on 2 ranks: stage 2 is on rank 0 but rank 1 holds only one.
  EXPECT_EQ(schedule_csv_error("0F0,2F0,2B0,0B0\n1F0,1B0\n"),
            "s.csv: 3 stages over 2 ranks: the stages must fill every rank equally (K x v of "
            "them)");
}

// Inputs the fuzzer (fuzz/fuzz_schedule_csv, fuzz/fuzz_plan) found crashing: a
// sign before a stage or micro-batch number indexed below the tables.
// Files saved on Windows (CR LF), classic Mac OS (CR alone) or with a UTF-8
// byte-order mark read as the same schedule; a BOM is not part of the first cell.
TEST(CustomSchedule, LineEndsAndByteOrderMarkReadAsMeant) {
  const std::string rows[] = {"0F0,0F1,,0B0,0B1", ",1F0,1B0,1F1,1B1"};
  const CustomSchedule lf = parse_schedule_csv(rows[0] + "\n" + rows[1] + "\n", "lf.csv");
  ASSERT_EQ(lf.devices(), 2);
  ASSERT_EQ(lf.micro_batches, 2);
  for (const std::string& text :
       {rows[0] + "\r\n" + rows[1] + "\r\n", rows[0] + "\r" + rows[1] + "\r",
        rows[0] + "\r" + rows[1], "\xEF\xBB\xBF" + rows[0] + "\n" + rows[1] + "\n",
        "\xEF\xBB\xBF" + rows[0] + "\r" + rows[1] + "\r\n\r\n"}) {
    const CustomSchedule c = parse_schedule_csv(text, "s.csv");
    EXPECT_EQ(c.devices(), 2) << ::testing::PrintToString(text);
    EXPECT_EQ(c.stages, lf.stages);
    EXPECT_EQ(c.micro_batches, lf.micro_batches);
    EXPECT_EQ(action_names(c), action_names(lf)) << ::testing::PrintToString(text);
  }
  // A blank line inside, however its ends are written, is still a rank with no actions.
  EXPECT_EQ(schedule_csv_error(rows[0] + "\r\r" + rows[1] + "\r"),
            schedule_csv_error(rows[0] + "\n\n" + rows[1] + "\n"));
}

TEST(CustomSchedule, SignedNumbersAreNotActions) {
  EXPECT_EQ(schedule_csv_error("-1F0\n"),
            "s.csv: row 1, column 1: '-1F0' is not an action: expected "
            "<stage><kind>[<micro-batch>], e.g. 0F1 (stages below 65536)");
  EXPECT_EQ(schedule_csv_error("-5F65536"),
            "s.csv: row 1, column 1: '-5F65536' is not an action: expected "
            "<stage><kind>[<micro-batch>], e.g. 0F1 (stages below 65536)");
  EXPECT_EQ(schedule_csv_error("0F-1\n"),
            "s.csv: row 1, column 1: '0F-1' needs a micro-batch number after its kind, e.g. 0F0 "
            "(below 1048576)");
  try {
    custom_from_actions({{"-1F0", "0F0", "0B0"}}, "plan.json", "actions");
    ADD_FAILURE() << "accepted";
  } catch (const ScenarioError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("plan.json: actions[0][0]: '-1F0' is not an action", 0),
              0u)
        << e.what();
  }
}

TEST(CustomSchedule, DeadlockNamesEveryStuckRank) {
  // Rank 0 runs micro-batch 0's backward before micro-batch 1's forward, rank 1
  // wants micro-batch 1's forward before it sends micro-batch 0's gradient.
  EXPECT_EQ(schedule_csv_error("0F0,0B0,0F1,0B1\n1F0,1F1,1B0,1B1\n"),
            "s.csv: the schedule deadlocks: rank 0 waits at '0B0' (row 1, column 2) for '1B0'; "
            "rank 1 waits at '1F1' (row 2, column 2) for '0F1'");
}

// What an overlapped pair produces leaves when the pair ends: an op that needs
// it inside the pair, or a rank whose pair waits for another rank's that waits
// for it, deadlocks (and is refused before any simulation or run).
TEST(CustomSchedule, DeadlockCountsTheOutputsAPairHolds) {
  EXPECT_EQ(schedule_csv_error("(0F0;1F0)OVERLAP_F_B,1B0,0B0\n"),
            "s.csv: the schedule deadlocks: rank 0 waits at '1F0' (row 1, column 1) for '0F0', "
            "which its overlapped pair holds until the pair ends");
  EXPECT_EQ(schedule_csv_error("0F0,(0F1;0I0)OVERLAP_F_B,0W0,0I1,0W1\n"
                               "1F0,(1F1;1I0)OVERLAP_F_B,1W0,1I1,1W1\n"),
            "s.csv: the schedule deadlocks: rank 0 waits at '0I0' (row 1, column 2) for '1I0'; "
            "rank 1 waits at '1F1' (row 2, column 2) for '0F1', which its overlapped pair "
            "holds until the pair ends");
  // The same actions without the pairs run.
  EXPECT_EQ(schedule_csv_error("0F0,1F0,1B0,0B0\n"), "(accepted)");
  EXPECT_EQ(schedule_csv_error("0F0,0F1,0I0,0W0,0I1,0W1\n1F0,1F1,1I0,1W0,1I1,1W1\n"), "(accepted)");
}

TEST(CustomSchedule, SimulationRefusesContradictingOptions) {
  const Scenario sc = testing::uniform_scenario(4, 2, 1000.0, 6, 3, false);
  SimConfig cfg;
  cfg.custom = std::make_shared<const CustomSchedule>(
      parse_schedule_csv("0F0,0F1,0F2,0B2,0B1,0B0\n1F0,1F1,1F2,1B2,1B1,1B0\n", "g.csv"));
  cfg.micro_batches = 2;
  EXPECT_THROW(
      {
        try {
          simulate(sc, cfg);
        } catch (const ConfigError& e) {
          EXPECT_STREQ(e.what(), "M=2 contradicts the custom schedule's 3");
          throw;
        }
      },
      ConfigError);
  SimConfig no_file;
  no_file.schedule = ScheduleKind::kCustom;
  EXPECT_THROW(simulate(sc, no_file), ConfigError);
}

TEST(CustomSchedule, PlannerSearchesReplicasAndRematAndThePlanKeepsTheActions) {
  const Scenario sc = testing::uniform_scenario(4, 4, 1000.0, 12, 3, true);
  PlanRequest req;
  req.custom = std::make_shared<const CustomSchedule>(
      parse_schedule_csv("0F0,0F1,0F2,0B0,0B1,0B2\n1F0,1F1,1F2,1B0,1B1,1B2\n", "bf.csv"));
  const PlanReport r = run_planner(sc, req);
  // D = 4 / 2 = 2, so ZeRO 1, 2 and 3; remat off fits at ZeRO-1, so
  // except-last and always, and ZeRO-2's and ZeRO-3's three modes, are not
  // simulated.
  ASSERT_EQ(r.ranked.size(), 1u);
  ASSERT_EQ(r.dominated.size(), 8u);
  EXPECT_EQ(r.ranked[0].zero, 1);
  for (const PlanCandidate& c : r.ranked) {
    EXPECT_EQ(c.schedule, ScheduleKind::kCustom);
    EXPECT_EQ(c.stages, 2);
    EXPECT_EQ(c.data_parallel, 2);
    EXPECT_EQ(c.micro_batches, 3);
  }
  for (const PlanCandidate& c : r.ranked) {
    EXPECT_EQ(c.remat, Remat::kNever);  // nothing recomputed is fastest
  }
  const PlanCandidate& best = r.ranked.front();
  const Plan plan = make_plan(replica_scenario(*best.scenario, 2, 2), best.result, 2, "optimal");
  ASSERT_TRUE(plan.custom);
  const nlohmann::json doc = plan_to_json(plan);
  EXPECT_EQ(doc["schedule"], "custom");
  EXPECT_EQ(doc["actions"][1], nlohmann::json::array({"1F0", "1F1", "1F2", "1B0", "1B1", "1B2"}));
  const Plan back = plan_from_json(doc, "p.json");
  ASSERT_TRUE(back.custom);
  EXPECT_EQ(back.schedule_ops().device_ops, plan.schedule_ops().device_ops);
  // The CSV export reproduces the actions; torchgpipe cannot run them.
  EXPECT_EQ(export_plan(back, ExportFormat::kTorchPipelining),
            "0F0,0F1,0F2,,,0B0,0B1,0B2\n,1F0,1F1,1F2,1B0,1B1,1B2\n");
  EXPECT_THROW(export_plan(back, ExportFormat::kTorchGpipe), std::invalid_argument);

  const auto plan_error = [](const nlohmann::json& d) -> std::string {
    try {
      plan_from_json(d, "p.json");
    } catch (const ScenarioError& e) {
      return e.what();
    }
    return "(accepted)";
  };
  nlohmann::json bad = doc;
  bad["K"] = 4;
  bad["cluster"]["devices"] = 8;
  EXPECT_EQ(plan_error(bad), "p.json: K: the plan says 4, its actions 2");
  bad = doc;
  bad["actions"][0][1] = "0F0";
  EXPECT_EQ(plan_error(bad), "p.json: actions[0][1]: '0F0' appears twice");
  bad = doc;
  bad["schedule"] = "gpipe";
  EXPECT_EQ(plan_error(bad), "p.json: actions: actions belong to a custom schedule, not gpipe");
}

TEST(CustomSchedule, ScenarioCannotNameCustomWithoutAFile) {
  nlohmann::json doc = testing::docs::good_doc();
  doc["training"]["schedule"] = "custom";
  try {
    parse_scenario(doc, "c.json");
    ADD_FAILURE() << "accepted";
  } catch (const ScenarioError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("c.json: training.schedule: a custom schedule comes "
                                          "from its action file",
                                          0),
              0u);
  }
}

}  // namespace
}  // namespace pipescope
