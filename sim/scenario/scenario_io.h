#pragma once
// Reading scenario JSON (docs/file-formats.md, "Scenarios"). Every problem becomes a
// ScenarioError that names the file and the JSON path of the offending field.

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "sim/base/scenario_error.h"
#include "sim/scenario/scenario.h"

namespace pipescope {

// Reads and validates a scenario file, applying `overrides` ("PATH=VALUE", the
// --set option) first. VALUE is parsed as JSON when it is valid JSON and taken
// as a string otherwise; PATH is dotted, with numbers indexing arrays
// ("model.layers.3.fwd_flops").
Scenario load_scenario(const std::filesystem::path& file,
                       const std::vector<std::string>& overrides = {});

// The document after overrides, before validation (for tools that vary a field and
// validate each variant, like capacity).
nlohmann::json load_scenario_json(const std::filesystem::path& file,
                                  const std::vector<std::string>& overrides = {});

// The same from text already read; `file` only labels errors.
Scenario parse_scenario_text(const std::string& text, const std::string& file,
                             const std::vector<std::string>& overrides = {});

// Validates a parsed document; `file` only labels errors.
Scenario parse_scenario(const nlohmann::json& doc, const std::string& file);

// A scenario's "model" object alone (as plan files carry it); `path` is where it
// sits in `file`, for errors; `framework` gives the fields the model leaves
// out (how attention, the layer norms and the loss run).
ModelSpec parse_model(const nlohmann::json& model, const std::string& file,
                      const std::string& path = "model",
                      const Framework& framework = *find_framework(kIdealFramework));

}  // namespace pipescope
