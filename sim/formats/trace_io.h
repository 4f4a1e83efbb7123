#pragma once
// Chrome trace event JSON of a Timeline (docs/file-formats.md, "Chrome traces"), for Perfetto and
// chrome://tracing: pid = device, tid = lane (0 compute, 1 send, 2 recv; slices
// that would overlap on a lane get further rows, tid + 3, + 6, ...; the
// tensor lane's rows are tid 1,000,000,000 + row),
// complete events "X" with stage and micro-batch in args, counter events "C" for
// memory, flow events "s"/"f" from each send to its receive. Times in
// microseconds. Written as a stream, in a fixed order, so the same timeline gives
// the same bytes.

#include <cstdint>
#include <filesystem>
#include <istream>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/base/input_file.h"
#include "sim/engine/timeline.h"

namespace pipescope {

// Writes the trace as the timeline comes, holding no more than a few numbers per
// lane: process names at begin(), each slice (and its flow event) as it comes,
// then the memory counters, and at end() the lanes' names, whose further rows
// are known only then. An event goes to the first row of its lane whose slices
// have ended by its start, so the bytes depend only on the order of the events.
class ChromeTraceWriter final : public TimelineSink {
 public:
  // Writes the opening of the document.
  explicit ChromeTraceWriter(std::ostream& out);
  void begin(const std::vector<std::string>& device_names,
             const std::vector<std::string>& route_names) override;
  void event(const TimelineEvent& e) override;
  void memory_point(int device, const MemoryPoint& point) override;
  // Writes the lanes' names and closes the document.
  void end() override;
  // Compute ops, transfers' halves and all-reduces written so far.
  std::int64_t slices() const { return slices_; }

 private:
  void put(const std::string& body);
  static void head(std::string& out, const char* ph, int pid, int tid);
  int row_for(const TimelineEvent& e);

  std::ostream& out_;
  std::vector<std::string> device_names_;
  std::vector<std::string> quoted_routes_;      // JSON strings, by route_id()
  std::vector<std::vector<SimTime>> row_ends_;  // [device * lanes + lane][row]: last end
  std::string buffer_;
  std::int64_t events_written_ = 0;
  std::int64_t slices_ = 0;
};

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
// with a missing, mistyped or inconsistent field are errors, as are malformed
// JSON, nesting deeper than any trace has and a key repeated in its object.
Timeline read_chrome_trace(std::istream& in, const std::string& file);
// The same from a file, read as every input is (sim/base/input_file.h): a FIFO or a
// process substitution like a file, within the traces' size limit, and a name
// ending in ".gz" decompressed.
Timeline read_chrome_trace_file(const std::filesystem::path& path);

// A Chrome trace's text, as read_chrome_trace_file reads it: the traces' size
// limit (4 GiB; tests set a smaller one), ".gz" decompressed; errors are
// TraceErrors naming `path`.
std::string read_trace_input(const std::filesystem::path& path,
                             std::uint64_t max_bytes = kMaxTraceBytes);

}  // namespace pipescope
