#include "sim/base/file_io.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <ext/stdio_sync_filebuf.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "sim/base/cancel.h"
#include "sim/base/file_descriptor.h"
#include "sim/base/input_file.h"
#include "sim/base/temp_files.h"

namespace pipescope {

namespace fs = std::filesystem;

namespace {

// Where the data written to "-" goes: standard output, or a copy of it once
// reserve_standard_output_for_data() has sent the rest of stdout to stderr.
std::atomic<int> g_data_fd{STDOUT_FILENO};
std::atomic<bool> g_unnamed{true};
std::atomic<bool> g_protect_inputs{false};
// The reason the first write to standard output failed (check_standard_output_writes).
std::atomic<int> g_stdout_error{0};

constexpr int kMaxLinks = 40;     // as the kernel follows
constexpr int kMaxAttempts = 64;  // random temporary names tried

// The descriptor a name stands for, if it names one of the process's open
// descriptors (/dev/stdout, /dev/fd/N, /proc/self/fd/N, ...) as it is written.
std::optional<int> descriptor_named(const fs::path& p) {
  const std::string name = p.lexically_normal().string();
  if (name == "/dev/stdin") return STDIN_FILENO;
  if (name == "/dev/stdout") return STDOUT_FILENO;
  if (name == "/dev/stderr") return STDERR_FILENO;
  const std::string own = "/proc/" + std::to_string(::getpid()) + "/fd/";
  for (const std::string& folder : {std::string("/dev/fd/"), std::string("/proc/self/fd/"),
                                    std::string("/proc/thread-self/fd/"), own}) {
    if (name.size() <= folder.size() || name.compare(0, folder.size(), folder) != 0) continue;
    const std::string number = name.substr(folder.size());
    if (number.size() > 9 || number.find_first_not_of("0123456789") != std::string::npos) {
      return std::nullopt;
    }
    return std::stoi(number);
  }
  return std::nullopt;
}

// Where `path` ends once its symbolic links are followed: at a file (a link to
// a missing file ends at that file, which the write creates) or at the name of
// an open descriptor (descriptor_named), where the walk stops. With a label,
// a link that cannot be read or followed is an OutputError naming it; without
// one, the walk ends there.
struct LinkEnd {
  fs::path file;
  std::optional<int> descriptor;
};

LinkEnd follow_links(const fs::path& path, const std::string* label) {
  fs::path p = path;
  for (int i = 0; i < kMaxLinks; ++i) {
    if (const std::optional<int> fd = descriptor_named(p)) return {p, fd};
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return {p, std::nullopt};
    std::error_code ec;
    const fs::path target = fs::read_symlink(p, ec);
    if (ec && label) throw OutputError(*label, "cannot read the symbolic link", ec.value());
    if (ec) return {p, std::nullopt};
    p = target.is_absolute() ? target : p.parent_path() / target;
  }
  if (label) throw OutputError(*label, "cannot follow the symbolic link", ELOOP);
  return {p, std::nullopt};
}

// Streams write()'s output to `fd`, compressed when asked, and checks it all.
void stream_to(int fd, const std::string& label, bool gzip,
               const std::function<void(std::ostream&)>& write) {
  WriteProgress progress(label);
  FdOutputBuf raw(fd, label, &progress);
  std::optional<GzipOutputBuf> zipped;
  if (gzip) zipped.emplace(raw, label);
  std::ostream out(gzip ? static_cast<std::streambuf*>(&*zipped) : &raw);
  out.exceptions(std::ios::badbit);  // lets OutputError and Cancelled through
  write(out);
  if (!out) throw OutputError(label, "cannot write", EIO);
  if (zipped) zipped->finish();
  raw.flush_all();
}

// A FIFO with no reader yet: wait for one, but let Ctrl-C end the wait.
int open_fifo(const fs::path& p, const std::string& label) {
  for (;;) {
    const int fd = ::open(p.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) {
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      return fd;
    }
    if (errno != ENXIO && errno != EINTR) throw OutputError(label, "cannot open", errno);
    throw_if_cancelled();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

int connect_socket(const fs::path& p, const std::string& label) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (p.string().size() >= sizeof address.sun_path) {
    throw OutputError(label, "cannot connect to the socket", ENAMETOOLONG);
  }
  std::memcpy(address.sun_path, p.c_str(), p.string().size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw OutputError(label, "cannot connect to the socket", errno);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    const int err = errno;
    ::close(fd);
    throw OutputError(label, "cannot connect to the socket", err);
  }
  return fd;
}

// Character and block devices, FIFOs and sockets are written to, never replaced.
void write_in_place(const fs::path& p, const struct stat& st, const std::string& label,
                    const std::function<void(std::ostream&)>& write) {
  int fd = -1;
  if (S_ISFIFO(st.st_mode)) {
    fd = open_fifo(p, label);
  } else if (S_ISSOCK(st.st_mode)) {
    fd = connect_socket(p, label);
  } else {
    fd = ::open(p.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) throw OutputError(label, "cannot open", errno);
  }
  FileDescriptor file(fd);
  stream_to(file.get(), label, wants_gzip(label), write);
  if (file.close() != 0) throw OutputError(label, "cannot write", errno);
}

// The replaced file's permissions (and, for root, its owner) carry over.
void copy_metadata(int fd, const std::optional<struct stat>& old) {
  if (!old) return;
  ::fchmod(fd, old->st_mode & 07777);
  if (::geteuid() == 0 && ::fchown(fd, old->st_uid, old->st_gid) != 0) {
    // Not fatal: the data is what was asked for.
  }
}

void sync_file(int fd, const std::string& label) {
  // EINVAL: the file system does not sync (e.g. some FUSE ones): nothing to do.
  if (::fsync(fd) != 0 && errno != EINVAL) throw OutputError(label, "cannot write", errno);
}

void sync_folder(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);  // best effort: the rename itself is already atomic
  ::close(fd);
}

void rename_into_place(const fs::path& temp, const fs::path& target, const std::string& label) {
  if (::rename(temp.c_str(), target.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    throw OutputError(label, "cannot put the finished file in place", err);
  }
}

// A finished output under its temporary name, to be renamed over its target
// (commit) or removed (discard).
struct StagedFile {
  fs::path temp;
  fs::path target;
  std::string label;
  std::unique_ptr<TempFileGuard> guard;  // a signal handler removes it until then
  // Holds the writer's lock (hold_temporary) until the file is in place, so
  // that remove_dead_temporaries never takes a staged file for a dead one.
  std::unique_ptr<FileDescriptor> lock;
};

void commit(StagedFile& staged) {
  rename_into_place(staged.temp, staged.target, staged.label);
  staged.guard.reset();
  staged.lock.reset();
  sync_folder(staged.target.parent_path());
}

void discard(std::vector<StagedFile>& staged) noexcept {
  for (StagedFile& f : staged) {
    if (f.guard) ::unlink(f.temp.c_str());
    f.guard.reset();
    f.lock.reset();
  }
}

// The unnamed way: nothing is visible (or left by SIGKILL) until the finished
// data gets a random name, which is renamed over the target when committed.
StagedFile stage_unnamed(int raw_fd, const fs::path& target, const std::optional<struct stat>& old,
                         const std::string& label,
                         const std::function<void(std::ostream&)>& write) {
  FileDescriptor file(raw_fd);
  copy_metadata(file.get(), old);
  stream_to(file.get(), label, wants_gzip(label), write);
  sync_file(file.get(), label);
  throw_if_cancelled();
  auto lock = std::make_unique<FileDescriptor>(hold_temporary(file.get()));
  const std::string proc = "/proc/self/fd/" + std::to_string(file.get());
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    const fs::path temp = temp_name(target);
    auto guard = std::make_unique<TempFileGuard>(temp.string());
    if (::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, temp.c_str(), AT_SYMLINK_FOLLOW) != 0) {
      if (errno == EEXIST) continue;
      throw OutputError(label, "cannot name the finished file", errno);
    }
    if (file.close() != 0) {
      const int err = errno;
      ::unlink(temp.c_str());
      throw OutputError(label, "cannot write", err);
    }
    return StagedFile{temp, target, label, std::move(guard), std::move(lock)};
  }
  throw OutputError(label, "cannot name the finished file", EEXIST);
}

// The named way, where the file system has no unnamed files: a file created
// exclusively under a random name, removed on every way out.
StagedFile stage_named(const fs::path& target, const std::optional<struct stat>& old,
                       const std::string& label, const std::function<void(std::ostream&)>& write) {
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    const fs::path temp = temp_name(target);
    auto guard = std::make_unique<TempFileGuard>(temp.string());
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0)
      throw OutputError(label, "cannot create a file in " + target.parent_path().string(), errno);
    std::unique_ptr<FileDescriptor> lock;
    try {
      FileDescriptor file(fd);
      lock = std::make_unique<FileDescriptor>(hold_temporary(file.get()));
      copy_metadata(file.get(), old);
      stream_to(file.get(), label, wants_gzip(label), write);
      sync_file(file.get(), label);
      if (file.close() != 0) throw OutputError(label, "cannot write", errno);
      throw_if_cancelled();
    } catch (...) {
      ::unlink(temp.c_str());
      throw;
    }
    return StagedFile{temp, target, label, std::move(guard), std::move(lock)};
  }
  throw OutputError(label, "cannot create a temporary file", EEXIST);
}

