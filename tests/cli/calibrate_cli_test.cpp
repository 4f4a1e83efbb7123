// `pipescope calibrate` as a user runs it: step times that simulate produced
// with a known GEMM efficiency are fitted back, the cost-model file it writes
// is taken by simulate, plan and sweep with --cost-model, and bad measurements
// are refused by line and column.

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace {

using pipescope::testing::CliResult;
using pipescope::testing::run;
using pipescope::testing::slurp;
namespace fs = std::filesystem;
using nlohmann::json;

const std::string kDemo = std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/demo.json";
const std::string kSmall = std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/cpu-small.json";

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("calibrate_cli_" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

double step_time(const std::string& args) {
  const CliResult r = run("simulate " + kDemo + " " + args + " --json");
  EXPECT_EQ(r.status, 0) << r.err;
  return json::parse(r.out)["step_time_s"].get<double>();
}

TEST(CalibrateCli, FitsStepTimesBackAndWritesACostModelThatCommandsTake) {
  const TempDir dir;
  // The demo's device table with GEMMs at 55 % of peak instead of 80 %.
  json truth = {{"format", "pipescope-cost-model"},
                {"version", 1},
                {"model", "kernels"},
                {"device", "a100-80g"},
                {"parameters",
                 {{"gemm_efficiency", 0.55},
                  {"attention_fwd_efficiency", 0.6},
                  {"attention_bwd_efficiency", 0.5},
                  {"memory_efficiency", 0.85},
                  {"kernel_overhead_s", 4e-6},
                  {"link_efficiency", 0.8}}}};
  std::ofstream(dir / "truth.json") << truth.dump();
  const std::vector<std::string> configs = {
      "-K 4 -M 8 --schedule gpipe --remat on", "-K 4 -M 16 --schedule 1f1b --remat off",
      "-K 2 -M 4 --schedule gpipe --remat on", "-K 2 -M 8 --schedule zb-h1 --remat off"};
  {
    std::ofstream csv(dir / "steps.csv");
    csv << "K,M,schedule,remat,step_time_s\n";
    const char* rows[] = {"4,8,gpipe,on,", "4,16,1f1b,off,", "2,4,gpipe,on,", "2,8,zb-h1,off,"};
    for (std::size_t i = 0; i < configs.size(); ++i) {
      char t[32];
      std::snprintf(t, sizeof t, "%.9g",
                    step_time(configs[i] + " --cost-model " + dir / "truth.json"));
      csv << rows[i] << t << "\n";
    }
  }
  const CliResult r =
      run("calibrate " + kDemo + " --measured " + dir / "steps.csv" + " -o " + dir / "fit.json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("K=4 M=16 1f1b remat off"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("gemm_efficiency"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Held at the device table's values: attention_fwd_efficiency"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("Cost model written to " + dir / "fit.json"), std::string::npos) << r.out;
  const json fit = json::parse(slurp(dir / "fit.json"));
  EXPECT_EQ(fit["format"], "pipescope-cost-model");
  EXPECT_EQ(fit["device"], "a100-80g");
  EXPECT_EQ(fit["fit"]["measured"], "steps.csv");
  EXPECT_EQ(fit["fit"]["rows"], 4);
  EXPECT_NEAR(fit["parameters"]["gemm_efficiency"].get<double>(), 0.55, 0.03 * 0.55);
  EXPECT_LT(fit["fit"]["max_relative_error"].get<double>(), 0.01);

  // An unseen configuration, predicted from the fitted file.
  const std::string unseen = "-K 4 -M 8 --schedule interleaved-1f1b --chunks 2 --remat off";
  const double measured = step_time(unseen + " --cost-model " + dir / "truth.json");
  const double predicted = step_time(unseen + " --cost-model " + dir / "fit.json");
  EXPECT_NEAR(predicted, measured, 0.03 * measured);
  // plan and sweep take it too.
  CliResult p = run("plan " + kDemo + " --cost-model " + dir / "fit.json" + " --json");
  EXPECT_EQ(p.status, 0) << p.err;
  p = run("sweep " + kDemo + " --cost-model " + dir / "fit.json" + " -K 2,4 -M 4,8 --json");
  EXPECT_EQ(p.status, 0) << p.err;
}

// --partition cuts every row as simulate --partition does: a fit that holds
// every parameter (the weak prior alone) reports the cut's step time before
// and after, which is the uniform cut's, not the optimal one's.
TEST(CalibrateCli, CutsEveryRowAsPartitionSays) {
  const TempDir dir;
  const double uniform = step_time("-K 2 -M 8 --partition uniform");
  const double optimal = step_time("-K 2 -M 8");
  ASSERT_GT(std::abs(uniform / optimal - 1.0), 0.005);
  std::ofstream(dir / "steps.csv")
      << "K,M,schedule,remat,step_time_s\n2,8,gpipe,on," << uniform << "\n";
  const auto calibrate = [&](const std::string& partition) {
    const CliResult r = run("calibrate " + kDemo + " --measured " + dir / "steps.csv" + " -o " +
                            dir / "fit.json" + partition);
    EXPECT_EQ(r.status, 0) << r.err;
    return r;
  };
  // The uniform cut matches the step before any parameter moves, and the file
  // says how the rows were cut; the optimal cut needs the parameters to
  // absorb the difference.
  const CliResult uniform_fit = calibrate(" --partition uniform");
  EXPECT_NE(uniform_fit.out.find("(--partition uniform)"), std::string::npos) << uniform_fit.out;
  EXPECT_NE(uniform_fit.out.find("No parameter moved"), std::string::npos) << uniform_fit.out;
  const json file = json::parse(slurp(dir / "fit.json"));
  EXPECT_LT(file["fit"]["max_relative_error"].get<double>(), 1e-3);
  EXPECT_EQ(file["fit"]["partition"], "uniform");
  const CliResult free = calibrate("");
  EXPECT_NE(free.out.find("(--partition optimal)"), std::string::npos) << free.out;
  EXPECT_EQ(free.out.find("No parameter moved"), std::string::npos) << free.out;
  const CliResult bad = run("calibrate " + kDemo + " --measured " + dir / "steps.csv" + " -o " +
                            dir / "other.json" + " --partition even");
  EXPECT_EQ(bad.status, 2);  // a usage error
  EXPECT_NE(bad.err.find("--partition"), std::string::npos) << bad.err;
  EXPECT_FALSE(fs::exists(dir / "other.json"));
}

TEST(CalibrateCli, ChoosesAModelByName) {
  const double analytic = step_time("-K 4 -M 8 --cost-model analytic");
  const double kernels = step_time("-K 4 -M 8 --cost-model kernels");
  EXPECT_NE(analytic, kernels);
  EXPECT_EQ(kernels, step_time("-K 4 -M 8"));  // the preset's default
  const CliResult r = run("simulate " + kSmall + " --cost-model kernels");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--cost-model kernels needs the device's kernel table: device"),
            std::string::npos)
      << r.err;
}

TEST(CalibrateCli, RefusesBadMeasurementsAndOtherDevices) {
  const TempDir dir;
  std::ofstream(dir / "bad.csv") << "K,M,schedule,remat,step_time_s\n4,8,gpipe,on,-1\n";
  CliResult r =
      run("calibrate " + kDemo + " --measured " + dir / "bad.csv" + " -o " + dir / "out.json");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("bad.csv: line 2, column step_time_s: expected a step time in seconds "
                       "above 0"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(dir / "out.json"));
  std::ofstream(dir / "ok.csv") << "K,M,schedule,remat,step_time_s\n4,8,gpipe,on,0.8\n";
  r = run("calibrate " + kDemo + " --measured " + dir / "ok.csv" + " -o " + dir / "out.json" +
          " --fit gemm_efficiency,speed");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--fit: unknown parameter 'speed'"), std::string::npos) << r.err;
  r = run("calibrate " + kSmall + " --measured " + dir / "ok.csv" + " -o " + dir / "out.json");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("has no kernel table"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "out.json"));

  // A file for another device.
  r = run("calibrate " + kDemo + " --measured " + dir / "ok.csv" + " -o " + dir / "out.json" +
          " --fit gemm_efficiency");
  ASSERT_EQ(r.status, 0) << r.err;
  r = run("simulate " + kDemo + " --set cluster.preset=h100-sxm --cost-model " + dir / "out.json");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("out.json: device: the figures are for device 'a100-80g'"),
            std::string::npos)
      << r.err;
  r = run("calibrate --help");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("kernel_overhead_s [0, 0.001]"), std::string::npos) << r.out;
}

}  // namespace
