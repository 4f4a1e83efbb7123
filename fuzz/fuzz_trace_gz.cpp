// A Chrome trace named *.json.gz, read from a file as the desktop app opens it
// (read_chrome_trace_file): gzip decompression with its limit, then the trace
// reader. Seeds are gzip-compressed traces; what decompresses and reads must
// write and read again to the same bytes (sim/formats/trace_io.h).

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

#include "fuzz/fuzz_support.h"
#include "sim/formats/trace_io.h"

using namespace pipescope;

namespace {

// One file per fuzzing process, rewritten for every input and removed at exit.
struct InputFile {
  std::filesystem::path path = std::filesystem::temp_directory_path() /
                               ("pipescope_fuzz_trace_" + std::to_string(::getpid()) + ".json.gz");
  ~InputFile() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
};

const std::filesystem::path& input_path() {
  static const InputFile file;
  return file.path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > fuzz::kMaxInput) return -1;
  {
    std::ofstream out(input_path(), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  Timeline timeline;
  const bool refused = fuzz::refuses([&] { timeline = read_chrome_trace_file(input_path()); });
  if (refused) return 0;
  fuzz::check_trace_round_trip(timeline);
  return 0;
}
