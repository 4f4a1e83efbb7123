// The desktop app's C (context parallelism) and E (expert parallelism)
// controls, driven offscreen: each offers the splits the scenario can take,
// simulates as `pipescope simulate -C` / `-E` does, puts the ring's exchanges
// on their own timeline row, keeps the planner at the split shown, and gives
// the command line's error, changing nothing, for one it cannot take.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <QComboBox>
#include <nlohmann/json.hpp>

#include "../cli/cli_runner.h"
#include "gui/main_window.h"
#include "gui/timeline_layout.h"
#include "gui/timeline_widget.h"
#include "sim/scenario/scenario_io.h"

namespace pipescope::gui {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
const std::string kDemo = PIPESCOPE_SOURCE_DIR "/scenarios/demo.json";
constexpr int kTimeout_ms = 120000;

std::vector<int> choices(const QComboBox& combo) {
  std::vector<int> out;
  for (int i = 0; i < combo.count(); ++i) out.push_back(combo.itemData(i).toInt());
  return out;
}

// The demo with these model fields, written to a temporary file.
class SplitControlsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (!file_.empty()) fs::remove(file_);
  }
  std::string write(const json& model, const std::string& name) {
    json doc = load_scenario_json(kDemo);
    for (const auto& [key, value] : model.items()) doc["model"][key] = value;
    file_ = fs::temp_directory_path() / name;
    std::ofstream(file_) << doc.dump();
    return file_.string();
  }
  void open(const std::string& file) {
    const auto error = window.open_scenario(QString::fromStdString(file));
    ASSERT_FALSE(error) << error->toStdString();
    settle();
    window.keep_opened_layout();
  }
  void settle() {
    ASSERT_TRUE(window.wait_idle(kTimeout_ms));
    ASSERT_TRUE(window.last_error().isEmpty()) << window.last_error().toStdString();
  }
  QComboBox* combo(const char* name) const {
    return window.findChild<QComboBox*>(QString::fromLatin1(name));
  }
  // `simulate FILE FLAGS` at the window's K and M.
  json simulate_cli(const std::string& file, const std::string& flags) const {
    const auto r = window.result();
    const pipescope::testing::CliResult cli = pipescope::testing::run(
        "simulate " + file + " " + flags + " -K " + std::to_string(r->stages) + " -M " +
        std::to_string(r->micro_batches) + " --json");
    EXPECT_EQ(cli.status, 0) << cli.err;
    return cli.status == 0 ? json::parse(cli.out) : json();
  }
  MainWindow window;
  fs::path file_;
};

// 4,096 tokens of fused attention on the demo's 4 GPUs.
const json kLong = {{"layers", 4}, {"seq_len", 4096}, {"attention", "fused"}};

TEST_F(SplitControlsTest, CControlSimulatesAsSimulateWithC) {
  const std::string file = write(kLong, "pipescope_gui_context.json");
  open(file);
  QComboBox* c = combo("context_parallel");
  ASSERT_TRUE(c);
  EXPECT_EQ(choices(*c), (std::vector<int>{1, 2, 4}));  // the divisors of 4 devices
  EXPECT_TRUE(c->isEnabled());
  c->setCurrentIndex(c->findData(2));
  settle();
  const auto r = window.result();
  EXPECT_EQ(window.context_parallel(), 2);
  EXPECT_EQ(r->context_parallel, 2);
  EXPECT_EQ(window.scenario()->cluster.devices, 2);  // groups of 2
  // T now takes the divisors of the 2 devices each C share leaves.
  EXPECT_EQ(choices(*combo("tensor_parallel")), (std::vector<int>{1, 2}));
  const json j = simulate_cli(file, "-C 2");
  EXPECT_EQ(j["C"], 2);
  EXPECT_DOUBLE_EQ(j["step_time_s"].get<double>(), r->metrics.step_time_s());
  EXPECT_NE(window.summary_text().indexOf(QStringLiteral("T=1 x C=2 x K=")), -1)
      << window.summary_text().toStdString();
  EXPECT_NE(window.summary_text().indexOf(QStringLiteral(" = 4 devices")), -1)
      << window.summary_text().toStdString();

  // The planner keeps the C shown.
  ASSERT_TRUE(window.best_plan());
  EXPECT_EQ(window.best_plan()->scenario->cluster.context_parallel, 2);
  ASSERT_FALSE(window.set_context_parallel(1));
  settle();
  ASSERT_TRUE(window.best_plan());
  EXPECT_EQ(window.best_plan()->scenario->cluster.context_parallel, 1);
  EXPECT_EQ(window.result()->context_parallel, 1);
}

