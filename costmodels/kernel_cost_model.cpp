#include "costmodels/kernel_cost_model.h"

#include <algorithm>
#include <cmath>

#include "costmodels/check.h"
#include "costmodels/size_checks.h"

namespace pipescope {

namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

// Backward FLOPs of fused attention over its forward's: the backward recomputes
// the scores and runs four more products (the gradients of P, S, Q/K and V)
// against the forward's two (Dao 2023, "FlashAttention-2", section 3.1.2).
constexpr double kAttentionBackwardFlops = 2.5;

// Bytes of one partial result of a split-K GEMM: fp32 accumulators.
constexpr double kPartialBytes = 4.0;

// Winograd's F(2 x 2, 3 x 3): a 4 x 4 input tile per 2 x 2 output tile, so 16
// element-wise products, each a GEMM over the input channels.
constexpr std::int64_t kWinogradPoints = 16;
constexpr std::int64_t kWinogradTaps = 9;

// The times of a layer's GEMMs that Transformer Engine's userbuffers run
// beside (Kernel::te_gemm): the row-split projections' forward, the
// column-split ones' input and weight gradients.
struct TeGemmSeconds {
  double proj_fprop = 0.0, fc2_fprop = 0.0;
  double qkv_dgrad = 0.0, qkv_wgrad = 0.0, fc1_dgrad = 0.0, fc1_wgrad = 0.0;

  void add(const Kernel& k, const KernelTimes& kt) {
    switch (k.te_gemm) {
      case Kernel::TeGemm::kProj:
        proj_fprop += kt.forward;
        break;
      case Kernel::TeGemm::kFc2:
        fc2_fprop += kt.forward;
        break;
      case Kernel::TeGemm::kQkv:
        qkv_dgrad += kt.backward - kt.weight;
        qkv_wgrad += kt.weight;
        break;
      case Kernel::TeGemm::kFc1:
        fc1_dgrad += kt.backward - kt.weight;
        fc1_wgrad += kt.weight;
        break;
      case Kernel::TeGemm::kNone:
        break;
    }
  }
  TeGemmTimes times(int multiprocessors) const {
    return {seconds_to_simtime(proj_fprop),
            seconds_to_simtime(fc2_fprop),
            seconds_to_simtime(qkv_dgrad),
            seconds_to_simtime(qkv_wgrad),
            seconds_to_simtime(fc1_dgrad),
            seconds_to_simtime(fc1_wgrad),
            multiprocessors};
  }
};

}  // namespace

double gemm_seconds(const KernelTable& t, double peak, double mem_bandwidth, Bytes element_bytes,
                    std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t count) {
  if (m <= 0 || n <= 0 || k <= 0 || count <= 0) return 0.0;
  const std::int64_t tiles = ceil_div(m, t.tile_m) * ceil_div(n, t.tile_n) * count;
  const double sm_rate = peak * t.gemm_efficiency / t.multiprocessors;
  const double bytes =
      f64(count) * (f64(m) * f64(k) + f64(k) * f64(n) + f64(m) * f64(n)) * f64(element_bytes);
  const double memory_s = memory_seconds(t, mem_bandwidth, bytes);
  // Split-K: with fewer tiles than SMs, the reduction is cut into `split` slices
  // run side by side, whose fp32 partial results one more kernel then sums. The
  // fastest split up to the idle SMs, in powers of two.
  double best = 0.0;
  const std::int64_t most = std::max<std::int64_t>(1, t.multiprocessors / tiles);
  for (std::int64_t split = 1; split <= most; split *= 2) {
    const std::int64_t waves = ceil_div(tiles * split, t.multiprocessors);
    const double depth = f64(ceil_div(k, split)) + t.gemm_k_overhead;
    const double compute_s = f64(waves) * 2.0 * t.tile_m * t.tile_n * depth / sm_rate;
    // The slices write their partials and the extra kernel reads them back.
    const double partials_s =
        split == 1 ? 0.0
                   : t.kernel_overhead_s + memory_seconds(t, mem_bandwidth,
                                                          2.0 * f64(split) * f64(count) * f64(m) *
                                                              f64(n) * kPartialBytes);
    const double s = std::max(compute_s, memory_s) + partials_s;
    if (split == 1 || s < best) best = s;
  }
  return best;
}

double winograd_seconds(const KernelTable& t, double peak, double mem_bandwidth,
                        Bytes element_bytes, std::int64_t tiles, std::int64_t n, std::int64_t k) {
  return gemm_seconds(t, peak, mem_bandwidth, element_bytes, tiles, n, k, kWinogradPoints);
}

