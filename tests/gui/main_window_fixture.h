#pragma once
// What the main window's tests share: the scenarios folder, a time limit for
// a simulation, a temporary file's path, the timeline's compute items, and a
// fixture that holds a window and opens scenarios in it.

#include <gtest/gtest.h>
#include <QAbstractItemModelTester>
#include <QApplication>
#include <QChart>
#include <QImage>
#include <QLegend>
#include <QLegendMarker>
#include <QStandardPaths>
#include <QTest>
#include <QWheelEvent>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include "../cli/cli_runner.h"
#include "gui/main_window.h"
#include "gui/memory_widget.h"
#include "gui/stage_table_model.h"
#include "gui/timeline_widget.h"
#include "gui/tradeoff_view.h"
#include "sim/engine/simulator.h"
#include "sim/scenario/scenario_io.h"

namespace pipescope::gui::main_window_test {
namespace fs = std::filesystem;
inline const QString kScenarios = QStringLiteral(PIPESCOPE_SOURCE_DIR "/scenarios/");
inline constexpr int kTimeout_ms = 120000;

inline fs::path temp(const std::string& name) {
  return fs::temp_directory_path() / ("pipescope_gui_" + std::to_string(::getpid()) + "_" + name);
}

inline std::size_t compute_items(const TimelineLayout& layout) {
  std::size_t n = 0;
  for (const TimelineItem& item : layout.items) {
    n += layout.rows[static_cast<std::size_t>(item.row)].lane == Lane::kCompute ? 1 : 0;
  }
  return n;
}

class MainWindowTest : public ::testing::Test {
 protected:
  void open(const QString& name) {
    const auto error = window.open_scenario(kScenarios + name);
    ASSERT_FALSE(error) << error->toStdString();
    ASSERT_TRUE(window.wait_idle(kTimeout_ms));
    ASSERT_TRUE(window.result());
  }
  // The demo on K = 4 devices, M = 8, and the step of `schedule` there with
  // `chunks` as simulate() gives it, for what the window shows.
  void open_demo_on_four() {
    open(QStringLiteral("demo.json"));
    window.set_stages(4);
    ASSERT_TRUE(window.wait_idle(kTimeout_ms));
    window.set_micro_batches(8);
    ASSERT_TRUE(window.wait_idle(kTimeout_ms));
  }
  SimTime demo_step_on_four(ScheduleKind schedule, int chunks) const {
    SimConfig config;
    config.stages = 4;
    config.micro_batches = 8;
    config.schedule = schedule;
    config.chunks = chunks;
    return simulate(*window.scenario(), config).metrics.step_time;
  }
  MainWindow window;
};

}  // namespace pipescope::gui::main_window_test
