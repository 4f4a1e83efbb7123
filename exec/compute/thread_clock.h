#pragma once
// The calling thread's CPU clock, which the executor's timings read beside the
// wall clock.

#include "costmodels/units.h"

namespace pipescope::exec {

// The calling thread's CPU time in ns, or -1 where the clock is missing. Unlike
// wall time it leaves out what the OS or a hypervisor (steal) took away.
SimTime thread_cpu_ns();

}  // namespace pipescope::exec
