#include "sim/base/input_file.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <utility>

#include "sim/base/cancel.h"
#include "sim/base/file_descriptor.h"
#include "sim/base/output_stream.h"
#include "sim/base/scenario_error.h"

namespace pipescope {
namespace {

// How often a wait for a writer or for data looks at the stop request: often
// enough that Ctrl-C feels immediate, rarely enough to cost nothing.
constexpr int kPollMilliseconds = 100;

// Reports a problem with the file; throws (each reader its own error type).
using Fail = InputFailure;

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

// The regular files read so far, by device and inode, and the names they
// were read as.
struct InputsRead {
  std::mutex mutex;
  std::map<std::pair<dev_t, ino_t>, std::string> names;
};
InputsRead& inputs_read() {
  static InputsRead inputs;
  return inputs;
}

void note_input(const struct stat& st, const std::filesystem::path& path) {
  InputsRead& r = inputs_read();
  const std::lock_guard<std::mutex> lock(r.mutex);
  r.names.emplace(std::make_pair(st.st_dev, st.st_ino), path.string());
}

std::string read_all(const std::filesystem::path& path, std::uint64_t max_bytes,
                     const std::string& what, const Fail& fail) {
  // "-" is standard input, as an output's "-" is standard output.
  const std::filesystem::path opened = path == "-" ? std::filesystem::path("/dev/stdin") : path;
  const FileDescriptor fd(::open(opened.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
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
  if (regular) note_input(st, path);
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

// The content of the gzip data `packed` (one member or several, as `cat a.gz
// b.gz` makes), at most `max_bytes` of it.
std::string gunzip(const std::string& packed, std::uint64_t max_bytes, const std::string& what,
                   const Fail& fail) {
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) fail("cannot decompress: out of memory");
  const struct End {
    z_stream& z;
    ~End() { inflateEnd(&z); }
  } end{z};
  const auto* const first = reinterpret_cast<const Bytef*>(packed.data());
  const auto* const last = first + packed.size();
  z.next_in = const_cast<Bytef*>(first);
  std::string text;
  std::array<char, 1 << 16> buffer;
  for (;;) {
    throw_if_cancelled();
    z.avail_in = static_cast<uInt>(
        std::min<std::size_t>(last - z.next_in, std::numeric_limits<uInt>::max()));
    z.next_out = reinterpret_cast<Bytef*>(buffer.data());
    z.avail_out = static_cast<uInt>(buffer.size());
    const int status = inflate(&z, Z_NO_FLUSH);
    const std::size_t produced = buffer.size() - z.avail_out;
    if (text.size() + produced > max_bytes) {
      fail("larger than " + byte_size_text(max_bytes) + " uncompressed, the limit for " + what);
    }
    text.append(buffer.data(), produced);
    const bool all_read = z.next_in == last;
    if (status == Z_STREAM_END && all_read) return text;
    if (status == Z_STREAM_END) {
      inflateReset(&z);  // another member follows
    } else if (status == Z_BUF_ERROR && all_read) {
      fail("not valid gzip: the data ends early");
    } else if (status != Z_OK) {
      fail("not valid gzip data");
    }
  }
}

}  // namespace

std::string read_input_file(const std::filesystem::path& path, const std::string& label,
                            std::uint64_t max_bytes, const std::string& what) {
  return read_all(path, max_bytes, what,
                  [&](const std::string& reason) { throw ScenarioError(label, "", reason); });
}

std::optional<std::string> read_as(const struct stat& st) {
  InputsRead& r = inputs_read();
  const std::lock_guard<std::mutex> lock(r.mutex);
  const auto it = r.names.find(std::make_pair(st.st_dev, st.st_ino));
  if (it == r.names.end()) return std::nullopt;
  return it->second;
}

std::string read_maybe_gzipped(const std::filesystem::path& path, std::uint64_t max_bytes,
                               const std::string& what, const InputFailure& fail) {
  std::string text = read_all(path, max_bytes, what, fail);
  if (!wants_gzip(path.string())) return text;
  return gunzip(text, max_bytes, what, fail);
}

std::string byte_size_text(std::uint64_t bytes) {
  for (const auto& [shift, unit] : {std::pair{30, " GiB"}, {20, " MiB"}, {10, " KiB"}}) {
    const std::uint64_t size = 1ULL << shift;
    if (bytes >= size && bytes % size == 0) return std::to_string(bytes / size) + unit;
  }
  return std::to_string(bytes) + " bytes";
}

}  // namespace pipescope
