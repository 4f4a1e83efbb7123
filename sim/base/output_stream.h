#pragma once
// The stream buffers every output goes through (sim/base/file_io.h):
// - FdOutputBuf writes to a file descriptor and checks every write: a full disk,
//   /dev/full, a closed pipe or the file size limit throws OutputError naming
//   the output; a stop request (sim/base/cancel.h) throws Cancelled, so a long trace
//   stops within one buffer of Ctrl-C. It counts bytes for WriteProgress.
// - GzipOutputBuf compresses into another buffer in the gzip format (zlib),
//   which Perfetto and chrome://tracing open as they are.
// Both throw from inside an ostream; the ostream must have exceptions(badbit)
// set to let the error through (write_file_atomically does).

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <streambuf>
#include <string>
#include <vector>

namespace pipescope {

// A failed write, read or open of an output: "LABEL: cannot write: REASON".
class OutputError : public std::runtime_error {
 public:
  OutputError(const std::string& label, const std::string& action, int err);
  // "label: reason", for a refusal that is no system error (error_number 0).
  OutputError(const std::string& label, const std::string& reason);
  int error_number() const { return errno_; }

 private:
  int errno_;
};

// Reports how far a long write has come: nothing for the first two seconds,
// then a line every half second ("pipescope: writing trace.json: 1.20 GiB at
// 310 MB/s"), cleared when the write ends. By default the line goes to stderr
// when it is a terminal, and nowhere otherwise; tests give a clock and a sink.
class WriteProgress {
 public:
  using Clock = std::function<double()>;  // seconds
  using Sink = std::function<void(const std::string& line)>;
  explicit WriteProgress(std::string label);
  WriteProgress(std::string label, Clock clock, Sink sink);
  ~WriteProgress();  // clears the line it drew
  WriteProgress(const WriteProgress&) = delete;
  WriteProgress& operator=(const WriteProgress&) = delete;

  void add(std::uint64_t bytes);
  std::uint64_t bytes() const { return bytes_; }

 private:
  std::string label_;
  Clock clock_;
  Sink sink_;
  double start_ = 0.0;
  double last_report_ = -1.0;
  std::uint64_t bytes_ = 0;
  bool drew_ = false;
};

// "1.20 GiB at 310 MB/s" (sim/base/format.h's units).
std::string progress_text(std::uint64_t bytes, double seconds);

class FdOutputBuf final : public std::streambuf {
 public:
  FdOutputBuf(int fd, std::string label, WriteProgress* progress = nullptr);
  // Writes what is buffered; throws like overflow().
  void flush_all();

 protected:
  int_type overflow(int_type ch) override;
  std::streamsize xsputn(const char* s, std::streamsize n) override;
  int sync() override;

 private:
  void write_out(const char* data, std::size_t size);

  int fd_;
  std::string label_;
  WriteProgress* progress_;
  std::vector<char> buffer_;
};

class GzipOutputBuf final : public std::streambuf {
 public:
  // level: zlib's 1 (fastest) to 9 (smallest).
  GzipOutputBuf(std::streambuf& downstream, std::string label, int level = 1);
  ~GzipOutputBuf() override;
  GzipOutputBuf(const GzipOutputBuf&) = delete;
  GzipOutputBuf& operator=(const GzipOutputBuf&) = delete;
  // Compresses what is buffered and writes the gzip trailer.
  void finish();

 protected:
  int_type overflow(int_type ch) override;
  std::streamsize xsputn(const char* s, std::streamsize n) override;

 private:
  void deflate_out(const char* data, std::size_t size, int flush);

  struct State;
  std::unique_ptr<State> state_;
  std::streambuf& downstream_;
  std::string label_;
  std::vector<char> input_;
  std::vector<char> output_;
};

// Whether `path` asks for gzip: it ends in ".gz".
bool wants_gzip(const std::string& path);

}  // namespace pipescope
