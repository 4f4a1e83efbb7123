// Chrome trace JSON, read as the desktop app reads a measured run to lay over
// a prediction (read_chrome_trace). A trace that reads must write and read
// again to the same bytes (sim/formats/trace_io.h).

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>

#include "fuzz/fuzz_support.h"
#include "sim/formats/trace_io.h"

using namespace pipescope;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > fuzz::kMaxInput) return -1;
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  Timeline timeline;
  const bool refused = fuzz::refuses([&] { timeline = read_chrome_trace(in, "trace.json"); });
  if (refused) return 0;
  fuzz::check_trace_round_trip(timeline);
  return 0;
}
