#pragma once
// The `simulate --json` object, exactly the keys docs/commands.md lists under
// "`pipescope simulate`" (`--json`).

#include <nlohmann/json_fwd.hpp>

#include "sim/engine/simulator.h"

namespace pipescope {

nlohmann::json to_json(const SimResult& r);

}  // namespace pipescope
