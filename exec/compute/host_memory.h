#pragma once
// How the CPU executor's process treats memory it frees, and how much it may
// take.
//
// Every step allocates and frees the same activation buffers. glibc's malloc by
// default hands large freed blocks back to the OS (munmap, or trimming the top
// of a heap), so the next step page-faults them in again; how often depends on
// which arena a thread drew and on what the process did before (a profile
// measured after other work saw a forward that keeps its stash cost 27 % more,
// or nothing more). Training frameworks keep freed memory in a cache for reuse
// instead; this does the same with malloc's own settings, so that a step costs
// the same every time and a profile predicts it.

#include <cstdint>
#include <optional>
#include <string>

namespace pipescope::exec {

// What the executor keeps for a parameter: its fp32 weight and gradient and
// the optimizer's two fp32 moments (Adam's; SGD keeps less).
inline constexpr double kStateBytesPerParam = 16.0;

// Process-wide: no trimming of freed memory at the top of a heap, blocks up
// to 32 MiB (glibc's largest setting) from the heap instead of their own
// mappings, and a thread's arena keeping its heaps of 64 MiB once they are
// empty (by default they are unmapped then, and a step whose threads free
// more than that between allocations maps them again page by page: on the
// 2-core machine of docs/executor.md, 1,400 mappings a step and the step
// 12-22 % longer for the all-to-all form of context parallelism). For
// programs that run the executor or the profiler; call before they start.
// Returns false where the C library has no such settings (not glibc), which
// leaves the defaults.
bool keep_freed_memory();

// Memory this process can still take: MemAvailable of /proc/meminfo, or the
// limit of its control group (cgroup v2 memory.max, v1 memory.limit_in_bytes,
// the lowest on its path) when that is lower. `source` names where the figure
// comes from, for messages. Empty when neither can be read.
struct HostMemory {
  std::int64_t bytes = 0;
  std::string source;
};
std::optional<HostMemory> host_memory_available();

}  // namespace pipescope::exec
