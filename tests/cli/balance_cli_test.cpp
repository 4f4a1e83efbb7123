// `simulate --balance` and a scenario's stated cut as a user runs them: the
// given cut beside the partitioner's, and one-line errors naming the option.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace {

using pipescope::testing::CliResult;
using pipescope::testing::run;

// 24 blocks: 26 layers on 4 A100s.
const std::string kDemo = std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/demo.json";

nlohmann::json json_of(const std::string& args) {
  const CliResult r = run(args);
  EXPECT_EQ(r.status, 0) << args << ": " << r.err;
  return nlohmann::json::parse(r.out);
}

std::vector<int> balance_of(const nlohmann::json& j) {
  std::vector<int> out;
  for (const auto& s : j["stages"]) {
    out.push_back(s["last_layer"].get<int>() - s["first_layer"].get<int>() + 1);
  }
  return out;
}

std::string list(const std::vector<int>& v) {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + std::to_string(v[i]);
  return out;
}

TEST(BalanceCli, TheOptimalCutGivenIsTheSameStep) {
  const nlohmann::json free = json_of("simulate " + kDemo + " --json");
  const std::vector<int> optimal = balance_of(free);
  ASSERT_EQ(optimal.size(), 4u);
  const nlohmann::json given =
      json_of("simulate " + kDemo + " --balance " + list(optimal) + " --json");
  EXPECT_EQ(given["step_time_s"], free["step_time_s"]);
  EXPECT_EQ(given["given_cut"]["balance"], nlohmann::json(optimal));
  EXPECT_EQ(given["given_cut"]["source"], "--balance");
  EXPECT_EQ(given["partitioner_cut"]["balance"], nlohmann::json(optimal));
  EXPECT_EQ(given["partitioner_cut"]["partition"], "optimal");
  EXPECT_EQ(given["partitioner_cut"]["step_time_s"], free["step_time_s"]);

  const CliResult text = run("simulate " + kDemo + " --balance " + list(optimal));
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("partition given (--balance)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("\nGiven cut      " + list(optimal) + ": "), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("\nPipeScope cut  the same (optimal)\n"), std::string::npos) << text.out;
}

TEST(BalanceCli, AnotherCutIsSetBesideThePartitioners) {
  const nlohmann::json j = json_of("simulate " + kDemo + " --balance 11,5,5,5 --json");
  EXPECT_EQ(balance_of(j), (std::vector<int>{11, 5, 5, 5}));
  const double given = j["step_time_s"].get<double>();
  const double partitioned = j["partitioner_cut"]["step_time_s"].get<double>();
  EXPECT_LT(partitioned, given);
  EXPECT_NE(j["partitioner_cut"]["balance"], nlohmann::json({11, 5, 5, 5}));

  const CliResult text = run("simulate " + kDemo + " --balance 11,5,5,5");
  ASSERT_EQ(text.status, 0) << text.err;
  const std::size_t line = text.out.find("\nPipeScope cut  ");
  ASSERT_NE(line, std::string::npos) << text.out;
  const std::string rest = text.out.substr(line + 1, text.out.find('\n', line + 1) - line - 1);
  char change[32];
  std::snprintf(change, sizeof change, "%+.1f %%", 100.0 * (partitioned - given) / given);
  EXPECT_NE(rest.find(" (optimal): "), std::string::npos) << rest;
  EXPECT_NE(rest.find(std::string(" a step, ") + change), std::string::npos) << rest;
  // --partition names the cut compared with.
  const nlohmann::json uniform =
      json_of("simulate " + kDemo + " --balance 11,5,5,5 --partition uniform --json");
  EXPECT_EQ(uniform["partitioner_cut"]["balance"], nlohmann::json({7, 7, 6, 6}));
  EXPECT_EQ(uniform["partitioner_cut"]["partition"], "uniform");
}

TEST(BalanceCli, ScenarioFieldsStateTheCutToo) {
  const std::string layout =
      " --set 'training.megatron={\"pipeline_model_parallel_layout\": \"Et*6|(t*6|)*2,t*6L\"}' "
      "--json";
  const nlohmann::json j = json_of("simulate " + kDemo + layout);
  EXPECT_EQ(balance_of(j), (std::vector<int>{7, 6, 6, 7}));
  EXPECT_EQ(j["given_cut"]["source"], "training.megatron.pipeline_model_parallel_layout");
  EXPECT_EQ(j["step_time_s"],
            json_of("simulate " + kDemo + " --balance 7,6,6,7 --json")["step_time_s"]);
  // --balance replaces the file's cut, whichever form it has.
  EXPECT_EQ(balance_of(json_of("simulate " + kDemo + layout + " --balance 8,6,6,6")),
            (std::vector<int>{8, 6, 6, 6}));
  const nlohmann::json even = json_of("simulate " + kDemo + " --set training.megatron={} --json");
  EXPECT_EQ(balance_of(even), (std::vector<int>{7, 6, 6, 7}));
}

TEST(BalanceCli, ErrorsNameTheOptionAndTheRange) {
  const CliResult count = run("simulate " + kDemo + " --balance 10,8,8");
  EXPECT_EQ(count.status, 1);
  EXPECT_EQ(count.err, "pipescope: error: " + kDemo +
                           ": --balance 10,8,8: expected 4 entries, one per model stage (K=4), "
                           "each at least 1 and adding up to the model's 26 layers; got 3\n");
  const CliResult sum = run("simulate " + kDemo + " --balance 7,7,7,7");
  EXPECT_EQ(sum.status, 1);
  EXPECT_EQ(sum.err, "pipescope: error: " + kDemo +
                         ": --balance 7,7,7,7: the entries add up to 28 layers; expected the "
                         "model's 26 (the embedding, 24 blocks and the head)\n");
  const CliResult chunks =
      run("simulate " + kDemo + " --schedule interleaved-1f1b --balance 7,6,6,7");
  EXPECT_EQ(chunks.status, 1);
  EXPECT_EQ(chunks.err, "pipescope: error: " + kDemo +
                            ": --balance 7,6,6,7: expected 8 entries, one per model stage (K=4 x "
                            "2 chunks = 8), each at least 1 and adding up to the model's 26 "
                            "layers; got 4\n");
  for (const char* bad : {"7,0,6,13", "7,-1,6,14", "7,six,6,7", "7,,6,7", "7,6,6,7,"}) {
    const CliResult r = run("simulate " + kDemo + " --balance=" + bad);
    EXPECT_EQ(r.status, 2) << bad;
    EXPECT_NE(r.err.find("--balance: expected the layers of each model stage, whole numbers of "
                         "at least 1 separated by commas (e.g. 3,2,2), got '" +
                         std::string(bad) + "'"),
              std::string::npos)
        << bad << ": " << r.err;
  }
  const CliResult plan =
      run("simulate " + kDemo + " --plan " + std::string(PIPESCOPE_TEST_DATA_DIR) +
          "/golden/plan.json --balance 7,6,6,7");
  EXPECT_EQ(plan.status, 1);
  EXPECT_NE(plan.err.find("drop -K"), std::string::npos) << plan.err;
  EXPECT_NE(plan.err.find("--balance"), std::string::npos) << plan.err;
}

TEST(BalanceCli, SweepRunsTheCutAtEveryPoint) {
  const nlohmann::json j = json_of("sweep " + kDemo + " -K 2,4 -M 4,8 --balance 7,6,6,7 --json");
  ASSERT_EQ(j.size(), 4u);
  for (const auto& p : j) {
    if (p["K"] == 4) {
      EXPECT_FALSE(p.contains("error")) << p;
      EXPECT_EQ(p["step_time_s"], json_of("simulate " + kDemo + " -M " + p["M"].dump() +
                                          " --balance 7,6,6,7 --json")["step_time_s"]);
    } else {
      EXPECT_NE(p["error"].get<std::string>().find("expected 2 entries"), std::string::npos) << p;
    }
  }
}

// capacity asks whether some cut of each model it tries fits: a cut the
// file states, of the file's model, stands aside.
TEST(BalanceCli, CapacityLeavesAStatedCutOut) {
  const nlohmann::json free = json_of("capacity " + kDemo + " -K 4 --json");
  const nlohmann::json stated =
      json_of("capacity " + kDemo + " -K 4 --set 'training.balance=[11,5,5,5]' --json");
  EXPECT_EQ(stated["max_value"], free["max_value"]);
  EXPECT_GT(stated["max_value"].get<int>(), 24);
}

TEST(BalanceCli, HelpNamesTheOption) {
  for (const char* command : {"simulate", "sweep"}) {
    const CliResult r = run(std::string(command) + " --help");
    EXPECT_EQ(r.status, 0);
    EXPECT_NE(r.out.find("--balance"), std::string::npos) << command;
  }
}

}  // namespace
