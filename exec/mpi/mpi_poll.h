#pragma once
// What the MPI transports share: MPI errors as exceptions, and how a waiting
// rank polls.

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>

#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "exec/transport.h"

namespace pipescope::exec {

// Throws std::runtime_error "WHAT failed: MPI's message" unless rc is MPI_SUCCESS.
inline void mpi_check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw std::runtime_error(std::string(what) + " failed: " + std::string(text, std::size_t(len)));
}

// Polls `ready` (an MPI_Improbe or MPI_Test, which also drive MPI's
// progress) until it says yes, `aborted` is set or `deadline` passes; `idle`
// runs between polls. It spins for the first 100 us (a yield there would hand
// a loaded core away for a whole time slice, ms), then sleeps 20 us between
// polls so that ranks sharing cores (mpirun --oversubscribe) leave them to the
// ranks that compute. The thread's timer slack is cut to 1 us so that such a
// sleep lasts about what it asks for (the default 50 us slack would make every
// late arrival cost up to ~100 us).
template <class Ready>
inline Transport::Wait mpi_poll(const Ready& ready, Transport::Clock::time_point deadline,
                                const std::atomic<bool>& aborted,
                                const std::function<void()>& idle) {
  using Clock = Transport::Clock;
  const auto start = Clock::now();
  for (;;) {
    if (aborted.load()) return Transport::Wait::kAborted;
    if (ready()) return Transport::Wait::kReady;
    if (idle) idle();
    const auto now = Clock::now();
    if (now >= deadline) return Transport::Wait::kTimedOut;
    if (now - start < std::chrono::microseconds(100)) continue;
#ifdef __linux__
    thread_local const bool slack_cut = prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL) == 0;
    (void)slack_cut;
#endif
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

}  // namespace pipescope::exec
