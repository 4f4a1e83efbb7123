// `pipescope simulate -C`, `run` and `compare` of a plan of C = 2, and
// `profile` of a scenario of C = 2: context parallelism from the command
// line.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace {

using pipescope::testing::CliResult;
using pipescope::testing::run;
using pipescope::testing::run_losses;

const std::string kDemo = std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/demo.json";

// -C 2 splits the demo's 1024-token sequences over two devices a stage:
// the stages' ops end with what the ring of keys and values adds (the
// backward's twice the forward's bytes), and a C whose 2 C chunks do not
// divide the sequence is refused naming the flag.
TEST(SimulateCli, ContextParallelSplitsTheSequence) {
  const CliResult text = run("simulate " + kDemo + " -C 2");
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(
      text.out.find("Context    C=2 devices share each sequence of 1024 tokens, 512 a device"),
      std::string::npos)
      << text.out;
  // One replica: its two shares still reduce their gradients.
  EXPECT_NE(text.out.find(", gradient all-reduce "), std::string::npos) << text.out;
  const CliResult json = run("simulate " + kDemo + " -C 2 --json");
  ASSERT_EQ(json.status, 0) << json.err;
  const nlohmann::json j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["C"], 2);
  EXPECT_EQ(j["K"], 2);  // the demo's 4 devices in groups of 2
  EXPECT_GT(j["stages"][1]["cp_fwd_s"].get<double>(), 0.0);
  EXPECT_GT(j["stages"][1]["cp_bwd_s"].get<double>(), j["stages"][1]["cp_fwd_s"].get<double>());
  const CliResult bad = run("simulate " + kDemo + " -C 3");
  EXPECT_EQ(bad.status, 1);
  EXPECT_EQ(bad.err, "pipescope: error: " + kDemo +
                         ": -C 3: context parallelism over 3 devices cuts seq_len 1024 into 6 "
                         "equal chunks (2 C), which do not divide it\n");
}

