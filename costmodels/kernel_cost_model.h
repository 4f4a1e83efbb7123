#pragma once
// The kernel-level cost model: a layer is the kernels it runs on the GPU
// (LayerSpec::kernels), each costed from its shape and the device's kernel table
// (costmodels/kernel_table.h), and a layer's time is the sum of its kernels'.
//
// - GEMM (rows x k) . (k x n), batch_count products: its output is cut into
//   tiles of tile_m x tile_n; the tiles run in waves of one per multiprocessor,
//   so a GEMM takes ceil(tiles / SMs) waves (tile and wave quantisation, NVIDIA
//   "Matrix Multiplication Background" user's guide), each wave the time of one
//   tile of depth k + gemm_k_overhead at gemm_efficiency of one SM's share of
//   the peak; never less than its operands and result moved at the achievable
//   memory bandwidth. A GEMM with fewer tiles than SMs (a weight gradient
//   reduced over many tokens or pixels) splits its reduction over the idle SMs
//   and sums the fp32 partial results in one more memory pass (split-K, as
//   cuBLAS and cuDNN do), taking the fastest split. Its backward is two GEMMs of the same size
//   (input and weight gradients); the weight-gradient one is the split backward's W.
//   A 3 x 3 stride-1 convolution in fp32 forward and its input gradient run as
//   the faster of the implicit GEMM and Winograd's F(2 x 2, 3 x 3), as cuDNN's
//   heuristics choose for single precision.
// - Memory-bound kernels: bytes / (bandwidth x memory_efficiency).
// - Fused attention: 4 s^2 d FLOPs per head forward (half with a causal mask) at
//   attention_fwd_efficiency; its backward 2.5 times the forward's FLOPs (five
//   products to the forward's two, Dao 2023) at attention_bwd_efficiency.
// - Every kernel adds kernel_overhead_s.
// Layers without kernels (convolutional models, explicit layer lists) are costed
// by the analytic roofline. Times are computed once per kernel list (equal
// layers share one) and batch size, then looked up.

#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "costmodels/cost_model.h"
#include "costmodels/device.h"
#include "costmodels/framework.h"
#include "costmodels/model.h"

namespace pipescope {

// One kernel's times for a micro-batch of `batch` samples, seconds.
struct KernelTimes {
  double forward = 0.0;
  double backward = 0.0;  // input and weight gradients together
  double weight = 0.0;    // the weight-gradient part of backward
  // Kernels the host launches for the forward, the backward and its weight
  // gradients (Kernel::launches).
  int forward_launches = 0;
  int backward_launches = 0;
  int weight_launches = 0;
};

// The cost terms, public so tests can check each against a hand computation.
// `peak` is the dense FLOP/s of the GEMM's element type.
double gemm_seconds(const KernelTable& t, double peak, double mem_bandwidth, Bytes element_bytes,
                    std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t count);
// Winograd's F(2 x 2, 3 x 3) over `tiles` 2 x 2 output tiles: 16 products of
// (tiles x k) . (k x n), 2.25 times fewer multiplications than the implicit
// GEMM's, the transforms inside the kernel (Lavin and Gray 2016; cuDNN's
// CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD).
double winograd_seconds(const KernelTable& t, double peak, double mem_bandwidth,
                        Bytes element_bytes, std::int64_t tiles, std::int64_t n, std::int64_t k);
double memory_seconds(const KernelTable& t, double mem_bandwidth, double bytes);
// `fp8`: the GEMMs with a weight run in FP8 (at gemm_peak, the FP8 peak, and
// the table's fp8_gemm_efficiency), with Transformer Engine's casts.
KernelTimes kernel_times(const Kernel& kernel, std::int64_t batch, const KernelTable& t,
                         double gemm_peak, double attention_peak, double mem_bandwidth,
                         Bytes element_bytes, bool fp8 = false);

class KernelCostModel final : public CostModel {
 public:
  // fp8: the GEMMs run at the device's FP8 peak (attention and memory-bound
  // kernels stay in dtype). The device must have a kernel table, and an FP8
  // peak when fp8 is set. `framework`: what the host pays per kernel, the
  // pass that accumulates 16-bit weight gradients into fp32 ones, the
  // optimizer step's passes over the gradients (costmodels/framework.h).
  KernelCostModel(Device device, DType dtype, bool fp8, double bytes_per_param,
                  Framework framework = *find_framework(kIdealFramework));
  std::string_view name() const override { return "kernels"; }
  std::string_view description() const override;
  SimTime forward(const LayerSpec& layer, std::int64_t batch) const override;
  SimTime backward(const LayerSpec& layer, std::int64_t batch) const override;
  SimTime recompute(const LayerSpec& layer, std::int64_t batch) const override;
  SimTime weight_grad(const LayerSpec& layer, std::int64_t batch) const override;
  SimTime core_recompute(const LayerSpec& layer, std::int64_t batch) const override;
  SimTime core_backward(const LayerSpec& layer, std::int64_t batch) const override;
  SimTime optimizer_step(std::int64_t params) const override;

  OpTimes op_times(const LayerSpec& layer, std::int64_t batch) const override;

 private:
  // A layer's times, ns: looked up, or computed from its kernels and kept.
  OpTimes times(const LayerSpec& layer, std::int64_t batch) const;
  OpTimes compute(const LayerSpec& layer, std::int64_t batch) const;

  // The pass adding a backward's weight gradients into the step's where the
  // GEMM does not (Framework::grad_accumulation_pass): its time and kernels.
  struct Accumulation {
    double seconds = 0.0;
    int launches = 0;
  };
  Accumulation accumulation(const LayerSpec& layer, std::int64_t weighted_gemms) const;

  Device device_;
  DType dtype_;
  bool fp8_;
  Framework framework_;
  AnalyticCostModel fallback_;
  double bytes_per_param_;
  // Keyed by the address of the layer's kernel list and the batch size; an entry
  // holds the list, so the address is not reused while the entry lives.
  struct Key {
    const void* list = nullptr;
    std::int64_t batch = 0;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const {
      return std::hash<const void*>()(k.list) ^ (std::hash<std::int64_t>()(k.batch) << 1);
    }
  };
  struct Entry {
    KernelList kernels;
    OpTimes times;
  };
  // Read under a shared lock: one model serves every thread of a planner's
  // search (most calls find their entry).
  mutable std::shared_mutex mutex_;
  mutable std::unordered_map<Key, Entry, KeyHash> cache_;
};

}  // namespace pipescope
