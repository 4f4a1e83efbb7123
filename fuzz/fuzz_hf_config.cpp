// Hugging Face config.json, read as `--hf-config` reads it (parse_json,
// parse_hf_config), then turned into a scenario's model (transformer_model_json,
// parse_scenario, parse_scenario_with_hf_model) and, when small, simulated.
//
// Input: the config document, optionally followed by a line "--seq-len N".

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz/fuzz_support.h"
#include "sim/base/json_reader.h"
#include "sim/scenario/hf_config.h"
#include "sim/scenario/model_json.h"
#include "sim/scenario/scenario_io.h"

using namespace pipescope;

namespace {

constexpr const char* kScenario = R"({
  "model": { "family": "mlp", "layers": 2, "d_model": 8 },
  "cluster": { "preset": "a100-80g", "devices": 4 },
  "training": { "global_batch": 8, "micro_batches": 4, "optimizer": "adam", "remat": true }
})";

// The CLI's --seq-len is a positive int64; anything that does not parse as
// one here is left out.
std::optional<std::int64_t> seq_len_of(const std::vector<std::string>& options) {
  if (options.empty()) return std::nullopt;
  const std::string& s = options.back();
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return value;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > fuzz::kMaxInput) return -1;
  std::string text(reinterpret_cast<const char*>(data), size);
  const std::optional<std::int64_t> seq_len =
      seq_len_of(fuzz::take_trailing_options(text, "--seq-len ", 1));
  TransformerParams params;
  if (fuzz::refuses([&] {
        params = parse_hf_config(json_io::parse_json(text, "config.json"), "config.json", seq_len);
      })) {
    return 0;
  }
  // A config that reads gives the scenario a model whose every field its reader
  // accepts: a problem with a value derived from the config is named in the
  // config at its key, never at a scenario field the user did not write. Only
  // the model as a whole may fail, with the scenario's batch and optimizer, and
  // that error names the config too.
  nlohmann::json doc = json_io::parse_json(kScenario, fuzz::kLabel);
  doc["model"] = transformer_model_json(params, "fuzz-model");
  Scenario scenario;
  try {
    scenario = parse_scenario(doc, fuzz::kLabel);
  } catch (const ScenarioError& e) {
    if (e.json_path() != "model") {
      fuzz::property_failed("a config that reads gives a model whose fields all read", e.what());
    }
    try {
      (void)parse_scenario_with_hf_model(doc, fuzz::kLabel, "config.json", {});
    } catch (const ScenarioError& named) {
      if (named.file() != "config.json") {
        fuzz::property_failed("errors about a model from a config name the config", named.what());
      }
    }
    return 0;
  }
  fuzz::simulate_if_small(scenario);
  return 0;
}
