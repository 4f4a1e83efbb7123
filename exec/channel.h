#pragma once
// The in-process transport of the CPU backend: payloads travelling to one stage
// in one direction, keyed by micro-batch, so a receiver takes the micro-batch it
// asks for whatever order they arrive in. Payloads are moved, never copied. The
// profiler times this same class to give the simulator its transport cost.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>

#include "exec/compute/tensor.h"

namespace pipescope::exec {

class Channel {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Wait { kReady, kAborted, kTimedOut };

  // Throws std::runtime_error when `key` is already waiting to be taken.
  void put(int key, Tensor payload) {
    {
      std::lock_guard lock(mu_);
      if (!ready_.try_emplace(key, std::move(payload)).second) {
        throw std::runtime_error("micro-batch " + std::to_string(key) + " was sent twice");
      }
    }
    cv_.notify_all();
  }

  // Blocks until the payload of `key` arrives (moved into `out`), `aborted` is
  // set (checked whenever the channel wakes), or `deadline` passes.
  Wait take(int key, Clock::time_point deadline, const std::atomic<bool>& aborted, Tensor& out) {
    std::unique_lock lock(mu_);
    for (;;) {
      if (aborted.load()) return Wait::kAborted;
      const auto it = ready_.find(key);
      if (it != ready_.end()) {
        out = std::move(it->second);
        ready_.erase(it);
        return Wait::kReady;
      }
      if (Clock::now() >= deadline) return Wait::kTimedOut;
      cv_.wait_until(lock, deadline);
    }
  }

  // Wakes every waiter; call after setting the abort flag. Taking the mutex
  // orders the flag before a waiter's next check, so no wake-up is lost.
  void wake_all() {
    std::lock_guard lock(mu_);
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int, Tensor> ready_;
};

}  // namespace pipescope::exec
