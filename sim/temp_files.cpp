#include "sim/temp_files.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <climits>
#include <cstring>

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

}  // namespace pipescope
