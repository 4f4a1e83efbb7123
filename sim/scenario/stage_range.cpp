#include "sim/scenario/stage_range.h"

#include <cstddef>

#include "costmodels/check.h"

namespace pipescope {

std::vector<StageRange> ranges_from_sizes(const std::vector<int>& sizes) {
  std::vector<StageRange> out;
  out.reserve(sizes.size());
  int first = 0;
  for (const int count : sizes) {
    PS_CHECK(count >= 1, "every stage holds at least one layer");
    out.push_back(StageRange{first, first + count - 1});
    first += count;
  }
  return out;
}

std::vector<int> sizes_of(const std::vector<StageRange>& ranges) {
  std::vector<int> out;
  out.reserve(ranges.size());
  for (const StageRange& r : ranges) out.push_back(r.layer_count());
  return out;
}

std::vector<int> boundaries_of(const std::vector<StageRange>& ranges) {
  std::vector<int> out{0};
  for (const StageRange& r : ranges) out.push_back(r.last_layer + 1);
  return out;
}

std::vector<StageRange> partition_uniform(int layers, int stages) {
  PS_CHECK(stages >= 1 && stages <= layers, "need 1 <= stages <= layers");
  const int base = layers / stages;
  const int extra = layers % stages;
  std::vector<int> sizes;
  sizes.reserve(static_cast<std::size_t>(stages));
  for (int s = 0; s < stages; ++s) sizes.push_back(base + (s < extra ? 1 : 0));
  return ranges_from_sizes(sizes);
}

}  // namespace pipescope
