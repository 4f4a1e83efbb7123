#include "sim/base/output_stream.h"

#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "sim/base/cancel.h"
#include "sim/base/format.h"

namespace pipescope {

namespace {

constexpr std::size_t kBufferBytes = std::size_t{1} << 20;
constexpr double kQuietSeconds = 2.0;   // a write shorter than this shows nothing
constexpr double kReportSeconds = 0.5;  // then a new line this often

double steady_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

WriteProgress::Sink terminal_sink() {
  if (::isatty(STDERR_FILENO) == 0) return {};
  return [](const std::string& line) {
    // "\r" + the line + clear to the end of the line; an empty line clears.
    std::fprintf(stderr, "\r%s\033[K", line.c_str());
    std::fflush(stderr);
  };
}

}  // namespace

OutputError::OutputError(const std::string& label, const std::string& action, int err)
    : std::runtime_error(label + ": " + action + ": " + std::strerror(err)), errno_(err) {}

OutputError::OutputError(const std::string& label, const std::string& reason)
    : std::runtime_error(label + ": " + reason), errno_(0) {}

std::string progress_text(std::uint64_t bytes, double seconds) {
  const double rate = seconds > 0.0 ? static_cast<double>(bytes) / seconds : 0.0;
  return format_bytes(static_cast<double>(bytes)) + " at " + format_rate(rate);
}

WriteProgress::WriteProgress(std::string label)
    : WriteProgress(std::move(label), steady_seconds, terminal_sink()) {}

WriteProgress::WriteProgress(std::string label, Clock clock, Sink sink)
    : label_(std::move(label)), clock_(std::move(clock)), sink_(std::move(sink)) {
  start_ = clock_();
}

WriteProgress::~WriteProgress() {
  if (drew_) sink_("");
}

void WriteProgress::add(std::uint64_t bytes) {
  bytes_ += bytes;
  if (!sink_) return;
  const double now = clock_();
  if (now - start_ < kQuietSeconds) return;
  if (last_report_ >= 0.0 && now - last_report_ < kReportSeconds) return;
  last_report_ = now;
  drew_ = true;
  sink_("pipescope: writing " + label_ + ": " + progress_text(bytes_, now - start_));
}

FdOutputBuf::FdOutputBuf(int fd, std::string label, WriteProgress* progress)
    : fd_(fd), label_(std::move(label)), progress_(progress), buffer_(kBufferBytes) {
  setp(buffer_.data(), buffer_.data() + buffer_.size());
}

void FdOutputBuf::write_out(const char* data, std::size_t size) {
  throw_if_cancelled();
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd_, data + done, size - done);
    if (n < 0 && errno == EINTR) {
      throw_if_cancelled();
      continue;
    }
    if (n < 0) throw OutputError(label_, "cannot write", errno);
    if (n == 0) throw OutputError(label_, "cannot write", EIO);
    done += static_cast<std::size_t>(n);
  }
  if (progress_ != nullptr) progress_->add(size);
}

void FdOutputBuf::flush_all() {
  const auto pending = static_cast<std::size_t>(pptr() - pbase());
  setp(buffer_.data(), buffer_.data() + buffer_.size());
  if (pending > 0) write_out(buffer_.data(), pending);
}

FdOutputBuf::int_type FdOutputBuf::overflow(int_type ch) {
  flush_all();
  if (!traits_type::eq_int_type(ch, traits_type::eof())) {
    *pptr() = traits_type::to_char_type(ch);
    pbump(1);
  }
  return traits_type::not_eof(ch);
}

std::streamsize FdOutputBuf::xsputn(const char* s, std::streamsize n) {
  const auto size = static_cast<std::size_t>(n);
  if (size <= static_cast<std::size_t>(epptr() - pptr())) {
    std::memcpy(pptr(), s, size);
    pbump(static_cast<int>(n));
    return n;
  }
  flush_all();
  if (size >= buffer_.size()) {
    write_out(s, size);
  } else {
    std::memcpy(pptr(), s, size);
    pbump(static_cast<int>(n));
  }
  return n;
}

int FdOutputBuf::sync() {
  flush_all();
  return 0;
}

struct GzipOutputBuf::State {
  z_stream z{};
};

GzipOutputBuf::GzipOutputBuf(std::streambuf& downstream, std::string label, int level)
    : state_(std::make_unique<State>()),
      downstream_(downstream),
      label_(std::move(label)),
      input_(kBufferBytes),
      output_(kBufferBytes) {
  // windowBits 15 + 16: the gzip wrapper rather than zlib's own.
  if (deflateInit2(&state_->z, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    throw OutputError(label_, "cannot start compressing", ENOMEM);
  }
  setp(input_.data(), input_.data() + input_.size());
}

GzipOutputBuf::~GzipOutputBuf() {
  deflateEnd(&state_->z);
}

void GzipOutputBuf::deflate_out(const char* data, std::size_t size, int flush) {
  z_stream& z = state_->z;
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data));
  z.avail_in = static_cast<uInt>(size);
  int rc = Z_OK;
  do {
    z.next_out = reinterpret_cast<Bytef*>(output_.data());
    z.avail_out = static_cast<uInt>(output_.size());
    rc = deflate(&z, flush);
    if (rc == Z_STREAM_ERROR) throw OutputError(label_, "cannot compress", EIO);
    const auto produced = static_cast<std::streamsize>(output_.size() - z.avail_out);
    // The downstream buffer throws on a failed write; sputn's count is a check.
    if (downstream_.sputn(output_.data(), produced) != produced) {
      throw OutputError(label_, "cannot write", EIO);
    }
  } while (z.avail_out == 0 || (flush == Z_FINISH && rc != Z_STREAM_END));
}

GzipOutputBuf::int_type GzipOutputBuf::overflow(int_type ch) {
  deflate_out(pbase(), static_cast<std::size_t>(pptr() - pbase()), Z_NO_FLUSH);
  setp(input_.data(), input_.data() + input_.size());
  if (!traits_type::eq_int_type(ch, traits_type::eof())) {
    *pptr() = traits_type::to_char_type(ch);
    pbump(1);
  }
  return traits_type::not_eof(ch);
}

std::streamsize GzipOutputBuf::xsputn(const char* s, std::streamsize n) {
  const auto size = static_cast<std::size_t>(n);
  if (size <= static_cast<std::size_t>(epptr() - pptr())) {
    std::memcpy(pptr(), s, size);
    pbump(static_cast<int>(n));
    return n;
  }
  overflow(traits_type::eof());
  deflate_out(s, size, Z_NO_FLUSH);
  return n;
}

void GzipOutputBuf::finish() {
  deflate_out(pbase(), static_cast<std::size_t>(pptr() - pbase()), Z_FINISH);
  setp(input_.data(), input_.data() + input_.size());
}

bool wants_gzip(const std::string& path) {
  return path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
}

}  // namespace pipescope
