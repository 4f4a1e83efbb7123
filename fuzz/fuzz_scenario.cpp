// Scenario JSON with --set overrides, read as `pipescope simulate` reads it:
// parse_json, apply_override for each --set, parse_scenario (which checks the
// magnitudes), then, for a small scenario, the simulation itself.
//
// Input: the scenario document, optionally followed by lines "--set PATH=VALUE"
// (at most 16), which are applied in order.

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz/fuzz_support.h"
#include "sim/base/json_reader.h"
#include "sim/scenario/scenario_io.h"
#include "sim/scenario/scenario_override.h"

using namespace pipescope;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > fuzz::kMaxInput) return -1;
  std::string text(reinterpret_cast<const char*>(data), size);
  const std::vector<std::string> overrides = fuzz::take_trailing_options(text, "--set ");
  Scenario scenario;
  const bool refused = fuzz::refuses([&] {
    nlohmann::json doc = json_io::parse_json(text, fuzz::kLabel);
    for (const std::string& assignment : overrides) apply_override(doc, assignment, fuzz::kLabel);
    scenario = parse_scenario(doc, fuzz::kLabel);
  });
  if (refused) return 0;
  fuzz::simulate_if_small(scenario);
  return 0;
}
