#include "sim/file_io.h"

#include <fstream>
#include <stdexcept>
#include <system_error>

#include "sim/cancel.h"

namespace pipescope {

void write_file_atomically(const std::filesystem::path& path,
                           const std::function<void(std::ostream&)>& write) {
  std::filesystem::path tmp = path;
  tmp += ".tmp";
  std::error_code ignored;
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error(path.string() + ": cannot open for writing");
    try {
      write(out);
    } catch (...) {
      out.close();
      std::filesystem::remove(tmp, ignored);
      throw;
    }
    out.flush();
    if (cancel_requested()) {  // Ctrl-C while writing: the file stays as it was
      out.close();
      std::filesystem::remove(tmp, ignored);
      throw Cancelled();
    }
    if (!out) {
      out.close();
      std::filesystem::remove(tmp, ignored);
      throw std::runtime_error(path.string() + ": write failed");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ignored);
    throw std::runtime_error(path.string() + ": cannot rename the finished file into place");
  }
}

}  // namespace pipescope
