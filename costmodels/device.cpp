#include "costmodels/device.h"

#include <algorithm>
#include <string>
#include <utility>

namespace pipescope {

double EfficiencyCurve::at(Flops flops) const {
  if (half_flops <= 0.0 || flops <= 0.0) return max_efficiency;
  return max_efficiency * flops / (flops + half_flops);
}

std::string_view to_string(TopologyKind k) {
  switch (k) {
    case TopologyKind::kAllToAll:
      return "all-to-all";
    case TopologyKind::kPcieHost:
      return "pcie-host";
    case TopologyKind::kRing:
      return "ring";
    case TopologyKind::kNodes:
      return "nodes";
    case TopologyKind::kTorus:
      return "torus";
  }
  return "unknown";
}

std::optional<TopologyKind> parse_topology(std::string_view name) {
  for (TopologyKind k : {TopologyKind::kAllToAll, TopologyKind::kPcieHost, TopologyKind::kRing,
                         TopologyKind::kNodes, TopologyKind::kTorus}) {
    if (name == to_string(k)) return k;
  }
  return std::nullopt;
}

namespace {

// Shared assumptions of every preset (ours, not a vendor's):
// - Large GEMMs reach 60-80 % of the dense peak (docs/models.md); we take 0.7.
// - half_flops = the work of 10 us at the faster of the two peaks: an op must keep every SM
//   (or the MXU) busy for about that long before launch, wave-quantization and
//   pipeline-fill costs stop dominating, so an op of 10 us of peak work runs at half
//   of max_efficiency and a tiny one far below it.
// - GPU op_overhead_s = 5 us, the order of a CUDA kernel launch plus its tail; a
//   TPU runs one XLA-compiled program per step with no host launch per op, so its
//   per-op cost (MXU fill, HBM->VMEM prologue) is taken as 1 us.
constexpr double kMaxEfficiency = 0.7;
constexpr double kHalfEfficiencyTime_s = 10e-6;
constexpr double kGpuOpOverhead_s = 5e-6;
constexpr double kTpuOpOverhead_s = 1e-6;
// Per-hop latency of a device-to-device copy: NVLink peer copies and TPU ICI are
// a few microseconds end to end including DMA setup (assumption); a PCIe copy
// staged through host memory pays DMA setup and PCIe round trips on each hop.
constexpr double kNvlinkLatency_s = 2e-6;
constexpr double kIciLatency_s = 1e-6;
constexpr double kPcieLatency_s = 5e-6;
// PCIe 3.0 x16: 8 GT/s x 16 lanes with 128b/130b coding, per direction (PCI-SIG).
constexpr double kPcie3x16 = 15.75e9;

DevicePreset make(std::string name, double fp32, double bit16, Bytes memory, double mem_bw,
                  double op_overhead_s, Interconnect link, std::string description) {
  Device d;
  d.name = std::move(name);
  d.peak_flops_fp32 = fp32;
  d.peak_flops_16bit = bit16;
  d.memory_bytes = memory;
  d.mem_bandwidth = mem_bw;
  d.op_overhead_s = op_overhead_s;
  d.efficiency = {kMaxEfficiency, std::max(fp32, bit16) * kHalfEfficiencyTime_s};
  return {std::move(d), link, std::move(description)};
}

// Kernel tables (the kernel-level model, costmodels/kernel_cost_model.h). The
// figures every GPU table shares, and why:
// - Tiles: cuBLAS runs large 16-bit GEMMs on Ampere and Hopper in 256 x 128
//   output tiles, its most efficient size, and in 128 x 128 tiles on older
//   GPUs; the tiles of a GEMM run in waves of one per SM (NVIDIA, "Matrix
//   Multiplication Background" user's guide, DU-09799-001, sections 2.3 and 3).
// - gemm_k_overhead = 64: a tile of depth k costs k + 64 at full rate (loading
//   its first operand slices and writing its result); an assumption that makes
//   a depth-64 product (attention scores over 64-wide heads) run at half the
//   rate of a deep one, as that guide's plots of small-k GEMMs show.
// - memory_efficiency = 0.85: what STREAM-style copy kernels typically reach of
//   the HBM peak; an assumption, not a measurement of ours.
// - kernel_overhead_s = 4 us: the launch-to-launch gap of kernels queued on one
//   CUDA stream, the order of the few microseconds of launch latency; an
//   assumption.
// - link_efficiency = 0.8: CUDA's p2pBandwidthLatencyTest on an 8 x A100 80GB
//   NVLink server measured 430-520 GB/s bidirectional between GPU pairs (of
//   600 peak), and nccl-tests all-reduce about 200 GB/s bus bandwidth (NVIDIA
//   nccl-tests issue #149, 2023); on 4 HDR InfiniBand NICs for 8 GPUs
//   nccl-tests reached 85-96 GB/s of 100 (issue #119, 2022).
KernelTable gpu_kernels(int sms, int tile_m, int tile_n, double gemm_eff, double attention_fwd,
                        double attention_bwd, double fp8_peak) {
  KernelTable t;
  t.present = true;
  t.multiprocessors = sms;
  t.tile_m = tile_m;
  t.tile_n = tile_n;
  t.gemm_efficiency = gemm_eff;
  t.gemm_k_overhead = 64.0;
  t.attention_fwd_efficiency = attention_fwd;
  t.attention_bwd_efficiency = attention_bwd;
  t.memory_efficiency = 0.85;
  t.kernel_overhead_s = 4e-6;
  t.link_efficiency = 0.8;
  t.peak_flops_fp8 = fp8_peak;
  return t;
}

// A100 (108 SMs, A100 architecture whitepaper): large bf16 GEMMs reach about 80 %
// of the 312 TFLOP/s peak in the user's guide above; FlashAttention-2 reaches 50-73 %
// of the peak in its forward (Dao 2023, "FlashAttention-2", figures 4-5) and less
// in its backward, taken as 0.6 and 0.5. No FP8.
KernelTable a100_kernels() {
  return gpu_kernels(108, 256, 128, 0.8, 0.6, 0.5, 0.0);
}

// H100 SXM5 (132 SMs, H100 whitepaper): large bf16 GEMMs reach about 75 % of
// their dense peak (989 TFLOP/s, H100 datasheet); FP8 ones less of theirs
// (1,979): the best of a sweep of shapes reached 794.5 TFLOP/s in bf16 (80.3 %)
// and 1,402.6 in FP8 (70.9 %) on an H100 SXM (Bekman, "Machine Learning
// Engineering", the maximum achievable matmul FLOPS table), so FP8 GEMMs
// get 0.75 x 70.9 / 80.3 = 0.66. FlashAttention-3 reaches up to 75 % of the
// bf16 peak forward and 1.5-1.75x FlashAttention-2's speed backward (Shah et
// al. 2024), taken as 0.6 and 0.45 for the sequence lengths of training.
// FlashAttention-2 on the same H100 reaches 335 TFLOP/s forward (causal, head
// dimension 128, sequence 16k; FlashAttention-3 616, cuDNN 539: Shah et al.
// 2024, figure 5), 0.34 of the peak, and FlashAttention-3's backward is
// 1.5-1.75 times FlashAttention-2's (the same paper), taken as 1.6: 0.28.
KernelTable h100_kernels(int sms, double fp8_peak) {
  KernelTable t = gpu_kernels(sms, 256, 128, 0.75, 0.6, 0.45, fp8_peak);
  t.fp8_gemm_efficiency = 0.75 * 70.9 / 80.3;
  t.fa2_attention_fwd_efficiency = 335.0 / 989.0;
  t.fa2_attention_bwd_efficiency = 0.45 / 1.6;
  return t;
}

// V100 (80 SMs, Volta whitepaper), 128 x 128 tiles; fp16 tensor-core GEMMs reach
// about 75 % of the 125 TFLOP/s peak at large sizes (the user's guide above,
// assumption for the exact figure). FlashAttention (Dao et al. 2022) does not
// run on Volta: fused attention here is a stand-in at half the peak, and
// scenarios of V100 runs of the time use "attention": "unfused".
KernelTable v100_kernels() {
  return gpu_kernels(80, 128, 128, 0.75, 0.5, 0.4, 0.0);
}

// P100 (56 SMs, Pascal whitepaper): no tensor cores; fp16 runs as paired FMAs on
// the CUDA cores, which large GEMMs keep about 75 % busy (assumption).
KernelTable p100_kernels() {
  return gpu_kernels(56, 128, 128, 0.75, 0.5, 0.4, 0.0);
}

// Tesla P40 (GP102, 30 SMs: 3,840 CUDA cores of 128 per SM, NVIDIA Pascal
// GP100/GP102 whitepapers): fp32 only (no fast fp16), in 128 x 128 SGEMM tiles at
// the presets' assumed 0.75; attention as P100's. Two figures measured on a P40
// (Microway 2016, "NVIDIA Tesla P40 GPU Accelerator (Pascal GP102) Up Close", CUDA
// bandwidthTest --memory=pinned on one card, 32 MiB): the device-to-device copy,
// 240,357.5 MB/s of 2^20 bytes counting each byte read and written, is 252 GB/s of
// the datasheet's 346, so memory-bound kernels get 0.73; the host-to-device copy,
// 11,842.8 MB/s = 12.4 GB/s of PCIe 3.0 x16's 15.75, gives links 0.79.
KernelTable p40_kernels() {
  KernelTable t = gpu_kernels(30, 128, 128, 0.75, 0.5, 0.4, 0.0);
  t.memory_efficiency = 0.73;
  t.link_efficiency = 0.79;
  return t;
}

// NVIDIA's "GB" of HBM is binary: an A100 80GB reports 81,920 MiB in nvidia-smi,
// a V100 16GB 16,384 MiB (less what the driver reserves), so GPU capacities are in
// GiB, like the TPUs'.
std::vector<DevicePreset> build_presets() {
  std::vector<DevicePreset> p;
  // A100 SXM4 80 GB: 19.5 TFLOP/s fp32, 312 bf16/fp16 dense, 80 GB HBM2e at
  // 2,039 GB/s (NVIDIA A100 Tensor Core GPU datasheet). NVLink 3 through NVSwitch
  // (DGX/HGX A100): 600 GB/s total per GPU, 300 GB/s each way to any peer (A100
  // architecture whitepaper).
  p.push_back(make("a100-80g", 19.5e12, 312e12, 80 * kGiB, 2039e9, kGpuOpOverhead_s,
                   {TopologyKind::kAllToAll, 300e9, kNvlinkLatency_s},
                   "NVIDIA A100 SXM4 80GB, NVLink 3 via NVSwitch (A100 datasheet)"));
  p.back().device.kernels = a100_kernels();
  // A100 SXM4 40 GB: the 80 GB part's compute with 40 GB of HBM2 at 1,555 GB/s
  // (A100 datasheet).
  p.push_back(make("a100-40g", 19.5e12, 312e12, 40 * kGiB, 1555e9, kGpuOpOverhead_s,
                   {TopologyKind::kAllToAll, 300e9, kNvlinkLatency_s},
                   "NVIDIA A100 SXM4 40GB, NVLink 3 via NVSwitch (A100 datasheet)"));
  p.back().device.kernels = a100_kernels();
  // DGX A100: 8 A100 SXM4 80 GB per node on NVSwitch (300 GB/s each way) and 8
  // ConnectX-6 HDR NICs of 200 Gbit/s = 25 GB/s each way, one per GPU, to the
  // InfiniBand fabric (NVIDIA DGX A100 user guide); hop latency as dgx-h100's.
  {
    DevicePreset dgx = make("dgx-a100", 19.5e12, 312e12, 80 * kGiB, 2039e9, kGpuOpOverhead_s,
                            {TopologyKind::kNodes, 300e9, kNvlinkLatency_s, 8, 25e9, 5e-6},
                            "NVIDIA DGX A100 nodes: 8 A100 SXM4 80GB on NVSwitch, a 200 Gb/s "
                            "InfiniBand NIC per GPU between nodes (DGX A100 user guide)");
    dgx.device.kernels = a100_kernels();
    p.push_back(std::move(dgx));
  }
  // H100 SXM5: 67 TFLOP/s fp32, 989 bf16 dense (1,979 is with sparsity), 80 GB HBM3
  // at 3.35 TB/s; NVLink 4 900 GB/s total, 450 GB/s each way (NVIDIA H100 datasheet).
  p.push_back(make("h100-sxm", 67e12, 989e12, 80 * kGiB, 3.35e12, kGpuOpOverhead_s,
                   {TopologyKind::kAllToAll, 450e9, kNvlinkLatency_s},
                   "NVIDIA H100 SXM5 80GB, NVLink 4 via NVSwitch (H100 datasheet)"));
  p.back().device.kernels = h100_kernels(132, 1979e12);
  // H100 PCIe: 114 SMs, 51 TFLOP/s fp32, 756 bf16 and 1,513 FP8 dense, 80 GB
  // HBM2e at 2.0 TB/s; PCIe Gen5 x16, 64 GB/s each way (H100 datasheet). Copies
  // between GPUs go through the host in this preset (no NVLink bridges).
  p.push_back(make("h100-pcie", 51e12, 756e12, 80 * kGiB, 2.0e12, kGpuOpOverhead_s,
                   {TopologyKind::kPcieHost, 64e9, kPcieLatency_s},
                   "NVIDIA H100 PCIe 80GB through host memory (H100 datasheet)"));
  p.back().device.kernels = h100_kernels(114, 1513e12);
  // DGX H100: 8 H100 SXM5 per node on NVLink 4 through NVSwitch, 450 GB/s each
  // way, and 8 ConnectX-7 NICs of 400 Gbit/s = 50 GB/s each way, one per GPU, to
  // the InfiniBand fabric (NVIDIA DGX H100 user guide). The InfiniBand hop
  // latency, 5 us per hop through the NIC and switch, is an assumption of the
  // order vendors quote for RDMA, not a measurement.
  {
    DevicePreset dgx = make("dgx-h100", 67e12, 989e12, 80 * kGiB, 3.35e12, kGpuOpOverhead_s,
                            {TopologyKind::kNodes, 450e9, kNvlinkLatency_s, 8, 50e9, 5e-6},
                            "NVIDIA DGX H100 nodes: 8 H100 SXM5 on NVSwitch, a 400 Gb/s "
                            "InfiniBand NIC per GPU between nodes (DGX H100 user guide)");
    dgx.device.kernels = h100_kernels(132, 1979e12);
    p.push_back(std::move(dgx));
  }
  // H200 SXM: the H100 compute (67 fp32, 989 bf16 dense) with 141 GB HBM3e at
  // 4.8 TB/s; NVLink 4 900 GB/s total, 450 GB/s each way (NVIDIA H200 datasheet).
  p.push_back(make("h200", 67e12, 989e12, 141 * kGiB, 4.8e12, kGpuOpOverhead_s,
                   {TopologyKind::kAllToAll, 450e9, kNvlinkLatency_s},
                   "NVIDIA H200 SXM 141GB, NVLink 4 via NVSwitch (H200 datasheet)"));
  p.back().device.kernels = h100_kernels(132, 1979e12);
  // P100 PCIe 16 GB: 9.3 TFLOP/s fp32, 18.7 fp16, 16 GB HBM2 at 732 GB/s (NVIDIA
  // Tesla P100 PCIe datasheet). No peer-to-peer: copies go through host memory over
  // PCIe 3 x16, 15.75 GB/s per direction; like every preset's link this is the
  // peak, and the kernel table's link efficiency (0.8) gives the ~12.6 GB/s that
  // pinned copies reach (CUDA bandwidthTest; 12.4 GB/s measured on a P40 below).
  p.push_back(make("p100-pcie", 9.3e12, 18.7e12, 16 * kGiB, 732e9, kGpuOpOverhead_s,
                   {TopologyKind::kPcieHost, kPcie3x16, kPcieLatency_s},
                   "NVIDIA Tesla P100 PCIe 16GB through host memory (P100 datasheet)"));
  p.back().device.kernels = p100_kernels();
  // An 8-GPU PCIe server of P100s: the p100-pcie figures on a PCIe tree, two GPUs
  // behind each PCIe 3 switch whose one x16 uplink to the host they share, peer
  // copies staged through host memory. Two GPUs per switch is the layout of the
  // common 4-switch, 8-GPU PCIe chassis; it is an assumption about the machine,
  // not a vendor figure, and `devices_per_switch` overrides it.
  {
    Interconnect tree{TopologyKind::kPcieHost, kPcie3x16, kPcieLatency_s};
    tree.devices_per_switch = 2;
    p.push_back(make("pcie-host", 9.3e12, 18.7e12, 16 * kGiB, 732e9, kGpuOpOverhead_s, tree,
                     "NVIDIA Tesla P100 PCIe 16GB, two per PCIe switch, copies through host "
                     "memory (P100 datasheet; switch layout assumed)"));
    p.back().device.kernels = p100_kernels();
  }
  // An 8-GPU PCIe server of Tesla P40s: 12 TFLOP/s fp32 at the 1,531 MHz boost
  // clock, 24 GB GDDR5 at 346 GB/s, PCIe 3.0 x16 (NVIDIA Tesla P40 datasheet);
  // 16-bit arithmetic runs at 1/64 of the fp32 rate on compute capability 6.1
  // (CUDA C++ Programming Guide, arithmetic instruction throughput), so its
  // 16-bit peak is 0.19 TFLOP/s. No NVLink:
  // peer copies are staged through host memory at PCIe 3.0 x16's 15.75 GB/s per
  // direction (the kernel table's link efficiency is the measured share of it),
  // two GPUs behind each switch, as in `pcie-host` (an assumption about the
  // machine).
  {
    Interconnect tree{TopologyKind::kPcieHost, kPcie3x16, kPcieLatency_s};
    tree.devices_per_switch = 2;
    p.push_back(make("p40-pcie", 12e12, 12e12 / 64, 24 * kGiB, 346e9, kGpuOpOverhead_s, tree,
                     "NVIDIA Tesla P40 24GB, two per PCIe switch, copies through host memory "
                     "(P40 datasheet; Microway 2016 bandwidthTest; switch layout assumed)"));
    p.back().device.kernels = p40_kernels();
  }
  // TPU v2, one core (half a chip). 45 TFLOP/s bf16 per chip (Google I/O 2017:
  // 180 TFLOP/s per 4-chip board), 22.5 per core; 8 GiB HBM per core (Cloud TPU
  // system architecture). HBM 700 GB/s per chip, 350 per core (Jouppi et al., "A
  // Domain-Specific Supercomputer for Training Deep Neural Networks", CACM 2020,
  // table 3; secondary sources quote 600 GB/s per chip). ICI: 4 links per chip of
  // 496 Gbit/s = 62 GB/s each, 2-D torus (same table; a third-party summary also
  // gives ~62 GB/s per v2 port), taken as per direction. fp32: XLA's default
  // precision for f32 matmuls on TPU is one bf16 pass with fp32 accumulation (JAX
  // issue google/jax#1856, JAX "Matmul precision" docs), which is how TF/Lingvo
  // models such as GPipe's ran, so fp32 uses the bf16 peak; Precision.HIGHEST (6
  // passes) would run at about 1/6 of it. Both cores of a chip sit on the ring and
  // every hop is charged at ICI speed (conservative).
  p.push_back(make("tpu-v2", 22.5e12, 22.5e12, 8 * kGiB, 350e9, kTpuOpOverhead_s,
                   {TopologyKind::kRing, 62e9, kIciLatency_s},
                   "Google TPU v2 core, ICI ring (Jouppi et al. CACM 2020; Cloud TPU docs)"));
  // TPU v3, one core: 123 TFLOP/s bf16 and 32 GiB HBM at 900 GB/s per 2-core chip,
  // 2-D torus (Cloud TPU v3 docs), so 61.5 TFLOP/s, 16 GiB, 450 GB/s per core. ICI
  // 4 links of 656 Gbit/s = 82 GB/s (Jouppi et al. CACM 2020, table 3). fp32 as for
  // tpu-v2.
  p.push_back(make("tpu-v3", 61.5e12, 61.5e12, 16 * kGiB, 450e9, kTpuOpOverhead_s,
                   {TopologyKind::kRing, 82e9, kIciLatency_s},
                   "Google TPU v3 core, ICI ring (Cloud TPU v3 docs; Jouppi et al. CACM 2020)"));
  // TPU v3 cores on a 2-D torus: the tpu-v3 core figures with the torus the
  // chips are wired in (Cloud TPU v3 docs: a 2-D torus of ICI links, 82 GB/s
  // each; Jouppi et al. CACM 2020, table 3), each core a vertex with its four
  // neighbours, the most nearly square grid for the device count.
  {
    DevicePreset torus = make("tpu-torus", 61.5e12, 61.5e12, 16 * kGiB, 450e9, kTpuOpOverhead_s,
                              {TopologyKind::kTorus, 82e9, kIciLatency_s},
                              "Google TPU v3 cores on a 2-D ICI torus (Cloud TPU v3 docs; "
                              "Jouppi et al. CACM 2020)");
    p.push_back(std::move(torus));
  }
  // V100 SXM2 16 GB: 15.7 TFLOP/s fp32, 125 fp16 tensor, 16 GB HBM2 at 900 GB/s
  // (NVIDIA Tesla V100 datasheet). NVLink 2: 6 links of 25 GB/s each way, 300 GB/s
  // total (Volta whitepaper). In a DGX-1 hybrid cube-mesh a linked pair shares one or
  // two links; we give every pair one link, 25 GB/s each way, the bandwidth any
  // linked pair is guaranteed (all-to-all is a simplification of the cube-mesh).
  p.push_back(make("v100-nvlink", 15.7e12, 125e12, 16 * kGiB, 900e9, kGpuOpOverhead_s,
                   {TopologyKind::kAllToAll, 25e9, kNvlinkLatency_s},
                   "NVIDIA Tesla V100 SXM2 16GB, NVLink 2 (V100 datasheet, Volta whitepaper)"));
  p.back().device.kernels = v100_kernels();
  // cpu: one core of the machine at hand, a device of the CPU executor. Its real
  // figures come from `pipescope profile` (--cost-model); these nominal ones only
  // let a scenario name it without a profile: 32 GFLOP/s fp32 (a 2-4 GHz core with
  // 128-bit SIMD, what a portable Eigen build uses), 20 GB/s of memory bandwidth,
  // 4 GiB per core (the executor's limit on model state), 1 us per op; stages
  // talk through in-process queues, taken as 10 GB/s and 5 us (a thread wake-up).
  {
    Device d;
    d.name = "cpu";
    d.peak_flops_fp32 = 32e9;
    d.peak_flops_16bit = 32e9;
    d.memory_bytes = 4 * kGiB;
    d.mem_bandwidth = 20e9;
    d.op_overhead_s = 1e-6;
    d.efficiency = {kMaxEfficiency, 32e9 * kHalfEfficiencyTime_s};
    p.push_back({std::move(d),
                 {TopologyKind::kAllToAll, 10e9, 5e-6},
                 "one core of this machine for the CPU executor (nominal figures; measure them "
                 "with `pipescope profile` and pass --cost-model)"});
  }
  std::sort(p.begin(), p.end(), [](const DevicePreset& a, const DevicePreset& b) {
    return a.device.name < b.device.name;
  });
  return p;
}

}  // namespace

const std::vector<DevicePreset>& device_presets() {
  static const std::vector<DevicePreset> presets = build_presets();
  return presets;
}

std::optional<DevicePreset> find_device_preset(std::string_view name) {
  for (const DevicePreset& p : device_presets()) {
    if (p.device.name == name) return p;
  }
  return std::nullopt;
}

}  // namespace pipescope
