#pragma once
// Contiguous cuts of a model's layers into pipeline stages.

#include <vector>

namespace pipescope {

struct StageRange {
  int first_layer = 0;  // inclusive
  int last_layer = 0;   // inclusive

  int layer_count() const { return last_layer - first_layer + 1; }
};

// Even split by layer count; the first (layers % stages) stages take one layer
// more. Requires 1 <= stages <= layers.
std::vector<StageRange> partition_uniform(int layers, int stages);

}  // namespace pipescope
