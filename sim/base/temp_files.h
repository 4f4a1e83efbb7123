#pragma once
// Temporary files that must not outlive the process. While an output is being
// put in place under a temporary name, that name sits in a fixed table that a
// signal handler can walk: remove_temp_files_now() uses no allocation and no
// lock, so the handlers of SIGPIPE and of a second Ctrl-C (sim/base/signals.h) call
// it before the process ends.

#include <filesystem>
#include <string>

namespace pipescope {

// ".NAME.0123456789abcdef.tmp" beside `target`: hidden, unpredictable (16
// random hex digits), and short enough for any file system's 255-byte names.
std::filesystem::path temp_name(const std::filesystem::path& target);

// Marks the open temporary `fd` as its writer's: an exclusive lock on it
// (flock), held while any copy of the descriptor is open, so released however
// the process ends, SIGKILL included. Returns such a copy (or -1), for the
// writer to keep open until the file is in place.
int hold_temporary(int fd);

// Removes the temporaries of `target` (temp_name's pattern, beside it) that
// a writer killed with SIGKILL left on a file system without unnamed files:
// those of this user, last written over a minute ago, whose lock
// (hold_temporary) nobody holds. Best effort: what it cannot prove dead it
// leaves.
void remove_dead_temporaries(const std::filesystem::path& target);

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
