#pragma once
// Brute force for the partitioner tests: every contiguous cut of a model.

#include <functional>
#include <vector>

#include "sim/engine/partition.h"

namespace pipescope::testing {

// Calls fn with every way to cut L layers into S non-empty contiguous stages.
inline void for_each_cut(int L, int S,
                         const std::function<void(const std::vector<StageRange>&)>& fn) {
  std::vector<StageRange> cut;
  std::function<void(int, int)> rec = [&](int first, int left) {
    if (left == 1) {
      cut.push_back({first, L - 1});
      fn(cut);
      cut.pop_back();
      return;
    }
    for (int last = first; last <= L - left; ++last) {
      cut.push_back({first, last});
      rec(last + 1, left - 1);
      cut.pop_back();
    }
  };
  rec(0, S);
}

}  // namespace pipescope::testing