double memory_seconds(const KernelTable& t, double mem_bandwidth, double bytes) {
  return bytes / (mem_bandwidth * t.memory_efficiency);
}

KernelTimes kernel_times(const Kernel& kn, std::int64_t batch, const KernelTable& table,
                         double gemm_peak, double attention_peak, double mem_bandwidth,
                         Bytes element_bytes, bool fp8) {
  KernelTimes out;
  const bool in_fp8 = fp8 && kn.kind == Kernel::Kind::kGemm && kn.has_weight;
  KernelTable t = table;
  if (in_fp8 && t.fp8_gemm_efficiency > 0.0) t.gemm_efficiency = t.fp8_gemm_efficiency;
  const double launch = t.kernel_overhead_s;
  switch (kn.kind) {
    case Kernel::Kind::kGemm: {
      // One product over every token of the micro-batch (a linear layer),
      // batch_count products per sample (attention's per-head products, whose
      // operands are all activations), or batch_count grouped products over
      // the micro-batch's tokens (the experts of a mixture, each its weight). Only products with a
      // weight run in FP8 (gemm_peak); the per-head ones stay in the model's dtype.
      const bool per_sample = !kn.grouped && (kn.batch_count > 1 || !kn.has_weight);
      const std::int64_t m = per_sample ? kn.rows : kn.rows * batch;
      const std::int64_t count = per_sample   ? kn.batch_count * batch
                                 : kn.grouped ? kn.batch_count
                                              : 1;
      const double peak = kn.has_weight ? gemm_peak : attention_peak;
      const auto gemm = [&](std::int64_t mm, std::int64_t nn, std::int64_t kk) {
        return launch + gemm_seconds(t, peak, mem_bandwidth, element_bytes, mm, nn, kk, count);
      };
      // A 3 x 3 stride-1 convolution in fp32 runs as the faster of its implicit
      // GEMM and Winograd, forward and for its input gradient (itself such a
      // convolution); 16-bit ones run on tensor cores as implicit GEMMs.
      const bool winograd = kn.winograd_tiles > 0 && element_bytes == 4;
      const std::int64_t channels = kn.k / kWinogradTaps;
      const auto fastest = [&](double implicit, std::int64_t nn, std::int64_t kk) {
        if (!winograd) return implicit;
        return std::min(implicit, launch + winograd_seconds(t, peak, mem_bandwidth, element_bytes,
                                                            kn.winograd_tiles * batch, nn, kk));
      };
      out.forward = fastest(gemm(m, kn.n, kn.k), kn.n, channels);
      const double input_grad = fastest(gemm(m, kn.k, kn.n), channels, kn.n);  // dX = dY . W^T
      const double weight_grad = gemm(kn.k, kn.n, m);                          // dW = X^T . dY
      out.backward = input_grad + weight_grad;
      out.weight = kn.has_weight ? weight_grad : 0.0;
      out.backward_launches = 2;
      out.weight_launches = kn.has_weight ? 1 : 0;
      if (in_fp8) {
        // Transformer Engine casts the GEMM's input to FP8, with the transpose
        // the weight gradient reads, and in the backward the output gradient
        // likewise (its cast_transpose kernels): a pass reading e and writing
        // 2 bytes per element, each its own kernel.
        const double fp8_bytes = static_cast<double>(element_bytes) + 2.0;
        out.forward += launch + memory_seconds(t, mem_bandwidth, f64(m) * f64(kn.k) * fp8_bytes);
        out.backward += launch + memory_seconds(t, mem_bandwidth, f64(m) * f64(kn.n) * fp8_bytes);
        out.forward_launches += 1;
        out.backward_launches += 1;
      }
      break;
    }
    case Kernel::Kind::kMemory: {
      const int bwd_launches = kn.bwd_bytes > 0 ? std::max(1, kn.bwd_launches) : 0;
      out.forward =
          kn.launches * launch + memory_seconds(t, mem_bandwidth, f64(kn.bytes) * f64(batch));
      if (kn.bwd_bytes > 0) {
        out.backward = bwd_launches * launch +
                       memory_seconds(t, mem_bandwidth, f64(kn.bwd_bytes) * f64(batch));
      }
      out.backward_launches = bwd_launches;
      if (kn.backward_is_weight_grad) {
        out.weight = out.backward;
        out.weight_launches = bwd_launches;
      }
      break;
    }
    case Kernel::Kind::kAttention: {
      // 2 per (query, key) pair and head for the scores over the keys' width
      // and as many for the product with the values over theirs: s^2 pairs,
      // or causally attended_pairs (s^2 / 2, less within a window).
      const std::int64_t value_dim = kn.value_dim > 0 ? kn.value_dim : kn.head_dim;
      // Under context parallelism this device's share of them (1 / C).
      const double pairs =
          (kn.causal ? attended_pairs(kn.seq, kn.window) : f64(kn.seq) * f64(kn.seq)) /
          std::max(1, kn.context_parallel);
      const double flops =
          2.0 * pairs * f64(kn.head_dim + value_dim) * f64(kn.batch_count) * f64(batch);
      out.forward = launch + flops / (attention_peak * t.attention_fwd_efficiency);
      const int bwd_launches = std::max(1, kn.bwd_launches);
      out.forward += (kn.launches - 1) * launch;
      out.backward = bwd_launches * launch + kAttentionBackwardFlops * flops /
                                                 (attention_peak * t.attention_bwd_efficiency);
      out.backward_launches = bwd_launches;
      break;
    }
  }
  out.forward_launches += kn.launches;
  return out;
}

