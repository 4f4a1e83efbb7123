#pragma once
// Where a command's --json document goes: standard output, or, while a caller
// in this process captures it (the Python module), that caller's document.

#include <nlohmann/json.hpp>

namespace pipescope::cli {

// Prints `document` as the command's JSON output (two-space indented, one
// trailing newline), or hands it to the capture of this thread.
void print_json(const nlohmann::json& document);

// While alive, print_json on this thread stores its document here instead of
// printing it. Captures do not nest.
class JsonCapture {
 public:
  explicit JsonCapture(nlohmann::json& into);
  ~JsonCapture();
  JsonCapture(const JsonCapture&) = delete;
  JsonCapture& operator=(const JsonCapture&) = delete;
};

}  // namespace pipescope::cli
