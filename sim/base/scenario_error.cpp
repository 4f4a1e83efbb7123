#include "sim/base/scenario_error.h"

#include <utility>

namespace pipescope {
namespace {

std::string compose(const std::string& file, const std::string& path, const std::string& message) {
  std::string out;
  if (!file.empty()) out += file + ": ";
  if (!path.empty()) out += path + ": ";
  return out + message;
}

}  // namespace

ScenarioError::ScenarioError(std::string file, std::string json_path, const std::string& message)
    : std::runtime_error(compose(file, json_path, message)),
      file_(std::move(file)),
      json_path_(std::move(json_path)),
      message_(message) {}

ScenarioError::ScenarioError(Verbatim, const std::string& what, std::string file,
                             std::string json_path, std::string message)
    : std::runtime_error(what),
      file_(std::move(file)),
      json_path_(std::move(json_path)),
      message_(std::move(message)) {}

ScenarioError ScenarioError::in_override(std::string file, std::string json_path,
                                         const std::string& assignment,
                                         const std::string& message) {
  return in_flag(std::move(file), std::move(json_path), "--set " + assignment, message);
}

ScenarioError ScenarioError::in_flag(std::string file, std::string json_path,
                                     const std::string& flag, const std::string& message) {
  const std::string what = compose(file, flag, message);
  return ScenarioError(Verbatim{}, what, std::move(file), std::move(json_path), message);
}

}  // namespace pipescope
