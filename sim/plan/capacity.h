#pragma once
// "How big a model can I train?" (the question of the GPipe paper's first
// table): the largest value of an integer scenario field, model.layers by
// default, for which some cut into K stages fits every device's memory.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "sim/scenario/scenario.h"

namespace pipescope {

struct CapacityRequest {
  int stages = 1;                    // K
  std::optional<int> micro_batches;  // default: the scenario's
  std::optional<Remat> remat;        // default: the scenario's
  // The field to grow; default model.layers (model.cells for amoebanet).
  std::optional<std::string> param;
  // Applied to the scenario and to every scenario probed (e.g. --cost-model:
  // apply_cost_model_argument with what was read once). Memory alone decides
  // what fits, and no cost model changes memory, so this cannot change the
  // answer; it is checked on every probe all the same. Its errors are errors,
  // not "does not fit": on a probed value they name the field and the value
  // (a profile that did not measure the layers of that model).
  std::function<void(Scenario&)> adjust;
};

struct CapacityResult {
  std::string param;
  std::int64_t max_value = 0;  // the largest value that fits; 0 when none does
  std::int64_t params = 0;     // the model's parameter count at max_value
  bool fits = false;           // some value fits at all
  std::int64_t probes = 0;     // values tried
  // The search stopped at kCapacityLayerLimit layers with the model still
  // fitting: max_value is a lower bound.
  bool limited = false;
  // Each device's memory, and the least peak any cut reaches at max_value and at
  // max_value + 1 (0 when that value was not probed or is not a valid model).
  std::int64_t memory_bytes = 0;
  std::int64_t peak_memory_bytes = 0;
  std::int64_t next_peak_memory_bytes = 0;
  std::int64_t next_params = 0;  // the parameter count at max_value + 1, with it
  // The capacity in finer steps than whole values: max_value plus the share of
  // the next value's extra memory that still fits, (memory - peak) / (next_peak -
  // peak). A table that reports whole layers floors this number, so comparing it
  // shows how far off a figure is when one layer is a large step (3 layers: 33 %).
  // Equal to max_value when the next value was not probed.
  double fractional_value = 0.0;
  // The parameter count at that capacity, interpolated the same way.
  double fractional_params = 0.0;
};

// Models beyond this many layers are not probed: partitioning them costs more
// than a capacity search should.
inline constexpr int kCapacityLayerLimit = 4096;

// `doc` is the scenario JSON with any --set overrides applied; `file` labels
// errors. The search doubles the value until it no longer fits, then bisects,
// so it assumes memory grows with the value (true of layers, widths and
// lengths). Values the scenario rejects (too large for 64-bit sizes, beyond a
// limit) count as not fitting. Throws ScenarioError when `param` is not an
// integer field of the scenario.
CapacityResult find_capacity(const nlohmann::json& doc, const std::string& file,
                             const CapacityRequest& request);

}  // namespace pipescope
