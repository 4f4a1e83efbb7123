#pragma once
// The error of a layout a scenario allows but that cannot run.

#include <stdexcept>
#include <string>
#include <utility>

namespace pipescope {

// A choice that the scenario allows but that cannot run, e.g. more stages than
// devices. The message names the setting ("K", "M") and says why; when the bad
// value came from the scenario itself, scenario_field names its JSON path.
class ConfigError : public std::runtime_error {
 public:
  explicit ConfigError(const std::string& message, std::string scenario_field = "")
      : std::runtime_error(message), scenario_field_(std::move(scenario_field)) {}
  const std::string& scenario_field() const { return scenario_field_; }

 private:
  std::string scenario_field_;
};

}  // namespace pipescope