KernelCostModel::KernelCostModel(Device device, DType dtype, bool fp8, double bytes_per_param,
                                 Framework framework)
    : device_(std::move(device)),
      dtype_(dtype),
      fp8_(fp8),
      framework_(std::move(framework)),
      fallback_(device_, dtype, bytes_per_param),
      bytes_per_param_(bytes_per_param) {
  const KernelTable& t = device_.kernels;
  PS_CHECK(t.present, "device " + device_.name + " has no kernel table");
  PS_CHECK(t.multiprocessors > 0 && t.tile_m > 0 && t.tile_n > 0, "kernel table without tiles");
  PS_CHECK(t.gemm_efficiency > 0.0 && t.memory_efficiency > 0.0 &&
               t.attention_fwd_efficiency > 0.0 && t.attention_bwd_efficiency > 0.0,
           "kernel table with a zero efficiency");
  PS_CHECK(!fp8_ || t.peak_flops_fp8 > 0.0, "device " + device_.name + " has no FP8 peak");
}

std::string_view KernelCostModel::description() const {
  return "kernel-level: GEMMs by tile and wave quantisation, fused attention, memory-bound "
         "kernels at achievable bandwidth, a fixed cost per kernel (docs/models.md)";
}

OpTimes KernelCostModel::compute(const LayerSpec& layer, std::int64_t batch) const {
  KernelTable t = device_.kernels;
  if (framework_.flash_attention_2 && t.fa2_attention_fwd_efficiency > 0.0) {
    t.attention_fwd_efficiency = t.fa2_attention_fwd_efficiency;
    t.attention_bwd_efficiency = t.fa2_attention_bwd_efficiency;
  }
  const double peak = device_.peak_flops(dtype_);
  const double gemm_peak = fp8_ ? t.peak_flops_fp8 : peak;
  double fwd = 0.0, bwd = 0.0, w = 0.0, core = 0.0, core_bwd = 0.0;
  TeGemmSeconds te;
  int fwd_launches = 0, bwd_launches = 0, w_launches = 0;
  std::int64_t weighted_gemms = 0;
  for (const Kernel& k : *layer.kernels) {
    const KernelTimes kt = kernel_times(k, batch, t, gemm_peak, peak, device_.mem_bandwidth,
                                        dtype_bytes(dtype_), fp8_);
    fwd += kt.forward;
    bwd += kt.backward;
    w += kt.weight;
    fwd_launches += kt.forward_launches;
    bwd_launches += kt.backward_launches;
    w_launches += kt.weight_launches;
    if (k.attention_core) {
      core += kt.forward;
      core_bwd += kt.backward;
    }
    te.add(k, kt);
    if (k.kind == Kernel::Kind::kGemm && k.has_weight) ++weighted_gemms;
  }
  // The weight gradients' accumulation into the step's, part of W.
  if (const Accumulation acc = accumulation(layer, weighted_gemms); acc.seconds > 0.0) {
    bwd += acc.seconds;
    w += acc.seconds;
    bwd_launches += acc.launches;
    w_launches += acc.launches;
  }
  // A forward keeps or drops its stash at the same cost; a recompute is a forward.
  const SimTime forward = seconds_to_simtime(fwd);
  const SimTime backward = seconds_to_simtime(bwd);
  const SimTime weight = seconds_to_simtime(w);
  const double host = framework_.host_launch_s;
  OpTimes out{
      forward, forward, backward, weight, forward, backward - weight, seconds_to_simtime(core)};
  out.core_backward = seconds_to_simtime(core_bwd);
  out.te_gemms = te.times(t.multiprocessors);
  out.host_forward = seconds_to_simtime(host * fwd_launches);
  out.host_backward = seconds_to_simtime(host * bwd_launches);
  out.host_weight = seconds_to_simtime(host * w_launches);
  return out;
}

