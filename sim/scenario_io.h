#pragma once
// Reading scenario JSON (docs/file-formats.md, "Scenarios"). Every problem becomes a
// ScenarioError that names the file and the JSON path of the offending field.

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "sim/scenario.h"

namespace pipescope {

class ScenarioError : public std::runtime_error {
 public:
  // what() reads "FILE: PATH: MESSAGE" (or "FILE: MESSAGE" without a path).
  ScenarioError(std::string file, std::string json_path, const std::string& message);
  // A bad --set override: what() reads "FILE: --set ASSIGNMENT: MESSAGE", so the user
  // sees the option as typed, while json_path() is the overridden PATH.
  static ScenarioError in_override(std::string file, std::string json_path,
                                   const std::string& assignment, const std::string& message);
  // A command-line flag that stands for the field at `json_path` (-M for
  // training.micro_batches): what() reads "FILE: FLAG: MESSAGE".
  static ScenarioError in_flag(std::string file, std::string json_path, const std::string& flag,
                               const std::string& message);
  const std::string& file() const { return file_; }
  const std::string& json_path() const { return json_path_; }
  // What is wrong, without the file and the path.
  const std::string& message() const { return message_; }

 private:
  struct Verbatim {};
  ScenarioError(Verbatim, const std::string& what, std::string file, std::string json_path,
                std::string message);

  std::string file_;
  std::string json_path_;
  std::string message_;
};

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
