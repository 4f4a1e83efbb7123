// `pipescope selftest --backend cuda` as a user runs it: status 4 and the
// reason on a machine without a GPU (nothing was checked), 0 with every kernel
// within its tolerance on one with a GPU, and a clear error when pipescope was
// built without CUDA.

#include <gtest/gtest.h>

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
  }
#endif
}

TEST(SelftestCli, OnlyTheCudaBackendHasASelftest) {
  const CliResult r = run("selftest --backend mpi");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--backend"), std::string::npos) << r.err;
}

}  // namespace
