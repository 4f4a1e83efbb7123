#include "sim/partition.h"

#include "costmodels/check.h"

namespace pipescope {

std::vector<StageRange> partition_uniform(int layers, int stages) {
  PS_CHECK(stages >= 1 && stages <= layers, "need 1 <= stages <= layers");
  std::vector<StageRange> out;
  out.reserve(static_cast<std::size_t>(stages));
  const int base = layers / stages;
  const int extra = layers % stages;
  int first = 0;
  for (int s = 0; s < stages; ++s) {
    const int count = base + (s < extra ? 1 : 0);
    out.push_back(StageRange{first, first + count - 1});
    first += count;
  }
  return out;
}

}  // namespace pipescope
