#pragma once
// Runs independent jobs on several threads: sweeps and the planner simulate many
// configurations, each on its own.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "sim/base/cancel.h"

namespace pipescope {

// Calls job(i) for i in [0, n) on `threads` threads (0: one per core) and
// progress(done, n) after each, from whichever thread finished it, one at a time.
// Rethrows the first exception a job threw, after all threads have stopped. A
// stop request (sim/base/cancel.h) ends the workers after their current job and
// throws Cancelled.
inline void parallel_for(std::size_t n, unsigned threads,
                         const std::function<void(std::size_t)>& job,
                         const std::function<void(std::size_t, std::size_t)>& progress = {}) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = static_cast<unsigned>(std::min<std::size_t>(threads, std::max<std::size_t>(n, 1)));
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mutex;  // guards done, error and progress calls
  std::size_t done = 0;
  std::exception_ptr error;
  const auto worker = [&] {
    for (;;) {
      if (failed || cancel_requested()) return;
      const std::size_t i = next++;
      if (i >= n) return;
      try {
        job(i);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(mutex);
        if (!error) error = std::current_exception();
        failed = true;
        return;
      }
      const std::lock_guard<std::mutex> lock(mutex);
      ++done;
      if (progress) progress(done, n);
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  if (error) std::rethrow_exception(error);
  throw_if_cancelled();
}

}  // namespace pipescope
