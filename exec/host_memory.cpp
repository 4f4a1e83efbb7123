#include "exec/host_memory.h"

#include <climits>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace pipescope::exec {

bool keep_freed_memory() {
#if defined(__GLIBC__)
  // M_MMAP_THRESHOLD may not exceed half of a non-main heap (64 MiB on 64-bit
  // systems); setting it also stops glibc adjusting it on its own.
  constexpr int kLargestHeapBlock = 32 * 1024 * 1024;
  const bool trim = mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1;
  const bool mmap = mallopt(M_MMAP_THRESHOLD, kLargestHeapBlock) == 1;
  return trim && mmap;
#else
  return false;
#endif
}

}  // namespace pipescope::exec
