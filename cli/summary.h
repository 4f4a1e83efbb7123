#pragma once
// The human-readable report of one simulated step.

#include <ostream>

#include "sim/scenario.h"
#include "sim/simulator.h"

namespace pipescope::cli {

void print_summary(std::ostream& out, const Scenario& scenario, const SimResult& result,
                   PartitionMethod partition);

}  // namespace pipescope::cli
