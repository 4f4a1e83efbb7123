#pragma once
// Bounds on a scenario's magnitudes, so that every size the simulator forms fits
// in 64 bits and every time in SimTime. Checked when a scenario is loaded.

#include <string>

#include "sim/scenario/scenario.h"

namespace pipescope {

// Throws ScenarioError naming `file` and the field when a size or the longest
// possible step would overflow.
void check_magnitudes(const Scenario& s, const std::string& file);

}  // namespace pipescope
