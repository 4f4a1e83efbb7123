#pragma once
// Chrome trace event JSON of a Timeline (DESIGN.md, "Trace"), for Perfetto and
// chrome://tracing: pid = device, tid = lane (0 compute, 1 send, 2 recv; slices
// that would overlap on a lane get further rows, tid + 3, + 6, ...),
// complete events "X" with stage and micro-batch in args, counter events "C" for
// memory, flow events "s"/"f" from each send to its receive. Times in
// microseconds. Written as a stream, in a fixed order, so the same timeline gives
// the same bytes.

#include <filesystem>
#include <istream>
#include <ostream>
#include <stdexcept>
#include <string>

#include "sim/timeline.h"

namespace pipescope {

void write_chrome_trace(std::ostream& out, const Timeline& timeline);

// Writes to `path` through a temporary file renamed into place, so a failed run
// leaves no half-written trace. Throws std::runtime_error naming the file.
void write_chrome_trace_file(const std::filesystem::path& path, const Timeline& timeline);

// A trace that cannot be read back; what() reads "FILE: PATH: MESSAGE" (or
// "FILE: MESSAGE"), PATH being the JSON path of the first problem.
class TraceError : public std::runtime_error {
 public:
  TraceError(std::string file, std::string json_path, const std::string& message);
  const std::string& file() const { return file_; }
  const std::string& json_path() const { return json_path_; }

 private:
  std::string file_;
  std::string json_path_;
};

// Reads a trace this program wrote (`simulate --trace`, `run --trace`) back into
// a Timeline, for laying a measured run over a prediction: device names, compute
// ops and transfers (kind from "cat", lane from the tid, stage, micro-batch,
// bytes, receiving stage, links, CPU time, flow ids from the flow events that
// follow their slice), and the memory counters; writing the result again gives
// the same bytes. Routes are numbered by route_id() from the transfer's
// direction and stages; a route no transfer took has no name in the trace and
// comes back as "". Times are microseconds with three decimals; they become
// exact nanoseconds below 2^43 us (8.8e15 ns, about 101 days), and larger ones
// are refused. Events of kinds this program does not write are skipped; ours
// with a missing, mistyped or inconsistent field are errors.
Timeline read_chrome_trace(std::istream& in, const std::string& file);
Timeline read_chrome_trace_file(const std::filesystem::path& path);

}  // namespace pipescope
