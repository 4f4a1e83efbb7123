#pragma once
// The memory view's data, as plain code tested without a display: each device's
// peak against its capacity, what makes up the peak (weights, gradients,
// optimizer state, activations), and by how much a device that does not fit is
// over.

#include <string>
#include <vector>

#include "costmodels/units.h"
#include "sim/engine/metrics.h"
#include "sim/engine/simulator.h"

namespace pipescope::gui {

struct MemoryBar {
  int device = 0;
  Bytes peak = 0;
  Bytes capacity = 0;
  bool fits = true;
  Bytes over_by = 0;  // peak - capacity when it does not fit, else 0
  std::string label;  // "9.42 GiB of 80.0 GiB", or "19.3 GiB of 16.0 GiB: 3.3 GiB over"
  // The peak's parts, adding up to it (memory_splits); all zero from Metrics alone.
  MemorySplit split;
};

std::vector<MemoryBar> memory_bars(const Metrics& metrics);
// The same with each device's split of its peak.
std::vector<MemoryBar> memory_bars(const SimResult& result);

// "weights 672 MiB, gradients 672 MiB, optimizer 3.94 GiB, activations 4.17 GiB",
// as the summary of `pipescope simulate` says it.
std::string split_text(const MemorySplit& split);

}  // namespace pipescope::gui
