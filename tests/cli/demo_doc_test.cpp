// The demo's output as the README and docs/getting-started.md quote it: every
// line they show of `pipescope simulate scenarios/demo.json` (and of the two
// plans scripts/demo.sh prints after it) is one the program prints now, so
// the quoted figures cannot drift from the model.

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cli_runner.h"

namespace {

using pipescope::testing::CliResult;
using pipescope::testing::run;
using pipescope::testing::slurp;

// The lines of `text` that start with one of the summary's or the stage
// table's labels.
std::vector<std::string> quoted_lines(const std::string& text) {
  static const char* kStarts[] = {
      "Step time ",      "Throughput ",      "Bubble ", "MFU ",          "Communication ",
      "Memory ",         "    0 ",           "    1 ",  "    2 ",        "    3 ",
      "Scenario   demo", "Schedule   gpipe", "   1 ",   "Plans for demo"};
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    for (const char* start : kStarts) {
      if (line.rfind(start, 0) == 0) out.push_back(line);
    }
  }
  return out;
}

TEST(DemoDoc, QuotedOutputIsWhatTheProgramPrints) {
  const std::string demo = std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/demo.json";
  CliResult r = run("simulate " + demo);
  ASSERT_EQ(r.status, 0) << r.err;
  // What the quick start prints after the simulation (scripts/demo.sh).
  for (const std::string& plan : {"plan " + demo + " --top 1", "plan " + demo + " -K 4 --top 1"}) {
    const CliResult p = run(plan);
    ASSERT_EQ(p.status, 0) << p.err;
    r.out += p.out;
  }
  // Each page and where its quote of the demo begins.
  const std::pair<const char*, const char*> pages[] = {
      {"README.md", "pipescope simulate scenarios/demo.json"},
      {"docs/getting-started.md", "## The demo"}};
  for (const auto& [doc, anchor] : pages) {
    SCOPED_TRACE(doc);
    const std::string text = slurp(std::string(PIPESCOPE_SOURCE_DIR) + "/" + doc);
    const std::size_t start = text.find(anchor);
    ASSERT_NE(start, std::string::npos);
    const std::size_t block = text.find("Step time", start);
    ASSERT_NE(block, std::string::npos);
    // The quote ends at the close of its code block.
    const std::size_t end = text.find("```", block);
    const std::vector<std::string> lines = quoted_lines(text.substr(start, end - start));
    ASSERT_GE(lines.size(), 5u);
    for (const std::string& line : lines) {
      EXPECT_NE(r.out.find(line + "\n"), std::string::npos) << "quoted, not printed: " << line;
    }
  }
}

}  // namespace
