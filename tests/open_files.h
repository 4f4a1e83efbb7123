#pragma once
// What a child process has open, read from /proc/PID/fd: how the tests that
// signal a writer or a reader know it has reached the file.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <system_error>
#include <thread>

namespace pipescope::testing {

// Waits until `pid` has open a file whose path `matches` (an unnamed temporary
// shows as "DIR/#INODE (deleted)"), and, with `min_bytes`, that holds at least
// that many bytes. False when the process ended or `limit` passed first.
inline bool wait_until_open(pid_t pid,
                            const std::function<bool(const std::filesystem::path&)>& matches,
                            std::chrono::milliseconds limit = std::chrono::minutes(1),
                            std::uintmax_t min_bytes = 0) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  const std::filesystem::path fds = "/proc/" + std::to_string(pid) + "/fd";
  while (std::chrono::steady_clock::now() < deadline) {
    std::error_code ec;
    for (const auto& fd : std::filesystem::directory_iterator(fds, ec)) {
      std::error_code link_ec;
      if (!matches(std::filesystem::read_symlink(fd.path(), link_ec))) continue;
      // The descriptor's link reaches the file even once it has no name.
      std::error_code size_ec;
      const std::uintmax_t size = std::filesystem::file_size(fd.path(), size_ec);
      if (min_bytes == 0 || (!size_ec && size >= min_bytes)) return true;
    }
    if (ec) return false;  // the process is gone
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// Waits until `pid` has a file open in the folder `dir` (holding at least
// `min_bytes`).
inline bool wait_until_writing_in(pid_t pid, const std::filesystem::path& dir,
                                  std::uintmax_t min_bytes = 0) {
  const std::string prefix = dir.string() + "/";
  return wait_until_open(
      pid, [&](const std::filesystem::path& p) { return p.string().rfind(prefix, 0) == 0; },
      std::chrono::minutes(1), min_bytes);
}

}  // namespace pipescope::testing
