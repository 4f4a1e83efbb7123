#include "exec/kernel_level.h"

#include <sstream>

namespace pipescope::exec {

namespace {

// What each level adds that the kernels use (Eigen's packet math).
const char* level_features(const std::string& level) {
  if (level == "x86-64-v4") return "AVX-512, FMA";
  if (level == "x86-64-v3") return "AVX2, FMA";
  if (level == "x86-64-v2") return "SSE4.2";
  if (level == "x86-64") return "SSE2";
  return "";
}

}  // namespace

const char* kernel_level() {
  return PIPESCOPE_EXEC_LEVEL;
}

std::vector<std::string> built_kernel_levels() {
  std::vector<std::string> levels;
  std::istringstream list(PIPESCOPE_EXEC_LEVELS_BUILT);
  for (std::string level; std::getline(list, level, ',');) {
    if (!level.empty()) levels.push_back(level);
  }
  return levels;
}

std::string kernel_level_label() {
  std::string label = kernel_level();
  std::string details = level_features(label);
  const std::vector<std::string> built = built_kernel_levels();
  if (built.size() > 1) {
    details += details.empty() ? "built: " : "; built: ";
    for (std::size_t i = 0; i < built.size(); ++i) details += (i ? ", " : "") + built[i];
  }
  return details.empty() ? label : label + " (" + details + ")";
}

}  // namespace pipescope::exec
