// How fast outputs are written: write_file_atomically of a Chrome-trace-like
// text (one JSON event a line) into a temporary folder, plain and gzip (zlib's
// fastest level), so a user can tell how long a multi-gigabyte trace will take
// and what compression costs. Reports bytes of uncompressed data per second.
//
//   build/bench/pipescope_io_bench --benchmark_min_time=2

#include <benchmark/benchmark.h>

#include <unistd.h>

#include <filesystem>
#include <string>

#include "sim/base/file_io.h"

namespace pipescope {
namespace {

namespace fs = std::filesystem;

// One megabyte of trace-shaped lines, written `megabytes` times.
void write_trace_like(benchmark::State& state, const std::string& name) {
  const auto megabytes = static_cast<int>(state.range(0));
  std::string chunk;
  for (int i = 0; chunk.size() < (1u << 20); ++i) {
    chunk += R"({"name":"F)" + std::to_string(i % 64) + R"(","ph":"X","pid":)" +
             std::to_string(i % 8) + R"(,"tid":0,"ts":)" + std::to_string(i * 13) +
             R"(.125,"dur":12.5,"args":{"mb":)" + std::to_string(i % 512) + "}},\n";
  }
  const fs::path dir =
      fs::temp_directory_path() / ("pipescope_io_bench_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::int64_t bytes = 0;
  for (auto _ : state) {
    write_file_atomically(dir / name, [&](std::ostream& out) {
      for (int m = 0; m < megabytes; ++m) out << chunk;
    });
    bytes += static_cast<std::int64_t>(chunk.size()) * megabytes;
  }
  fs::remove_all(dir);
  state.SetBytesProcessed(bytes);
}

void BM_WriteOutput(benchmark::State& state) {
  write_trace_like(state, "trace.json");
}
void BM_WriteOutputGzip(benchmark::State& state) {
  write_trace_like(state, "trace.json.gz");
}
BENCHMARK(BM_WriteOutput)->Arg(256)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_WriteOutputGzip)->Arg(256)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace pipescope

BENCHMARK_MAIN();
