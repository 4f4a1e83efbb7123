#include "exec/compute/host_memory.h"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace pipescope::exec {

bool keep_freed_memory() {
#if defined(__GLIBC__)
  // M_MMAP_THRESHOLD may not exceed half of a non-main heap (64 MiB on 64-bit
  // systems); setting it also stops glibc adjusting it on its own.
  constexpr int kLargestHeapBlock = 32 * 1024 * 1024;
  const bool trim = mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1;
  const bool mmap = mallopt(M_MMAP_THRESHOLD, kLargestHeapBlock) == 1;
  // A thread's own arena is made of heaps of at most 64 MiB, and one left
  // empty is unmapped whatever M_TRIM_THRESHOLD says unless that would leave
  // less than M_TOP_PAD free at the top; a pad of a whole heap keeps them
  // mapped. (One arena for every thread keeps them too, but the threads of a
  // small model then wait on its lock: a step of cpu-small 30-100 % longer.)
  // Each new arena's heap is then mapped writable whole: 64 MiB of commit
  // charge a thread's arena, not of resident memory.
  constexpr int kNonMainHeap = 64 * 1024 * 1024;
  const bool heaps = mallopt(M_TOP_PAD, kNonMainHeap) == 1;
  return trim && mmap && heaps;
#else
  return false;
#endif
}

namespace {

// The number a cgroup limit file holds; none for "max" (no limit), a missing
// file or the huge value cgroup v1 writes for no limit.
std::optional<std::int64_t> read_limit(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::string text;
  if (!(in >> text) || text.empty() || text.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
  if (errno == ERANGE || v >= (1ULL << 62)) return std::nullopt;
  return static_cast<std::int64_t>(v);
}

// The limit files of this process's control groups, from its own group up to
// the root of each hierarchy: a parent's limit binds its children too.
std::vector<std::filesystem::path> cgroup_limit_files() {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    // "0::/path" (v2) or "4:memory:/path" (v1).
    const auto first = line.find(':');
    const auto second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const bool v2 = controllers.empty();
    if (!v2 && controllers != "memory") continue;
    const fs::path root = v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory";
    const char* name = v2 ? "memory.max" : "memory.limit_in_bytes";
    fs::path group = fs::path(line.substr(second + 1)).relative_path();
    for (;; group = group.parent_path()) {
      files.push_back(root / group / name);
      if (group.empty()) break;
    }
  }
  return files;
}

}  // namespace

std::optional<HostMemory> host_memory_available() {
  std::optional<HostMemory> out;
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    std::istringstream fields(line);
    std::string key;
    std::int64_t kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:") {
      out = HostMemory{kib * 1024, "MemAvailable in /proc/meminfo"};
    }
  }
  for (const std::filesystem::path& file : cgroup_limit_files()) {
    const std::optional<std::int64_t> limit = read_limit(file);
    if (limit && (!out || *limit < out->bytes)) out = HostMemory{*limit, file.string()};
  }
  return out;
}

}  // namespace pipescope::exec
