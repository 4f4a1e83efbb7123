// Reading inputs (sim/base/input_file.h): regular files, FIFOs and pipes alike, a stop
// request that ends a wait for a writer, and each kind's size limit.

#include "sim/base/input_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "sim/base/cancel.h"
#include "sim/base/file_io.h"
#include "sim/formats/trace_io.h"
#include "sim/scenario/scenario_io.h"

namespace pipescope {
namespace {

namespace fs = std::filesystem;

class InputFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("pipescope_input_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    reset_cancel();
  }
  void TearDown() override {
    reset_cancel();
    fs::remove_all(dir_);
  }

  fs::path write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  fs::path fifo(const std::string& name) {
    const fs::path p = dir_ / name;
    EXPECT_EQ(::mkfifo(p.c_str(), 0600), 0);
    return p;
  }
  // The message of the ScenarioError reading `path` throws, or "" when it reads.
  static std::string error_reading(const fs::path& path, std::uint64_t max_bytes = 1 << 10) {
    try {
      (void)read_input_file(path, "in.json", max_bytes, "a test input");
    } catch (const ScenarioError& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

// Writes `text` into the FIFO once a reader has it open, and closes it, as a
// shell's `cat s.json > fifo` does. Gives up after 20 s without a reader, so that
// a reader that went away early fails its test instead of hanging it.
bool write_to_fifo(const fs::path& path, const std::string& text) {
  int fd = -1;
  for (int i = 0; i < 2000 && fd < 0; ++i) {
    fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);  // ENXIO: no reader yet
    if (fd < 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (fd < 0) return false;
  ::fcntl(fd, F_SETFL, 0);
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  return done == text.size();
}

TEST_F(InputFile, ReadsARegularFileWhole) {
  const std::string text(200000, 'x');
  EXPECT_EQ(read_input_file(write("big.txt", text), "big.txt", 1 << 20, "a test input"), text);
  EXPECT_EQ(read_input_file(write("empty.txt", ""), "empty.txt", 1, "a test input"), "");
}

// The writer connects after the reader has started waiting: the reader must wait
// for it rather than take the empty FIFO for an empty file (a FIFO opened without
// blocking reads as empty before its first writer connects).
TEST_F(InputFile, WaitsForAFifosWriter) {
  const fs::path path = fifo("late_writer.json");
  const std::string text(100000, 'y');  // more than a pipe holds at once
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_TRUE(write_to_fifo(path, text));
  });
  const std::string got = read_input_file(path, "late_writer.json", 1 << 20, "a test input");
  writer.join();
  EXPECT_EQ(got.size(), text.size());
  EXPECT_EQ(got, text);
}

// Nobody ever writes: a stop request ends the wait with Cancelled. The guard
// connects a writer after 20 s so that a reader that ignores the request ends
// (with an empty text, failing the test) instead of hanging the suite.
TEST_F(InputFile, StopRequestEndsTheWaitForAWriter) {
  const fs::path path = fifo("nobody.json");
  std::atomic<bool> done{false};
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    request_cancel();
    for (int i = 0; i < 200 && !done; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (!done) write_to_fifo(path, "");
  });
  bool cancelled = false;
  try {
    (void)read_input_file(path, "nobody.json", 1 << 10, "a test input");
  } catch (const Cancelled&) {
    cancelled = true;
  }
  done = true;
  stopper.join();
  EXPECT_TRUE(cancelled);
}

TEST_F(InputFile, ReadsAPipeToItsEnd) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const std::string text = "{\"a\": 1}\n";
  ASSERT_EQ(::write(fds[1], text.data(), text.size()), static_cast<ssize_t>(text.size()));
  ::close(fds[1]);
  // What a process substitution <(...) passes: /dev/fd/N.
  const fs::path path = "/dev/fd/" + std::to_string(fds[0]);
  EXPECT_EQ(read_input_file(path, "pipe", 1 << 10, "a test input"), text);
  ::close(fds[0]);
}

TEST_F(InputFile, RefusesFilesOverTheLimit) {
  EXPECT_EQ(error_reading(write("exact.json", std::string(1024, ' '))), "");
  EXPECT_EQ(error_reading(write("over.json", std::string(1025, ' '))),
            "in.json: larger than 1 KiB, the limit for a test input");
}

// A stream has no size to check first: it is refused once it passes the limit,
// however long it would go on (/dev/zero never ends).
TEST_F(InputFile, RefusesStreamsOverTheLimit) {
  EXPECT_EQ(error_reading("/dev/zero"), "in.json: larger than 1 KiB, the limit for a test input");
  // The reader leaves before the writer is done: the writer's write fails with
  // EPIPE rather than ending the test program.
  const auto previous = std::signal(SIGPIPE, SIG_IGN);
  const fs::path path = fifo("long.json");
  std::thread writer([&] { (void)write_to_fifo(path, std::string(500000, 'z')); });
  EXPECT_EQ(error_reading(path), "in.json: larger than 1 KiB, the limit for a test input");
  writer.join();
  std::signal(SIGPIPE, previous);
}

TEST_F(InputFile, NamesWhatCannotBeRead) {
  EXPECT_EQ(error_reading(dir_ / "missing.json"), "in.json: cannot open file");
  EXPECT_EQ(error_reading(dir_), "in.json: cannot open file: it is a directory");
}

TEST_F(InputFile, TracesHaveTheirOwnLimitAndError) {
  EXPECT_EQ(kMaxTraceBytes, 4ULL << 30);
  try {
    (void)read_trace_input(dir_ / "missing_trace.json");
    FAIL() << "expected TraceError";
  } catch (const TraceError& e) {
    EXPECT_EQ(e.file(), (dir_ / "missing_trace.json").string());
    EXPECT_EQ(std::string(e.what()), (dir_ / "missing_trace.json").string() + ": cannot open file");
  }
  const std::string text = "{\"traceEvents\": []}";
  EXPECT_EQ(read_trace_input(write("t.json", text)), text);
}

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// The trace error for reading `path` with a limit of `max_bytes`; "" when read.
std::string trace_error(const fs::path& path, std::uint64_t max_bytes) {
  try {
    (void)read_trace_input(path, max_bytes);
  } catch (const TraceError& e) {
    return e.what();
  }
  return "";
}

// A trace named *.gz is read as the writer writes it: gzip, one member or several
// (`cat a.gz b.gz`), with the limit on what it holds, not on its compressed size.
TEST_F(InputFile, DecompressesTracesNamedGz) {
  std::string text = "{\"traceEvents\": [";
  for (int i = 0; i < 20000; ++i) text += "{\"ph\":\"M\",\"pid\":" + std::to_string(i) + "},";
  text += "{}]}";
  const fs::path gz = dir_ / "t.json.gz";
  write_file_atomically(gz, text);
  ASSERT_LT(fs::file_size(gz), text.size() / 4) << "the writer did not compress";
  EXPECT_EQ(read_trace_input(gz), text);

  const fs::path twice = dir_ / "twice.json.gz";
  const std::string packed = slurp(gz);
  (void)write("twice.json.gz", packed + packed);
  EXPECT_EQ(read_trace_input(twice), text + text);

  EXPECT_EQ(trace_error(gz, text.size()), "");
  EXPECT_EQ(trace_error(gz, text.size() - 1), gz.string() + ": larger than " +
                                                  byte_size_text(text.size() - 1) +
                                                  " uncompressed, the limit for a Chrome trace");
  const fs::path cut = write("cut.json.gz", packed.substr(0, packed.size() / 2));
  EXPECT_EQ(trace_error(cut, 1 << 20), cut.string() + ": not valid gzip: the data ends early");
  const fs::path plain = write("plain.json.gz", text);
  EXPECT_EQ(trace_error(plain, 1 << 20), plain.string() + ": not valid gzip data");
  const fs::path tail = write("tail.json.gz", packed + "garbage");
  EXPECT_EQ(trace_error(tail, 1 << 20), tail.string() + ": not valid gzip data");
}

TEST(ByteSizeText, NamesTheLargestWholeUnit) {
  EXPECT_EQ(byte_size_text(kMaxDocumentBytes), "64 MiB");
  EXPECT_EQ(byte_size_text(kMaxPlanBytes), "512 MiB");
  EXPECT_EQ(byte_size_text(kMaxTraceBytes), "4 GiB");
  EXPECT_EQ(byte_size_text(1536), "1536 bytes");
  EXPECT_EQ(byte_size_text(2048), "2 KiB");
  EXPECT_EQ(byte_size_text(7), "7 bytes");
}

}  // namespace
}  // namespace pipescope
