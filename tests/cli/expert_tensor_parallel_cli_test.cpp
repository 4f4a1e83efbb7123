// `--expert-tensor-parallel 1` from the command line: whole experts beside
// -T in `simulate` (one replica's T devices its expert ranks), the E they
// need, and a plan of them replayed with `simulate --plan`.

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace {

using pipescope::testing::CliResult;
using pipescope::testing::run;

const std::string kDemo = std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/demo.json";
// The demo's blocks as a mixture of 8 experts, top 2, split over T = 2 with
// sequence parallelism.
const std::string kMoe = kDemo +
                         " --set model.layers=4 --set model.experts=8"
                         " --set model.experts_per_token=2 --set training.sequence_parallel=true ";

TEST(ExpertTensorParallelCli, OneReplicasTensorRanksAreItsExpertRanks) {
  // 4 devices in groups of T = 2: K = 2, D = 1, and E = 2 over a group's 2.
  const CliResult text = run("simulate " + kMoe + "-T 2 --expert-tensor-parallel 1 -E 2");
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("Experts    E=2 of the T x D devices share the 8 experts, 4 whole on "
                          "each device"),
            std::string::npos)
      << text.out;
  const CliResult json = run("simulate " + kMoe + "-T 2 --expert-tensor-parallel 1 -E 2 --json");
  ASSERT_EQ(json.status, 0) << json.err;
  EXPECT_GT(nlohmann::json::parse(json.out)["stages"][0]["ep_fwd_s"].get<double>(), 0.0);
  // E below T: the T would hold the same experts.
  const CliResult one = run("simulate " + kMoe + "-T 2 --expert-tensor-parallel 1");
  EXPECT_EQ(one.status, 1);
  EXPECT_NE(one.err.find("need expert_parallel a multiple of 2 (got 1)"), std::string::npos)
      << one.err;
  const CliResult two = run("simulate " + kMoe + "-T 2 --expert-tensor-parallel 2 -E 2");
  EXPECT_EQ(two.status, 1);  // split over T, E = 2 needs two replicas
  EXPECT_NE(two.err.find("give --data-parallel a multiple of E"), std::string::npos) << two.err;
}

TEST(ExpertTensorParallelCli, APlanOfWholeExpertsReplays) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "pipescope_cli_expert_tensor";
  fs::create_directories(dir);
  const std::string plan = (dir / "plan.json").string();
  const CliResult planned =
      run("plan " + kMoe + "-T 2 --expert-tensor-parallel 1 -E 2 -K 2 -o " + plan);
  ASSERT_EQ(planned.status, 0) << planned.err;
  // The scenario file does not say it: the plan does.
  const CliResult replay = run("simulate " + kMoe + "--plan " + plan + " --json");
  ASSERT_EQ(replay.status, 0) << replay.err;
  const nlohmann::json j = nlohmann::json::parse(replay.out);
  EXPECT_EQ(j["E"], 2);
  EXPECT_EQ(j["T"], 2);
  const CliResult beside =
      run("simulate " + kMoe + "--plan " + plan + " --expert-tensor-parallel 2");
  EXPECT_EQ(beside.status, 1);
  EXPECT_NE(beside.err.find("--expert-tensor-parallel"), std::string::npos) << beside.err;
  fs::remove_all(dir);
}

}  // namespace
