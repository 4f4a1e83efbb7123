#pragma once
// Chrome trace event JSON of a Timeline (DESIGN.md, "Trace"), for Perfetto and
// chrome://tracing: pid = device, tid = lane (0 compute, 1 send, 2 recv; slices
// that would overlap on a lane get further rows, tid + 3, + 6, ...),
// complete events "X" with stage and micro-batch in args, counter events "C" for
// memory, flow events "s"/"f" from each send to its receive. Times in
// microseconds. Written as a stream, in a fixed order, so the same timeline gives
// the same bytes.

#include <filesystem>
#include <ostream>

#include "sim/timeline.h"

namespace pipescope {

void write_chrome_trace(std::ostream& out, const Timeline& timeline);

// Writes to `path` through a temporary file renamed into place, so a failed run
// leaves no half-written trace. Throws std::runtime_error naming the file.
void write_chrome_trace_file(const std::filesystem::path& path, const Timeline& timeline);

}  // namespace pipescope
