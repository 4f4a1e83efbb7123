// `--framework NAME` on a command: which profile the scenario then runs under,
// and what of the scenario's own framework fields it keeps.

#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace {

using pipescope::testing::CliResult;
using pipescope::testing::run;

const std::string kDemo = std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/demo.json";

// --framework swaps the profile of a framework object and keeps its fields.
TEST(FrameworkCli, KeepsTheScenariosOverrides) {
  const auto step = [](const std::string& args) {
    const CliResult r = run("simulate " + kDemo + " -K 2 --json " + args);
    EXPECT_EQ(r.status, 0) << r.err;
    return nlohmann::json::parse(r.out)["step_time_s"].get<double>();
  };
  const std::string blocking =
      R"( --set 'training.framework={"profile":"ideal","launch_blocking":true,)"
      R"("host_launch_s":8e-6}')";
  const double kept = step(blocking + " --framework megatron-core");
  const double stated =
      step(R"( --set 'training.framework={"profile":"megatron-core","launch_blocking":true,)"
           R"("host_launch_s":8e-6}')");
  EXPECT_EQ(kept, stated);
  EXPECT_GT(kept, step("--framework megatron-core"));  // the overrides count
}

// ZeRO-1's line says how the framework sums the gradients, and DeepSpeed's
// whole all-reduce makes the step longer than a reduce-scatter does, all
// else in its profile the same.
TEST(FrameworkCli, ZeroOneSaysHowTheFrameworkSumsTheGradients) {
  const std::string base = "simulate " + kDemo + " -K 2 -D 2 --set training.zero=1";
  const std::string scatter =
      base + " --set 'training.framework={\"profile\":\"deepspeed\",\"zero1_allreduce\":false}'";
  const CliResult rs = run(scatter);
  ASSERT_EQ(rs.status, 0) << rs.err;
  EXPECT_NE(rs.out.find("(ring reduce-scatter of each stage's gradients, all-gather of its "
                        "updated weights after the step; ZeRO-1"),
            std::string::npos)
      << rs.out;
  const CliResult ar = run(base + " --framework deepspeed");
  ASSERT_EQ(ar.status, 0) << ar.err;
  EXPECT_NE(ar.out.find("(ring all-reduce of each stage's gradients, all-gather of its "
                        "updated weights after the step; ZeRO-1"),
            std::string::npos)
      << ar.out;
  const CliResult rs_json = run(scatter + " --json");
  const CliResult ar_json = run(base + " --framework deepspeed --json");
  ASSERT_EQ(rs_json.status, 0) << rs_json.err;
  ASSERT_EQ(ar_json.status, 0) << ar_json.err;
  EXPECT_GT(nlohmann::json::parse(ar_json.out)["step_time_s"].get<double>(),
            nlohmann::json::parse(rs_json.out)["step_time_s"].get<double>());
}

}  // namespace
