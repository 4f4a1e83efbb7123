// The source tree's rooms and the one way their arrows point (docs/design.md,
// "Folders and their dependencies"): a file may include from its own folder and from the folders
// its folder builds on, never from one above. The libraries link the same way (sim/CMakeLists.txt),
// so a wrong include also fails their link. And no file of theirs grows past 600 lines.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

// Each folder and the folders it may include from (besides itself).
const std::map<std::string, std::set<std::string>>& allowed() {
  static const std::map<std::string, std::set<std::string>> rooms = [] {
    const std::set<std::string> to_plan = {"costmodels", "sim/base", "sim/scenario", "sim/engine",
                                           "sim/plan"};
    std::set<std::string> to_formats = to_plan;
    to_formats.insert("sim/formats");
    std::set<std::string> gui = to_formats;
    gui.insert("sim/export");
    std::set<std::string> cli = gui;
    cli.insert({"sim/validation", "exec/compute", "exec"});
    std::set<std::string> exec = to_formats;
    exec.insert("exec/compute");
    return std::map<std::string, std::set<std::string>>{
        {"costmodels", {}},
        {"sim/base", {"costmodels"}},
        {"sim/scenario", {"costmodels", "sim/base"}},
        {"sim/engine", {"costmodels", "sim/base", "sim/scenario"}},
        {"sim/plan", {"costmodels", "sim/base", "sim/scenario", "sim/engine"}},
        {"sim/formats", to_plan},
        {"sim/export", to_plan},
        {"sim/validation", to_formats},
        {"exec/compute", {"costmodels"}},
        {"exec", exec},
        {"gui", gui},
        {"cli", cli},
    };
  }();
  return rooms;
}

bool may_include(const std::string& from, const std::string& to) {
  return to == from || allowed().at(from).count(to) == 1;
}

// The room of a path relative to the source root: "sim/engine" for
// sim/engine/engine.h, "exec/compute" for exec/compute/kernels.h, "exec" for
// exec/cuda/kernels.cu; "" outside the rooms.
std::string room_of(const std::string& path) {
  const std::size_t first = path.find('/');
  if (first == std::string::npos) return "";
  const std::string top = path.substr(0, first);
  const std::size_t second = path.find('/', first + 1);
  if (top == "sim") {
    return second == std::string::npos ? "sim" : path.substr(0, second);  // "sim": a file in sim/
  }
  if (top == "exec" && second != std::string::npos && path.substr(0, second) == "exec/compute") {
    return "exec/compute";
  }
  return top;
}

// The source files of the rooms, relative to the source root.
std::vector<std::string> room_sources(const fs::path& root) {
  std::vector<std::string> out;
  for (const std::string top : {"costmodels", "sim", "exec", "cli", "gui"}) {
    for (const auto& entry : fs::recursive_directory_iterator(root / top)) {
      const std::string ext = entry.path().extension().string();
      if (ext == ".h" || ext == ".cpp" || ext == ".cu" || ext == ".cuh") {
        out.push_back(fs::relative(entry.path(), root).generic_string());
      }
    }
  }
  return out;
}

struct Include {
  std::string file;  // relative to the source root
  int line = 0;
  std::string target;
};

std::vector<Include> project_includes(const fs::path& root) {
  static const std::regex quoted(R"re(^\s*#\s*include\s+"([^"]+)")re");
  std::vector<Include> out;
  for (const std::string& rel : room_sources(root)) {
    std::ifstream in(root / rel);
    std::string line;
    int number = 0;
    std::smatch m;
    while (std::getline(in, line)) {
      ++number;
      if (std::regex_search(line, m, quoted)) out.push_back({rel, number, m[1]});
    }
  }
  return out;
}

TEST(SourceTree, RoomOfAPath) {
  EXPECT_EQ(room_of("sim/engine/engine.h"), "sim/engine");
  EXPECT_EQ(room_of("exec/cuda/kernels.cu"), "exec");
  EXPECT_EQ(room_of("exec/compute/kernels.h"), "exec/compute");
  EXPECT_EQ(room_of("exec/step_run.h"), "exec");
  EXPECT_EQ(room_of("sim/CMakeLists.txt"), "sim");
  EXPECT_EQ(room_of("README.md"), "");
}

TEST(SourceTree, ArrowsPointOneWay) {
  EXPECT_TRUE(may_include("sim/engine", "sim/scenario"));
  EXPECT_TRUE(may_include("sim/engine", "sim/engine"));
  EXPECT_FALSE(may_include("sim/scenario", "sim/engine"));
  EXPECT_FALSE(may_include("sim/export", "sim/formats"));
  EXPECT_FALSE(may_include("exec", "sim/validation"));
  EXPECT_FALSE(may_include("costmodels", "sim/base"));
  EXPECT_TRUE(may_include("cli", "exec"));
  EXPECT_TRUE(may_include("exec", "exec/compute"));
  EXPECT_FALSE(may_include("exec/compute", "exec"));
  EXPECT_FALSE(may_include("exec/compute", "sim/base"));
  // Every room may use what the rooms it uses may: the arrows form no
  // shortcut around a layer's rules.
  for (const auto& [room, uses] : allowed()) {
    for (const std::string& used : uses) {
      ASSERT_EQ(allowed().count(used), 1u) << used;
      for (const std::string& below : allowed().at(used)) {
        EXPECT_TRUE(may_include(room, below)) << room << " uses " << used << " but not " << below;
      }
    }
  }
}

TEST(SourceTree, EveryIncludeComesFromBelow) {
  const fs::path root = PIPESCOPE_SOURCE_DIR;
  const std::vector<Include> includes = project_includes(root);
  ASSERT_GT(includes.size(), 500u);  // the tree was read
  int checked = 0;
  for (const Include& inc : includes) {
    const std::string from = room_of(inc.file);
    const std::string to = room_of(inc.target);
    ASSERT_TRUE(allowed().count(from) == 1) << inc.file << " is in no room of the map";
    if (!fs::exists(root / inc.target)) continue;  // a header beside its file, a generated one
    ASSERT_TRUE(allowed().count(to) == 1)
        << inc.file << ":" << inc.line << " includes " << inc.target << ", in no room of the map";
    ++checked;
    EXPECT_TRUE(may_include(from, to))
        << inc.file << ":" << inc.line << " (" << from << ") includes " << inc.target << " (" << to
        << "), a room it may not use";
  }
  EXPECT_GT(checked, 500);
}

// A file holds one concept; one that grows past 600 lines holds several.
TEST(SourceTree, NoSourceFileIsOverSixHundredLines) {
  const fs::path root = PIPESCOPE_SOURCE_DIR;
  const std::vector<std::string> sources = room_sources(root);
  ASSERT_GT(sources.size(), 300u);
  for (const std::string& rel : sources) {
    std::ifstream in(root / rel);
    std::string line;
    int lines = 0;
    while (std::getline(in, line)) ++lines;
    EXPECT_LE(lines, 600) << rel;
  }
}

}  // namespace