bool unnamed_files_usable() {
  return g_unnamed.load() && ::access("/proc/self/fd", X_OK) == 0;
}

StagedFile stage_regular(const fs::path& target, const std::optional<struct stat>& old,
                         const std::string& label,
                         const std::function<void(std::ostream&)>& write) {
  const fs::path dir = target.parent_path();
  remove_dead_temporaries(target);
  if (unnamed_files_usable()) {
    const int fd = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
    if (fd >= 0) return stage_unnamed(fd, target, old, label, write);
    // EOPNOTSUPP: not on this file system; EISDIR or EINVAL: a kernel without it.
    if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) {
      throw OutputError(label, "cannot create a file in " + dir.string(), errno);
    }
  }
  return stage_named(target, old, label, write);
}

void write_standard_output(const std::function<void(std::ostream&)>& write) {
  std::cout.flush();
  std::fflush(stdout);
  stream_to(g_data_fd.load(), "standard output", false, write);
}

}  // namespace

void use_unnamed_temporaries(bool use) {
  g_unnamed.store(use);
}

void refuse_overwriting_inputs(bool refuse) {
  g_protect_inputs.store(refuse);
}

std::optional<int> open_descriptor_named(const fs::path& path) {
  return follow_links(path, nullptr).descriptor;
}

bool is_standard_output(const fs::path& path) {
  return path == "-" || open_descriptor_named(path) == STDOUT_FILENO;
}

