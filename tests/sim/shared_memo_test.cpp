// What the planner remembers between candidates: the memo itself, a
// schedule's holds and the least-memory cut, each the same as computed afresh.

#include "costmodels/shared_memo.h"

#include <gtest/gtest.h>

#include <string>

#include "sim/engine/custom_schedule.h"
#include "sim/engine/partition.h"
#include "sim/engine/schedule.h"
#include "sim/engine/schedule_holds.h"

namespace pipescope {
namespace {

TEST(SharedMemo, MakesEachValueOnceUntilCleared) {
  SharedMemo<int, std::string> memo(8);
  int made = 0;
  const auto make = [&](int k) {
    return [&made, k] {
      ++made;
      return std::to_string(k * k);
    };
  };
  EXPECT_EQ(memo.get(3, make(3)), "9");
  EXPECT_EQ(memo.get(3, make(3)), "9");
  EXPECT_EQ(memo.get(4, make(4)), "16");
  EXPECT_EQ(made, 2);
  clear_shared_memos();
  EXPECT_EQ(memo.get(3, make(3)), "9");
  EXPECT_EQ(made, 3);
}

TEST(SharedMemo, StartsAgainPastItsCapacity) {
  SharedMemo<int, int> memo(2);
  int made = 0;
  const auto get = [&](int k) {
    return memo.get(k, [&] {
      ++made;
      return -k;
    });
  };
  EXPECT_EQ(get(1), -1);
  EXPECT_EQ(get(2), -2);
  EXPECT_EQ(get(3), -3);  // full: forgets 1 and 2
  EXPECT_EQ(made, 3);
  EXPECT_EQ(get(3), -3);
  EXPECT_EQ(made, 3);
  EXPECT_EQ(get(1), -1);
  EXPECT_EQ(made, 4);
}

// Every built-in kind on shapes it takes, every remat mode: what the holds
// remember is what the order, built afresh, holds.
TEST(ScheduleHolds, AreTheOrdersOwnCounts) {
  const ScheduleKind kinds[] = {ScheduleKind::kGpipe,         ScheduleKind::k1F1B,
                                ScheduleKind::kZbH1,          ScheduleKind::kInterleaved1F1B,
                                ScheduleKind::kLoopedBfs,     ScheduleKind::kZbV,
                                ScheduleKind::kInterleavedZb, ScheduleKind::kDualPipeV};
  int checked = 0;
  for (const ScheduleKind kind : kinds) {
    for (const int K : {2, 4}) {
      for (const int M : {4, 8, 16}) {
        for (const int v : {1, 2, 4}) {
          if (!schedule_shape_problem(kind, K, M, v).empty()) continue;
          for (const Remat remat : kScheduleRemats) {
            for (int twice = 0; twice < 2; ++twice) {  // made, then remembered
              const ScheduleHolds h = schedule_holds(kind, K, M, remat, v);
              EXPECT_EQ(h.most, most_stashes_held(build_schedule(kind, K, M, Remat::kNever, v)));
              const bool rebuilt_until_w =
                  splits_backward(kind) && (remat == Remat::kAlways || remat == Remat::kExceptLast);
              if (v == 1 && !rebuilt_until_w) {
                EXPECT_TRUE(h.at_peak.empty());
              } else {
                EXPECT_EQ(h.at_peak, held_at_peak(build_schedule(kind, K, M, remat, v)));
              }
            }
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 100);
}

PartitionProblem problem(Bytes stash, SimTime time) {
  PartitionProblem p;
  for (int l = 0; l < 9; ++l) {
    p.layers.push_back({time * (1 + l % 3), 2 * time, time, 100 + 37 * l, stash * (1 + l % 2)});
  }
  p.cut_bytes.assign(p.layers.size() + 1, 10);
  p.stages = 3;
  p.micro_batches = 4;
  p.remat = Remat::kNever;
  p.bytes_per_param = 2.0;
  return p;
}

// The cut is remembered by what memory reads: problems alike but for their
// times share one; another stash gets its own, the one computed afresh.
TEST(MinPeakMemoryCut, IsRememberedByTheMemoryTermsAlone) {
  clear_shared_memos();
  const std::vector<StageRange> light = min_peak_memory_cut(problem(10, 100));
  EXPECT_EQ(min_peak_memory_cut(problem(10, 900)), light);
  const std::vector<StageRange> heavy = min_peak_memory_cut(problem(4000, 100));
  clear_shared_memos();
  EXPECT_EQ(min_peak_memory_cut(problem(4000, 100)), heavy);
  EXPECT_EQ(min_peak_memory_cut(problem(10, 100)), light);
  EXPECT_NE(heavy, light);  // the stash moves the cut: a memo keyed on less would fail
}

TEST(OptimalCut, IsPartitionOptimalsCut) {
  PartitionProblem p = problem(10, 100);
  EXPECT_EQ(optimal_cut(p), partition_optimal(p).stages);
  p.memory_capacity = 1;  // nothing fits
  EXPECT_TRUE(optimal_cut(p).empty());
  EXPECT_TRUE(partition_optimal(p).stages.empty());
}

}  // namespace
}  // namespace pipescope
