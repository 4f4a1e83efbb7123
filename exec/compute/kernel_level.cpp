#include "exec/compute/kernel_level.h"

#include <sstream>

namespace pipescope::exec {

namespace {

// The vector instructions this copy was compiled for, as its compiler saw them
// (a build with -march=native included), widest first.
std::string compiled_features() {
  std::string f;
#if defined(__AVX512F__)
  f = "AVX-512";
#elif defined(__AVX2__)
  f = "AVX2";
#elif defined(__AVX__)
  f = "AVX";
#elif defined(__SSE4_2__)
  f = "SSE4.2";
#elif defined(__SSE2__)
  f = "SSE2";
#endif
#if defined(__FMA__)
  f += f.empty() ? "FMA" : ", FMA";
#endif
  return f;
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
  std::string details = compiled_features();
  const std::vector<std::string> built = built_kernel_levels();
  if (built.size() > 1) {
    details += details.empty() ? "built: " : "; built: ";
    for (std::size_t i = 0; i < built.size(); ++i) details += (i ? ", " : "") + built[i];
  }
  return details.empty() ? label : label + " (" + details + ")";
}

}  // namespace pipescope::exec