std::string output_name(const std::string& path) {
  return path == "-" ? "standard output" : path;
}

namespace {

// Where an output goes once its name is resolved (file_io.h says how each is
// written).
struct Destination {
  enum class Kind { kStandardOutput, kDescriptor, kInPlace, kRegular } kind = Kind::kRegular;
  int fd = -1;                     // kDescriptor
  fs::path target;                 // kInPlace, kRegular
  std::optional<struct stat> old;  // the file it replaces (kRegular), the node (kInPlace)
  std::string label;
};

Destination resolve(const fs::path& path) {
  Destination d;
  d.label = path.string();
  if (path == "-") {
    d.kind = Destination::Kind::kStandardOutput;
    return d;
  }
  if (d.label.empty()) throw OutputError("(empty file name)", "cannot write", ENOENT);
  const LinkEnd end = follow_links(path, &d.label);
  if (end.descriptor) {
    d.kind = *end.descriptor == STDOUT_FILENO ? Destination::Kind::kStandardOutput
                                              : Destination::Kind::kDescriptor;
    d.fd = *end.descriptor;
    return d;
  }
  d.target = end.file;
  if (!d.target.has_parent_path()) d.target = fs::path(".") / d.target;
  struct stat st {};
  if (::stat(d.target.c_str(), &st) != 0) {
    if (errno != ENOENT) throw OutputError(d.label, "cannot write", errno);
    return d;
  }
  if (S_ISDIR(st.st_mode)) throw OutputError(d.label, "cannot write", EISDIR);
  if (S_ISREG(st.st_mode) && g_protect_inputs.load()) {
    if (const std::optional<std::string> input = read_as(st)) {
      throw OutputError(d.label, "cannot write: it is " + *input +
                                     ", an input of this command, which the output would "
                                     "replace; write it elsewhere");
    }
  }
  d.old = st;
  if (!S_ISREG(st.st_mode)) d.kind = Destination::Kind::kInPlace;
  return d;
}

// Writes an output that is not staged: standard output, a descriptor, a
// device, FIFO or socket.
void write_directly(const Destination& d, const std::function<void(std::ostream&)>& write) {
  switch (d.kind) {
    case Destination::Kind::kStandardOutput:
      return write_standard_output(write);
    case Destination::Kind::kDescriptor:
      // Another open descriptor (stderr, a shell's 3>>log): written through
      // at its offset, as the shell opened it, never renamed over.
      std::cout.flush();
      std::cerr.flush();
      std::fflush(nullptr);
      return stream_to(d.fd, d.label, wants_gzip(d.label), write);
    case Destination::Kind::kInPlace:
      return write_in_place(d.target, *d.old, d.label, write);
    case Destination::Kind::kRegular:
      break;
  }
}

}  // namespace

