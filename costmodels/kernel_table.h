#pragma once
// What the kernel-level cost model (costmodels/kernel_cost_model.h) knows about
// one kind of accelerator: how its GEMMs are tiled over its multiprocessors,
// what fraction of its peaks large GEMMs, fused attention, memory-bound kernels
// and its links achieve, and what each kernel costs beyond its work. One table
// per device preset (costmodels/device.cpp), each figure with its source there;
// docs/models.md explains the model term by term.

#include <string>
#include <vector>

namespace pipescope {

struct KernelTable {
  // False: the device has no kernel-level table (the CPU, an explicit device
  // given without one) and only the analytic model can cost it.
  bool present = false;
  int multiprocessors = 0;  // SMs: the units a GEMM's output tiles are spread over
  // Output tile of a large 16-bit GEMM (cuBLAS's common choice on the device);
  // a GEMM runs ceil(m / tile_m) * ceil(n / tile_n) tiles in waves of
  // `multiprocessors` tiles.
  int tile_m = 128;
  int tile_n = 128;
  // Fraction of the dense peak that a large GEMM's main loop sustains.
  double gemm_efficiency = 0.8;
  // The reduction depth at which a tile's fixed cost (prologue, epilogue: loading
  // the first operands, writing the tile) equals its main loop: a tile of depth k
  // takes the time of k + gemm_k_overhead at full rate.
  double gemm_k_overhead = 64.0;
  // Fused attention (FlashAttention-style): fraction of the dense peak its
  // forward and its backward reach on long sequences.
  double attention_fwd_efficiency = 0.6;
  double attention_bwd_efficiency = 0.5;
  // The same for FlashAttention-2's kernels where the device has faster ones
  // (cuDNN's and FlashAttention-3's on Hopper), for frameworks that run
  // FlashAttention-2 (Framework::flash_attention_2); 0: as above.
  double fa2_attention_fwd_efficiency = 0.0;
  double fa2_attention_bwd_efficiency = 0.0;
  // Fraction of the memory bandwidth that memory-bound kernels (layer norm,
  // activations, dropout, softmax, residual adds, optimizer step) achieve.
  double memory_efficiency = 0.85;
  // Fixed time of every kernel beyond its work: launch-to-launch gap on a busy
  // stream, ramp-up and tail.
  double kernel_overhead_s = 4e-6;
  // Fraction of a link's peak bandwidth that a point-to-point copy achieves.
  double link_efficiency = 0.8;
  // The same for a NIC's link between nodes (InfiniBand, RoCE): NCCL reaches
  // 24 GB/s on a 200 Gb/s HDR NIC and 48-49 GB/s on a 400 Gb/s NDR one, as
  // NCCL's maintainers state of nccl-tests (NVIDIA/nccl issue 412,
  // NVIDIA/nccl-tests issue 267).
  double network_efficiency = 0.96;
  // Dense 8-bit floating-point peak (FP8 tensor cores); 0: none.
  double peak_flops_fp8 = 0.0;
  // Fraction of the FP8 peak a large FP8 GEMM's main loop sustains; 0: as
  // gemm_efficiency.
  double fp8_gemm_efficiency = 0.0;
};

// A parameter of the kernel table that `pipescope calibrate` may fit, with the
// range a fit may move it in.
struct CalibrationParameter {
  std::string name;            // as written in cost-model files: "gemm_efficiency"
  double KernelTable::*field;  // the figure it sets
  double min = 0.0;
  double max = 0.0;
  std::string meaning;  // one line for --help and the report
};

// gemm_efficiency, attention_fwd_efficiency, attention_bwd_efficiency,
// memory_efficiency, kernel_overhead_s, link_efficiency.
const std::vector<CalibrationParameter>& calibration_parameters();

}  // namespace pipescope
