#pragma once
// A pipeline stage's layers: a contiguous range of the model's layers, and the
// ways a cut is written down (layers per stage, boundaries).

#include <vector>

namespace pipescope {

struct StageRange {
  int first_layer = 0;  // inclusive
  int last_layer = 0;   // inclusive

  int layer_count() const { return last_layer - first_layer + 1; }
  friend bool operator==(const StageRange&, const StageRange&) = default;
};

// Even split by layer count; the first (layers % stages) stages take one layer
// more. Requires 1 <= stages <= layers.
std::vector<StageRange> partition_uniform(int layers, int stages);

// The contiguous cut whose stage s holds sizes[s] layers, from layer 0 (a
// torchgpipe `balance`). Requires every size >= 1.
std::vector<StageRange> ranges_from_sizes(const std::vector<int>& sizes);
// Layers per stage: the inverse of ranges_from_sizes.
std::vector<int> sizes_of(const std::vector<StageRange>& ranges);
// The K + 1 layer indices around K contiguous stages (DeepSpeed's `parts`):
// stage s holds layers [b[s], b[s + 1]); {0} for no stages.
std::vector<int> boundaries_of(const std::vector<StageRange>& ranges);

}  // namespace pipescope
