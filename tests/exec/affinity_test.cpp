// Pinning the executor's threads: the helpers do what they say, and the runtime
// gives each device's thread a core of its own when there are enough, and
// leaves them to the OS when there are not.

#include "exec/affinity.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "../tiny_models.h"
#include "exec/data.h"
#include "exec/models.h"
#include "exec/runtime.h"
#include "exec/tensor_shard.h"
#include "sim/engine/schedule.h"
#include "sim/scenario/stage_range.h"

namespace pipescope::exec {
namespace {

TEST(Affinity, AllowedCpusAreAscendingAndIncludeTheOneWeRunOn) {
  const std::vector<int> cpus = allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  EXPECT_TRUE(std::is_sorted(cpus.begin(), cpus.end()));
  EXPECT_EQ(std::adjacent_find(cpus.begin(), cpus.end()), cpus.end());
  EXPECT_NE(std::find(cpus.begin(), cpus.end(), current_cpu()), cpus.end());
}

TEST(Affinity, APinnedThreadRunsThereAndMayRunNowhereElse) {
  for (const int cpu : allowed_cpus()) {
    std::vector<int> after;
    int ran_on = -2;
    bool pinned = false;
    std::thread t([&] {
      pinned = pin_current_thread(cpu);
      ran_on = current_cpu();
      after = allowed_cpus();
    });
    t.join();
    EXPECT_TRUE(pinned) << cpu;
    EXPECT_EQ(ran_on, cpu);
    EXPECT_EQ(after, std::vector<int>{cpu});
  }
}

TEST(Affinity, ImpossibleCpusAreRefusedAndChangeNothing) {
  std::vector<int> after;
  bool pinned = true;
  std::thread t([&] {
    pinned = pin_current_thread(-1) || pin_current_thread(1 << 20);
    after = allowed_cpus();
  });
  t.join();
  EXPECT_FALSE(pinned);
  EXPECT_EQ(after, allowed_cpus());
}

TEST(Affinity, OneCoreEachOrNone) {
  const std::vector<int> cpus = allowed_cpus();
  const int n = static_cast<int>(cpus.size());
  EXPECT_EQ(cpus_for_threads(n), cpus);
  EXPECT_EQ(cpus_for_threads(1), std::vector<int>{cpus.front()});
  EXPECT_TRUE(cpus_for_threads(n + 1).empty());
  EXPECT_TRUE(cpus_for_threads(0).empty());
}

// Threads in groups (a stage's ranks) that outnumber the cores take the
// cores in turn, no two of a group on one core; a group of one, or larger
// than the cores, is left to the OS.
TEST(Affinity, AGroupsThreadsHaveCoresOfTheirOwnWhenTheyOutnumberTheCores) {
  const std::vector<int> cpus = allowed_cpus();
  const int n = static_cast<int>(cpus.size());
  EXPECT_EQ(cpus_for_groups(n, 2), cpus);  // they fit: one core each
  if (n < 2) GTEST_SKIP() << "one CPU allowed: no group of two can have a core each";
  const std::vector<int> shared = cpus_for_groups(2 * n, 2);
  ASSERT_EQ(shared.size(), static_cast<std::size_t>(2 * n));
  for (int i = 0; i < 2 * n; ++i) {
    EXPECT_EQ(shared[static_cast<std::size_t>(i)], cpus[static_cast<std::size_t>(i % n)]) << i;
  }
  for (int i = 0; i + 1 < 2 * n; i += 2) EXPECT_NE(shared[i], shared[i + 1]) << i;
  EXPECT_TRUE(cpus_for_groups(n + 1, 1).empty());
  EXPECT_TRUE(cpus_for_groups(2 * n + 2, n + 1).empty());
  EXPECT_TRUE(cpus_for_groups(0, 2).empty());
}

// Processes that time-slice cores (an MPI group's, more of them than cores)
// go round the cores in turn, whichever CPUs those are.
TEST(Affinity, ProcessesThatShareCoresGoRoundThemInTurn) {
  const std::vector<int> cpus{4, 6, 9};
  EXPECT_EQ(spread_cpu(cpus, 0), 4);
  EXPECT_EQ(spread_cpu(cpus, 2), 9);
  EXPECT_EQ(spread_cpu(cpus, 3), 4);
  EXPECT_EQ(spread_cpu(cpus, 7), 6);
  EXPECT_EQ(spread_cpu({}, 0), -1);
  EXPECT_EQ(spread_cpu(cpus, -1), -1);
}

// A step's worker threads: a one-device plan run whole here puts its one
// thread on the first CPU; the one thread of one of its four rank processes
// (MPI) is left where mpirun put the process, as is one of a two-device
// plan's two device processes; two or more threads take their groups' CPUs.
TEST(Affinity, AStepPinsItsOneThreadOnlyWhereItRunsThePlanWhole) {
  const std::vector<int> cpus = allowed_cpus();
  if (cpus.empty()) GTEST_SKIP() << "the system does not say which CPUs this process may use";
  EXPECT_EQ(step_worker_cpus(1, 1, 1, 1, 1), std::vector<int>{cpus.front()});
  EXPECT_TRUE(step_worker_cpus(1, 1, 1, 1, 4).empty());
  EXPECT_TRUE(step_worker_cpus(1, 1, 1, 2, 1).empty());
  EXPECT_EQ(step_worker_cpus(4, 4, 1, 1, 4), cpus_for_groups(4, 4));
  EXPECT_EQ(step_worker_cpus(2, 1, 2, 2, 1), cpus_for_groups(2, 1));
}

// The CPUs each device's thread may run on, as it saw them before every op.
std::map<int, std::vector<std::vector<int>>> cpus_seen(int K, bool pin) {
  std::mutex mu;
  std::map<int, std::vector<std::vector<int>>> seen;
  RuntimeOptions options;
  options.pin_threads = pin;
  options.before_op = [&](int device, const Op&) {
    std::vector<int> cpus = allowed_cpus();
    std::lock_guard lock(mu);
    seen[device].push_back(std::move(cpus));
  };
  ModelSpec spec = testing::tiny_transformer(4);
  LayerList model = build_layers(spec, 3);
  std::vector<LayerList> stages(static_cast<std::size_t>(K));
  const std::size_t per =
      (model.size() + static_cast<std::size_t>(K) - 1) / static_cast<std::size_t>(K);
  for (std::size_t l = 0; l < model.size(); ++l) {
    stages[std::min(l / per, static_cast<std::size_t>(K - 1))].push_back(std::move(model[l]));
  }
  PipelineRuntime rt(std::move(stages), build_gpipe(K, 2, Remat::kNever), options);
  rt.step(synthetic_batch(task_shape(spec), 4, 2, 0, 5));
  return seen;
}

TEST(RuntimeAffinity, EachDeviceThreadHasACoreOfItsOwnWhenThereAreEnough) {
  const std::vector<int> cpus = allowed_cpus();
  if (cpus.size() < 2) GTEST_SKIP() << "one CPU allowed: two devices cannot have a core each";
  const auto seen = cpus_seen(2, true);
  ASSERT_EQ(seen.size(), 2u);
  for (const auto& [device, each_op] : seen) {
    for (const std::vector<int>& c : each_op) {
      EXPECT_EQ(c, std::vector<int>{cpus[static_cast<std::size_t>(device)]}) << device;
    }
  }
}

// A one-device plan run whole in this process: its thread on the first CPU,
// the one the profiler measures a one-device plan's ops on, not wherever the
// OS puts it (a core may run slower than another for seconds).
TEST(RuntimeAffinity, AOneDevicePlansThreadRunsOnTheCoreItsOpsWereProfiledOn) {
  const std::vector<int> cpus = allowed_cpus();
  if (cpus.empty()) GTEST_SKIP() << "the system does not say which CPUs the process may use";
  const auto seen = cpus_seen(1, true);
  ASSERT_EQ(seen.size(), 1u);
  for (const std::vector<int>& c : seen.at(0)) EXPECT_EQ(c, std::vector<int>{cpus[0]});
  const auto unpinned = cpus_seen(1, false);
  for (const std::vector<int>& c : unpinned.at(0)) EXPECT_EQ(c, cpus);
}

// A stage of two tensor ranks on each of as many devices as there are
// cores: twice the threads the cores hold, a device's two ranks each pinned
// to a core of its own, device d's rank r to core 2d + r (mod the cores).
TEST(RuntimeAffinity, AStagesRanksComputeOnCoresOfTheirOwnWhenTheyShareTheCores) {
  const std::vector<int> cpus = allowed_cpus();
  const int n = static_cast<int>(cpus.size());
  if (n < 2) GTEST_SKIP() << "one CPU allowed: two ranks cannot have a core each";
  std::mutex mu;
  std::map<int, std::set<std::vector<int>>> seen;  // device -> CPUs its threads saw
  RuntimeOptions options;
  options.before_op = [&](int device, const Op&) {
    std::vector<int> c = allowed_cpus();
    std::lock_guard lock(mu);
    seen[device].insert(std::move(c));
  };
  const ModelSpec spec = testing::tiny_transformer(4);
  std::vector<std::vector<LayerList>> ranks;
  for (LayerList& rank : build_tensor_ranks(*spec.transformer, 3, 2)) {
    const int L = static_cast<int>(rank.size());
    ranks.push_back(cut_into_stages(std::move(rank), partition_uniform(L, n)));
  }
  PipelineRuntime rt(std::move(ranks), build_gpipe(n, 2, Remat::kNever), options);
  rt.step(synthetic_batch(task_shape(spec), 4, 2, 0, 5));
  ASSERT_EQ(seen.size(), static_cast<std::size_t>(n));
  for (const auto& [device, each] : seen) {
    const std::set<std::vector<int>> want{{cpus[static_cast<std::size_t>((2 * device) % n)]},
                                          {cpus[static_cast<std::size_t>((2 * device + 1) % n)]}};
    EXPECT_EQ(each, want) << device;
  }
}

TEST(RuntimeAffinity, MoreDevicesThanCoresOrPinningOffAreLeftToTheOs) {
  const std::vector<int> cpus = allowed_cpus();
  for (const auto& [K, pin] :
       {std::pair{static_cast<int>(cpus.size()) + 1, true}, std::pair{2, false}}) {
    const auto seen = cpus_seen(K, pin);
    ASSERT_EQ(seen.size(), static_cast<std::size_t>(K));
    for (const auto& [device, each_op] : seen) {
      for (const std::vector<int>& c : each_op) EXPECT_EQ(c, cpus) << K << " " << pin;
    }
  }
}

}  // namespace
}  // namespace pipescope::exec