// cpu-small with fused attention (which context parallelism needs) planned
// with C = 2 on 4 cores trains, under `run`, to the same losses as its plan
// without; `compare` profiles a share and predicts the plan with its ring.
// The all-to-all form likewise.
TEST(RunCli, AContextParallelPlanTrainsAsTheWholeSequenceDoes) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "pipescope_cli_context_run";
  fs::create_directories(dir);
  const std::string scenario = std::string(PIPESCOPE_SOURCE_DIR) +
                               "/scenarios/cpu-small.json --set model.attention=fused -K 2 -M 4 "
                               "--schedule 1f1b --remat off";
  const std::string cp = (dir / "cp.json").string(), whole = (dir / "whole.json").string();
  ASSERT_EQ(run("plan " + scenario + " --set cluster.devices=4 -C 2 -o " + cp).status, 0);
  ASSERT_EQ(run("plan " + scenario + " -o " + whole).status, 0);
  const CliResult shares = run("run " + cp + " --steps 2");
  ASSERT_EQ(shares.status, 0) << shares.err;
  const CliResult one = run("run " + whole + " --steps 2");
  ASSERT_EQ(one.status, 0) << one.err;
  const std::vector<double> got = run_losses(shares.out), want = run_losses(one.out);
  ASSERT_EQ(got.size(), 2u) << shares.out;
  ASSERT_EQ(want.size(), 2u) << one.out;
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-4 * want[i]) << shares.out << one.out;  // printed to 6 digits
  }
  const CliResult compare = run("compare " + cp + " --steps 3 --json");
  ASSERT_EQ(compare.status, 0) << compare.err;
  const nlohmann::json j = nlohmann::json::parse(compare.out);
  EXPECT_EQ(j["C"], 2);
  EXPECT_EQ(j["K"], 2);
  EXPECT_GT(j["predicted_step_time_s"].get<double>(), 0.0);
  EXPECT_GT(j["measured_step_time_s"].get<double>(), 0.0);
  // The forward of each of the 4 micro-batches on each of the 2 stages,
  // compared op by op.
  int forwards = 0;
  for (const nlohmann::json& op : j["ops"])
    forwards += op["kind"] == "F kept" ? op["count"].get<int>() : 0;
  EXPECT_EQ(forwards, 8);
  // Each stage's shares sum their gradients before the step: a row of its
  // own, timed by the profile's sum where the machine has the two cores.
  int sums = 0;
  for (const nlohmann::json& op : j["ops"])
    sums += op["kind"] == "optimizer collectives" ? op["count"].get<int>() : 0;
  EXPECT_EQ(sums, 2);
  if (j["cores"].get<int>() >= 2) {
    EXPECT_EQ(j["gradient_sum"]["ranks"], 2);
  }
  // The all-to-all form of the same plan (the shares trade sequence for
  // heads) trains to the same losses, and compare predicts its all-to-alls.
  const std::string traded = (dir / "a2a.json").string();
  ASSERT_EQ(run("plan " + scenario +
                " --set cluster.devices=4 --set training.cp_comm_type=a2a -C 2 -o " + traded)
                .status,
            0);
  const CliResult heads = run("run " + traded + " --steps 2");
  ASSERT_EQ(heads.status, 0) << heads.err;
  const std::vector<double> by_heads = run_losses(heads.out);
  ASSERT_EQ(by_heads.size(), 2u) << heads.out;
  for (std::size_t i = 0; i < by_heads.size(); ++i) {
    EXPECT_NEAR(by_heads[i], want[i], 1e-4 * want[i]) << heads.out << one.out;
  }
  const CliResult heads_compare = run("compare " + traded + " --steps 3");
  ASSERT_EQ(heads_compare.status, 0) << heads_compare.err;
  EXPECT_NE(heads_compare.out.find("Heads traded        2 shares;"), std::string::npos)
      << heads_compare.out;
  EXPECT_NE(heads_compare.out.find("Gradient sum        the 2 shares sum the gradients"),
            std::string::npos)
      << heads_compare.out;
  fs::remove_all(dir);
}

// `profile` of a scenario of C = 2 times the shares' exchanges as their layers
// run them (with two cores or more): the ring's takes, or for the a2a form
// the shares' all-to-all, in the file and on the page.
TEST(ProfileCli, TimesTheSharesExchanges) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "pipescope_cli_context_profile";
  fs::create_directories(dir);
  const std::string scenario = std::string(PIPESCOPE_SOURCE_DIR) +
                               "/scenarios/cpu-small.json --set model.attention=fused "
                               "--set training.context_parallel=2 --batch-sizes 2 --repeats 1";
  const std::string ring = (dir / "ring.json").string(), a2a = (dir / "a2a.json").string();
  const CliResult r = run("profile " + scenario + " -o " + ring);
  ASSERT_EQ(r.status, 0) << r.err;
  const CliResult a = run("profile " + scenario + " --set training.cp_comm_type=a2a -o " + a2a);
  ASSERT_EQ(a.status, 0) << a.err;
  const auto read = [](const std::string& file) {
    std::ifstream in(file);
    return nlohmann::json::parse(in);
  };
  const nlohmann::json rp = read(ring), ap = read(a2a);
  if (rp["cores"].get<int>() < 2) GTEST_SKIP() << "one core: no shares at once to time";
  EXPECT_EQ(rp["context_ring"]["ranks"], 2);
  EXPECT_GT(rp["context_ring"]["backward_take_s"].get<double>(), 0.0);
  EXPECT_FALSE(rp.contains("alltoall_group"));
  EXPECT_NE(r.out.find("Context    ring of 2 shares: a take "), std::string::npos) << r.out;
  EXPECT_EQ(ap["alltoall_group"]["ranks"], 2);
  EXPECT_FALSE(ap.contains("context_ring"));
  EXPECT_NE(a.out.find("Context    all-to-all of 2 shares: "), std::string::npos) << a.out;
  fs::remove_all(dir);
}

}  // namespace
