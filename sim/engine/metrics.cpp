#include "sim/engine/metrics.h"

#include <algorithm>

#include "costmodels/check.h"

namespace pipescope {

bool Metrics::fits() const {
  return std::all_of(devices.begin(), devices.end(),
                     [](const DeviceMetrics& d) { return d.fits(); });
}

Metrics compute_metrics(const EngineResult& run, const std::vector<Bytes>& peak_memory,
                        const MetricsInput& in) {
  PS_CHECK(peak_memory.size() == run.device_busy.size(), "one peak per device");
  Metrics m;
  m.step_time = run.step_time;
  m.comm_time = run.comm_time;
  m.recompute_time = run.recompute_time;
  m.allreduce_time = run.allreduce_time;
  m.tensor_time = run.tensor_time;
  const auto n = static_cast<std::int64_t>(run.device_busy.size());
  SimTime busy_total = 0;
  for (std::size_t d = 0; d < run.device_busy.size(); ++d) {
    DeviceMetrics dm;
    dm.busy = run.device_busy[d];
    dm.peak_memory = peak_memory[d];
    dm.memory_capacity = in.memory_capacity;
    // Idle time is an exact integer; dividing once keeps closed forms exact.
    dm.bubble_fraction = run.step_time > 0 ? static_cast<double>(run.step_time - dm.busy) /
                                                 static_cast<double>(run.step_time)
                                           : 0.0;
    busy_total += dm.busy;
    m.devices.push_back(dm);
  }
  if (run.step_time > 0) {
    const double step_s = simtime_to_seconds(run.step_time);
    m.bubble_fraction = static_cast<double>(n * run.step_time - busy_total) /
                        static_cast<double>(n * run.step_time);
    m.samples_per_s = static_cast<double>(in.samples) / step_s;
    m.tokens_per_s = m.samples_per_s * static_cast<double>(in.tokens_per_sample);
    if (in.peak_flops > 0.0)
      m.mfu = in.model_flops / (step_s * in.peak_flops * static_cast<double>(n));
  }
  return m;
}

}  // namespace pipescope
