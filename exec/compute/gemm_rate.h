#pragma once
// How fast this machine runs the executor's own GEMM: the fp32 product of two
// row-major Eigen matrices that every linear layer and attention head computes
// (exec/compute/kernels.h), on the calling thread, as each stage's one thread runs it.
// `pipescope profile` reports every layer's achieved FLOP/s as a fraction of
// this rate: a layer far below it spends its time outside large products
// (shapes too small to reach the plateau, elementwise work, the executor's own
// overhead), while a layer near it is as fast as this GEMM path allows.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "costmodels/model.h"
#include "costmodels/profile.h"

namespace pipescope::exec {

// One product (m x k) . (k x n).
struct GemmShape {
  std::int64_t m = 0;
  std::int64_t n = 0;
  std::int64_t k = 0;
  bool operator==(const GemmShape&) const = default;
};

// A multiply and an add per term: 2 m n k.
double gemm_flops(const GemmShape& shape);

// The best time of one shape over the repeats.
struct GemmTiming {
  GemmShape shape;
  double seconds = 0.0;
};

struct GemmRate {
  GemmShape shape;      // the shape that reached it
  double flop_s = 0.0;  // FLOP/s
};

// The fastest of the timings in FLOP/s: the plateau that large products reach.
// Throws std::invalid_argument when none has a positive time.
GemmRate best_gemm_rate(const std::vector<GemmTiming>& timings);

struct GemmRateOptions {
  // Square products n x n x n: large enough for the plateau, small enough that
  // the whole measurement takes about a tenth of a second.
  std::vector<std::int64_t> sizes{256, 384, 512};
  // Timed products per size, after an untimed one; the best is kept (anything
  // slower was interrupted).
  int repeats = 5;
};

// The best of `repeats` timings of the executor's n x n x n product on the
// calling thread, after an untimed one, each on the thread's CPU clock where
// there is one and never longer than the wall clock. Throws
// std::invalid_argument for n outside [1, 4096] or repeats < 1.
GemmTiming time_square_gemm(std::int64_t n, int repeats);

// Times the executor's product at each size on the calling thread. Throws
// std::invalid_argument for no sizes, a size outside [1, 4096] or repeats < 1.
GemmRate measure_gemm_rate(const GemmRateOptions& options = {});

// A measured op against the machine's rate: `flops` done in `seconds`.
struct AchievedRate {
  double flop_s = 0.0;    // flops / seconds
  double fraction = 0.0;  // flop_s / the machine's rate; 0 when the rate is unknown
};
AchievedRate achieved_rate(double flops, double seconds, double machine_flop_s);

// One profile entry at its batch size [size_index], against the machine's rate:
// the layer's FLOPs are the cost model's (LayerSpec::fwd_flops and bwd_flops per
// sample, times the batch), its times the profile's. A recompute is a forward.
struct LayerRates {
  double forward_flops = 0.0;
  double backward_flops = 0.0;
  AchievedRate forward;
  AchievedRate backward;
};
LayerRates layer_rates(const LayerSpec& layer, const LayerProfile& entry, std::size_t size_index,
                       double machine_flop_s);

// The layer of `model` that a profile entry stands for (the first with its
// signature), or null.
const LayerSpec* measured_layer(const ModelSpec& model, const LayerProfile& entry);

}  // namespace pipescope::exec
