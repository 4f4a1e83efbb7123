#pragma once
// The memory view's data, as plain code tested without a display: each device's
// peak against its capacity, and by how much a device that does not fit is over.

#include <string>
#include <vector>

#include "costmodels/units.h"
#include "sim/metrics.h"

namespace pipescope::gui {

struct MemoryBar {
  int device = 0;
  Bytes peak = 0;
  Bytes capacity = 0;
  bool fits = true;
  Bytes over_by = 0;  // peak - capacity when it does not fit, else 0
  std::string label;  // "9.42 GiB of 80.0 GiB", or "19.3 GiB of 16.0 GiB: 3.3 GiB over"
};

std::vector<MemoryBar> memory_bars(const Metrics& metrics);

}  // namespace pipescope::gui
