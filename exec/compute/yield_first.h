#pragma once
// How a thread of a group waits for the others (exec/compute/tensor_group.h,
// exec/compute/ring_exchange.h): first it yields its core for a while, since
// the others are usually that close behind, and only then sleeps on its
// condition variable. Waking a sleeping thread cost tens of microseconds each
// time, most of a small all-to-all's time (docs/performance.md). It yields
// rather than spins: the threads of a process may share a core with the very
// thread they wait for (more threads than cores), which a yield lets run,
// where the MPI transport's ranks (exec/mpi/mpi_poll.h), each a process
// mpirun binds to a core of its own, spin first and then sleep.

#include <chrono>
#include <mutex>
#include <thread>

namespace pipescope::exec {

inline constexpr std::chrono::microseconds kYieldFirst{100};

// Yields, `lock` released, until ready() (called under `lock`) or
// kYieldFirst has passed.
template <class Ready>
void yield_first(std::unique_lock<std::mutex>& lock, const Ready& ready) {
  const auto until = std::chrono::steady_clock::now() + kYieldFirst;
  while (!ready() && std::chrono::steady_clock::now() < until) {
    lock.unlock();
    std::this_thread::yield();
    lock.lock();
  }
}

}  // namespace pipescope::exec
