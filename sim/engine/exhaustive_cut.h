#pragma once
// The exact search of the device partitioner: every cut of a problem, depth
// first, pruned. partition_devices (sim/engine/device_partition.cpp) runs it
// after its local search, whose cut it proves optimal or beats.

#include <optional>
#include <vector>

#include "costmodels/units.h"
#include "sim/engine/layer_count_bound.h"
#include "sim/engine/partition.h"

namespace pipescope {

// What the search over every cut ends with.
struct ExhaustiveCut {
  bool exact = false;              // it finished: `stages` is an optimal cut
  std::vector<StageRange> stages;  // the best cut found, or the incumbent when none beats it
  SimTime busiest = 0;             // the busiest device's time under `stages`
};

// Every cut of p on `devices`, depth first, pruned as partition_devices
// describes (sim/engine/device_partition.h), for one whose busiest device is
// below `incumbent_time` and whose every device fits `capacity` (none: no
// limit); `incumbent` is the best cut known so far. Exact unless it would visit
// more than `max_nodes` partial cuts: it then gives up, and the best cut it
// met stands.
ExhaustiveCut exhaustive_cut(const PartitionProblem& p, const StagePrices& prices,
                             const LayerCountBound& count, int devices,
                             std::optional<Bytes> capacity, std::vector<StageRange> incumbent,
                             SimTime incumbent_time, long max_nodes);

}  // namespace pipescope
