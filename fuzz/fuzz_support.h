#pragma once
// What the fuzz targets share: splitting an input into a document and trailing
// option lines, and a simulation bounded so that one input runs in milliseconds.
//
// Bad input is a std::runtime_error (ScenarioError, ConfigError, TraceError) or
// a std::invalid_argument, and the targets catch exactly those. Anything else
// escaping a target is a bug and aborts the run: InternalError (a failed
// PS_CHECK), nlohmann::json's own exceptions (a parser that read a value without
// checking its type), std::out_of_range and the like.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/engine/simulator.h"
#include "sim/formats/result_json.h"
#include "sim/formats/trace_io.h"
#include "sim/scenario/scenario.h"

namespace pipescope::fuzz {

// Labels errors like a file name would; its stem is the default scenario name.
inline const std::string kLabel = "fuzz.json";

// Inputs larger than this are not parsed (libFuzzer runs with -max_len=65536).
inline constexpr std::size_t kMaxInput = 1 << 16;

// Simulations above these sizes are skipped: the optimal partitioner is
// quadratic in the layers and the engine linear in K x v x M ops.
inline constexpr std::size_t kMaxSimLayers = 256;
inline constexpr int kMaxSimDevices = 64;
inline constexpr std::int64_t kMaxSimStageMicroBatches = 4096;

// Pops the trailing lines of `text` that start with `prefix` ("--set ") and
// returns what follows the prefix, in the order the lines appear. A JSON
// document cannot end in such a line, so plain JSON seeds have none.
inline std::vector<std::string> take_trailing_options(std::string& text, std::string_view prefix,
                                                      std::size_t max_options = 16) {
  std::vector<std::string> options;
  while (options.size() < max_options) {
    std::size_t end = text.size();
    while (end > 0 && text[end - 1] == '\n') --end;
    const std::size_t nl = text.rfind('\n', end == 0 ? 0 : end - 1);
    const std::size_t start = nl == std::string::npos ? 0 : nl + 1;
    if (start >= end) break;
    const std::string_view line = std::string_view(text).substr(start, end - start);
    if (!line.starts_with(prefix)) break;
    options.insert(options.begin(), std::string(line.substr(prefix.size())));
    text.resize(start);
  }
  return options;
}

// Runs `read`; true when it refused its input as bad input (the exceptions above),
// which is an expected outcome for a fuzzed input.
template <class Read>
bool refuses(Read&& read) {
  try {
    read();
    return false;
  } catch (const std::runtime_error&) {
    return true;
  } catch (const std::invalid_argument&) {
    return true;
  }
}

// A failed property of the code under test (not of the input): report it and
// abort, so that libFuzzer saves the input.
[[noreturn]] inline void property_failed(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz property failed: %s\n%s\n", what, detail.c_str());
  std::abort();
}

// A trace this program wrote reads back, and writing what was read gives the
// same bytes (sim/formats/trace_io.h).
inline void check_trace_round_trip(const Timeline& timeline) {
  std::ostringstream written;
  write_chrome_trace(written, timeline);
  std::istringstream in(written.str());
  Timeline read;
  try {
    read = read_chrome_trace(in, "trace.json");
  } catch (const TraceError& e) {
    property_failed("a written trace reads back", e.what());
  }
  std::ostringstream rewritten;
  write_chrome_trace(rewritten, read);
  if (rewritten.str() != written.str()) {
    property_failed("a trace read back writes the same bytes", written.str());
  }
}

// Simulates `scenario` as `pipescope simulate --json --trace` does when it is
// small enough; a configuration it cannot run (ConfigError) is an expected
// outcome.
inline void simulate_if_small(const Scenario& scenario, SimConfig config = {}) {
  const int K =
      config.custom ? config.custom->devices() : config.stages.value_or(scenario.cluster.devices);
  const int chunks =
      config.custom ? config.custom->chunks() : config.chunks.value_or(scenario.training.chunks);
  const int M = config.custom ? config.custom->micro_batches
                              : config.micro_batches.value_or(scenario.training.micro_batches);
  if (scenario.model.layers.size() > kMaxSimLayers || scenario.cluster.devices > kMaxSimDevices ||
      K > kMaxSimDevices || std::int64_t{K} * std::max(chunks, 2) * M > kMaxSimStageMicroBatches) {
    return;
  }
  SimResult result;
  if (refuses([&] { result = simulate(scenario, config); })) return;
  (void)to_json(result).dump();
  check_trace_round_trip(result.timeline);
}

}  // namespace pipescope::fuzz
