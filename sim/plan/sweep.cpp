#include "sim/plan/sweep.h"

#include <algorithm>
#include <cstdio>

#include "sim/base/format.h"
#include "sim/base/parallel.h"
#include "sim/engine/simulator.h"
#include "sim/plan/planner.h"

namespace pipescope {

std::vector<SweepPoint> run_sweep(const Scenario& scenario, const SweepRequest& request) {
  std::vector<SweepPoint> points;
  for (int K : request.stages) {
    for (int M : request.micro_batches) {
      SweepPoint p;
      p.stages = K;
      p.micro_batches = M;
      points.push_back(p);
    }
  }
  parallel_for(
      points.size(), request.threads,
      [&](std::size_t i) {
        SweepPoint& p = points[i];
        SimConfig config;
        config.stages = p.stages;
        config.micro_batches = p.micro_batches;
        config.remat = request.remat;
        config.schedule = request.schedule;
        config.chunks = request.chunks;
        config.partition = request.partition;
        config.record_timeline = false;
        const int D = request.data_parallel;
        try {
          if (D > 1 && scenario.training.global_batch % D != 0) {
            throw ConfigError(std::to_string(D) + " replicas do not divide the global batch of " +
                              std::to_string(scenario.training.global_batch));
          }
          config.data_parallel =
              data_parallel_ring(scenario.cluster, p.stages, D, scenario.training.expert_parallel);
          const bool replicated = D > 1 || scenario.cluster.context_parallel > 1;
          const SimResult r =
              simulate(replicated ? replica_scenario(scenario, p.stages, D) : scenario, config);
          p.step_time_s = r.metrics.step_time_s();
          p.samples_per_s = r.metrics.samples_per_s * D;
          p.bubble_fraction = r.metrics.bubble_fraction;
          p.mfu = r.metrics.mfu;
          for (const DeviceMetrics& d : r.metrics.devices)
            p.peak_memory = std::max(p.peak_memory, d.peak_memory);
          p.fits = r.metrics.fits();
        } catch (const ConfigError& e) {
          p.error = e.what();
        }
      },
      request.progress);
  return points;
}

std::string sweep_nothing_fits(const std::vector<SweepPoint>& points, Bytes capacity) {
  const SweepPoint* least = nullptr;
  const SweepPoint* refused = nullptr;
  std::size_t refused_count = 0;
  for (const SweepPoint& p : points) {
    if (!p.error.empty()) {
      if (refused == nullptr) refused = &p;
      ++refused_count;
      continue;
    }
    if (p.fits) return {};
    if (least == nullptr || p.peak_memory < least->peak_memory) least = &p;
  }
  const auto name = [](const SweepPoint& p) {
    return "K=" + std::to_string(p.stages) + " M=" + std::to_string(p.micro_batches);
  };
  std::string others;
  if (refused != nullptr) {
    others = std::to_string(refused_count) + " of the " + std::to_string(points.size()) +
             " configurations cannot run (" + name(*refused) + ": " + refused->error + ")";
  }
  if (least == nullptr) return others.empty() ? "the sweep has no configurations" : others;
  return "no configuration fits in memory: the least any needs is " +
         format_bytes(static_cast<double>(least->peak_memory)) + " per device (" + name(*least) +
         "), the device has " + format_bytes(static_cast<double>(capacity)) +
         (others.empty() ? "" : "; " + others);
}

std::string sweep_csv(const std::vector<SweepPoint>& points) {
  std::string out =
      "K,M,step_time_s,samples_per_s,bubble_fraction,mfu,peak_memory_bytes,fits,error\n";
  char buf[256];
  for (const SweepPoint& p : points) {
    std::snprintf(buf, sizeof buf, "%d,%d,%.9g,%.9g,%.9g,%.9g,%lld,%s,", p.stages, p.micro_batches,
                  p.step_time_s, p.samples_per_s, p.bubble_fraction, p.mfu,
                  static_cast<long long>(p.peak_memory),
                  p.error.empty() ? (p.fits ? "true" : "false") : "");
    out += buf;
    // Errors are sentences: quote them, doubling any quote (RFC 4180).
    if (!p.error.empty()) {
      out += '"';
      for (char c : p.error) out += c == '"' ? std::string("\"\"") : std::string(1, c);
      out += '"';
    }
    out += '\n';
  }
  return out;
}

}  // namespace pipescope
