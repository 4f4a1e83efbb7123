#pragma once
// A file descriptor closed on every way out, for the readers and writers that
// work below iostreams (sim/base/input_file.h, sim/base/file_io.h).

#include <unistd.h>

namespace pipescope {

class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }
  // Closes now and returns close()'s result: a write's error can surface only
  // here (NFS, quotas).
  int close() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

}  // namespace pipescope
