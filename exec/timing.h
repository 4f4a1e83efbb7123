#pragma once
// What the executor's measurements share: a monotonic clock, the median of a
// set of timings (and of a call's), and n threads run at once.

#include <algorithm>
#include <chrono>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

#include "costmodels/units.h"

namespace pipescope::exec {

using Clock = std::chrono::steady_clock;

// Nanoseconds since `start`.
inline SimTime elapsed(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
}

// The median of `v` (the upper one of an even count); `v` must not be empty.
template <typename T>
T median(std::vector<T> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The median time of `repeats` calls of `once`, seconds, after one untimed
// call (a group's ranks each call it back to back, and keep the first's).
inline double median_call_s(int repeats, const std::function<void()>& once) {
  std::vector<SimTime> t;
  for (int r = 0; r <= repeats; ++r) {
    const auto t0 = Clock::now();
    once();
    if (r > 0) t.push_back(elapsed(t0));
  }
  return static_cast<double>(median(t)) * 1e-9;
}

// Runs body(i) on n threads at once (i = 0 on the caller), and rethrows the
// first failure after all have ended. `body` must not wait for a thread that
// failed (barriers: arrive_and_drop on failure).
inline void run_threads(int n, const std::function<void(int)>& body) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  const auto guarded = [&](int i) {
    try {
      body(i);
    } catch (...) {
      errors[static_cast<std::size_t>(i)] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  for (int i = 1; i < n; ++i) threads.emplace_back(guarded, i);
  guarded(0);
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace pipescope::exec
