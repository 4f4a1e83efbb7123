#pragma once
// Cost-model files: the kernel-level model's fitted figures for one device,
// as `pipescope calibrate` writes them and `--cost-model FILE` applies them.
//
//   {"format": "pipescope-cost-model", "version": 1, "model": "kernels",
//    "device": "a100-80g",
//    "parameters": {"gemm_efficiency": 0.71, ...},
//    "fit": {"measured": "steps.csv", "rows": 6,
//            "rms_relative_error": 0.012, "max_relative_error": 0.021}}
//
// "parameters" holds every figure of calibration_parameters()
// (costmodels/kernel_table.h), each within that registry's range; "fit" says
// where the figures came from and may be left out of a file written by hand.
// Reading is as strict as for scenarios: unknown keys, wrong types and values
// out of range are ScenarioErrors naming the file, the field and the range.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "costmodels/kernel_table.h"
#include "sim/engine/partition.h"
#include "sim/scenario/scenario.h"

namespace pipescope {

inline constexpr const char* kCostModelFormat = "pipescope-cost-model";
inline constexpr int kCostModelVersion = 1;

// How well the figures reproduce the step times they were fitted to.
struct CostModelFit {
  std::string measured;  // the CSV's name
  std::int64_t rows = 0;
  double rms_relative_error = 0.0;  // sqrt(mean((simulated - measured) / measured)^2)
  double max_relative_error = 0.0;  // max |simulated - measured| / measured
  // How the fit cut every row into stages (calibrate --partition): the same
  // figures describe other runs best when simulated with the same cut.
  PartitionMethod partition = PartitionMethod::kOptimal;
};

struct CostModelFile {
  std::string device;  // the device name the figures belong to ("a100-80g")
  // One value per calibration_parameters() entry, in the registry's order.
  std::vector<std::pair<std::string, double>> parameters;
  std::optional<CostModelFit> fit;

  // The value of `name`, if the file holds it.
  std::optional<double> find(std::string_view name) const;
};

// The figures of `table` (every calibration parameter) for `device`.
CostModelFile cost_model_of(const KernelTable& table, const std::string& device);

nlohmann::json cost_model_to_json(const CostModelFile& file);
// Whether `doc` says it is a cost-model file (its "format"), so that one
// --cost-model option can take a profile or a cost-model file.
bool is_cost_model_document(const nlohmann::json& doc);
// Throws ScenarioError (file + JSON path + valid range) for anything malformed
// or unknown.
CostModelFile cost_model_from_json(const nlohmann::json& doc, const std::string& file);

// Written to a temporary file and renamed into place (sim/base/file_io.h).
void write_cost_model_file(const std::filesystem::path& path, const CostModelFile& file);
CostModelFile read_cost_model_file(const std::filesystem::path& path);

// Makes `scenario` use the kernel-level model with the file's figures. Throws
// ScenarioError naming `label` when the scenario's device is not the file's or
// has no kernel table.
void apply_cost_model(Scenario& scenario, const CostModelFile& file, const std::string& label);

// `--cost-model ARG` as read: a model chosen by name, a cost-model file or a
// profile. Read once and applied to any number of scenarios, for the commands
// that derive many scenarios from one document (capacity's probes, the GUI's
// cluster presets): the file may be a pipe that can be read only once.
struct CostModelArgument {
  std::string arg;                         // as given; errors name it
  std::optional<CostModelKind> kind;       // "analytic" or "kernels"
  std::optional<CostModelFile> file;       // a cost-model file
  std::shared_ptr<const Profile> profile;  // a profile
};

// Reads ARG: "analytic" or "kernels" chooses that model by name; any other ARG
// is a file, read once: a cost-model file (its "format" says so), anything else
// a profile (sim/formats/profile_io.h). Errors are ScenarioErrors naming ARG.
CostModelArgument read_cost_model_argument(const std::string& arg);

// What `--cost-model ARG` does to a scenario: the model chosen by name (kernels
// needs the device's kernel table: std::invalid_argument naming the device),
// a cost-model file applied with apply_cost_model, a profile with apply_profile
// (a ScenarioError naming ARG when it lacks one of the scenario's layers).
void apply_cost_model_argument(Scenario& scenario, const CostModelArgument& arg);
// The two above in one step.
void apply_cost_model_argument(Scenario& scenario, const std::string& arg);

}  // namespace pipescope
