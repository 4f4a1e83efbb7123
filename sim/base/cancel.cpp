#include "sim/base/cancel.h"

#include <atomic>

namespace pipescope {

namespace {

std::atomic<bool> g_cancel{false};
static_assert(std::atomic<bool>::is_always_lock_free,
              "request_cancel() runs in a signal handler and needs a lock-free flag");

}  // namespace

Cancelled::Cancelled() : std::runtime_error("interrupted") {}

void request_cancel() noexcept {
  g_cancel.store(true, std::memory_order_relaxed);
}

bool cancel_requested() noexcept {
  return g_cancel.load(std::memory_order_relaxed);
}

void reset_cancel() noexcept {
  g_cancel.store(false, std::memory_order_relaxed);
}

void throw_if_cancelled() {
  if (cancel_requested()) throw Cancelled();
}

}  // namespace pipescope
