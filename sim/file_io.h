#pragma once
// Output files are written to a temporary name beside the target and renamed into
// place, so a failure (or Ctrl-C) never leaves a half-written plan, trace or CSV.

#include <filesystem>
#include <functional>
#include <ostream>
#include <string>

namespace pipescope {

// Calls write(stream) on a temporary file and renames it to `path`. Throws
// std::runtime_error naming `path` when it cannot open, write or rename, and
// Cancelled when a stop was requested (sim/cancel.h) before the rename; what
// write() throws passes through. The temporary file is removed then and `path`
// is left as it was.
void write_file_atomically(const std::filesystem::path& path,
                           const std::function<void(std::ostream&)>& write);

inline void write_file_atomically(const std::filesystem::path& path, const std::string& text) {
  write_file_atomically(path, [&](std::ostream& out) { out << text; });
}

}  // namespace pipescope
