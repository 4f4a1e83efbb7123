#pragma once
// The one error of every input document: it names the file and the JSON path of
// the offending field (or the command-line option that stands for it).

#include <stdexcept>
#include <string>

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

}  // namespace pipescope
