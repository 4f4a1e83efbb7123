// `pipescope selftest --backend cuda` as a user runs it: status 4 and the
// reason on a machine without a GPU (nothing was checked), 0 with every kernel
// within its tolerance on one with a GPU, and a clear error when pipescope was
// built without CUDA.

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace {

using pipescope::testing::CliResult;
using pipescope::testing::run;

TEST(SelftestCli, ChecksTheKernelsOrSaysWhyNot) {
  const CliResult r = run("selftest --backend cuda --json");
#ifndef PIPESCOPE_CLI_HAS_CUDA
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("built without CUDA"), std::string::npos) << r.err;
#else
  ASSERT_TRUE(r.status == 0 || r.status == 4) << r.status << ": " << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  if (r.status == 4) {
    EXPECT_EQ(j["gpus"], 0);
    EXPECT_TRUE(j["checks"].empty());
    EXPECT_NE(r.err.find("no CUDA GPU visible"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("nothing was checked"), std::string::npos) << r.err;
  } else {
    EXPECT_TRUE(j["ok"].get<bool>());
    EXPECT_GE(j["checks"].size(), 20u);
    // The short pipeline runs close the list.
    EXPECT_EQ(j["checks"].back()["kernel"].get<std::string>().rfind("pipeline ", 0), 0u);
  }
#endif
}

// `run --backend cuda` trains on the GPUs, or says why it cannot, in one line.
TEST(RunCudaCli, TrainsOnTheGpusOrSaysWhyNot) {
  const std::string small = std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/cpu-small.json";
  const std::string plan = ::testing::TempDir() + "run_cuda_plan.json";
  ASSERT_EQ(run("plan " + small + " -K 2 -M 4 -o " + plan).status, 0);
  const CliResult r = run("run " + plan + " --backend cuda --steps 3 --json");
  const CliResult gpus = run("selftest --backend cuda --json");
  if (gpus.status == 0) {
    ASSERT_EQ(r.status, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["losses"].size(), 3u);
  } else {
    EXPECT_EQ(r.status, 1);
    const std::string why = gpus.status == 4
                                ? "pipescope: error: --backend cuda: no CUDA GPU visible"
                                : "pipescope: error: --backend cuda: this pipescope "
                                  "was built without CUDA";
    EXPECT_EQ(r.err.rfind(why, 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    // profile and compare need the GPUs too, and say so alike.
    for (const std::string& args :
         {"profile " + small + " --backend cuda -o " + ::testing::TempDir() + "p.json",
          "compare " + plan + " --backend cuda --steps 2 --warmup 1"}) {
      const CliResult other = run(args);
      EXPECT_EQ(other.status, 1) << args;
      EXPECT_EQ(other.err.rfind(why, 0), 0u) << args << ": " << other.err;
    }
  }
}

TEST(SelftestCli, OnlyTheCudaBackendHasASelftest) {
  const CliResult r = run("selftest --backend mpi");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--backend"), std::string::npos) << r.err;
}

}  // namespace
