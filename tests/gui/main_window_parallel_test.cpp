// The desktop app's T (tensor parallelism), sequence parallelism and ZeRO
// controls and its per-device memory split, driven offscreen: each gives what
// `pipescope simulate` (and the simulator run directly) gives for the same
// scenario, a T that cannot split the model gives the command line's error and
// changes nothing, and every device's weights, gradients, optimizer state and
// activations add up to its peak.

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <QAbstractItemModelTester>
#include <QCheckBox>
#include <QComboBox>
#include <nlohmann/json.hpp>

#include "../cli/cli_runner.h"
#include "gui/device_table_model.h"
#include "gui/main_window.h"
#include "gui/memory_widget.h"
#include "sim/base/format.h"
#include "sim/engine/simulator.h"
#include "sim/plan/planner.h"
#include "sim/scenario/scenario_io.h"

namespace pipescope::gui {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
const std::string kScenarios = PIPESCOPE_SOURCE_DIR "/scenarios/";
const std::string kDemo = kScenarios + "demo.json";
constexpr int kTimeout_ms = 120000;

// The scenario file with these training fields set, as the command line's
// flags set them (`-T 2`: tensor_parallel 2).
Scenario scenario_with(const std::string& file, const json& training) {
  json doc = load_scenario_json(file);
  for (const auto& [key, value] : training.items()) doc["training"][key] = value;
  return parse_scenario(doc, file);
}

// A byte column of the device table.
Bytes cell(const DeviceTableModel& m, int row, int column) {
  return m.data(m.index(row, column), DeviceTableModel::kBytesRole).toLongLong();
}

std::vector<int> choices(const QComboBox& combo) {
  std::vector<int> out;
  for (int i = 0; i < combo.count(); ++i) out.push_back(combo.itemData(i).toInt());
  return out;
}

class ParallelControlsTest : public ::testing::Test {
 protected:
  void open(const std::string& file) {
    const auto error = window.open_scenario(QString::fromStdString(file));
    ASSERT_FALSE(error) << error->toStdString();
    ASSERT_TRUE(window.wait_idle(kTimeout_ms));
    ASSERT_TRUE(window.result());
  }
  void settle() {
    ASSERT_TRUE(window.wait_idle(kTimeout_ms));
    ASSERT_TRUE(window.last_error().isEmpty()) << window.last_error().toStdString();
  }
  QComboBox* combo(const char* name) const {
    return window.findChild<QComboBox*>(QString::fromLatin1(name));
  }
  std::string summary() const { return window.summary_text().toStdString(); }
  MainWindow window;
};

TEST_F(ParallelControlsTest, TControlSimulatesAsSimulateWithT) {
  open(kDemo);
  const SimTime whole = window.result()->metrics.step_time;
  QComboBox* t = combo("tensor_parallel");
  ASSERT_TRUE(t);
  EXPECT_EQ(choices(*t), (std::vector<int>{1, 2, 4}));  // the divisors of the 4 devices
  t->setCurrentIndex(t->findData(2));
  settle();
  const auto r = window.result();
  EXPECT_EQ(window.tensor_parallel(), 2);
  EXPECT_EQ(r->tensor_parallel, 2);
  EXPECT_EQ(window.scenario()->cluster.devices, 2);  // groups of 2
  EXPECT_EQ(r->stages, 2);                           // K, from 4, now at most the 2 groups
  EXPECT_NE(r->metrics.step_time, whole);

  const pipescope::testing::CliResult cli =
      pipescope::testing::run("simulate " + kDemo + " -T 2 --json");
  ASSERT_EQ(cli.status, 0) << cli.err;
  const json j = json::parse(cli.out);
  EXPECT_EQ(j["T"], 2);
  EXPECT_EQ(j["K"], r->stages);
  EXPECT_EQ(j["M"], r->micro_batches);
  EXPECT_DOUBLE_EQ(j["step_time_s"].get<double>(), r->metrics.step_time_s());
  const DeviceTableModel& devices = *window.device_model();
  ASSERT_EQ(j["devices"].size(), static_cast<std::size_t>(devices.rowCount()));
  for (int d = 0; d < devices.rowCount(); ++d) {
    const json& cli_device = j["devices"][static_cast<std::size_t>(d)];
    EXPECT_EQ(cli_device["peak_memory_bytes"], cell(devices, d, DeviceTableModel::kPeak));
    EXPECT_EQ(cli_device["weights_bytes"], cell(devices, d, DeviceTableModel::kWeights));
    EXPECT_EQ(cli_device["gradients_bytes"], cell(devices, d, DeviceTableModel::kGradients));
    EXPECT_EQ(cli_device["optimizer_bytes"], cell(devices, d, DeviceTableModel::kOptimizer));
    EXPECT_EQ(cli_device["activations_bytes"], cell(devices, d, DeviceTableModel::kActivations));
  }
  // The simulator on the scenario split by T says the same.
  SimConfig config;
  config.stages = 2;
  config.micro_batches = r->micro_batches;
  EXPECT_EQ(simulate(scenario_with(kDemo, {{"tensor_parallel", 2}}), config).metrics.step_time,
            r->metrics.step_time);
  EXPECT_NE(summary().find("Parallelism T=2 x K=2 x D=1 = 4 devices"), std::string::npos)
      << summary();
}

// A scenario that spreads a mixture's experts over E = 2 replicas opens at
// D = 2, offers only D that E divides, and simulates as `simulate -D 2 -E 2`.
TEST_F(ParallelControlsTest, ExpertParallelismOpensAtDMultipleOfE) {
  json doc = load_scenario_json(kDemo);
  doc["model"]["layers"] = 4;
  doc["model"]["experts"] = 8;
  doc["model"]["experts_per_token"] = 2;
  doc["training"]["expert_parallel"] = 2;
  const fs::path file = fs::temp_directory_path() / "pipescope_gui_experts.json";
  {
    std::ofstream out(file);
    out << doc.dump();
  }
  open(file.string());
  QComboBox* d = combo("data_parallel");
  ASSERT_TRUE(d);
  EXPECT_EQ(choices(*d), (std::vector<int>{2, 4}));
  EXPECT_EQ(d->currentData().toInt(), 2);
  const auto r = window.result();
  EXPECT_EQ(r->expert_parallel, 2);
  EXPECT_GT(r->stage_costs.front().ep_forward, 0);
  const pipescope::testing::CliResult cli = pipescope::testing::run(
      "simulate " + file.string() + " -D 2 -K " + std::to_string(r->stages) + " -M " +
      std::to_string(r->micro_batches) + " --json");
  ASSERT_EQ(cli.status, 0) << cli.err;
  EXPECT_DOUBLE_EQ(json::parse(cli.out)["step_time_s"].get<double>(), r->metrics.step_time_s());
  fs::remove(file);
}

TEST_F(ParallelControlsTest, PlannerAndPlanFilesFollowTheChosenT) {
  open(kDemo);
  ASSERT_TRUE(window.best_plan());
  EXPECT_EQ(window.best_plan()->tensor_parallel, 1);
  ASSERT_FALSE(window.set_tensor_parallel(2));
  settle();
  ASSERT_TRUE(window.best_plan());
  EXPECT_EQ(window.best_plan()->tensor_parallel, 2);
  PlanRequest request;
  request.tensor_parallel = 2;
  // The window's scenario says T, the sequence split and the ZeRO stage once
  // one of them is chosen, so its planner keeps all three.
  const PlanReport report = run_planner(
      scenario_with(kDemo, {{"tensor_parallel", 2}, {"sequence_parallel", false}, {"zero", 0}}),
      request);
  ASSERT_FALSE(report.ranked.empty());
  EXPECT_EQ(window.best_plan()->label(), report.ranked.front().label());

  window.apply_best_plan();
  settle();
  const fs::path plan = fs::temp_directory_path() /
                        ("pipescope_gui_" + std::to_string(::getpid()) + "_tensor_plan.json");
  ASSERT_FALSE(window.export_plan(QString::fromStdString(plan.string())));
  const pipescope::testing::CliResult cli =
      pipescope::testing::run("simulate " + kDemo + " --plan " + plan.string() + " --json");
  const json written = json::parse(pipescope::testing::slurp(plan));
  fs::remove(plan);
  EXPECT_EQ(written["T"], 2);
  ASSERT_EQ(cli.status, 0) << cli.err;
  const json j = json::parse(cli.out);
  EXPECT_EQ(j["T"], 2);
  EXPECT_DOUBLE_EQ(j["step_time_s"].get<double>(), window.result()->metrics.step_time_s());
}

TEST_F(ParallelControlsTest, AnInvalidTGivesTheCommandLinesErrorAndChangesNothing) {
  open(kDemo);
  const SimTime before = window.result()->metrics.step_time;
  // 3 divides neither the 16 heads nor the 4 devices.
  const auto error = window.set_tensor_parallel(3);
  ASSERT_TRUE(error);
  const pipescope::testing::CliResult cli = pipescope::testing::run("simulate " + kDemo + " -T 3");
  EXPECT_EQ(cli.status, 1);
  EXPECT_EQ(cli.err, "pipescope: error: " + error->toStdString() + "\n");
  EXPECT_NE(error->indexOf(QStringLiteral("-T 3: ")), -1) << error->toStdString();
  EXPECT_EQ(window.last_error(), *error);
  ASSERT_TRUE(window.wait_idle(kTimeout_ms));
  EXPECT_EQ(window.tensor_parallel(), 1);
  EXPECT_EQ(window.result()->tensor_parallel, 1);
  EXPECT_EQ(window.result()->metrics.step_time, before);
  EXPECT_EQ(combo("tensor_parallel")->currentData().toInt(), 1);

  // A model that is not a transformer splits over no T: the control goes back.
  const std::string amoebanet = kScenarios + "gpipe/amoebanet-tpuv2.json";
  open(amoebanet);
  QComboBox* t = combo("tensor_parallel");
  t->setCurrentIndex(t->findData(2));
  ASSERT_TRUE(window.wait_idle(kTimeout_ms));
  const pipescope::testing::CliResult not_transformer =
      pipescope::testing::run("simulate " + amoebanet + " -T 2");
  EXPECT_EQ(not_transformer.status, 1);
  EXPECT_EQ(not_transformer.err, "pipescope: error: " + window.last_error().toStdString() + "\n");
  EXPECT_EQ(t->currentData().toInt(), 1);
  EXPECT_EQ(window.result()->tensor_parallel, 1);
}

TEST_F(ParallelControlsTest, ZeroStageShardsOptimizerStateThenGradients) {
  open(kDemo);
  window.set_data_parallel(2);  // 2 replicas of K = 2
  settle();
  ASSERT_EQ(window.result()->stages, 2);
  const DeviceTableModel& devices = *window.device_model();
  const Bytes optimizer = cell(devices, 0, DeviceTableModel::kOptimizer);
  const Bytes gradients = cell(devices, 0, DeviceTableModel::kGradients);
  const Bytes weights = cell(devices, 0, DeviceTableModel::kWeights);
  QComboBox* zero = combo("zero");
  ASSERT_TRUE(zero);
  zero->setCurrentIndex(zero->findData(1));
  settle();
  EXPECT_EQ(window.zero(), 1);
  EXPECT_EQ(window.result()->zero, 1);
  EXPECT_LT(cell(devices, 0, DeviceTableModel::kOptimizer), optimizer);
  EXPECT_EQ(cell(devices, 0, DeviceTableModel::kGradients), gradients);
  EXPECT_EQ(cell(devices, 0, DeviceTableModel::kWeights), weights);
  // One of D = 2 replicas as the simulator has it, each keeping half the state.
  const Scenario whole = scenario_with(kDemo, {{"zero", 1}});
  SimConfig config;
  config.stages = 2;
  config.micro_batches = window.result()->micro_batches;
  config.data_parallel = data_parallel_ring(whole.cluster, 2, 2);
  const std::vector<MemorySplit> direct =
      memory_splits(simulate(replica_scenario(whole, 2, 2), config));
  for (int d = 0; d < devices.rowCount(); ++d) {
    EXPECT_EQ(cell(devices, d, DeviceTableModel::kOptimizer),
              direct[static_cast<std::size_t>(d)].optimizer);
  }
  EXPECT_NE(summary().find("D=2 = 4 devices, ZeRO-1"), std::string::npos) << summary();

  ASSERT_FALSE(window.set_zero(2));
  settle();
  EXPECT_LT(cell(devices, 0, DeviceTableModel::kGradients), gradients);
}

TEST_F(ParallelControlsTest, SequenceParallelismSplitsTheActivations) {
  open(kDemo);
  auto* sequence = window.findChild<QCheckBox*>(QStringLiteral("sequence_parallel"));
  ASSERT_TRUE(sequence);
  EXPECT_FALSE(sequence->isEnabled());
  const auto error = window.set_sequence_parallel(true);
  ASSERT_TRUE(error);
  EXPECT_NE(error->indexOf(QStringLiteral("tensor_parallel above 1")), -1) << error->toStdString();

  ASSERT_FALSE(window.set_tensor_parallel(2));
  settle();
  EXPECT_TRUE(sequence->isEnabled());
  const DeviceTableModel& devices = *window.device_model();
  const Bytes activations = cell(devices, 0, DeviceTableModel::kActivations);
  sequence->setChecked(true);
  settle();
  EXPECT_TRUE(window.sequence_parallel());
  EXPECT_TRUE(window.result()->sequence_parallel);
  EXPECT_LT(cell(devices, 0, DeviceTableModel::kActivations), activations);
  SimConfig config;
  config.stages = 2;
  config.micro_batches = window.result()->micro_batches;
  const SimResult direct =
      simulate(scenario_with(kDemo, {{"tensor_parallel", 2}, {"sequence_parallel", true}}), config);
  EXPECT_EQ(memory_splits(direct)[0].activations, cell(devices, 0, DeviceTableModel::kActivations));
  EXPECT_NE(summary().find("T=2 (sequence parallel)"), std::string::npos) << summary();

  // Without tensor parallelism there is nothing to split it among.
  ASSERT_FALSE(window.set_tensor_parallel(1));
  settle();
  EXPECT_FALSE(window.sequence_parallel());
  EXPECT_FALSE(sequence->isChecked());
  EXPECT_FALSE(sequence->isEnabled());
}

TEST_F(ParallelControlsTest, EachDevicesMemorySplitAddsUpToItsPeak) {
  open(kDemo);
  window.set_stages(4);
  window.set_schedule(ScheduleKind::kLoopedBfs);  // 2 chunks: stages d and d + 4 on device d
  settle();
  DeviceTableModel* devices = window.device_model();
  QAbstractItemModelTester tester(devices, QAbstractItemModelTester::FailureReportingMode::Fatal);
  ASSERT_EQ(devices->rowCount(), 4);
  const std::vector<std::pair<int, const char*>> headers = {
      {DeviceTableModel::kStages, "stages"},       {DeviceTableModel::kPeak, "peak"},
      {DeviceTableModel::kWeights, "weights"},     {DeviceTableModel::kGradients, "gradients"},
      {DeviceTableModel::kOptimizer, "optimizer"}, {DeviceTableModel::kActivations, "activations"},
      {DeviceTableModel::kCapacity, "capacity"}};
  for (const auto& [column, name] : headers) {
    EXPECT_EQ(devices->headerData(column, Qt::Horizontal).toString(), QString::fromLatin1(name));
  }
  const auto r = window.result();
  const std::vector<MemorySplit> splits = memory_splits(*r);
  const std::vector<MemoryBar>& bars = window.memory()->bars();
  ASSERT_EQ(bars.size(), 4u);
  for (int d = 0; d < 4; ++d) {
    const auto i = static_cast<std::size_t>(d);
    const Bytes weights = cell(*devices, d, DeviceTableModel::kWeights);
    const Bytes gradients = cell(*devices, d, DeviceTableModel::kGradients);
    const Bytes optimizer = cell(*devices, d, DeviceTableModel::kOptimizer);
    const Bytes activations = cell(*devices, d, DeviceTableModel::kActivations);
    const Bytes peak = cell(*devices, d, DeviceTableModel::kPeak);
    EXPECT_EQ(peak, r->metrics.devices[i].peak_memory);
    EXPECT_EQ(weights + gradients + optimizer + activations, peak) << "device " << d;
    EXPECT_GT(weights, 0);
    EXPECT_GT(activations, 0);
    EXPECT_EQ(weights, splits[i].weights);
    EXPECT_EQ(optimizer, splits[i].optimizer);
    EXPECT_EQ(devices->data(devices->index(d, DeviceTableModel::kStages)).toString(),
              QStringLiteral("%1, %2").arg(d).arg(d + 4));
    EXPECT_EQ(devices->data(devices->index(d, DeviceTableModel::kWeights)).toString(),
              QString::fromStdString(format_bytes(static_cast<double>(weights))));
    // The memory view stacks the same parts, and hovering a bar lists them.
    EXPECT_EQ(bars[i].split.activations, activations);
    EXPECT_EQ(bars[i].split.gradients, gradients);
    EXPECT_NE(window.memory()->tooltip(d).indexOf(QString::fromStdString(split_text(splits[i]))),
              -1);
  }
  EXPECT_NE(window.memory()->part_color(bars[0], MemoryWidget::kWeights),
            window.memory()->part_color(bars[0], MemoryWidget::kActivations));
  EXPECT_NE(summary().find(": weights "), std::string::npos) << summary();
}

TEST(CommandLine, TensorParallelOption) {
  const fs::path png = fs::temp_directory_path() /
                       ("pipescope_gui_" + std::to_string(::getpid()) + "_tensor_shot.png");
  const std::string gui = std::string(PIPESCOPE_GUI) + " --screenshot " + png.string() + " ";
  // T = 2 leaves 2 groups: no room for K = 3, which 4 devices would have had.
  pipescope::testing::CliResult r = pipescope::testing::run_program(gui + kDemo, "-T 2 -K 3");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("pipescope-gui: error: K=3 is more stages than the cluster's 2 groups of "
                       "T=2 devices"),
            std::string::npos)
      << r.err;
  r = pipescope::testing::run_program(gui + kDemo, "-T 3");
  EXPECT_EQ(r.status, 1);
  const pipescope::testing::CliResult cli = pipescope::testing::run("simulate " + kDemo + " -T 3");
  ASSERT_EQ(cli.err.rfind("pipescope: error: ", 0), 0u) << cli.err;
  EXPECT_NE(r.err.find("pipescope-gui: error: " + cli.err.substr(18)), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(png));
}

}  // namespace
}  // namespace pipescope::gui
