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

}  // namespace
