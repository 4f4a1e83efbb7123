// Outputs: written whole or not at all, through a temporary no one else can own
// or predict, never replacing a device, FIFO or socket, following links, checked
// on every write, compressed when the name ends in .gz, and removed on every
// way out, signals included.

#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "sim/base/cancel.h"
#include "sim/base/file_io.h"
#include "sim/base/signals.h"
#include "tests/open_files.h"

namespace pipescope {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The names in `dir`, sorted.
std::set<std::string> listing(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.insert(entry.path().filename());
  return names;
}

class FileIo : public ::testing::Test {
 protected:
  void SetUp() override {
    reset_cancel();
    use_unnamed_temporaries(true);
    dir_ = fs::temp_directory_path() /
           ("pipescope_file_io_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    reset_cancel();
    use_unnamed_temporaries(true);
    fs::remove_all(dir_);
  }
  fs::path dir_;
};

TEST_F(FileIo, WritesANewFileWholeAndNothingElse) {
  for (const bool unnamed : {true, false}) {
    use_unnamed_temporaries(unnamed);
    const fs::path out = dir_ / (unnamed ? "a.json" : "b.json");
    write_file_atomically(out, std::string(3'000'000, 'x'));
    EXPECT_EQ(slurp(out), std::string(3'000'000, 'x'));
  }
  EXPECT_EQ(listing(dir_), (std::set<std::string>{"a.json", "b.json"}));
}

TEST_F(FileIo, ReplacingKeepsTheFilesPermissions) {
  const fs::path out = dir_ / "plan.json";
  write_file_atomically(out, std::string("old"));
  fs::permissions(out, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  write_file_atomically(out, std::string("new"));
  EXPECT_EQ(slurp(out), "new");
  EXPECT_EQ(fs::status(out).permissions(),
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
}

// A planted OUT.tmp link to another file must not be written through: the old
// writer opened exactly that name.
TEST_F(FileIo, APlantedTemporaryLinkIsNotFollowed) {
  const fs::path victim = dir_ / "victim";
  write_file_atomically(victim, std::string("precious"));
  fs::create_symlink(victim, dir_ / "out.json.tmp");
  write_file_atomically(dir_ / "out.json", std::string("data"));
  EXPECT_EQ(slurp(victim), "precious");
  EXPECT_FALSE(fs::is_symlink(dir_ / "out.json"));
  EXPECT_EQ(slurp(dir_ / "out.json"), "data");
}

TEST_F(FileIo, ALinkToAFileReplacesTheFileAndKeepsTheLink) {
  fs::create_directories(dir_ / "real");
  write_file_atomically(dir_ / "real" / "trace.json", std::string("old"));
  fs::create_symlink("real/trace.json", dir_ / "link.json");
  write_file_atomically(dir_ / "link.json", std::string("new"));
  EXPECT_TRUE(fs::is_symlink(dir_ / "link.json"));
  EXPECT_EQ(slurp(dir_ / "real" / "trace.json"), "new");
  // A link to a file that does not exist yet creates that file.
  fs::create_symlink("real/fresh.json", dir_ / "dangling.json");
  write_file_atomically(dir_ / "dangling.json", std::string("made"));
  EXPECT_TRUE(fs::is_symlink(dir_ / "dangling.json"));
  EXPECT_EQ(slurp(dir_ / "real" / "fresh.json"), "made");
}

TEST_F(FileIo, ACharacterDeviceIsWrittenToNotReplaced) {
  write_file_atomically("/dev/null", std::string(5'000'000, 'x'));
  struct stat st {};
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

TEST_F(FileIo, AnOpenDescriptorIsWrittenThroughNotReplaced) {
  // As `-o /dev/fd/3 3>>log.txt` would: the data goes through the
  // descriptor, after what the file held, and the file stays the same file.
  const fs::path log = dir_ / "log.txt";
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "earlier\n", 8), 8);
  struct stat before {};
  ASSERT_EQ(::fstat(fd, &before), 0);
  const std::string n = std::to_string(fd);
  write_file_atomically("/proc/self/fd/" + n, std::string("proc\n"));
  write_file_atomically("/dev/fd/" + n, std::string("dev\n"));
  fs::create_symlink("/proc/self/fd/" + n, dir_ / "out");
  write_file_atomically(dir_ / "out", std::string("linked\n"));
  EXPECT_EQ(open_descriptor_named(dir_ / "out"), fd);
  ::close(fd);
  EXPECT_EQ(slurp(log), "earlier\nproc\ndev\nlinked\n");
  struct stat after {};
  ASSERT_EQ(::stat(log.c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino);
  EXPECT_TRUE(fs::is_symlink(dir_ / "out"));
  EXPECT_EQ(listing(dir_), (std::set<std::string>{"log.txt", "out"}));
}

TEST_F(FileIo, SeveralOutputsAreWrittenTogetherOrNotAtAll) {
  const auto text = [](const std::string& t) { return [t](std::ostream& out) { out << t; }; };
  write_file_atomically(dir_ / "a.csv", std::string("old a"));
  // The second cannot be written (a folder, then a folder that is missing,
  // then its data fails): the first stays as it was, nothing else is left.
  fs::create_directories(dir_ / "b.py");
  const auto failing = [](std::ostream& out) {
    out << "half";
    throw std::runtime_error("no more data");
  };
  for (const Output& second :
       {Output{dir_ / "b.py", text("new b")}, Output{dir_ / "none" / "b.py", text("new b")},
        Output{dir_ / "c.py", failing}}) {
    EXPECT_ANY_THROW(write_files_atomically({{dir_ / "a.csv", text("new a")}, second}));
    EXPECT_EQ(slurp(dir_ / "a.csv"), "old a");
    EXPECT_EQ(listing(dir_), (std::set<std::string>{"a.csv", "b.py"}));
  }
  for (const bool unnamed : {true, false}) {
    use_unnamed_temporaries(unnamed);
    write_files_atomically({{dir_ / "a.csv", text("new a")}, {dir_ / "c.py", text("new c")}});
    EXPECT_EQ(slurp(dir_ / "a.csv"), "new a");
    EXPECT_EQ(slurp(dir_ / "c.py"), "new c");
  }
  EXPECT_EQ(listing(dir_), (std::set<std::string>{"a.csv", "b.py", "c.py"}));
}

TEST_F(FileIo, AFifoIsWrittenToNotReplaced) {
  const fs::path fifo = dir_ / "pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string received;
  std::thread reader([&] { received = slurp(fifo); });
  write_file_atomically(fifo, std::string(2'000'000, 'f'));
  reader.join();
  EXPECT_EQ(received, std::string(2'000'000, 'f'));
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_EQ(listing(dir_), std::set<std::string>{"pipe"});
}

TEST_F(FileIo, ASocketIsWrittenToNotReplaced) {
  const fs::path path = dir_ / "sock";
  const int server = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(server, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof address.sun_path - 1);
  ASSERT_EQ(::bind(server, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(::listen(server, 1), 0);
  std::string received;
  std::thread reader([&] {
    const int client = ::accept(server, nullptr, nullptr);
    char buf[65536];
    ssize_t n = 0;
    while ((n = ::read(client, buf, sizeof buf)) > 0) received.append(buf, static_cast<size_t>(n));
    ::close(client);
  });
  write_file_atomically(path, std::string("hello over a socket"));
  reader.join();
  ::close(server);
  EXPECT_EQ(received, "hello over a socket");
  EXPECT_TRUE(fs::is_socket(path));
}

TEST_F(FileIo, AFullDeviceIsAnErrorNamingTheOutput) {
  try {
    write_file_atomically("/dev/full", std::string(10, 'x'));
    FAIL() << "writing to /dev/full succeeded";
  } catch (const OutputError& e) {
    EXPECT_EQ(e.error_number(), ENOSPC);
    EXPECT_NE(std::string(e.what()).find("/dev/full"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No space left"), std::string::npos) << e.what();
  }
}

TEST_F(FileIo, AMissingFolderIsNamedWithTheReason) {
  const fs::path out = dir_ / "no" / "such" / "trace.json";
  try {
    write_file_atomically(out, std::string("x"));
    FAIL() << "writing into a missing folder succeeded";
  } catch (const OutputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(out.string()), std::string::npos) << what;
    EXPECT_NE(what.find("No such file or directory"), std::string::npos) << what;
  }
  // A file where a folder should be.
  write_file_atomically(dir_ / "file", std::string("x"));
  try {
    write_file_atomically(dir_ / "file" / "out.json", std::string("x"));
    FAIL() << "writing below a file succeeded";
  } catch (const OutputError& e) {
    EXPECT_NE(std::string(e.what()).find("Not a directory"), std::string::npos) << e.what();
  }
  EXPECT_THROW(write_file_atomically(dir_, std::string("x")), OutputError);  // a folder
}

TEST_F(FileIo, AFolderWithoutWritePermissionIsNamed) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes into any folder: nothing to refuse";
  fs::create_directories(dir_ / "locked");
  fs::permissions(dir_ / "locked", fs::perms::owner_read | fs::perms::owner_exec);
  try {
    write_file_atomically(dir_ / "locked" / "x.json", std::string("x"));
    FAIL() << "writing into a read-only folder succeeded";
  } catch (const OutputError& e) {
    EXPECT_NE(std::string(e.what()).find("Permission denied"), std::string::npos) << e.what();
  }
  fs::permissions(dir_ / "locked", fs::perms::owner_all);
}

// A failing writer and a stop request leave the old file and nothing else.
TEST_F(FileIo, FailureAndStopLeaveTheOldFileAlone) {
  for (const bool unnamed : {true, false}) {
    use_unnamed_temporaries(unnamed);
    const fs::path out = dir_ / "plan.json";
    write_file_atomically(out, std::string("old"));
    EXPECT_THROW(write_file_atomically(out,
                                       [](std::ostream& o) {
                                         o << std::string(3'000'000, 'x');
                                         throw std::runtime_error("writer failed");
                                       }),
                 std::runtime_error);
    // A stop requested half way through stops the write within one buffer.
    std::size_t written = 0;
    EXPECT_THROW(write_file_atomically(out,
                                       [&](std::ostream& o) {
                                         for (int i = 0; i < 1000; ++i) {
                                           o << std::string(1 << 20, 'y');
                                           written += 1 << 20;
                                           if (i == 3) request_cancel();
                                         }
                                       }),
                 Cancelled);
    reset_cancel();
    EXPECT_LE(written, std::size_t{8} << 20);
    EXPECT_EQ(slurp(out), "old");
    EXPECT_EQ(listing(dir_), std::set<std::string>{"plan.json"});
  }
}

// Two writers of one output never mix: each result is one writer's whole file.
TEST_F(FileIo, ConcurrentWritersNeverMix) {
  const fs::path out = dir_ / "shared.json";
  const std::size_t size = 3'000'000;
  const auto writer = [&](char c) {
    for (int round = 0; round < 8; ++round) write_file_atomically(out, std::string(size, c));
  };
  std::thread a(writer, 'a');
  std::thread b(writer, 'b');
  for (int i = 0; i < 20; ++i) {
    const std::string seen = slurp(out);
    if (seen.empty()) continue;  // not written yet
    ASSERT_EQ(seen.size(), size);
    EXPECT_TRUE(seen == std::string(size, 'a') || seen == std::string(size, 'b'));
  }
  a.join();
  b.join();
  const std::string last = slurp(out);
  EXPECT_TRUE(last == std::string(size, 'a') || last == std::string(size, 'b'));
  EXPECT_EQ(listing(dir_), std::set<std::string>{"shared.json"});
}

std::string gunzip(const fs::path& p) {
  gzFile f = gzopen(p.c_str(), "rb");
  if (f == nullptr) return "<cannot open>";
  std::string text;
  char buf[65536];
  int n = 0;
  while ((n = gzread(f, buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
  gzclose(f);
  return text;
}

TEST_F(FileIo, ANameEndingInGzIsCompressed) {
  std::string text;
  for (int i = 0; i < 200000; ++i) text += "{\"name\":\"F" + std::to_string(i) + "\"},\n";
  write_file_atomically(dir_ / "trace.json.gz", text);
  const std::string raw = slurp(dir_ / "trace.json.gz");
  ASSERT_GE(raw.size(), 2u);
  EXPECT_EQ(static_cast<unsigned char>(raw[0]), 0x1f);  // the gzip magic number
  EXPECT_EQ(static_cast<unsigned char>(raw[1]), 0x8b);
  EXPECT_LT(raw.size(), text.size() / 4);
  EXPECT_EQ(gunzip(dir_ / "trace.json.gz"), text);
  write_file_atomically(dir_ / "empty.gz", std::string());
  EXPECT_EQ(gunzip(dir_ / "empty.gz"), "");
}

TEST(WriteProgress, QuietForTwoSecondsThenTwiceASecondThenCleared) {
  double now = 0.0;
  std::vector<std::string> lines;
  {
    WriteProgress progress(
        "t.json", [&] { return now; }, [&](const std::string& line) { lines.push_back(line); });
    progress.add(1000);
    now = 1.9;
    progress.add(1000);
    EXPECT_TRUE(lines.empty());
    now = 2.0;
    progress.add(2'000'000'000 - 2000);
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(lines[0], "pipescope: writing t.json: 1.86 GiB at 1.00 GB/s");
    now = 2.3;
    progress.add(1);
    EXPECT_EQ(lines.size(), 1u);
    now = 2.5;
    progress.add(1);
    EXPECT_EQ(lines.size(), 2u);
  }
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines.back(), "");  // the line is cleared when the write ends
}

// --- Signals: a child process writes, the test signals it, nothing is left. ---

enum class Stuck { kWriting, kIdle };

// Forks a child that installs the program's signal handlers and writes `out`
// for ever (kWriting: a megabyte at a time; kIdle: a megabyte, then it sleeps
// without touching the stream). Returns its pid once the temporary exists.
pid_t start_writer(const fs::path& out, bool unnamed, Stuck stuck, rlim_t file_limit = 0) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    install_signal_handlers();
    use_unnamed_temporaries(unnamed);
    if (file_limit > 0) {
      const rlimit limit{file_limit, file_limit};
      ::setrlimit(RLIMIT_FSIZE, &limit);
    }
    try {
      write_file_atomically(out, [&](std::ostream& o) {
        for (;;) {
          o << std::string(1 << 20, 'z') << std::flush;
          while (stuck == Stuck::kIdle) ::pause();
        }
      });
    } catch (const Cancelled&) {
      ::_exit(128 + stop_signal());
    } catch (const OutputError& e) {
      ::_exit(e.error_number() == EFBIG ? 27 : 26);
    } catch (...) {
      ::_exit(25);
    }
    ::_exit(0);
  }
  return pid;
}

int wait_status(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

TEST_F(FileIo, EachStopSignalEndsTheWriteAndLeavesNothing) {
  for (const bool unnamed : {true, false}) {
    for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {
      const pid_t pid = start_writer(dir_ / "out.json", unnamed, Stuck::kWriting);
      (void)testing::wait_until_writing_in(pid, dir_);
      ::kill(pid, sig);
      const int status = wait_status(pid);
      ASSERT_TRUE(WIFEXITED(status)) << "signal " << sig;
      EXPECT_EQ(WEXITSTATUS(status), 128 + sig);
      EXPECT_TRUE(listing(dir_).empty()) << "signal " << sig << ", unnamed " << unnamed;
    }
  }
}

// A second Ctrl-C while the writer is stuck ends the process at once; the
// handler removes the named temporary first.
TEST_F(FileIo, ASecondInterruptEndsAStuckWriteAndLeavesNothing) {
  const pid_t pid = start_writer(dir_ / "out.json", false, Stuck::kIdle);
  // Stuck once its megabyte is out: a first Ctrl-C before that would end the
  // write where it checks for one.
  (void)testing::wait_until_writing_in(pid, dir_, 1 << 20);
  // Two signals sent close together can arrive as one: interrupt until it ends
  // (a minute at most), as a user presses Ctrl-C again.
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  do {
    ::kill(pid, SIGINT);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  } while (::waitpid(pid, &status, WNOHANG) == 0 && std::chrono::steady_clock::now() < deadline);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGINT);
  EXPECT_TRUE(listing(dir_).empty());
}

// SIGPIPE (the reader went away) and SIGKILL end the process; neither leaves
// the temporary: the handler removes a named one, an unnamed one has no name.
TEST_F(FileIo, BrokenPipeAndKillLeaveNothing) {
  for (const auto& [sig, unnamed] : {std::pair{SIGPIPE, false}, std::pair{SIGKILL, true}}) {
    const pid_t pid = start_writer(dir_ / "out.json", unnamed, Stuck::kIdle);
    (void)testing::wait_until_writing_in(pid, dir_);
    ::kill(pid, sig);
    const int status = wait_status(pid);
    ASSERT_TRUE(WIFSIGNALED(status));
    EXPECT_EQ(WTERMSIG(status), sig);
    EXPECT_TRUE(listing(dir_).empty()) << "signal " << sig;
  }
}

// Past the file size limit the write fails with EFBIG (SIGXFSZ is ignored).
// Without unnamed files a writer killed with SIGKILL leaves its temporary;
// the next write of the same output removes it once it is over a minute old,
// since no live writer holds its lock, and leaves every other file alone.
TEST_F(FileIo, TheNextWriteRemovesAKilledWritersTemporary) {
  const pid_t pid = start_writer(dir_ / "t.json", false, Stuck::kIdle);
  (void)testing::wait_until_writing_in(pid, dir_);
  ::kill(pid, SIGKILL);
  ASSERT_TRUE(WIFSIGNALED(wait_status(pid)));
  const std::set<std::string> left = listing(dir_);
  ASSERT_EQ(left.size(), 1u);
  const fs::path dead = dir_ / *left.begin();
  // Beside it: one too new to judge, one a live writer holds, another
  // output's, and names that are not a temporary's.
  const std::vector<std::string> others = {
      ".t.json.00000000000000ff.tmp", ".t.json.fedcba9876543210.tmp",
      ".u.json.0123456789abcdef.tmp", ".t.json.0123.tmp", "t.json.0123456789abcdef.tmp"};
  for (const std::string& name : others) std::ofstream(dir_ / name) << "x";
  const auto old = fs::file_time_type::clock::now() - std::chrono::minutes(2);
  for (const std::string& name : others) {
    if (name != others[0]) fs::last_write_time(dir_ / name, old);
  }
  fs::last_write_time(dead, old);
  const int live = ::open((dir_ / others[1]).c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_EQ(::flock(live, LOCK_EX), 0);
  for (const bool unnamed : {false, true}) {
    use_unnamed_temporaries(unnamed);
    write_file_atomically(dir_ / "t.json", std::string("data"));
  }
  ::close(live);
  std::set<std::string> expected(others.begin(), others.end());
  expected.insert("t.json");
  EXPECT_EQ(listing(dir_), expected);
  EXPECT_EQ(slurp(dir_ / "t.json"), "data");
}

TEST_F(FileIo, TheFileSizeLimitIsAnErrorAndLeavesNothing) {
  for (const bool unnamed : {true, false}) {
    const pid_t pid = start_writer(dir_ / "out.json", unnamed, Stuck::kWriting, 4 << 20);
    const int status = wait_status(pid);
    ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
    EXPECT_EQ(WEXITSTATUS(status), 27);
    EXPECT_TRUE(listing(dir_).empty());
  }
}

// Messages name "-" as what it is.
TEST(OutputName, StandardOutputIsNamedAsSuch) {
  EXPECT_EQ(output_name("-"), "standard output");
  EXPECT_EQ(output_name("out/a.csv"), "out/a.csv");
  EXPECT_EQ(output_name("./-"), "./-");  // a file called "-" in a folder
  // Descriptor 1 by any of its names is standard output; others are not.
  for (const char* name : {"-", "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1", "/dev//stdout"}) {
    EXPECT_TRUE(is_standard_output(name)) << name;
  }
  for (const char* name : {"/dev/stderr", "/dev/fd/12", "/dev/fd/1x", "./-", "stdout"}) {
    EXPECT_FALSE(is_standard_output(name)) << name;
  }
  EXPECT_EQ(open_descriptor_named("/dev/stderr"), 2);
  EXPECT_EQ(open_descriptor_named("/proc/thread-self/fd/7"), 7);
  EXPECT_FALSE(open_descriptor_named("/proc/1/fd/7").has_value());  // another process's
}

}  // namespace
}  // namespace pipescope
