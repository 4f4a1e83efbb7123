#include "gui/memory_bars.h"

#include "sim/base/format.h"

namespace pipescope::gui {

std::vector<MemoryBar> memory_bars(const Metrics& metrics) {
  std::vector<MemoryBar> bars;
  bars.reserve(metrics.devices.size());
  for (std::size_t d = 0; d < metrics.devices.size(); ++d) {
    const DeviceMetrics& m = metrics.devices[d];
    MemoryBar b;
    b.device = static_cast<int>(d);
    b.peak = m.peak_memory;
    b.capacity = m.memory_capacity;
    b.fits = m.fits();
    b.over_by = b.fits ? 0 : m.peak_memory - m.memory_capacity;
    b.label = format_bytes(static_cast<double>(b.peak)) + " of " +
              format_bytes(static_cast<double>(b.capacity));
    if (!b.fits) b.label += ": " + format_bytes(static_cast<double>(b.over_by)) + " over";
    bars.push_back(std::move(b));
  }
  return bars;
}

std::vector<MemoryBar> memory_bars(const SimResult& result) {
  std::vector<MemoryBar> bars = memory_bars(result.metrics);
  const std::vector<MemorySplit> splits = memory_splits(result);
  for (std::size_t d = 0; d < bars.size() && d < splits.size(); ++d) bars[d].split = splits[d];
  return bars;
}

std::string split_text(const MemorySplit& split) {
  const auto bytes = [](Bytes b) { return format_bytes(static_cast<double>(b)); };
  return "weights " + bytes(split.weights) + ", gradients " + bytes(split.gradients) +
         ", optimizer " + bytes(split.optimizer) + ", activations " + bytes(split.activations);
}

}  // namespace pipescope::gui
