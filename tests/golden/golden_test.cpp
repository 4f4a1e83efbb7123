// Golden command tests: each tests/golden/NAME.tesh file holds a command line of
// pipescope, the standard output and standard error it must print and its exit
// status. The command runs from the source folder, so its paths are relative
// to it. PIPESCOPE_UPDATE_GOLDEN=1 rewrites each file's expected part from
// what the command printed instead (review the diff before committing).
//
// File format (lines):
//   # a comment: what the case shows
//   $ ARGS          the arguments, as a shell would take them
//   > TEXT          a line the command prints on standard output
//   2> TEXT         a line it prints on standard error
//   exit N          its exit status (0 when absent)

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli/cli_runner.h"

namespace pipescope::testing {
namespace {

namespace fs = std::filesystem;

const fs::path kCases = fs::path(PIPESCOPE_SOURCE_DIR) / "tests" / "golden";

struct Case {
  std::string name;
  fs::path file;
  std::vector<std::string> comments;
  std::string args;
  std::string out;
  std::string err;
  int status = 0;
};

// Every line of `text` with `prefix` before it.
std::string prefixed(const std::string& prefix, const std::string& text) {
  std::string lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines += prefix + line + "\n";
  return lines;
}

Case read_case(const fs::path& file) {
  Case c;
  c.file = file;
  c.name = file.stem().string();
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# ", 0) == 0 || line == "#") {
      c.comments.push_back(line);
    } else if (line.rfind("$ ", 0) == 0) {
      c.args = line.substr(2);
    } else if (line.rfind("> ", 0) == 0 || line == ">") {
      c.out += (line.size() > 2 ? line.substr(2) : "") + "\n";
    } else if (line.rfind("2> ", 0) == 0 || line == "2>") {
      c.err += (line.size() > 3 ? line.substr(3) : "") + "\n";
    } else if (line.rfind("exit ", 0) == 0) {
      c.status = std::stoi(line.substr(5));
    } else if (!line.empty()) {
      ADD_FAILURE() << file << ": a line of no known kind: " << line;
    }
  }
  return c;
}

void write_case(const Case& c, const CliResult& r) {
  std::string text;
  for (const std::string& comment : c.comments) text += comment + "\n";
  text += "$ " + c.args + "\n";
  text += prefixed("> ", r.out);
  text += prefixed("2> ", r.err);
  if (r.status != 0) text += "exit " + std::to_string(r.status) + "\n";
  std::ofstream(c.file, std::ios::binary) << text;
}

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(kCases)) {
    if (entry.path().extension() == ".tesh") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Output ends with a line break; a missing final one shows as one.
std::string as_lines(const std::string& text) {
  return prefixed("", text);
}

class Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Golden, PrintsWhatItsFileSays) {
  const Case c = read_case(kCases / (GetParam() + ".tesh"));
  ASSERT_FALSE(c.args.empty()) << c.file << " has no '$ ' command line";
  const CliResult r = run_under("cd " + std::string(PIPESCOPE_SOURCE_DIR) + " &&", c.args);
  const char* update = std::getenv("PIPESCOPE_UPDATE_GOLDEN");
  if (update != nullptr && std::string(update) == "1") {
    write_case(c, r);
    return;
  }
  EXPECT_EQ(as_lines(r.out), c.out) << c.file << ": standard output of pipescope " << c.args;
  EXPECT_EQ(as_lines(r.err), c.err) << c.file << ": standard error of pipescope " << c.args;
  EXPECT_EQ(r.status, c.status) << c.file << ": exit status of pipescope " << c.args;
}

INSTANTIATE_TEST_SUITE_P(Commands, Golden, ::testing::ValuesIn(case_names()),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           std::string name = param.param;
                           std::replace_if(
                               name.begin(), name.end(),
                               [](char ch) {
                                 return !std::isalnum(static_cast<unsigned char>(ch));
                               },
                               '_');
                           return name;
                         });

}  // namespace
}  // namespace pipescope::testing
