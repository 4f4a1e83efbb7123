#include "exec/compute/thread_clock.h"

#ifdef __linux__
#include <time.h>
#endif

namespace pipescope::exec {

SimTime thread_cpu_ns() {
#ifdef __linux__
  timespec t{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) != 0) return -1;
  return SimTime{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
#else
  return -1;
#endif
}

}  // namespace pipescope::exec
