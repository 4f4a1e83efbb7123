#include "cli/progress.h"

#include <unistd.h>

#include <cstdio>

namespace pipescope::cli {

ProgressBar::ProgressBar(std::string what)
    : what_(std::move(what)), enabled_(::isatty(STDERR_FILENO) == 1) {}

ProgressBar::~ProgressBar() {
  if (enabled_ && last_permille_ >= 0) std::fprintf(stderr, "\r\033[K");
}

void ProgressBar::update(std::size_t done, std::size_t total) {
  if (!enabled_ || total == 0) return;
  const int permille = static_cast<int>(done * 1000 / total);
  if (permille == last_permille_) return;
  last_permille_ = permille;
  constexpr int kWidth = 30;
  const int filled = permille * kWidth / 1000;
  std::fprintf(stderr, "\r%s [%.*s%*s] %zu/%zu", what_.c_str(), filled,
               "##############################", kWidth - filled, "", done, total);
  std::fflush(stderr);
}

}  // namespace pipescope::cli
