#pragma once
// Every file PipeScope writes goes through write_file_atomically. What it
// promises (docs/bad-input-and-files.md says the same):
// - A regular file (or a new one) is written whole or not at all: the data goes
//   to a temporary file that no other process can own or predict (unnamed,
//   O_TMPFILE, where the file system has it; otherwise created exclusively under
//   a random name beside the target), is flushed and fsync()ed, and then
//   renamed over the target, keeping the target's permissions. On an error, an
//   exception, a stop request or a signal the temporary file is removed; an
//   unnamed one disappears even when the process is killed with SIGKILL, and
//   a named one that SIGKILL left is removed by the next write of the same
//   output once its writer is proven dead (remove_dead_temporaries).
// - A symbolic link is followed: the file it points to is replaced, the link
//   stays.
// - An output that is not a regular file (a character device such as
//   /dev/null, a FIFO, a socket) is written to directly and never replaced.
// - "-" is standard output, and so are /dev/stdout and /proc/self/fd/1.
// - A name of another open descriptor (/dev/stderr, /dev/fd/N,
//   /proc/self/fd/N, directly or through links) is written through that
//   descriptor, at its offset as the shell opened it (appending after `>>`),
//   never renamed over the file it stands for.
// - A name ending in ".gz" is written compressed (gzip).
// - Once refuse_overwriting_inputs(true) (the command line's), a regular file
//   this process has read as an input (sim/base/input_file.h) is not replaced: an
//   OutputError says which input it is, and nothing is written.
// - Every write is checked: a full disk, a closed pipe or the file size limit
//   is an OutputError naming the output and the reason.
// - A write that takes more than two seconds shows its progress on a terminal.

#include <filesystem>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "sim/base/output_stream.h"

namespace pipescope {

// Calls write(stream) and puts the result in place at `path` as said above.
// Throws OutputError naming `path` when it cannot create, write or rename, and
// Cancelled when a stop was requested (sim/base/cancel.h) before the data was
// complete; what write() throws passes through. In every one of these cases
// `path` is left as it was.
void write_file_atomically(const std::filesystem::path& path,
                           const std::function<void(std::ostream&)>& write);

inline void write_file_atomically(const std::filesystem::path& path, const std::string& text) {
  write_file_atomically(path, [&](std::ostream& out) { out << text; });
}

// One of several outputs that a command writes together.
struct Output {
  std::filesystem::path path;
  std::function<void(std::ostream&)> write;
};

// Writes several outputs as one: every name is resolved (a folder refused)
// and every regular file written to its temporary before any is put in
// place, then each is renamed over its target in turn. When anything fails
// before the renames, every output is left as it was; only a rename that
// fails after others succeeded (the folder changed meanwhile) leaves those
// before it in place. Outputs that are not regular files (standard output, a
// device, a FIFO, an open descriptor) are written after the regular ones are
// staged and before they are put in place.
void write_files_atomically(const std::vector<Output>& outputs);

// For tests: false makes every regular output take the named way, as on file
// systems without unnamed temporary files.
void use_unnamed_temporaries(bool use);

// true: an output that names a regular file this process read as an input
// is refused (the command line: `plan s.json -o s.json` would lose the
// scenario). The desktop app leaves it off: its save dialogs ask first.
void refuse_overwriting_inputs(bool refuse);

// Whether `path` names standard output: "-", or a name of descriptor 1
// (/dev/stdout, /dev/fd/1, /proc/self/fd/1, directly or through links).
bool is_standard_output(const std::filesystem::path& path);
// The open descriptor `path` names (/dev/stdin, /dev/stdout, /dev/stderr,
// /dev/fd/N, /proc/self/fd/N, /proc/thread-self/fd/N, /proc/<this
// process>/fd/N), directly or through symbolic links; nothing otherwise.
std::optional<int> open_descriptor_named(const std::filesystem::path& path);
// How a message names where an output went: "standard output" for "-", else
// the path.
std::string output_name(const std::string& path);

// For a command one of whose outputs is "-": from now on the data written to
// "-" goes to the process's standard output and everything else the program
// prints there (summaries, notes) goes to standard error, so the two never mix.
void reserve_standard_output_for_data();

// Makes standard output (printf and std::cout alike) remember why its first
// write failed, which stdio itself forgets: "No space left on device" rather
// than a guess. Call once, first thing in main().
void check_standard_output_writes();

// Flushes and checks standard output (and the data descriptor, when reserved):
// throws OutputError("standard output", ...) when a write failed, e.g. on a
// full disk. A reader that went away (EPIPE) is not an error: the caller ends
// quietly, as `| head` expects.
void finish_standard_output();

}  // namespace pipescope
