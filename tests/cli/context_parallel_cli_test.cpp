// `pipescope simulate -C`: context parallelism from the command line.

#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace {

using pipescope::testing::CliResult;
using pipescope::testing::run;

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

}  // namespace
