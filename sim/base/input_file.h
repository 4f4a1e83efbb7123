#pragma once
// Reading an input file whole, the one way every reader does it: scenarios, plans,
// profiles, Hugging Face configs, schedule CSVs and Chrome traces.
//
// - Anything that can be opened for reading is read like a file: a regular file,
//   a FIFO (mkfifo), a process substitution (<(jq ... s.json), /dev/fd/N), a
//   character device, and "-", standard input. Each is opened once and read
//   once, to its end.
// - Waiting for a writer or for data never holds off a stop request: the file is
//   opened without blocking and polled, and Ctrl-C (sim/base/cancel.h) ends the wait
//   with Cancelled within a fraction of a second.
// - Each kind of input has a size limit, checked before and while reading, so a
//   wrong file (a disk image, /dev/zero) is refused at once rather than read into
//   memory. The limits are far above real files of each kind.

#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

namespace pipescope {

// Scenarios (even 16,384 explicit layers take a few MB), profiles and Hugging
// Face configs (a few KB). A JSON document takes several times its size in
// memory once parsed, so the limit also bounds what a wrong file can cost.
inline constexpr std::uint64_t kMaxDocumentBytes = 64ULL << 20;  // 64 MiB
// Plans and schedule CSVs, which list every action of every device: K = 1024
// devices and M = 8192 micro-batches take about 130 MB.
inline constexpr std::uint64_t kMaxPlanBytes = 512ULL << 20;  // 512 MiB
// Chrome traces, which the GUI reads: the full trace of a large
// pipeline runs to gigabytes.
inline constexpr std::uint64_t kMaxTraceBytes = 4ULL << 30;  // 4 GiB

// The whole content of `path`, at most `max_bytes` of it; `what` names the kind
// of input in the error about its size ("a scenario"). Errors are ScenarioErrors
// (sim/base/scenario_error.h) naming `label`: "cannot open file", "cannot open file: it
// is a directory", "larger than 64 MiB, the limit for a scenario". Throws
// Cancelled when a stop is requested while waiting.
std::string read_input_file(const std::filesystem::path& path, const std::string& label,
                            std::uint64_t max_bytes, const std::string& what);

// Why a read failed ("cannot open file", "not valid gzip data"), for the
// caller to throw as its own kind of error; it must not return.
using InputFailure = std::function<void(const std::string& reason)>;

// The whole content of `path` as read_input_file reads it, decompressed when
// the name ends in ".gz" (gzip, one member or several) with the same limit on
// what it holds; every error goes through `fail`. Chrome traces are read so
// (read_trace_input, sim/formats/trace_io.h).
std::string read_maybe_gzipped(const std::filesystem::path& path, std::uint64_t max_bytes,
                               const std::string& what, const InputFailure& fail);

// The name under which this process read the regular file `st` describes (by
// device and inode), if any reader above read it: outputs can refuse to
// replace an input (sim/base/file_io.h).
std::optional<std::string> read_as(const struct stat& st);

// "64 MiB", "4 GiB", "512 bytes": a limit as the errors print it.
std::string byte_size_text(std::uint64_t bytes);

}  // namespace pipescope
