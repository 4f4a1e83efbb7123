#pragma once
// A process-wide request to stop long work, set by the command line's Ctrl-C
// (SIGINT) and SIGTERM handler. Sweeps, the planner, the engine, the profiler and
// the executor's runtime check it between units of work and throw Cancelled, so
// every worker stops within a fraction of a second; output files are written
// whole and renamed into place only if no stop was requested (sim/base/file_io.h), so
// an interrupted command leaves nothing half-written behind.

#include <stdexcept>

namespace pipescope {

// What long work throws when a stop was requested. The command line turns it
// into "pipescope: interrupted" and exit status 130 (128 + SIGINT).
class Cancelled : public std::runtime_error {
 public:
  Cancelled();
};

// Async-signal-safe: a lock-free atomic store.
void request_cancel() noexcept;
bool cancel_requested() noexcept;
// Clears the request (tests; a long-lived program that recovers).
void reset_cancel() noexcept;
// Throws Cancelled when a stop was requested.
void throw_if_cancelled();

}  // namespace pipescope