TEST_F(SplitControlsTest, TheRingsExchangesHaveARowOfTheirOwn) {
  // C = 4 over the node's 4 GPUs: a ring step of a quarter of the keys and
  // values outlasts a sixteenth of the attention, and what it adds shows.
  const std::string file = write(kLong, "pipescope_gui_context_lane.json");
  open(file);
  ASSERT_FALSE(window.set_context_parallel(4));
  settle();
  const TimelineLayout& layout = window.timeline()->layout();
  int rows = 0;
  for (const auto& row : layout.rows) rows += row.lane == Lane::kContext ? 1 : 0;
  int exchanges = 0;
  for (const TimelineEvent& e : window.result()->timeline.events) {
    if (e.kind == EventKind::kContextExchange) ++exchanges;
  }
  ASSERT_GT(exchanges, 0);
  EXPECT_EQ(rows, 1);  // one device shown a row: K = 1 of the one group
  EXPECT_GT(window.result()->stage_costs.front().cp_bytes, 0);
}

TEST_F(SplitControlsTest, ACTheAttentionCannotSplitGivesTheCommandLinesError) {
  const std::string file =
      write({{"layers", 4}, {"seq_len", 4096}, {"attention", "unfused"}}, "pipescope_gui_cp.json");
  open(file);
  const SimTime before = window.result()->metrics.step_time;
  const auto error = window.set_context_parallel(2);
  ASSERT_TRUE(error);
  const pipescope::testing::CliResult cli = pipescope::testing::run("simulate " + file + " -C 2");
  EXPECT_EQ(cli.status, 1);
  EXPECT_EQ(cli.err, "pipescope: error: " + error->toStdString() + "\n");
  EXPECT_NE(error->indexOf(QStringLiteral("-C 2: ")), -1) << error->toStdString();
  ASSERT_TRUE(window.wait_idle(kTimeout_ms));
  EXPECT_EQ(window.context_parallel(), 1);
  EXPECT_EQ(window.result()->metrics.step_time, before);
  EXPECT_EQ(combo("context_parallel")->currentData().toInt(), 1);
}

TEST_F(SplitControlsTest, EControlSimulatesAsSimulateWithE) {
  const std::string file =
      write({{"layers", 4}, {"experts", 8}, {"experts_per_token", 2}}, "pipescope_gui_e.json");
  open(file);
  QComboBox* e = combo("expert_parallel");
  ASSERT_TRUE(e);
  EXPECT_EQ(choices(*e), (std::vector<int>{1, 2, 4}));  // dividing the 8 experts and 4 devices
  e->setCurrentIndex(e->findData(2));
  settle();
  EXPECT_EQ(window.expert_parallel(), 2);
  EXPECT_EQ(choices(*combo("data_parallel")), (std::vector<int>{2, 4}));
  const auto r = window.result();
  EXPECT_EQ(r->expert_parallel, 2);
  EXPECT_GT(r->stage_costs.front().ep_forward, 0);
  const int d = combo("data_parallel")->currentData().toInt();
  const json j = simulate_cli(file, "-E 2 -D " + std::to_string(d));
  EXPECT_DOUBLE_EQ(j["step_time_s"].get<double>(), r->metrics.step_time_s());
  ASSERT_TRUE(window.best_plan());
  EXPECT_EQ(window.best_plan()->expert_parallel(), 2);

  // A dense model has no experts to spread: the control offers 1 alone.
  open(kDemo);
  EXPECT_EQ(choices(*combo("expert_parallel")), (std::vector<int>{1}));
  EXPECT_FALSE(combo("expert_parallel")->isEnabled());
  const auto dense = window.set_expert_parallel(2);
  ASSERT_TRUE(dense);
  EXPECT_NE(dense->indexOf(QStringLiteral("-E 2: ")), -1) << dense->toStdString();
  EXPECT_EQ(window.expert_parallel(), 1);
}

// Beside C the experts spread over E of the D x C devices: on 4 devices in
// groups of C = 2, E = 4 takes the D = 2 of both groups, as -C 2 -E 4 does.
TEST_F(SplitControlsTest, EBesideCSpreadsOverTheShares) {
  const std::string file =
      write({{"layers", 4}, {"seq_len", 4096}, {"experts", 8}, {"experts_per_token", 2}},
            "pipescope_gui_ce.json");
  open(file);
  ASSERT_FALSE(window.set_context_parallel(2));
  settle();
  EXPECT_EQ(choices(*combo("expert_parallel")), (std::vector<int>{1, 2, 4}));
  ASSERT_FALSE(window.set_expert_parallel(4));
  settle();
  EXPECT_EQ(window.expert_parallel(), 4);
  EXPECT_EQ(window.context_parallel(), 2);
  EXPECT_EQ(choices(*combo("data_parallel")), (std::vector<int>{2}));
  const auto r = window.result();
  EXPECT_GT(r->stage_costs.front().ep_forward, 0);
  const json j = simulate_cli(file, "-C 2 -E 4 -D 2");
  EXPECT_DOUBLE_EQ(j["step_time_s"].get<double>(), r->metrics.step_time_s());
}

}  // namespace
}  // namespace pipescope::gui
