#include "sim/scenario/scenario_override.h"

#include <charconv>
#include <cstddef>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/base/json_reader.h"
#include "sim/scenario/scenario_io.h"

namespace pipescope {

using json_io::find_json_problem;
using json_io::JsonProblem;
using nlohmann::json;

namespace {

std::optional<std::size_t> parse_index(const std::string& segment) {
  std::size_t value = 0;
  const char* end = segment.data() + segment.size();
  const auto [ptr, ec] = std::from_chars(segment.data(), end, value);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

// "model.layers.2.fwd_flops", or the form errors print, "model.layers[2].fwd_flops".
std::vector<std::string> split_path(const std::string& bracketed) {
  std::string path;
  for (const char c : bracketed) {
    if (c == '[') {
      path += '.';
    } else if (c != ']') {
      path += c;
    }
  }
  std::vector<std::string> segments;
  std::size_t start = 0;
  for (;;) {
    const std::size_t dot = path.find('.', start);
    segments.push_back(path.substr(start, dot - start));
    if (dot == std::string::npos) return segments;
    start = dot + 1;
  }
}

}  // namespace

void apply_override(json& doc, const std::string& assignment, const std::string& file) {
  const std::size_t eq = assignment.find('=');
  if (eq == std::string::npos) {
    throw ScenarioError::in_override(file, "", assignment, "expected PATH=VALUE");
  }
  const std::string path = assignment.substr(0, eq);
  const auto fail = [&](const std::string& message) {
    return ScenarioError::in_override(file, path, assignment, message);
  };
  if (path.empty()) throw fail("the path before '=' is empty");
  // Not JSON (a bare word such as gpipe) means a string, so quotes are rarely needed;
  // JSON is held to the rules of a file's JSON (no repeated key, bounded nesting).
  const std::string text = assignment.substr(eq + 1);
  const std::optional<JsonProblem> problem = find_json_problem(text);
  if (problem && problem->kind != JsonProblem::Kind::kMalformed) {
    throw fail("in the value at '" + problem->path + "': " + problem->message);
  }
  json value = problem ? json(text) : json::parse(text);

  const std::vector<std::string> segments = split_path(path);
  json* node = &doc;
  std::string walked;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const std::string& segment = segments[i];
    if (segment.empty()) throw fail("the path has an empty segment");
    std::string here = walked;
    here.append(walked.empty() ? "" : ".").append(segment);
    const bool last = i + 1 == segments.size();
    if (node->is_object()) {
      if (last) {
        (*node)[segment] = std::move(value);
        return;
      }
      const auto it = node->find(segment);
      if (it == node->end()) throw fail("'" + here + "' does not exist");
      node = &*it;
      // A framework named by its profile alone is that profile with no field
      // changed, so that a field of it can be set.
      if (here == "training.framework" && node->is_string()) {
        *node = json{{"profile", node->get<std::string>()}};
      }
    } else if (node->is_array()) {
      const std::optional<std::size_t> index = parse_index(segment);
      if (!index || *index >= node->size()) throw fail("'" + here + "' does not exist");
      node = &(*node)[*index];
      if (last) {
        *node = std::move(value);
        return;
      }
    } else {
      throw fail("'" + walked + "' is not an object or an array");
    }
    walked = here;
  }
}

}  // namespace pipescope
