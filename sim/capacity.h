#pragma once
// "How big a model can I train?" (the question of the GPipe paper's first
// table): the largest value of an integer scenario field, model.layers by
// default, for which some cut into K stages fits every device's memory.

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace pipescope {

struct CapacityRequest {
  int stages = 1;                    // K
  std::optional<int> micro_batches;  // default: the scenario's
  std::optional<bool> remat;         // default: the scenario's
  // The field to grow; default model.layers (model.cells for amoebanet).
  std::optional<std::string> param;
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
