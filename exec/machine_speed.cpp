// Whether this machine kept its speed through a measurement.
#include "exec/machine_speed.h"

#include <algorithm>
#include <stdexcept>
#include <thread>

#include "exec/affinity.h"
#include "exec/compute/gemm_rate.h"

namespace pipescope::exec {

namespace {

double reference_time() {
  return time_square_gemm(kReferenceProductSize, kReferenceProductRepeats).seconds;
}

}  // namespace

std::vector<double> reference_times(int cores) {
  std::vector<int> cpus = allowed_cpus();
  if (cpus.empty()) return {reference_time()};
  cpus.resize(std::min(cpus.size(), static_cast<std::size_t>(std::max(1, cores))));
  std::vector<double> out;
  for (const int cpu : cpus) {
    double t = 0.0;
    // A thread of its own, so that the caller's affinity stays as it was.
    std::thread on_cpu([&] {
      pin_current_thread(cpu);
      t = reference_time();
    });
    on_cpu.join();
    out.push_back(t);
  }
  return out;
}

double speed_spread(const std::vector<std::vector<double>>& checks) {
  std::vector<double> fastest;
  std::vector<double> slowest;
  for (const std::vector<double>& check : checks) {
    for (std::size_t c = 0; c < check.size(); ++c) {
      const double t = check[c];
      if (!(t > 0.0)) throw std::invalid_argument("a reference time must be positive");
      if (c >= fastest.size()) {
        fastest.push_back(t);
        slowest.push_back(t);
      }
      fastest[c] = std::min(fastest[c], t);
      slowest[c] = std::max(slowest[c], t);
    }
  }
  double spread = 0.0;
  for (std::size_t c = 0; c < fastest.size(); ++c) {
    spread = std::max(spread, slowest[c] / fastest[c] - 1.0);
  }
  return spread;
}

std::vector<double> step_speed_spreads(const std::vector<std::vector<double>>& checks,
                                       std::size_t profile_checks) {
  if (profile_checks == 0 || profile_checks > checks.size()) {
    throw std::invalid_argument("the profile's speed checks must be among the checks");
  }
  std::vector<std::vector<double>> seen(
      checks.begin(), checks.begin() + static_cast<std::ptrdiff_t>(profile_checks));
  std::vector<double> out;
  for (std::size_t i = 0; profile_checks + i < checks.size(); ++i) {
    seen.push_back(checks[profile_checks - 1 + i]);
    seen.push_back(checks[profile_checks + i]);
    out.push_back(speed_spread(seen));
    seen.resize(profile_checks);
  }
  return out;
}

double speed_checked_disturbance(double other_work, double spread) {
  return spread > kDiscardSpeedSpreadAbove ? 1.0 + spread : other_work;
}

}  // namespace pipescope::exec
