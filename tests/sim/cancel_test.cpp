// A stop request (Ctrl-C) ends parallel jobs, the engine and file writes with
// Cancelled, and leaves no file behind.

#include <gtest/gtest.h>

#include <unistd.h>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>

#include "sim/base/cancel.h"
#include "sim/base/file_io.h"
#include "sim/base/parallel.h"
#include "sim/engine/simulator.h"
#include "sim_fixtures.h"

namespace pipescope {
namespace {

struct CancelGuard {
  CancelGuard() { reset_cancel(); }
  ~CancelGuard() { reset_cancel(); }
};

TEST(Cancel, FlagIsSetAndCleared) {
  const CancelGuard guard;
  EXPECT_FALSE(cancel_requested());
  EXPECT_NO_THROW(throw_if_cancelled());
  request_cancel();
  EXPECT_TRUE(cancel_requested());
  EXPECT_THROW(throw_if_cancelled(), Cancelled);
  reset_cancel();
  EXPECT_FALSE(cancel_requested());
}

// One thread: the job that asks to stop is the last one to run.
TEST(Cancel, ParallelForStopsAfterTheCurrentJob) {
  const CancelGuard guard;
  std::atomic<int> ran{0};
  EXPECT_THROW(parallel_for(1000, 1,
                            [&](std::size_t i) {
                              ++ran;
                              if (i == 3) request_cancel();
                            }),
               Cancelled);
  EXPECT_EQ(ran.load(), 4);
}

TEST(Cancel, ParallelForOnSeveralThreadsThrowsCancelled) {
  const CancelGuard guard;
  std::atomic<int> ran{0};
  EXPECT_THROW(parallel_for(100000, 2,
                            [&](std::size_t i) {
                              ++ran;
                              if (i == 3) request_cancel();
                            }),
               Cancelled);
  EXPECT_LT(ran.load(), 100000);
}

// A schedule of far more than the engine's 65,536 events between checks.
TEST(Cancel, EngineStopsALongSimulation) {
  const CancelGuard guard;
  const Scenario sc = testing::uniform_scenario(16, 16, 1000.0, 4096, 4096, false);
  SimConfig config;
  config.record_timeline = false;
  config.partition = PartitionMethod::kUniform;
  const SimResult full = simulate(sc, config);  // runs when nothing asks to stop
  EXPECT_GT(full.compute_ops, 100000);
  request_cancel();
  EXPECT_THROW(simulate(sc, config), Cancelled);
}

TEST(Cancel, AtomicWriteLeavesTheOldFileAndNoTemporary) {
  const CancelGuard guard;
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("pipescope_cancel_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path target = dir / "plan.json";
  write_file_atomically(target, std::string("old\n"));
  request_cancel();
  EXPECT_THROW(write_file_atomically(target, std::string("new\n")), Cancelled);
  std::ifstream in(target);
  std::string text;
  std::getline(in, text);
  EXPECT_EQ(text, "old");
  EXPECT_FALSE(fs::exists(dir / "plan.json.tmp"));
  EXPECT_THROW(write_file_atomically(dir / "fresh.json", std::string("x")), Cancelled);
  EXPECT_FALSE(fs::exists(dir / "fresh.json"));
  EXPECT_FALSE(fs::exists(dir / "fresh.json.tmp"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pipescope
