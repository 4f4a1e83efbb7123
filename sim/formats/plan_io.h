#pragma once
// Plan JSON: {"format": "pipescope-plan", "version": 1, ...}. Reading checks the
// format, version and every field; errors name the file and the JSON path.

#include <filesystem>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "sim/plan/plan.h"
#include "sim/scenario/scenario.h"

namespace pipescope {

nlohmann::json plan_to_json(const Plan& plan);
// Throws ScenarioError (file + JSON path) for anything malformed, unknown or
// from another format or version.
Plan plan_from_json(const nlohmann::json& doc, const std::string& file);

// Written to a temporary file and renamed into place.
void write_plan_file(const std::filesystem::path& path, const Plan& plan);
Plan read_plan_file(const std::filesystem::path& path);

// Throws ScenarioError naming the plan file when the plan was made for another
// model (its layer hash differs; the model's name is only a label), needs more
// devices than the scenario's cluster has, or was made for another global batch.
void check_plan_matches(const Plan& plan, const Scenario& scenario, const std::string& plan_file);

}  // namespace pipescope
