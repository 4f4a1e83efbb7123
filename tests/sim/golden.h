#pragma once
// Golden files under tests/data/golden: a test compares its output with the file;
// PIPESCOPE_UPDATE_GOLDEN=1 rewrites the file instead (tests/data/golden/README.md).

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace pipescope::testing {

inline const std::filesystem::path kGolden =
    std::filesystem::path(PIPESCOPE_TEST_DATA_DIR) / "golden";

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void expect_golden(const std::string& name, const std::string& actual) {
  const std::filesystem::path path = kGolden / name;
  const char* update = std::getenv("PIPESCOPE_UPDATE_GOLDEN");
  if (update != nullptr && std::string(update) == "1") {
    std::ofstream(path, std::ios::binary) << actual;
    return;
  }
  ASSERT_TRUE(std::filesystem::exists(path))
      << path << " is missing; run with PIPESCOPE_UPDATE_GOLDEN=1";
  EXPECT_EQ(actual, read_text(path)) << "differs from " << path;
}

}  // namespace pipescope::testing