void write_file_atomically(const fs::path& path, const std::function<void(std::ostream&)>& write) {
  write_files_atomically({{path, write}});
}

void write_files_atomically(const std::vector<Output>& outputs) {
  std::vector<Destination> destinations;
  for (const Output& o : outputs) destinations.push_back(resolve(o.path));
  std::vector<StagedFile> staged;
  try {
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      const Destination& d = destinations[i];
      if (d.kind != Destination::Kind::kRegular) continue;
      staged.push_back(stage_regular(d.target, d.old, d.label, outputs[i].write));
    }
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      write_directly(destinations[i], outputs[i].write);
    }
    for (StagedFile& f : staged) commit(f);
  } catch (...) {
    discard(staged);
    throw;
  }
}

void reserve_standard_output_for_data() {
  if (g_data_fd.load() != STDOUT_FILENO) return;
  std::cout.flush();
  std::fflush(stdout);
  const int data = ::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
  if (data < 0) throw OutputError("standard output", "cannot reserve", errno);
  ::dup2(STDERR_FILENO, STDOUT_FILENO);
  g_data_fd.store(data);
}

namespace {

// Standard output's writes, made by stdio: every byte or the reason it failed.
// A short count tells stdio the write failed.
ssize_t write_standard_output(void* /*cookie*/, const char* data, std::size_t size) {
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(STDOUT_FILENO, data + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int none = 0;
      g_stdout_error.compare_exchange_strong(none, n < 0 ? errno : EIO);
      break;
    }
    done += static_cast<std::size_t>(n);
  }
  return static_cast<ssize_t>(done);
}

}  // namespace

void check_standard_output_writes() {
  static bool installed = false;
  if (installed) return;
  FILE* checked = fopencookie(nullptr, "w", {nullptr, write_standard_output, nullptr, nullptr});
  if (checked == nullptr) return;  // stdio keeps the flag, without the reason
  std::cout.flush();
  std::fflush(stdout);
  // Line by line: what goes here is a few lines of summary (data written to
  // "-" has its own descriptor), and fd 1 may become stderr later
  // (reserve_standard_output_for_data), where lines must not wait.
  std::setvbuf(checked, nullptr, _IOLBF, BUFSIZ);
  stdout = checked;
  // std::cout writes through stdout, in order with printf, as before. Never
  // freed: std::cout flushes it after every static object is gone.
  static auto* const cout_buffer = new __gnu_cxx::stdio_sync_filebuf<char>(checked);
  std::cout.rdbuf(cout_buffer);
  installed = true;
}

void finish_standard_output() {
  std::cout.flush();
  errno = 0;
  const bool failed = std::fflush(stdout) != 0 || std::ferror(stdout) != 0 || !std::cout;
  const int recorded = g_stdout_error.load();
  const int err = recorded != 0 ? recorded : errno != 0 ? errno : EIO;
  if (failed && err != EPIPE) throw OutputError("standard output", "cannot write", err);
}

}  // namespace pipescope
