// The main window's pipeline controls driven as a user would, offscreen:
// K and M, every schedule (1F1B, zero bubble, interleaved, the V), each remat
// mode and a custom schedule file re-simulate and redraw the timeline as
// simulate() gives them.

#include <gtest/gtest.h>

#include "main_window_fixture.h"

namespace pipescope::gui {
namespace {

using namespace main_window_test;

TEST_F(MainWindowTest, ChangingKAndMUpdatesTheTimeline) {
  open(QStringLiteral("demo.json"));
  for (const auto& [k, m] : {std::pair{2, 4}, std::pair{4, 8}, std::pair{1, 2}}) {
    window.set_stages(k);
    window.set_micro_batches(m);
    ASSERT_TRUE(window.wait_idle(kTimeout_ms));
    const auto result = window.result();
    ASSERT_TRUE(result);
    EXPECT_EQ(result->stages, k);
    EXPECT_EQ(result->micro_batches, m);
    // The same numbers as the simulator run directly.
    SimConfig config;
    config.stages = k;
    config.micro_batches = m;
    const SimResult direct = simulate(*window.scenario(), config);
    EXPECT_EQ(result->metrics.step_time, direct.metrics.step_time);
    const TimelineLayout& layout = window.timeline()->layout();
    EXPECT_EQ(layout.items.size(), direct.timeline.events.size());
    EXPECT_EQ(static_cast<std::int64_t>(compute_items(layout)), direct.compute_ops);
    EXPECT_NE(window.summary_text().indexOf(QStringLiteral("Step time")), -1);
  }
}

TEST_F(MainWindowTest, ScheduleControlSimulatesOneFOneB) {
  open(QStringLiteral("demo.json"));
  window.set_schedule(ScheduleKind::k1F1B);
  ASSERT_TRUE(window.wait_idle(kTimeout_ms));
  EXPECT_EQ(window.result()->schedule, ScheduleKind::k1F1B);
  SimConfig config;
  config.schedule = ScheduleKind::k1F1B;
  const SimResult direct = simulate(*window.scenario(), config);
  EXPECT_EQ(window.result()->metrics.step_time, direct.metrics.step_time);
  // The plan it exports says 1f1b.
  const fs::path plan = temp("1f1b.json");
  ASSERT_FALSE(window.export_plan(QString::fromStdString(plan.string())));
  EXPECT_EQ(nlohmann::json::parse(pipescope::testing::slurp(plan))["schedule"], "1f1b");
  fs::remove(plan);
}

// Every schedule is on the control; zb-h1's timeline shows its W ops.
TEST_F(MainWindowTest, ScheduleControlSimulatesZeroBubble) {
  open(QStringLiteral("demo.json"));
  window.set_schedule(ScheduleKind::kZbH1);
  ASSERT_TRUE(window.wait_idle(kTimeout_ms));
  EXPECT_EQ(window.result()->schedule, ScheduleKind::kZbH1);
  SimConfig config;
  config.schedule = ScheduleKind::kZbH1;
  const SimResult direct = simulate(*window.scenario(), config);
  EXPECT_EQ(window.result()->metrics.step_time, direct.metrics.step_time);
  std::size_t weights = 0;
  for (const TimelineItem& item : window.timeline()->layout().items) {
    if (window.result()->timeline.events[item.event].kind == EventKind::kWeight) ++weights;
  }
  EXPECT_EQ(weights, static_cast<std::size_t>(direct.stage_costs.size()) *
                         static_cast<std::size_t>(direct.micro_batches));
}

// The remat control takes every mode; except-last's timeline has no R for the
// last micro-batch, and the exported plan says which mode it is.
TEST_F(MainWindowTest, RematControlTakesEveryMode) {
  open(QStringLiteral("demo.json"));
  EXPECT_EQ(window.remat(), Remat::kAlways);  // the scenario's
  window.set_remat(Remat::kExceptLast);
  ASSERT_TRUE(window.wait_idle(kTimeout_ms));
  const auto result = window.result();
  EXPECT_EQ(result->remat, Remat::kExceptLast);
  SimConfig config;
  config.remat = Remat::kExceptLast;
  const SimResult direct = simulate(*window.scenario(), config);
  EXPECT_EQ(result->metrics.step_time, direct.metrics.step_time);
  std::size_t recomputes = 0;
  for (const TimelineItem& item : window.timeline()->layout().items) {
    const TimelineEvent& e = result->timeline.events[item.event];
    if (e.kind == EventKind::kRecompute) {
      ++recomputes;
      EXPECT_NE(e.micro_batch, result->micro_batches - 1);
    }
  }
  EXPECT_EQ(recomputes,
            result->stage_costs.size() * static_cast<std::size_t>(result->micro_batches - 1));
  const fs::path plan = temp("except_last.json");
  ASSERT_FALSE(window.export_plan(QString::fromStdString(plan.string())));
  EXPECT_EQ(nlohmann::json::parse(pipescope::testing::slurp(plan))["remat_mode"], "except-last");
  fs::remove(plan);
  window.set_remat(Remat::kNever);
  ASSERT_TRUE(window.wait_idle(kTimeout_ms));
  EXPECT_EQ(window.result()->remat, Remat::kNever);
}

// A schedule file makes the schedule custom: K and M follow it, the prediction
// is simulate()'s with the same actions, and a bad file changes nothing.
TEST_F(MainWindowTest, OpensACustomScheduleFile) {
  open(QStringLiteral("demo.json"));
  const fs::path bad = temp("bad_schedule.csv");
  {
    std::ofstream out(bad);
    out << "0F0,0X0\n";
  }
  const auto error = window.open_schedule_file(QString::fromStdString(bad.string()));
  ASSERT_TRUE(error);
  EXPECT_NE(error->indexOf(QStringLiteral("row 1, column 2")), -1) << error->toStdString();
  ASSERT_TRUE(window.wait_idle(kTimeout_ms));
  EXPECT_EQ(window.result()->schedule, ScheduleKind::kGpipe);  // the scenario's, unchanged
  const fs::path csv = temp("schedule.csv");
  {
    std::ofstream out(csv);
    out << "0F0,0F1,0F2,0F3,0B0,0B1,0B2,0B3\n1F0,1F1,1F2,1F3,1B0,1B1,1B2,1B3\n";
  }
  ASSERT_FALSE(window.open_schedule_file(QString::fromStdString(csv.string())));
  ASSERT_TRUE(window.wait_idle(kTimeout_ms));
  const auto result = window.result();
  ASSERT_TRUE(result);
  EXPECT_EQ(result->schedule, ScheduleKind::kCustom);
  EXPECT_EQ(result->stages, 2);
  EXPECT_EQ(result->micro_batches, 4);
  SimConfig config;
  config.custom = std::make_shared<const CustomSchedule>(read_schedule_csv(csv));
  const SimResult direct = simulate(replica_scenario(*window.scenario(), 2, 1), config);
  EXPECT_EQ(result->metrics.step_time, direct.metrics.step_time);
  fs::remove(bad);
  fs::remove(csv);
}

// The chunks control drives interleaved-1f1b: K x v stages, as simulate() does.
TEST_F(MainWindowTest, ChunksControlSimulatesInterleaving) {
  open_demo_on_four();
  window.set_schedule(ScheduleKind::kInterleaved1F1B);
  window.set_chunks(2);
  ASSERT_TRUE(window.wait_idle(kTimeout_ms));
  ASSERT_NE(window.result(), nullptr);
  EXPECT_EQ(window.result()->chunks, 2);
  EXPECT_EQ(window.result()->stage_costs.size(), 8u);
  EXPECT_EQ(window.result()->metrics.step_time,
            demo_step_on_four(ScheduleKind::kInterleaved1F1B, 2));
  // The plan it exports says so.
  const fs::path plan = temp("interleaved.json");
  ASSERT_FALSE(window.export_plan(QString::fromStdString(plan.string())));
  EXPECT_EQ(nlohmann::json::parse(pipescope::testing::slurp(plan))["chunks"], 2);
  fs::remove(plan);
}

// Every built-in schedule can be chosen; the V-shaped ones run two chunks
// whatever the chunks control said before.
TEST_F(MainWindowTest, EveryScheduleIsOfferedAndTheVRunsTwoChunks) {
  open_demo_on_four();
  window.set_schedule(ScheduleKind::kInterleaved1F1B);
  window.set_chunks(3);
  ASSERT_TRUE(window.wait_idle(kTimeout_ms));
  ASSERT_NE(window.result(), nullptr);
  EXPECT_EQ(window.result()->chunks, 3);
  for (const ScheduleKind kind : kAllSchedules) {
    window.set_schedule(kind);
    ASSERT_TRUE(window.wait_idle(kTimeout_ms));
    ASSERT_NE(window.result(), nullptr) << to_string(kind);
    EXPECT_EQ(window.result()->schedule, kind);
  }
  window.set_schedule(ScheduleKind::kDualPipeV);
  ASSERT_TRUE(window.wait_idle(kTimeout_ms));
  EXPECT_EQ(window.result()->chunks, 2);
  EXPECT_EQ(window.result()->stage_costs.size(), 8u);
  EXPECT_EQ(window.result()->metrics.step_time, demo_step_on_four(ScheduleKind::kDualPipeV, 2));
  // Back on a loop, the 3 chunks chosen for it come back.
  window.set_schedule(ScheduleKind::kLoopedBfs);
  ASSERT_TRUE(window.wait_idle(kTimeout_ms));
  EXPECT_EQ(window.result()->chunks, 3);
  EXPECT_EQ(window.result()->stage_costs.size(), 12u);
}

}  // namespace
}  // namespace pipescope::gui
