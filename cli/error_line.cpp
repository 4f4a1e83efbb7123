#include "cli/error_line.h"

#include <cstdio>

namespace pipescope::cli {

void print_line(const std::string& line) {
  const std::string whole = line + "\n";
  std::fwrite(whole.data(), 1, whole.size(), stderr);  // stderr is unbuffered: one write
  std::fflush(stderr);
}

void print_error(const std::string& message) {
  print_line("pipescope: error: " + message);
}

}  // namespace pipescope::cli
