#pragma once
// The human-readable report of one simulated step.

#include <ostream>
#include <string_view>

#include "sim/scenario.h"
#include "sim/simulator.h"

namespace pipescope::cli {

void print_summary(std::ostream& out, const Scenario& scenario, const SimResult& result,
                   std::string_view partition, int replicas = 1);

}  // namespace pipescope::cli
