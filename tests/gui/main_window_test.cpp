// The desktop app driven as a user would, offscreen: the memory view flags a
// device that does not fit, exports reproduce the prediction, a measured trace
// lies under the predicted rows, the planner's best plan and the cost models
// apply, the time axis moves, and the screenshot mode writes a real picture
// (the pipeline controls: main_window_schedule_test.cpp).

#include <gtest/gtest.h>

#include "main_window_fixture.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <QAbstractItemModelTester>
#include <QApplication>
#include <QChart>
#include <QImage>
#include <QLegend>
#include <QLegendMarker>
#include <QStandardPaths>
#include <QTest>
#include <QWheelEvent>
#include <nlohmann/json.hpp>

#include "../cli/cli_runner.h"
#include "gui/main_window.h"
#include "gui/memory_widget.h"
#include "gui/stage_table_model.h"
#include "gui/timeline_widget.h"
#include "gui/tradeoff_view.h"
#include "sim/engine/simulator.h"
#include "sim/scenario/scenario_io.h"

namespace pipescope::gui {
namespace {

using namespace main_window_test;

TEST_F(MainWindowTest, MemoryViewFlagsADeviceThatDoesNotFit) {
  open(QStringLiteral("gpipe/transformer-tpuv3.json"));
  window.set_stages(2);
  window.set_micro_batches(1);
  ASSERT_TRUE(window.wait_idle(kTimeout_ms));
  const auto& bars = window.memory()->bars();
  ASSERT_EQ(bars.size(), 2u);
  for (const MemoryBar& b : bars) {
    EXPECT_FALSE(b.fits);
    EXPECT_EQ(b.over_by, b.peak - b.capacity);
    EXPECT_GT(b.over_by, 0);
    EXPECT_EQ(MemoryWidget::bar_color(b), QColor(0xd3, 0x2f, 0x2f));
    EXPECT_NE(b.label.find(" over"), std::string::npos) << b.label;
  }
  EXPECT_NE(window.summary_text().indexOf(QStringLiteral("does not fit")), -1);
  // With eight stages and 32 micro-batches it fits, and nothing is red.
  window.set_stages(8);
  window.set_micro_batches(32);
  ASSERT_TRUE(window.wait_idle(kTimeout_ms));
  for (const MemoryBar& b : window.memory()->bars()) EXPECT_TRUE(b.fits) << b.label;
}

TEST_F(MainWindowTest, ExportedPlanReproducesThePrediction) {
  open(QStringLiteral("demo.json"));
  window.set_stages(2);
  window.set_micro_batches(8);
  ASSERT_TRUE(window.wait_idle(kTimeout_ms));
  const fs::path plan = temp("plan.json");
  ASSERT_FALSE(window.export_plan(QString::fromStdString(plan.string())));
  const pipescope::testing::CliResult r =
      pipescope::testing::run("simulate " + (kScenarios + "demo.json").toStdString() + " --plan " +
                              plan.string() + " --json");
  fs::remove(plan);
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["K"], 2);
  EXPECT_EQ(j["M"], 8);
  EXPECT_DOUBLE_EQ(j["step_time_s"].get<double>(), window.result()->metrics.step_time_s());

  const fs::path torchgpipe = temp("torchgpipe.py");
  ASSERT_FALSE(window.export_framework(QString::fromStdString(torchgpipe.string()),
                                       QStringLiteral("torchgpipe")));
  EXPECT_NE(pipescope::testing::slurp(torchgpipe).find("balance"), std::string::npos);
  fs::remove(torchgpipe);
  EXPECT_TRUE(window.export_framework(QStringLiteral("/tmp/x"), QStringLiteral("nonsense")));

