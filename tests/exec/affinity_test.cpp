// Pinning the executor's threads: the helpers do what they say, and the runtime
// gives each device's thread a core of its own when there are enough, and
// leaves them to the OS when there are not.

#include "exec/affinity.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "../tiny_models.h"
#include "exec/data.h"
#include "exec/models.h"
#include "exec/runtime.h"
#include "sim/engine/schedule.h"

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
