// Faults during `pipescope run --backend cpu`: a stage that throws, weights that
// blow up into NaN, a stage stuck in an op. Each ends the run within seconds
// (the `timeout` launcher turns a hang into status 124), with one line naming
// the stage, the op and its micro-batch, a non-zero status and no trace left
// behind. The MPI backend's faults, a killed rank among them, are in
// mpi_cli_test.cpp.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "cli_runner.h"

namespace {

using pipescope::testing::CliResult;
using pipescope::testing::run;
using pipescope::testing::run_under;
namespace fs = std::filesystem;

const std::string kSmall = std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/cpu-small.json";
const std::string kTimeout = "timeout -k 2 20";

class RunFaultCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("pipescope_run_fault_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    plan_ = dir_ / "plan.json";
    trace_ = dir_ / "trace.json";
    // GPipe over two stages, four micro-batches.
    const CliResult r =
        run("plan " + kSmall + " -K 2 -M 4 --schedule gpipe --remat off -o " + plan_.string());
    ASSERT_EQ(r.status, 0) << r.err;
  }
  void TearDown() override { fs::remove_all(dir_); }

  CliResult run_plan(const std::string& options) const {
    return run_under(kTimeout, "run " + plan_.string() + " --steps 3 --trace " + trace_.string() +
                                   " " + options);
  }

  // One error line, a refusal's status, and no trace (nor its temporary file).
  void expect_failed_with(const CliResult& r, const std::string& message) const {
    EXPECT_NE(r.status, 124) << "the run hung";
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_EQ(r.err, "pipescope: error: " + message + "\n");
    EXPECT_FALSE(fs::exists(trace_));
    EXPECT_FALSE(fs::exists(trace_.string() + ".tmp"));
  }

  fs::path dir_, plan_, trace_;
};

TEST_F(RunFaultCli, AStageThatThrowsNamesItsOp) {
  expect_failed_with(run_plan("--inject-fault 'throw:B(1,2)'"),
                     "stage 1 failed in B(1,2): injected fault");
}

TEST_F(RunFaultCli, ALearningRateThatBlowsUpStopsAtTheFirstNaN) {
  // The first step is finite; its update sends the weights to infinity, so the
  // second step's first forward meets the NaN.
  expect_failed_with(run_plan("--lr 1e30"),
                     "stage 0 failed in F(0,0): layer 'block0' produced NaN or inf");
}

TEST_F(RunFaultCli, AStuckStageIsNamedInsteadOfHanging) {
  // F(1,1) never ends: stage 0's backward waits for its gradient until the
  // watchdog, and the stuck worker is given as long again to stop.
  expect_failed_with(run_plan("--watchdog 500 --inject-fault 'stall:F(1,1)'"),
                     "pipeline stalled (watchdog 500 ms): device 0 waits in B(0,3) for the "
                     "gradient of micro-batch 3 from stage 1; device 1 runs F(1,1); device 1 (in "
                     "F(1,1)) did not stop within 500 ms of the error and was abandoned");
}

}  // namespace
