#pragma once
// Reading the text of an export back in the tests: its lines, a Python
// assignment's value, a list of integers, Megatron-LM's flags, a CSV.

#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace pipescope::testing {

// The lines of `text`.
inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The rest of the first line that starts with `prefix`, or "(none)".
inline std::string after(const std::string& text, const std::string& prefix) {
  for (const std::string& line : lines_of(text)) {
    if (line.rfind(prefix, 0) == 0) return line.substr(prefix.size());
  }
  return "(none)";
}

// "[3, 2, 2]" -> {3, 2, 2}.
inline std::vector<int> ints_of(std::string list) {
  for (char& c : list) {
    if (c == '[' || c == ']' || c == ',') c = ' ';
  }
  std::istringstream in(list);
  std::vector<int> out;
  for (int v = 0; in >> v;) out.push_back(v);
  return out;
}

// Megatron flags as name -> value ("" for a flag without one).
inline std::map<std::string, std::string> flags_of(const std::string& text) {
  std::map<std::string, std::string> out;
  for (std::string line : lines_of(text)) {
    if (line.empty() || line[0] == '#') continue;
    if (line.size() >= 2 && line.substr(line.size() - 2) == " \\") line.resize(line.size() - 2);
    const std::size_t space = line.find(' ');
    out[line.substr(0, space)] = space == std::string::npos ? "" : line.substr(space + 1);
  }
  return out;
}

inline std::vector<std::vector<std::string>> csv_of(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  for (const std::string& line : lines_of(text)) {
    std::vector<std::string> cells;
    std::size_t start = 0;
    for (;;) {
      const std::size_t comma = line.find(',', start);
      cells.push_back(line.substr(start, comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    rows.push_back(cells);
  }
  return rows;
}

}  // namespace pipescope::testing
