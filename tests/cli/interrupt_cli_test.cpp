// Ctrl-C during long commands: every worker stops, the program says it was
// interrupted and exits 130, and no output file (or temporary) is left behind.

#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli_runner.h"

namespace pipescope::testing {
namespace {

namespace fs = std::filesystem;

class InterruptCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("pipescope_interrupt_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Whether `pid` has a handler for SIGINT installed (/proc/PID/status, SigCgt).
  static bool catches_sigint(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("SigCgt:", 0) == 0) {
        const std::uint64_t mask = std::stoull(line.substr(7), nullptr, 16);
        return (mask & (std::uint64_t{1} << (SIGINT - 1))) != 0;
      }
    }
    return false;
  }

  struct Outcome {
    bool exited = false;
    int status = -1;
    std::string err;
  };

  // Starts pipescope with `args`, waits until it catches SIGINT, lets it work
  // for `work`, sends SIGINT and waits for it to end (killing it after a minute:
  // a hang fails the test instead of stalling the suite).
  Outcome interrupt(const std::vector<std::string>& args, std::chrono::milliseconds work) {
    const fs::path err_file = dir_ / "stderr";
    const pid_t pid = ::fork();
    if (pid == 0) {
      const int fd = ::open(err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 2);
      const int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, 1);
      std::vector<char*> argv;
      std::string program = PIPESCOPE_CLI;
      argv.push_back(program.data());
      std::vector<std::string> copy = args;
      for (std::string& a : copy) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(program.c_str(), argv.data());
      ::_exit(127);
    }
    Outcome o;
    if (pid < 0) return o;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    int raw = 0;
    bool done = false;
    while (!catches_sigint(pid) && std::chrono::steady_clock::now() < give_up) {
      if (::waitpid(pid, &raw, WNOHANG) == pid) {
        done = true;  // ended before it could be interrupted
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (!done) {
      std::this_thread::sleep_for(work);
      ::kill(pid, SIGINT);
      for (;;) {
        if (::waitpid(pid, &raw, WNOHANG) == pid) break;
        if (std::chrono::steady_clock::now() > give_up) {
          ::kill(pid, SIGKILL);
          ::waitpid(pid, &raw, 0);
          ADD_FAILURE() << "pipescope did not stop within a minute of Ctrl-C";
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    o.exited = WIFEXITED(raw);
    o.status = o.exited ? WEXITSTATUS(raw) : -1;
    o.err = slurp(err_file);
    return o;
  }

  fs::path dir_;
};

// A sweep of a few million ops per point: stopped in its first point.
TEST_F(InterruptCli, SweepStopsAndWritesNoCsv) {
  const fs::path csv = dir_ / "sweep.csv";
  const Outcome o =
      interrupt({"sweep", std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/gpt3-175b-1024.json",
                 "--set", "model.layers=512", "--set", "training.global_batch=8192", "-K",
                 "256,512", "-M", "4096,8192", "--partition", "uniform", "--csv", csv.string()},
                std::chrono::milliseconds(300));
  EXPECT_TRUE(o.exited) << "ended by a signal, not by itself";
  EXPECT_EQ(o.status, 130);
  EXPECT_EQ(o.err, "pipescope: interrupted\n");
  EXPECT_FALSE(fs::exists(csv));
  EXPECT_FALSE(fs::exists(dir_ / "sweep.csv.tmp"));
}

// A training run on the executor: every worker thread stops after its op.
TEST_F(InterruptCli, RunStopsEveryWorkerAndWritesNoTrace) {
  const fs::path plan = dir_ / "plan.json";
  const fs::path trace = dir_ / "trace.json";
  const CliResult planned = run("plan " + std::string(PIPESCOPE_SOURCE_DIR) +
                                "/scenarios/cpu-small.json -o " + plan.string());
  ASSERT_EQ(planned.status, 0) << planned.err;
  const Outcome o = interrupt(
      {"run", plan.string(), "--backend", "cpu", "--steps", "100000", "--trace", trace.string()},
      std::chrono::milliseconds(500));
  EXPECT_TRUE(o.exited) << "ended by a signal, not by itself";
  EXPECT_EQ(o.status, 130);
  EXPECT_EQ(o.err, "pipescope: interrupted\n");
  EXPECT_FALSE(fs::exists(trace));
  EXPECT_FALSE(fs::exists(dir_ / "trace.json.tmp"));
}

}  // namespace
}  // namespace pipescope::testing
