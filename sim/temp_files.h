#pragma once
// Temporary files that must not outlive the process. While an output is being
// put in place under a temporary name, that name sits in a fixed table that a
// signal handler can walk: remove_temp_files_now() uses no allocation and no
// lock, so the handlers of SIGPIPE and of a second Ctrl-C (sim/signals.h) call
// it before the process ends.

#include <string>

namespace pipescope {

// Registers `path` for its lifetime; the destructor forgets it (it does not
// remove the file: the owner has renamed or removed it by then). With the
// table full (64 outputs at once) the path is not registered: it is still
// removed on every ordinary way out, but not by a signal handler.
class TempFileGuard {
 public:
  explicit TempFileGuard(const std::string& path);
  ~TempFileGuard();
  TempFileGuard(const TempFileGuard&) = delete;
  TempFileGuard& operator=(const TempFileGuard&) = delete;

 private:
  int slot_ = -1;
};

// Unlinks every registered path. Async-signal-safe.
void remove_temp_files_now() noexcept;

}  // namespace pipescope
