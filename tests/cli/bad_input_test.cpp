// A battery of malformed inputs, one ctest entry each (BadInput/Battery.Rejects/<case>):
// scenarios, --set overrides, plans, profiles, schedule CSVs and Hugging Face configs
// listed in tests/data/bad/cases.json. Every case must be refused the way a user can
// act on: an exit status of 1..127 (no signal, no success), exactly one line on stderr,
// "pipescope: error: ...", that names the file and the offending field (the case's
// "expect" substrings), within a few seconds, leaving no file at all in the case's
// temporary folder (where {out} points): neither the output nor a temporary file of
// any name beside it.
//
// Manifest entries:
//   name      the test's name: letters, digits and '_'
//   file      the input under tests/data/bad (a file or a folder); {file} in args
//   missing   true: `file` must not exist (the "no such file" cases)
//   generate  instead of `file`: written at run time into the case's temporary folder
//             as head + open x depth + middle + close x depth + tail (deep nesting
//             that would be wasteful to store); {file} is its path
//   args      the command line after `pipescope`; {scenario} is scenarios/cpu-small.json,
//             {out} a path in a fresh temporary folder
//   expect    substrings stderr must contain: the file's name and the field
//   output    whether args passes {out} (checked against args)

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace {

namespace fs = std::filesystem;
using pipescope::testing::CliResult;

const fs::path kBadDir = fs::path(PIPESCOPE_TEST_DATA_DIR) / "bad";
const fs::path kManifest = kBadDir / "cases.json";
const std::string kScenario = std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/cpu-small.json";

// A refusal at load takes well under a second; a case still running after this long
// hangs (timeout's status 124, or 137 when it had to be killed).
constexpr int kTimeoutSeconds = 10;
const std::string kLauncher = "timeout -k 2 " + std::to_string(kTimeoutSeconds);

struct Generated {
  std::string name;
  std::string head, open, middle, close, tail;
  std::size_t depth = 0;
};

struct Case {
  std::string name;
  std::string file;  // relative to tests/data/bad; empty when none or generated
  bool missing = false;
  std::optional<Generated> generate;
  std::string args;
  std::vector<std::string> expect;
  bool output = false;
  std::string note;
  std::string manifest_error;  // set on the one placeholder case when the manifest is bad
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

std::vector<Case> load_cases() {
  try {
    std::ifstream in(kManifest);
    if (!in) throw std::runtime_error("cannot open " + kManifest.string());
    const nlohmann::json doc = nlohmann::json::parse(in);
    std::vector<Case> cases;
    for (const nlohmann::json& j : doc.at("cases")) {
      Case c;
      c.name = j.at("name").get<std::string>();
      c.file = j.value("file", std::string());
      c.missing = j.value("missing", false);
      if (j.contains("generate")) {
        const nlohmann::json& g = j.at("generate");
        Generated gen;
        gen.name = g.at("name").get<std::string>();
        gen.head = g.value("head", std::string());
        gen.open = g.at("open").get<std::string>();
        gen.middle = g.value("middle", std::string());
        gen.close = g.value("close", std::string());
        gen.tail = g.value("tail", std::string());
        gen.depth = g.at("depth").get<std::size_t>();
        c.generate = gen;
      }
      c.args = j.at("args").get<std::string>();
      c.expect = j.at("expect").get<std::vector<std::string>>();
      c.output = j.at("output").get<bool>();
      c.note = j.value("note", std::string());
      cases.push_back(std::move(c));
    }
    return cases;
  } catch (const std::exception& e) {
    Case c;
    c.name = "manifest_unreadable";
    c.manifest_error = e.what();
    return {c};
  }
}

// Single quotes for the shell, which run() goes through.
std::string quote(const std::string& s) {
  std::string out = "'";
  for (const char ch : s) {
    if (ch == '\'') {
      out += "'\\''";
    } else {
      out += ch;
    }
  }
  return out + "'";
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
  return s;
}

// A fresh, empty folder for one case.
fs::path case_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("pipescope_bad_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write_generated(const Generated& g, const fs::path& path) {
  std::ofstream out(path, std::ios::binary);
  out << g.head;
  for (std::size_t i = 0; i < g.depth; ++i) out << g.open;
  out << g.middle;
  for (std::size_t i = 0; i < g.depth; ++i) out << g.close;
  out << g.tail;
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

class Battery : public ::testing::TestWithParam<Case> {};

TEST_P(Battery, Rejects) {
  const Case& c = GetParam();
  ASSERT_TRUE(c.manifest_error.empty()) << kManifest << ": " << c.manifest_error;
  ASSERT_EQ(c.output, c.args.find("{out}") != std::string::npos)
      << "cases.json: 'output' must say whether args has {out}";
  SCOPED_TRACE(c.name + ": " + c.note);

  const fs::path dir = case_dir(c.name);
  fs::path input;
  if (c.generate) {
    input = dir / c.generate->name;
    write_generated(*c.generate, input);
  } else if (!c.file.empty()) {
    input = kBadDir / c.file;
    if (c.missing) {
      ASSERT_FALSE(fs::exists(input)) << input << " should not exist";
    } else {
      ASSERT_TRUE(fs::exists(input)) << input << " is not in tests/data/bad";
    }
  }
  ASSERT_EQ(input.empty(), c.args.find("{file}") == std::string::npos)
      << "cases.json: {file} needs a 'file' or 'generate', and they need {file}";
  const fs::path out = dir / "output";

  std::string args = c.args;
  args = replace_all(args, "{file}", quote(input.string()));
  args = replace_all(args, "{scenario}", quote(kScenario));
  args = replace_all(args, "{out}", quote(out.string()));
  const CliResult r = pipescope::testing::run_under(kLauncher, args);
  const std::string context =
      "pipescope " + args + "\nstatus " + std::to_string(r.status) + "\nstderr:\n" + r.err;

  std::error_code ignored;
  if (r.status == 124 || r.status == 137) {
    ADD_FAILURE() << "did not finish within " << kTimeoutSeconds << " s\n" << context;
    fs::remove_all(dir, ignored);
    return;
  }
  // The exit status: a refusal, not success or a signal (the shell's 128 + N, or -1).
  EXPECT_GE(r.status, 1) << context;
  EXPECT_LE(r.status, 127) << context;

  // One line: "pipescope: error: ..." and its newline, nothing else.
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1)
      << "expected exactly one line on stderr\n"
      << context;
  EXPECT_TRUE(r.err.starts_with("pipescope: error: ") && r.err.ends_with("\n")) << context;
  for (const std::string& s : c.expect) {
    EXPECT_TRUE(r.err.find(s) != std::string::npos) << "stderr should contain \"" << s << "\"\n"
                                                    << context;
  }

  // Nothing written: no file in the case's folder but the generated input, so
  // neither the output nor a temporary file, whatever its name.
  std::vector<std::string> left;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    if (!c.generate || e.path().filename() != c.generate->name) {
      left.push_back(e.path().filename().string());
    }
  }
  EXPECT_TRUE(left.empty()) << "left behind in " << dir << ": " << ::testing::PrintToString(left)
                            << "\n"
                            << context;
  fs::remove_all(dir, ignored);
}

INSTANTIATE_TEST_SUITE_P(BadInput, Battery, ::testing::ValuesIn(load_cases()),
                         [](const ::testing::TestParamInfo<Case>& p) { return p.param.name; });

// The manifest itself: enough cases over every format, unique names, and every
// stored file used by some case (a case on a folder below a format's folder, such
// as validate/truncated, uses what is in it).
TEST(BadInputManifest, CoversEveryStoredFile) {
  const std::vector<Case> cases = load_cases();
  ASSERT_GE(cases.size(), 50u);
  ASSERT_TRUE(cases.front().manifest_error.empty()) << cases.front().manifest_error;
  std::set<std::string> names;
  std::set<std::string> formats;
  for (const Case& c : cases) {
    EXPECT_TRUE(names.insert(c.name).second) << "duplicate case name " << c.name;
    EXPECT_FALSE(c.expect.empty()) << c.name << " expects nothing";
    formats.insert(c.name.substr(0, c.name.find('_')));
  }
  for (const char* f : {"scenario", "set", "plan", "profile", "csv", "hf"}) {
    EXPECT_TRUE(formats.count(f) == 1) << "no case for " << f;
  }
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(kBadDir)) {
    if (!e.is_regular_file() || e.path() == kManifest) continue;
    const std::string rel = fs::relative(e.path(), kBadDir).generic_string();
    const bool used = std::any_of(cases.begin(), cases.end(), [&](const Case& c) {
      const bool folder_case = c.file.find('/') != std::string::npos;
      return !c.file.empty() && (rel == c.file || (folder_case && rel.starts_with(c.file + "/")));
    });
    EXPECT_TRUE(used) << rel << " is in tests/data/bad but no case uses it";
  }
}

}  // namespace
