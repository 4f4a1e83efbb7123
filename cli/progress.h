#pragma once
// A progress bar on stderr for long runs, drawn only when stderr is a terminal,
// so logs and pipes stay clean.

#include <cstddef>
#include <string>

namespace pipescope::cli {

class ProgressBar {
 public:
  explicit ProgressBar(std::string what);
  ~ProgressBar();  // clears the line
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void update(std::size_t done, std::size_t total);

 private:
  std::string what_;
  bool enabled_;
  int last_permille_ = -1;
};

}  // namespace pipescope::cli
