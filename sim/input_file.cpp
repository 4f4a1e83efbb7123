#include "sim/input_file.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <functional>

#include "sim/cancel.h"
#include "sim/file_descriptor.h"
#include "sim/scenario_io.h"
#include "sim/trace_io.h"

namespace pipescope {
namespace {

// How often a wait for a writer or for data looks at the stop request: often
// enough that Ctrl-C feels immediate, rarely enough to cost nothing.
constexpr int kPollMilliseconds = 100;

// Reports a problem with the file; throws (each reader its own error type).
using Fail = std::function<void(const std::string& reason)>;

// Waits until `fd` has data or has reached its end. A FIFO opened without
// blocking reads as empty until its first writer connects, and Linux's poll()
// reports nothing for it until then (POLLHUP only once a writer has come and
// gone), so reading only after poll() reports keeps what a blocking open means:
// the content the writer will send.
void wait_readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  for (;;) {
    throw_if_cancelled();
    const int ready = ::poll(&p, 1, kPollMilliseconds);
    if (ready > 0 || (ready < 0 && errno != EINTR)) return;  // read() reports errors
  }
}

std::string read_all(const std::filesystem::path& path, std::uint64_t max_bytes,
                     const std::string& what, const Fail& fail) {
  const FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (fd.get() < 0) fail("cannot open file");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail("cannot read file");
  if (S_ISDIR(st.st_mode)) fail("cannot open file: it is a directory");
  const auto too_large = [&] {
    fail("larger than " + byte_size_text(max_bytes) + ", the limit for " + what);
  };
  // Regular files never block; anything else (FIFOs, pipes, devices) may wait.
  const bool regular = S_ISREG(st.st_mode);
  if (regular && static_cast<std::uint64_t>(st.st_size) > max_bytes) too_large();
  std::string text;
  if (regular) text.reserve(static_cast<std::size_t>(st.st_size));
  std::array<char, 1 << 16> buffer;
  for (;;) {
    if (regular) {
      throw_if_cancelled();
    } else {
      wait_readable(fd.get());
    }
    const ssize_t n = ::read(fd.get(), buffer.data(), buffer.size());
    if (n == 0) return text;
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      fail("cannot read file");
    }
    if (text.size() + static_cast<std::size_t>(n) > max_bytes) too_large();
    text.append(buffer.data(), static_cast<std::size_t>(n));
  }
}

}  // namespace

std::string read_input_file(const std::filesystem::path& path, const std::string& label,
                            std::uint64_t max_bytes, const std::string& what) {
  return read_all(path, max_bytes, what,
                  [&](const std::string& reason) { throw ScenarioError(label, "", reason); });
}

std::string read_trace_input(const std::filesystem::path& path) {
  return read_all(path, kMaxTraceBytes, "a Chrome trace",
                  [&](const std::string& reason) { throw TraceError(path.string(), "", reason); });
}

std::string byte_size_text(std::uint64_t bytes) {
  for (const auto& [shift, unit] : {std::pair{30, " GiB"}, {20, " MiB"}, {10, " KiB"}}) {
    const std::uint64_t size = 1ULL << shift;
    if (bytes >= size && bytes % size == 0) return std::to_string(bytes / size) + unit;
  }
  return std::to_string(bytes) + " bytes";
}

}  // namespace pipescope
