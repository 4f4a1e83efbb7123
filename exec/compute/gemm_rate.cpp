#include "exec/compute/gemm_rate.h"

#include <chrono>
#include <cmath>
#include <stdexcept>

#include "exec/compute/kernels.h"
#include "exec/compute/thread_clock.h"

namespace pipescope::exec {

namespace {

using Clock = std::chrono::steady_clock;

// The best of `repeats` timings of c = a b, after an untimed product that
// brings the operands into the caches, as a stage's layers are between
// micro-batches. The product is the one linear_forward computes. Each is
// timed on the thread's CPU clock where there is one (as the profiler times
// the layers, profile_passes.h), so that other work taking the core does not
// lower the rate, and never longer than the wall clock says.
double best_product_s(const Mat<float>& a, const Mat<float>& b, int repeats) {
  Mat<float> c(a.rows(), b.cols());
  c.noalias() = a * b;
  double best = 0.0;
  for (int r = 0; r < repeats; ++r) {
    const SimTime cpu0 = thread_cpu_ns();
    const auto t0 = Clock::now();
    c.noalias() = a * b;
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (cpu0 >= 0) s = std::min(s, static_cast<double>(thread_cpu_ns() - cpu0) * 1e-9);
    if (r == 0 || s < best) best = s;
  }
  if (!std::isfinite(c(0, 0))) throw std::runtime_error("the GEMM benchmark produced NaN or inf");
  return best;
}

}  // namespace

GemmTiming time_square_gemm(std::int64_t n, int repeats) {
  if (n < 1 || n > 4096) throw std::invalid_argument("GEMM sizes must be in [1, 4096]");
  if (repeats < 1) throw std::invalid_argument("GEMM repeats must be at least 1");
  const auto size = static_cast<Index>(n);
  // Values of order one keep every partial sum far from overflow and denormals.
  const Mat<float> a = Mat<float>::Constant(size, size, 0.5f);
  const Mat<float> b = Mat<float>::Constant(size, size, 0.25f);
  return GemmTiming{GemmShape{n, n, n}, best_product_s(a, b, repeats)};
}

double gemm_flops(const GemmShape& shape) {
  return 2.0 * static_cast<double>(shape.m) * static_cast<double>(shape.n) *
         static_cast<double>(shape.k);
}

GemmRate best_gemm_rate(const std::vector<GemmTiming>& timings) {
  GemmRate best;
  for (const GemmTiming& t : timings) {
    if (!(t.seconds > 0.0)) continue;
    const double rate = gemm_flops(t.shape) / t.seconds;
    if (rate > best.flop_s) best = GemmRate{t.shape, rate};
  }
  if (best.flop_s <= 0.0) throw std::invalid_argument("no GEMM timing with a positive time");
  return best;
}

GemmRate measure_gemm_rate(const GemmRateOptions& options) {
  if (options.sizes.empty()) throw std::invalid_argument("no GEMM sizes to measure");
  if (options.repeats < 1) throw std::invalid_argument("GEMM repeats must be at least 1");
  std::vector<GemmTiming> timings;
  for (const std::int64_t n : options.sizes) {
    timings.push_back(time_square_gemm(n, options.repeats));
  }
  return best_gemm_rate(timings);
}

AchievedRate achieved_rate(double flops, double seconds, double machine_flop_s) {
  AchievedRate r;
  if (seconds > 0.0) r.flop_s = flops / seconds;
  if (machine_flop_s > 0.0) r.fraction = r.flop_s / machine_flop_s;
  return r;
}

LayerRates layer_rates(const LayerSpec& layer, const LayerProfile& entry, std::size_t size_index,
                       double machine_flop_s) {
  const auto batch = static_cast<double>(entry.batch_sizes.at(size_index));
  LayerRates r;
  r.forward_flops = layer.fwd_flops * batch;
  r.backward_flops = layer.bwd_flops * batch;
  r.forward = achieved_rate(r.forward_flops, simtime_to_seconds(entry.forward.at(size_index)),
                            machine_flop_s);
  r.backward = achieved_rate(r.backward_flops, simtime_to_seconds(entry.backward.at(size_index)),
                             machine_flop_s);
  return r;
}

const LayerSpec* measured_layer(const ModelSpec& model, const LayerProfile& entry) {
  for (const LayerSpec& layer : model.layers) {
    if (layer_signature(layer) == entry.signature) return &layer;
  }
  return nullptr;
}

}  // namespace pipescope::exec