KernelCostModel::Accumulation KernelCostModel::accumulation(const LayerSpec& layer,
                                                            std::int64_t weighted_gemms) const {
  if (!framework_.grad_accumulation_pass || layer.params == 0) return {};
  // bf16 gradients added into fp32 ones: the framework's pass (an add that
  // casts as it reads, or a cast to a temporary first, a kernel more);
  // otherwise an in-place add in the gradients' own type, e read and 2e read
  // and written. A kernel each for a GEMM's weight and bias, one for a layer
  // whose weights no GEMM reads (an embedding's table).
  const bool into_fp32 = dtype_ == DType::kBf16 && framework_.fp32_grads;
  const double bytes =
      into_fp32 ? framework_.grad_accumulation_bytes : 3.0 * f64(dtype_bytes(dtype_));
  const bool casts_first = into_fp32 && framework_.grad_accumulation_bytes > kCastingAddBytes;
  const std::int64_t tensors = weighted_gemms > 0 ? 2 * weighted_gemms : 1;
  const int launches = static_cast<int>((casts_first ? 2 : 1) * tensors);
  const KernelTable& t = device_.kernels;
  return {memory_seconds(t, device_.mem_bandwidth, bytes * f64(layer.params)) +
              f64(launches) * t.kernel_overhead_s,
          launches};
}

OpTimes KernelCostModel::times(const LayerSpec& layer, std::int64_t batch) const {
  const Key key{layer.kernels.get(), batch};
  {
    const std::shared_lock lock(mutex_);
    const auto it = cache_.find(key);
    if (it != cache_.end()) return it->second.times;
  }
  const OpTimes t = compute(layer, batch);
  const std::lock_guard lock(mutex_);
  cache_.emplace(key, Entry{layer.kernels, t});
  return t;
}

OpTimes KernelCostModel::op_times(const LayerSpec& layer, std::int64_t batch) const {
  if (!layer.kernels) return CostModel::op_times(layer, batch);
  return times(layer, batch);
}

SimTime KernelCostModel::forward(const LayerSpec& layer, std::int64_t batch) const {
  if (!layer.kernels) return fallback_.forward(layer, batch);
  return times(layer, batch).forward;
}

SimTime KernelCostModel::backward(const LayerSpec& layer, std::int64_t batch) const {
  if (!layer.kernels) return fallback_.backward(layer, batch);
  return times(layer, batch).backward;
}

SimTime KernelCostModel::recompute(const LayerSpec& layer, std::int64_t batch) const {
  return forward(layer, batch);
}

SimTime KernelCostModel::core_recompute(const LayerSpec& layer, std::int64_t batch) const {
  if (!layer.kernels) return fallback_.core_recompute(layer, batch);
  return times(layer, batch).core;
}

SimTime KernelCostModel::core_backward(const LayerSpec& layer, std::int64_t batch) const {
  if (!layer.kernels) return fallback_.core_backward(layer, batch);
  return times(layer, batch).core_backward;
}

SimTime KernelCostModel::weight_grad(const LayerSpec& layer, std::int64_t batch) const {
  if (!layer.kernels) return fallback_.weight_grad(layer, batch);
  return times(layer, batch).weight;
}

// The optimizer reads and writes weights, gradients and state once: a
// memory-bound pass over 2 * params * bytes_per_param bytes, as one fused
// kernel; then the framework's other passes over the gradients
// (Framework::step_grad_pass_bytes, counted for fp32 gradients, half for
// 16-bit ones).
SimTime KernelCostModel::optimizer_step(std::int64_t params) const {
  if (params == 0) return 0;
  const KernelTable& t = device_.kernels;
  const bool fp32_grads = !is_16bit(dtype_) || framework_.fp32_grads;
  const double passes = framework_.step_grad_pass_bytes * (fp32_grads ? 1.0 : 0.5);
  return seconds_to_simtime(
      t.kernel_overhead_s +
      memory_seconds(t, device_.mem_bandwidth, (2.0 * bytes_per_param_ + passes) * f64(params)));
}

}  // namespace pipescope
