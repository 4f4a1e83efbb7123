#pragma once
// Profile JSON: {"format": "pipescope-profile", "version": 1, ...}, times in
// seconds. Reading is as strict as for scenarios and plans: every key required,
// unknown keys rejected, errors naming the file and the JSON path. A profile
// applied to a scenario replaces the roofline with its measurements.

#include <filesystem>
#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "costmodels/profile.h"
#include "sim/scenario/scenario.h"

namespace pipescope {

nlohmann::json profile_to_json(const Profile& profile);
// The profile's `expert_load`, `alltoall_group`, `gradient_sum` and
// `group_slowdown` objects, as
// profile_to_json writes them (compare's report carries the ones its
// prediction took).
nlohmann::json expert_load_json(const ExpertLoadFigures& f);
nlohmann::json alltoall_group_json(const GroupAllToAllFigures& a);
nlohmann::json gradient_sum_json(const GradientSumFigures& g);
nlohmann::json group_slowdown_json(const GroupSlowdownFigures& g);
// Throws ScenarioError (file + JSON path) for anything malformed or unknown.
Profile profile_from_json(const nlohmann::json& doc, const std::string& file);

// Written to a temporary file and renamed into place.
void write_profile_file(const std::filesystem::path& path, const Profile& profile);
Profile read_profile_file(const std::filesystem::path& path);

// Makes `scenario` use the profile: its layer times and optimizer step, its
// transport as every link's bandwidth and latency, its core count as the cores
// the devices share (which only matters when there are more devices), its
// slowdown of cores computing at once, and for a CPU profile its
// mfu_peak_flop_s as the devices' peak (what MFU is measured against).
// Throws ScenarioError naming `profile_file` when a layer of the scenario's model
// was not measured.
void apply_profile(Scenario& scenario, std::shared_ptr<const Profile> profile,
                   const std::string& profile_file);

}  // namespace pipescope
