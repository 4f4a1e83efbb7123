#include "sim/base/temp_files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>

namespace pipescope {

namespace {

enum SlotState : int { kFree = 0, kFilling = 1, kHeld = 2 };

struct Slot {
  std::atomic<int> state{kFree};
  char path[PATH_MAX] = {};
};

std::array<Slot, 64> g_slots;
static_assert(std::atomic<int>::is_always_lock_free,
              "remove_temp_files_now() runs in signal handlers and needs lock-free state");

}  // namespace

TempFileGuard::TempFileGuard(const std::string& path) {
  if (path.size() >= PATH_MAX) return;
  for (std::size_t i = 0; i < g_slots.size(); ++i) {
    int expected = kFree;
    if (!g_slots[i].state.compare_exchange_strong(expected, kFilling)) continue;
    std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
    g_slots[i].state.store(kHeld, std::memory_order_release);
    slot_ = static_cast<int>(i);
    return;
  }
}

TempFileGuard::~TempFileGuard() {
  if (slot_ >= 0) g_slots[static_cast<std::size_t>(slot_)].state.store(kFree);
}

void remove_temp_files_now() noexcept {
  for (Slot& slot : g_slots) {
    if (slot.state.load(std::memory_order_acquire) == kHeld) ::unlink(slot.path);
  }
}

namespace {

namespace fs = std::filesystem;

constexpr std::size_t kHexDigits = 16;
constexpr std::size_t kNameKept = 200;  // of the target's name, in a temporary's
constexpr std::time_t kDeadAfterS = 60;

std::string random_hex() {
  unsigned char bytes[kHexDigits / 2] = {};
  if (::getrandom(bytes, sizeof bytes, 0) != static_cast<ssize_t>(sizeof bytes)) {
    // No entropy source: the time and the address space still differ per run;
    // O_EXCL and linkat() refuse a name that exists, whatever its origin.
    const auto seed = static_cast<std::uint64_t>(
        std::chrono::steady_clock::now().time_since_epoch().count() ^ ::getpid());
    std::memcpy(bytes, &seed, sizeof bytes);
  }
  char text[kHexDigits + 1];
  for (std::size_t i = 0; i < sizeof bytes; ++i) std::snprintf(text + 2 * i, 3, "%02x", bytes[i]);
  return text;
}

std::string temp_prefix(const fs::path& target) {
  return "." + target.filename().string().substr(0, kNameKept) + ".";
}

// Whether `name` is one of temp_name(target)'s, given its prefix.
bool is_temp_name(const std::string& name, const std::string& prefix) {
  const std::string suffix = ".tmp";
  if (name.size() != prefix.size() + kHexDigits + suffix.size()) return false;
  if (name.compare(0, prefix.size(), prefix) != 0) return false;
  if (name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) return false;
  return name.substr(prefix.size(), kHexDigits).find_first_not_of("0123456789abcdef") ==
         std::string::npos;
}

// Removes `path` if it is a dead temporary: this user's regular file, old,
// and unlocked; the lock is taken first, so no writer can be alive behind it.
void remove_if_dead(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return;
  struct stat held {};
  struct stat named {};
  const bool dead = ::fstat(fd, &held) == 0 && S_ISREG(held.st_mode) &&
                    held.st_uid == ::geteuid() &&
                    std::time(nullptr) - held.st_mtime > kDeadAfterS &&
                    ::flock(fd, LOCK_EX | LOCK_NB) == 0 && ::lstat(path.c_str(), &named) == 0 &&
                    named.st_dev == held.st_dev && named.st_ino == held.st_ino;
  if (dead) ::unlink(path.c_str());
  ::close(fd);
}

}  // namespace

fs::path temp_name(const fs::path& target) {
  return target.parent_path() / (temp_prefix(target) + random_hex() + ".tmp");
}

int hold_temporary(int fd) {
  ::flock(fd, LOCK_EX | LOCK_NB);  // a new file: nobody else holds it
  return ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
}

void remove_dead_temporaries(const fs::path& target) {
  const std::string prefix = temp_prefix(target);
  std::error_code ec;
  fs::directory_iterator it(target.parent_path(), ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (is_temp_name(name, prefix)) remove_if_dead(it->path());
  }
}

}  // namespace pipescope
