#pragma once
// The `simulate --json` object (DESIGN.md, "Contracts"), exactly those keys.

#include <nlohmann/json_fwd.hpp>

#include "sim/simulator.h"

namespace pipescope {

nlohmann::json to_json(const SimResult& r);

}  // namespace pipescope