  const fs::path png = temp("timeline.png");
  const fs::path svg = temp("timeline.svg");
  ASSERT_FALSE(window.export_image(QString::fromStdString(png.string())));
  ASSERT_FALSE(window.export_image(QString::fromStdString(svg.string())));
  const QImage image(QString::fromStdString(png.string()));
  EXPECT_FALSE(image.isNull());
  EXPECT_EQ(image.height(), window.timeline()->minimumHeight());
  EXPECT_NE(pipescope::testing::slurp(svg).find("<svg"), std::string::npos);
  fs::remove(png);
  fs::remove(svg);
}

// A picture that cannot be written gives one error naming the file and leaves no
// temporary file beside it.
TEST_F(MainWindowTest, ImageExportFailsCleanly) {
  open(QStringLiteral("demo.json"));
  const fs::path dir = temp("no_such_dir");
  fs::remove_all(dir);
  for (const char* name : {"timeline.svg", "timeline.png"}) {
    const fs::path target = dir / name;
    const auto error = window.export_image(QString::fromStdString(target.string()));
    ASSERT_TRUE(error);
    EXPECT_NE(error->indexOf(QString::fromStdString(target.string())), -1) << error->toStdString();
  }
  EXPECT_FALSE(fs::exists(dir));
  const fs::path here = temp("clean_export.svg");
  ASSERT_FALSE(window.export_image(QString::fromStdString(here.string())));
  for (const auto& entry : fs::directory_iterator(here.parent_path())) {
    EXPECT_EQ(entry.path().filename().string().find("clean_export.svg."), std::string::npos)
        << entry.path();
  }
  fs::remove(here);
}

TEST_F(MainWindowTest, MeasuredTraceLiesUnderThePrediction) {
  open(QStringLiteral("demo.json"));
  const fs::path trace = temp("trace.json");
  ASSERT_FALSE(window.export_trace(QString::fromStdString(trace.string())));
  const std::size_t predicted = window.timeline()->layout().items.size();
  const std::size_t rows = window.timeline()->layout().rows.size();
  ASSERT_FALSE(window.open_measured_trace(QString::fromStdString(trace.string())));
  fs::remove(trace);
  const TimelineLayout& layout = window.timeline()->layout();
  EXPECT_EQ(layout.items.size(), 2 * predicted);
  EXPECT_EQ(layout.rows.size(), 2 * rows);
  EXPECT_EQ(layout.rows[rows].label.rfind("measured", 0), 0u) << layout.rows[rows].label;
  // The trace is the prediction itself: the step time error is zero.
  EXPECT_NE(window.summary_text().indexOf(QStringLiteral("+0.0 %")), -1)
      << window.summary_text().toStdString();
  const auto bad = window.open_measured_trace(QStringLiteral("/no/such/trace.json"));
  ASSERT_TRUE(bad);
  EXPECT_NE(bad->indexOf(QStringLiteral("/no/such/trace.json")), -1);
}

// A trace measured by `pipescope run` (with CPU times per op) under the
// prediction of the same plan.
TEST_F(MainWindowTest, OpensATraceMeasuredByRun) {
  open(QStringLiteral("cpu-small.json"));
  window.set_stages(2);
  window.set_micro_batches(4);
  ASSERT_TRUE(window.wait_idle(kTimeout_ms));
  const fs::path plan = temp("run_plan.json");
  const fs::path trace = temp("run_trace.json");
  ASSERT_FALSE(window.export_plan(QString::fromStdString(plan.string())));
  const pipescope::testing::CliResult r =
      pipescope::testing::run("run " + plan.string() + " --steps 2 --trace " + trace.string());
  ASSERT_EQ(r.status, 0) << r.err;
  const auto error = window.open_measured_trace(QString::fromStdString(trace.string()));
  fs::remove(plan);
  fs::remove(trace);
  ASSERT_FALSE(error) << error->toStdString();
  const TimelineLayout& layout = window.timeline()->layout();
  int measured_compute = 0;
  for (const TimelineItem& item : layout.items) {
    measured_compute +=
        item.source == 1 && layout.rows[static_cast<std::size_t>(item.row)].lane == Lane::kCompute;
  }
  // Same schedule: as many compute ops measured as predicted.
  EXPECT_EQ(measured_compute, window.result()->compute_ops);
  EXPECT_NE(window.summary_text().indexOf(QStringLiteral("Measured step")), -1);
}

TEST_F(MainWindowTest, BadScenarioKeepsTheCurrentOne) {
  open(QStringLiteral("demo.json"));
  const fs::path bad = temp("bad.json");
  std::FILE* f = std::fopen(bad.c_str(), "w");
  std::fputs(R"({"model": {"family": "transformer"}})", f);
  std::fclose(f);
  const auto error = window.open_scenario(QString::fromStdString(bad.string()));
  fs::remove(bad);
  ASSERT_TRUE(error);
  EXPECT_NE(error->indexOf(QString::fromStdString(bad.string())), -1) << error->toStdString();
  EXPECT_EQ(window.scenario()->name, "demo");
}

TEST_F(MainWindowTest, TradeoffChartsAndStageTable) {
  open(QStringLiteral("demo.json"));
  EXPECT_EQ(window.tradeoffs()->stage_values(), (std::vector<int>{1, 2, 4}));
  std::set<int> ms;
  for (const SweepPoint& p : window.tradeoffs()->points()) ms.insert(p.micro_batches);
  EXPECT_EQ(ms, (std::set<int>{1, 2, 4, 8, 16, 32}));
  // Choosing a point on the chart selects that K and M.
  emit window.tradeoffs()->selected(2, 16);
  ASSERT_TRUE(window.wait_idle(kTimeout_ms));
  EXPECT_EQ(window.result()->stages, 2);
  EXPECT_EQ(window.result()->micro_batches, 16);

  QAbstractItemModelTester tester(window.stage_model(),
                                  QAbstractItemModelTester::FailureReportingMode::Fatal);
  EXPECT_EQ(window.stage_model()->rowCount(), 2);
  EXPECT_EQ(window.stage_model()->columnCount(), StageTableModel::kColumns);
  EXPECT_EQ(window.stage_model()->data(window.stage_model()->index(1, 0)).toInt(), 1);
}

// With many K a row of legends below each chart would show colour boxes
// without their labels: past six entries the legend lists them at the right.
TEST(TradeoffViewLegend, ManyKAreListedAtTheRight) {
  const auto points = [](int ks) {
    std::vector<SweepPoint> out;
    for (int k = 1; k <= ks; ++k) {
      for (const int m : {1, 2, 4, 8}) {
        SweepPoint p;
        p.stages = k;
        p.micro_batches = m;
        p.samples_per_s = 10.0 * k + m;
        p.bubble_fraction = 1.0 / (1 + m);
        out.push_back(p);
      }
    }
    return out;
  };
  TradeoffView view;
  view.resize(900, 320);
  view.set_points(points(11));
  for (const QChart* chart : {view.throughput_chart(), view.bubble_chart()}) {
    EXPECT_EQ(chart->legend()->alignment(), Qt::AlignRight);
    ASSERT_EQ(chart->legend()->markers().size(), 12);  // K = 1 ... 11 and the current mark
    EXPECT_EQ(chart->legend()->markers()[10]->label(), "K=11");
  }
  if (const char* shot = std::getenv("PIPESCOPE_TRADEOFF_SHOT")) view.grab().save(shot);
  view.set_points(points(3));
  EXPECT_EQ(view.throughput_chart()->legend()->alignment(), Qt::AlignBottom);
}

// A scenario whose default layout does not fit (GPT-3 at K = 98 stages, one
// replica) opens at the planner's best plan, and the window says so.
TEST_F(MainWindowTest, ADefaultThatDoesNotFitOpensAtTheBestPlan) {
  // The demo at micro-batches of 512 sequences does not fit at its default
  // (K = 4, D = 1).
  nlohmann::json demo =
      nlohmann::json::parse(pipescope::testing::slurp(PIPESCOPE_SOURCE_DIR "/scenarios/demo.json"));
  demo["training"]["global_batch"] = 4096;
  const fs::path file = temp("large_batch.json");
  std::ofstream(file) << demo.dump(2);
  auto error = window.open_scenario(QString::fromStdString(file.string()));
  ASSERT_FALSE(error) << error->toStdString();
  for (int i = 0; i < 3 && !(window.result() && window.result()->metrics.fits()); ++i) {
    ASSERT_TRUE(window.wait_idle(kTimeout_ms));
  }
  ASSERT_TRUE(window.best_plan());
  EXPECT_TRUE(window.result()->metrics.fits());
  EXPECT_EQ(window.result()->stages, window.best_plan()->stages);
  EXPECT_EQ(window.result()->micro_batches, window.best_plan()->micro_batches);
  EXPECT_NE(window.best_plan_text().indexOf(
                QStringLiteral("opened at it: the scenario's default layout (K=4, D=1) does not "
                               "fit")),
            -1)
      << window.best_plan_text().toStdString();
  // A layout asked for on the command line (-K, -M, -T) stays.
  error = window.open_scenario(QString::fromStdString(file.string()));
  ASSERT_FALSE(error) << error->toStdString();
  window.keep_opened_layout();
  ASSERT_TRUE(window.wait_idle(kTimeout_ms));
  ASSERT_TRUE(window.wait_idle(kTimeout_ms));
  EXPECT_EQ(window.result()->stages, 4);
  EXPECT_FALSE(window.result()->metrics.fits());
  EXPECT_EQ(window.best_plan_text().indexOf(QStringLiteral("opened at it")), -1);
  fs::remove(file);
}

TEST_F(MainWindowTest, AppliesThePlannersBestPlan) {
  open(QStringLiteral("demo.json"));
  ASSERT_TRUE(window.best_plan());
  const PlanCandidate best = *window.best_plan();
  window.apply_best_plan();
  ASSERT_TRUE(window.wait_idle(kTimeout_ms));
  EXPECT_EQ(window.result()->stages, best.stages);
  EXPECT_EQ(window.result()->micro_batches, best.micro_batches);
  EXPECT_EQ(window.result()->remat, best.remat);
  // The window shows one replica; its throughput counts all of them, as the
  // planner's does.
  EXPECT_EQ(window.result()->metrics.step_time, best.result.metrics.step_time);
  EXPECT_NE(window.summary_text().indexOf(
                QStringLiteral("%1 samples/s").arg(best.samples_per_s, 0, 'f', 2)),
            -1)
      << window.summary_text().toStdString();
  if (best.data_parallel > 1) {
    EXPECT_NE(window.summary_text().indexOf(QStringLiteral("D=%1").arg(best.data_parallel)), -1);
  }
  // Its plan file says the same.
  const fs::path plan = temp("best.json");
  ASSERT_FALSE(window.export_plan(QString::fromStdString(plan.string())));
  const nlohmann::json j = nlohmann::json::parse(pipescope::testing::slurp(plan));
  fs::remove(plan);
  EXPECT_EQ(j["D"], best.data_parallel);
  EXPECT_EQ(j["K"], best.stages);
  EXPECT_EQ(j["cluster"]["devices"], best.stages * best.data_parallel);
}

TEST_F(MainWindowTest, ClickingAnOpHighlightsItsDependencies) {
  open(QStringLiteral("demo.json"));
  TimelineWidget* t = window.timeline();
  const TimelineLayout& layout = t->layout();
  const Timeline& timeline = window.result()->timeline;
  std::optional<std::size_t> middle;
  for (std::size_t i = 0; i < layout.items.size(); ++i) {
    const TimelineEvent& e = timeline.events[layout.items[i].event];
    if (e.kind == EventKind::kForward && e.stage == 1 && e.micro_batch == 0) middle = i;
  }
  ASSERT_TRUE(middle);
  t->select(middle);
  EXPECT_FALSE(t->selected_dependencies().before.empty());
  EXPECT_FALSE(t->selected_dependencies().after.empty());
  t->select(std::nullopt);
  EXPECT_TRUE(t->selected_dependencies().before.empty());
}

TEST_F(MainWindowTest, WheelDragBandAndKeysMoveTheTimeAxis) {
  open(QStringLiteral("demo.json"));
  TimelineWidget* t = window.timeline();
  window.show();
  t->resize(1150, t->height());
  const TimeAxis full = t->axis();
  const double full_span = full.span_ns();
  ASSERT_GT(full_span, 0);
  const int y = TimelineWidget::kAxisHeight + 5;
  // The wheel zooms in about the cursor: the time under it stays put.
  const QPointF at(TimelineWidget::kGutter + 300.0, y);
  const double t_at = full.t_of(300);
  QWheelEvent wheel(at, t->mapToGlobal(at), QPoint(), QPoint(0, 120), Qt::NoButton, Qt::NoModifier,
                    Qt::NoScrollPhase, false);
  QApplication::sendEvent(t, &wheel);
  EXPECT_NEAR(t->axis().span_ns(), full_span / 1.25, full_span * 1e-9);
  EXPECT_NEAR(t->axis().t_of(300), t_at, full_span * 1e-9);
  // Dragging right by 100 px shows earlier times.
  const double before = t->axis().start_ns;
  QTest::mousePress(t, Qt::LeftButton, Qt::NoModifier, QPoint(TimelineWidget::kGutter + 400, y));
  QTest::mouseMove(t, QPoint(TimelineWidget::kGutter + 450, y));
  QTest::mouseMove(t, QPoint(TimelineWidget::kGutter + 500, y));
  QTest::mouseRelease(t, Qt::LeftButton, Qt::NoModifier, QPoint(TimelineWidget::kGutter + 500, y));
  EXPECT_LT(t->axis().start_ns, before);
  // Escape resets to the whole step.
  QTest::keyClick(t, Qt::Key_Escape);
  EXPECT_DOUBLE_EQ(t->axis().start_ns, full.start_ns);
  EXPECT_DOUBLE_EQ(t->axis().end_ns, full.end_ns);
  // Shift+drag zooms to the band; Backspace goes back.
  const double t0 = t->axis().t_of(200), t1 = t->axis().t_of(600);
  QTest::mousePress(t, Qt::LeftButton, Qt::ShiftModifier, QPoint(TimelineWidget::kGutter + 200, y));
  QTest::mouseMove(t, QPoint(TimelineWidget::kGutter + 600, y));
  QTest::mouseRelease(t, Qt::LeftButton, Qt::ShiftModifier,
                      QPoint(TimelineWidget::kGutter + 600, y));
  EXPECT_NEAR(t->axis().start_ns, t0, full_span * 1e-9);
  EXPECT_NEAR(t->axis().end_ns, t1, full_span * 1e-9);
  QTest::keyClick(t, Qt::Key_Backspace);
  EXPECT_DOUBLE_EQ(t->axis().span_ns(), full_span);
  // A click on an op selects it.
  QTest::mouseClick(t, Qt::LeftButton, Qt::NoModifier, QPoint(TimelineWidget::kGutter + 2, y));
  ASSERT_TRUE(t->selected());
  EXPECT_EQ(window.result()->timeline.events[t->layout().items[*t->selected()].event].kind,
            EventKind::kForward);
}

// --cost-model in the window: by name or from a file read once, applied to the
// scenario and kept for the presets chosen after; what it cannot cost changes
// nothing and says why.
TEST_F(MainWindowTest, CostModelRetimesTheScenarioAndItsPresets) {
  open(QStringLiteral("demo.json"));
  const auto step_time = [&](const QString& model) {
    const auto error = window.set_cost_model(model);
    EXPECT_FALSE(error) << error->toStdString();
    EXPECT_TRUE(window.wait_idle(kTimeout_ms));
    SimConfig config;
    config.stages = window.result()->stages;
    config.micro_batches = window.result()->micro_batches;
    const SimResult direct = simulate(*window.scenario(), config);
    EXPECT_EQ(window.result()->metrics.step_time, direct.metrics.step_time);
    return window.result()->metrics.step_time;
  };
  const SimTime analytic = step_time(QStringLiteral("analytic"));
  EXPECT_EQ(window.scenario()->cluster.cost_model, CostModelKind::kAnalytic);
  EXPECT_EQ(window.result()->cost_model, "analytic");
  EXPECT_NE(window.summary_text().indexOf(QStringLiteral("Cost model analytic")), -1);
  const SimTime kernels = step_time(QStringLiteral("kernels"));
  EXPECT_EQ(window.scenario()->cluster.cost_model, CostModelKind::kKernels);
  EXPECT_NE(kernels, analytic);
  EXPECT_EQ(window.cost_model(), QStringLiteral("kernels"));

  // A cost-model file: the kernel model with its figures, GEMMs at 40 % here.
  const fs::path file = temp("cost_model.json");
  std::ofstream(file) << nlohmann::json{
      {"format", "pipescope-cost-model"},
      {"version", 1},
      {"model", "kernels"},
      {"device", "a100-80g"},
      {"parameters",
       {{"gemm_efficiency", 0.4},
        {"attention_fwd_efficiency", 0.6},
        {"attention_bwd_efficiency", 0.5},
        {"memory_efficiency", 0.85},
        {"kernel_overhead_s", 4e-6},
        {"link_efficiency",
         0.8}}}}.dump();
  const QString path = QString::fromStdString(file.string());
  const SimTime fitted = step_time(path);
  EXPECT_DOUBLE_EQ(window.scenario()->cluster.device.kernels.gemm_efficiency, 0.4);
  EXPECT_GT(fitted, kernels);  // slower GEMMs
  EXPECT_NE(window.summary_text().indexOf(QStringLiteral("Cost model kernels (") +
                                          QString::fromStdString(file.filename().string())),
            -1)
      << window.summary_text().toStdString();
  // Read once: a preset chosen after the file is gone still gets its figures.
  fs::remove(file);
  window.set_preset(QStringLiteral("a100-80g"));
  ASSERT_TRUE(window.wait_idle(kTimeout_ms));
  EXPECT_TRUE(window.last_error().isEmpty()) << window.last_error().toStdString();
  EXPECT_DOUBLE_EQ(window.scenario()->cluster.device.kernels.gemm_efficiency, 0.4);
  EXPECT_EQ(window.result()->metrics.step_time, fitted);
  // Figures for another device: the preset is refused and the scenario stays.
  window.set_preset(QStringLiteral("h100-sxm"));
  ASSERT_TRUE(window.wait_idle(kTimeout_ms));
  EXPECT_EQ(window.scenario()->cluster.device.name, "a100-80g");
  EXPECT_NE(window.last_error().indexOf(QStringLiteral("calibrate again")), -1)
      << window.last_error().toStdString();

  // Back to the scenario's own model (kernels: the device has a table).
  EXPECT_EQ(step_time(QString()), kernels);
  EXPECT_TRUE(window.cost_model().isEmpty());
}

TEST_F(MainWindowTest, CostModelItCannotApplyChangesNothing) {
  open(QStringLiteral("cpu-small.json"));
  const SimTime before = window.result()->metrics.step_time;
  auto error = window.set_cost_model(QStringLiteral("kernels"));
  ASSERT_TRUE(error);
  EXPECT_NE(error->indexOf(QStringLiteral("device 'cpu' has none")), -1) << error->toStdString();
  EXPECT_TRUE(window.cost_model().isEmpty());
  error = window.set_cost_model(QStringLiteral("/no/such/cost-model.json"));
  ASSERT_TRUE(error);
  EXPECT_TRUE(error->startsWith(QStringLiteral("/no/such/cost-model.json")))
      << error->toStdString();
  ASSERT_TRUE(window.wait_idle(kTimeout_ms));
  EXPECT_EQ(window.result()->metrics.step_time, before);
  // Chosen first, then a scenario it cannot cost: the scenario is not opened.
  ASSERT_FALSE(window.set_cost_model(QStringLiteral("analytic")));
  ASSERT_TRUE(window.wait_idle(kTimeout_ms));
  open(QStringLiteral("demo.json"));
  EXPECT_EQ(window.result()->cost_model, "analytic");
  ASSERT_FALSE(window.set_cost_model(QStringLiteral("kernels")));
  ASSERT_TRUE(window.wait_idle(kTimeout_ms));
  error = window.open_scenario(kScenarios + QStringLiteral("cpu-small.json"));
  ASSERT_TRUE(error);
  EXPECT_NE(error->indexOf(QStringLiteral("device 'cpu' has none")), -1) << error->toStdString();
  EXPECT_EQ(window.scenario()->name, "demo");
}

// The command line's --cost-model: applied before the first simulation, and a
// model the scenario cannot use ends the program with why.
TEST(CommandLine, CostModelOption) {
  const fs::path png = temp("cost_model_shot.png");
  const fs::path err = temp("cost_model_err.txt");
  const std::string gui = std::string(PIPESCOPE_GUI) + " --screenshot " + png.string() + " ";
  std::string cmd = gui + "--cost-model analytic " + (kScenarios + "demo.json").toStdString() +
                    " -K 2 -M 4 >/dev/null 2>" + err.string();
  EXPECT_EQ(std::system(cmd.c_str()), 0) << pipescope::testing::slurp(err);
  EXPECT_TRUE(fs::exists(png));
  fs::remove(png);
  cmd = gui + "--cost-model kernels " + (kScenarios + "cpu-small.json").toStdString() +
        " >/dev/null 2>" + err.string();
  const int status = std::system(cmd.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1);
  const std::string message = pipescope::testing::slurp(err);
  // After whatever Qt says on stderr (XDG_RUNTIME_DIR unset), the one error line.
  EXPECT_NE(message.find("pipescope-gui: error: --cost-model kernels needs the device's kernel "
                         "table: device 'cpu' has none"),
            std::string::npos)
      << message;
  EXPECT_FALSE(fs::exists(png));
  cmd = gui + "--cost-model /no/such.json " + (kScenarios + "demo.json").toStdString() +
        " >/dev/null 2>" + err.string();
  EXPECT_NE(std::system(cmd.c_str()), 0);
  EXPECT_NE(pipescope::testing::slurp(err).find(
                "pipescope-gui: error: /no/such.json: cannot open file\n"),
            std::string::npos)
      << pipescope::testing::slurp(err);
  fs::remove(err);
}

TEST(Screenshot, WritesANonBlankPictureOfTheWindow) {
  const fs::path png = temp("shot.png");
  const std::string cmd = std::string(PIPESCOPE_GUI) + " --screenshot " + png.string() + " " +
                          (kScenarios + "demo.json").toStdString() + " -K 2 -M 4 >/dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const QImage image(QString::fromStdString(png.string()));
  fs::remove(png);
  ASSERT_FALSE(image.isNull());
  EXPECT_EQ(image.size(), QSize(1400, 900));
  std::set<QRgb> colours;
  for (int y = 0; y < image.height(); y += 7) {
    for (int x = 0; x < image.width(); x += 7) colours.insert(image.pixel(x, y));
  }
  EXPECT_GT(colours.size(), 20u);  // text, ops of several kinds, charts: not a blank window
  const std::string bad = std::string(PIPESCOPE_GUI) + " --screenshot " + png.string() +
                          " /no/such.json >/dev/null 2>&1";
  const int status = std::system(bad.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1);
  EXPECT_FALSE(fs::exists(png));
}

}  // namespace
}  // namespace pipescope::gui

int main(int argc, char** argv) {
  if (!qEnvironmentVariableIsSet("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  QStandardPaths::setTestModeEnabled(true);  // recent files go to a test folder
  QApplication app(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
