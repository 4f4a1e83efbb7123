// `run` and `compare` of a plan of E = 2: expert parallelism from the command
// line, on the executor's threads.

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace {

using pipescope::testing::CliResult;
using pipescope::testing::run;
using pipescope::testing::run_losses;

// `run` of the plan at `split` (made with `split_args` on `devices`) and of
// the plan without: two steps each, the same losses (printed to 6 digits),
// the split run's header naming `header`. Returns the split plan's path.
std::string expect_trains_as_whole(const std::filesystem::path& dir, const std::string& scenario,
                                   const std::string& split_args, const std::string& header) {
  const std::string split = (dir / "split.json").string(), whole = (dir / "whole.json").string();
  EXPECT_EQ(run("plan " + scenario + " " + split_args + " -o " + split).status, 0);
  EXPECT_EQ(run("plan " + scenario + " -o " + whole).status, 0);
  const CliResult ranks = run("run " + split + " --steps 2");
  EXPECT_EQ(ranks.status, 0) << ranks.err;
  EXPECT_NE(ranks.out.find(header), std::string::npos) << ranks.out;
  const CliResult one = run("run " + whole + " --steps 2");
  EXPECT_EQ(one.status, 0) << one.err;
  const std::vector<double> got = run_losses(ranks.out), want = run_losses(one.out);
  EXPECT_EQ(got.size(), 2u) << ranks.out;
  EXPECT_EQ(want.size(), 2u) << one.out;
  for (std::size_t i = 0; i < got.size() && i < want.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-4 * want[i]) << ranks.out << one.out;
  }
  return split;
}

// cpu-small with four experts, two a token, planned with E = 2 on 4 cores (two
// replicas holding two experts each) trains, under `run`, to the same losses
// as its plan without on 2 (one replica of the whole batch); `compare`
// profiles an expert rank and predicts the plan with its all-to-alls.
TEST(RunCli, AnExpertParallelPlanTrainsAsTheWholeModelDoes) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "pipescope_cli_expert_run";
  fs::create_directories(dir);
  const std::string scenario = std::string(PIPESCOPE_SOURCE_DIR) +
                               "/scenarios/cpu-small.json --set model.experts=4 --set "
                               "model.experts_per_token=2 --set model.expert_d_ff=64 -K 2 -M 4 "
                               "--schedule 1f1b --remat off";
  const std::string ep = expect_trains_as_whole(dir, scenario, "--set cluster.devices=4 -E 2",
                                                "K=2, E=2, M=4, batch 8 an expert rank");
  const CliResult compare = run("compare " + ep + " --steps 3 --json");
  ASSERT_EQ(compare.status, 0) << compare.err;
  const nlohmann::json j = nlohmann::json::parse(compare.out);
  EXPECT_EQ(j["E"], 2);
  EXPECT_EQ(j["K"], 2);
  EXPECT_GT(j["predicted_step_time_s"].get<double>(), 0.0);
  // Each stage's 4 forwards, and their all-to-alls predicted and measured.
  int forwards = 0, exchanges = 0;
  for (const nlohmann::json& op : j["ops"]) {
    forwards += op["kind"] == "F kept" ? op["count"].get<int>() : 0;
    if (op["kind"] == "F collectives") {
      exchanges += op["count"].get<int>();
      EXPECT_GT(op["predicted_s"].get<double>(), 0.0);
    }
  }
  EXPECT_EQ(forwards, 8);
  EXPECT_EQ(exchanges, 8);
  // Every rank of both devices, each with its compute and its collectives.
  ASSERT_TRUE(j.contains("measured_ranks")) << compare.out;
  ASSERT_EQ(j["measured_ranks"].size(), 4u) << compare.out;
  for (std::size_t i = 0; i < 4; ++i) {
    const nlohmann::json& r = j["measured_ranks"][i];
    EXPECT_EQ(r["device"], static_cast<int>(i / 2));
    EXPECT_EQ(r["rank"], static_cast<int>(i % 2));
    EXPECT_GT(r["compute_s"].get<double>(), 0.0);
    EXPECT_GT(r["collectives_s"].get<double>(), 0.0);
  }
  // The profile measured the two ranks' load and their group's all-to-all
  // at the plan's micro-batch of 2, and the prediction took both.
  if (std::thread::hardware_concurrency() >= 2) {
    ASSERT_TRUE(j.contains("expert_load")) << compare.out;
    EXPECT_EQ(j["expert_load"]["ranks"], 2);
    EXPECT_EQ(j["expert_load"]["micro_batch"], 2);
    EXPECT_GE(j["expert_load"]["imbalance"].get<double>(), 1.0);
    ASSERT_TRUE(j.contains("alltoall_group")) << compare.out;
    EXPECT_EQ(j["alltoall_group"]["group"], "experts");
    EXPECT_EQ(j["alltoall_group"]["ranks"], 2);
    EXPECT_EQ(j["alltoall_group"]["micro_batch"], 2);
    EXPECT_GT(j["alltoall_group"]["bandwidth"].get<double>(), 0.0);
  }
  fs::remove_all(dir);
}

// The same mixture (fused attention, as context parallelism runs it) planned
// with E = 2 expert ranks of C = 2 shares of each sequence on 8 cores trains
// to the losses of its plan without either (the same plan over MPI:
// tests/cli/mpi_cli_test.cpp); `compare` tells what each rank's gradient sum
// covers.
TEST(RunCli, AnExpertAndContextParallelPlanTrainsAsTheWholeModelDoes) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "pipescope_cli_expert_context_run";
  fs::create_directories(dir);
  const std::string scenario =
      std::string(PIPESCOPE_SOURCE_DIR) +
      "/scenarios/cpu-small.json --set model.experts=4 --set model.experts_per_token=2 --set "
      "model.expert_d_ff=64 --set model.attention=fused -K 2 -M 4 --schedule 1f1b --remat off";
  const std::string both =
      expect_trains_as_whole(dir, scenario, "--set cluster.devices=8 -E 2 -C 2",
                             "K=2, C=2, E=2, M=4, batch 8 an expert rank");
  const CliResult compare = run("compare " + both + " --steps 3");
  ASSERT_EQ(compare.status, 0) << compare.err;
  EXPECT_NE(compare.out.find("Gradient sum        the 4 ranks (2 expert ranks of 2 shares) sum "
                             "the gradients they all hold, and each expert's over the shares of "
                             "its rank, before each step"),
            std::string::npos)
      << compare.out;
  fs::remove_all(dir);
}

}  // namespace
