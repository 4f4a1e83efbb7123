#pragma once
// How a training framework runs a job on GPUs, beyond the kernels' shapes:
// which elementwise work it fuses, when its host waits for the device, in which
// precision and when it reduces gradients, what it overlaps with compute, and
// what it keeps per parameter. A scenario names a profile
// (`training.framework`); every field of the profile can be overridden there.
// docs/models.md ("What each framework pays") gives each field's source: the
// frameworks' own code at the version named, NCCL's and PyTorch's measured
// figures.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "costmodels/cluster.h"
#include "costmodels/model_families.h"

namespace pipescope {

// An add of a bf16 gradient into an fp32 one that casts as it reads: read 2
// and 4 bytes, write 4. More bytes than this mean a cast to an fp32
// temporary first, a kernel of its own.
inline constexpr double kCastingAddBytes = 10.0;

struct Framework {
  std::string name;  // the profile it started from: "megatron-core"

  // --- The host ---
  // CPU time to issue one kernel or collective (eager PyTorch: the Python
  // module, the dispatcher and autograd's recording). 0: the host is never
  // behind the device.
  double host_launch_s = 0.0;
  // Whether the host waits for the device (torch.cuda.synchronize) after each
  // exchange between pipeline stages: in schedules of one chunk a device, and
  // in those of several (interleaved). After such a wait the device idles
  // until the host has issued the next op's first kernel, and from there runs
  // no faster than the host issues; without it the host runs ahead.
  bool sync_after_p2p = false;
  bool sync_after_p2p_interleaved = false;
  // Whether every kernel launch and collective call returns only once the
  // device has finished it (CUDA_LAUNCH_BLOCKING=1): the host's time per
  // launch adds to the device's instead of hiding behind it, and no
  // communication overlaps computation (the overlap fields below, and
  // overlapped exchanges between stages, are refused beside it).
  bool launch_blocking = false;

  // --- Kernels (the model's defaults: model.attention, model.cross_entropy,
  // model.norm) ---
  bool fused_attention = true;
  // The fused attention is FlashAttention-2's kernel (PyTorch's SDPA, the
  // flash-attn 2 package), slower on Hopper than the cuDNN or
  // FlashAttention-3 kernels Transformer Engine runs
  // (KernelTable::fa2_attention_*_efficiency).
  bool flash_attention_2 = false;
  CrossEntropy cross_entropy = CrossEntropy::kFp32;
  // Layer norms (LayerNorm, RMSNorm) as one fused kernel each way, or as the
  // separate PyTorch ops of an unfused implementation.
  bool fused_norm = true;
  // Under FP8 (model.fp8), what the backward keeps of a GEMM's input for its
  // weight gradient: the FP8 copy the forward cast, one byte an element
  // (Transformer Engine's Linear and LayerNormLinear), or the input in dtype,
  // cast again in the backward (torchao's Float8Linear, which torchtitan
  // runs). The model's default: model.fp8_stash.
  bool fp8_stash = false;
  // Every backward adds its new weight gradients into the step's in a pass
  // of its own (PyTorch's AccumulateGrad, Megatron-LM 2021's main_grad hook,
  // DeepSpeed's bf16 optimizer): in their own type (e read, 2e read and
  // written), or, for bf16 runs that keep fp32 gradients (fp32_grads),
  // grad_accumulation_bytes. Off where the weight-gradient GEMM accumulates
  // into them itself (Megatron-LM's gradient_accumulation_fusion, from
  // February 2022).
  bool grad_accumulation_pass = false;
  // Bytes per parameter of that pass into fp32 gradients of a bf16 run: an
  // add that casts as it reads (2 + 4 + 4), or a cast to an fp32 temporary
  // first (DeepSpeed's bf16 optimizer: 18).
  double grad_accumulation_bytes = kCastingAddBytes;

  // --- Pipeline exchanges (the cluster's defaults: cluster.p2p,
  // cluster.p2p_split, cluster.rank_order) ---
  // How stages exchange tensors in schedules of one chunk a device, and in
  // interleaved ones.
  P2pMode p2p = P2pMode::kOverlapped;
  P2pMode p2p_interleaved = P2pMode::kOverlapped;
  bool p2p_split = false;
  RankOrder rank_order = RankOrder::kTpPpDp;

  // --- Data parallelism ---
  // 16-bit (bf16) runs keep their gradients in fp32 (Megatron-LM's main_grad
  // buffers, DeepSpeed's fp32 gradient copy), 4 bytes a parameter instead of
  // 2, and reduce them among the replicas in fp32 (fp32_grad_reduce) or cast
  // to 16 bits.
  bool fp32_grads = false;
  bool fp32_grad_reduce = false;
  // The replicas' gradient reduction runs during the last backward of the step
  // (bucket by bucket), not after it.
  bool overlap_grad_reduce = false;
  // ZeRO's all-gather of the updated weights runs during the next step's first
  // forward, not at the end of this one.
  bool overlap_param_gather = false;
  // Under ZeRO-1 the gradients are summed by a full all-reduce, not a
  // reduce-scatter, before each replica steps its 1/D and the updated weights
  // are all-gathered: 1.5 times the bytes a replica sends (DeepSpeed's stage 1
  // without experts, which turns contiguous gradients off, and its bf16
  // optimizer). Not for a mixture of experts, whose contiguous gradients
  // DeepSpeed keeps.
  bool zero1_allreduce = false;

  // --- Tensor parallelism ---
  // A backward's collective on its input gradient runs while the weight
  // gradient's GEMM computes (Megatron-LM's asynchronous all-reduce).
  bool tp_backward_overlap = false;
  // The forward's collectives too are hidden behind the GEMMs (Transformer
  // Engine's userbuffers: Megatron-Core's --tp-comm-overlap, NeMo's
  // performance recipes).
  bool tp_forward_overlap = false;
  // How that overlap runs (costmodels/userbuffers.h; Transformer Engine's
  // names): the reduce-scatter after a row-split GEMM's forward in chunks of
  // which the last stays exposed (this share of it, 1 / num_splits), on
  // this many SMs beside the attention's output projection (proj_fprop) and
  // the MLP's down projection (fc2_fprop); in the backward, the gather of a
  // column-split projection's input beside its input gradient (qkv_dgrad,
  // fc1_dgrad) and the reduce-scatter of that gradient beside its weight
  // gradient (qkv_wgrad, fc1_wgrad), each on this many SMs. With an SM
  // margin (TE's set_sm_margin) the GEMMs keep off those SMs throughout;
  // without, they share them while the collective runs.
  double userbuffers_exposed_share = 0.0;
  double userbuffers_proj_fprop_sms = 0.0;
  double userbuffers_fc2_fprop_sms = 0.0;
  double userbuffers_qkv_dgrad_sms = 0.0;
  double userbuffers_qkv_wgrad_sms = 0.0;
  double userbuffers_fc1_dgrad_sms = 0.0;
  double userbuffers_fc1_wgrad_sms = 0.0;
  bool userbuffers_fprop_sm_margin = false;
  bool userbuffers_bulk_sm_margin = false;

  // --- Expert parallelism ---
  // In an overlapped pair (Op::paired, DualPipe(V)'s F&B) one half's
  // all-to-alls run beside the other half's compute: DeepSeek-V3's DualPipe,
  // and PyTorch's OVERLAP_F_B with an overlapping function registered (its
  // runtime otherwise runs the two one after the other). No profile sets it.
  bool pair_alltoall_overlap = false;

  // --- The optimizer step ---
  // Passes over the gradients beyond the optimizer's own, bytes per
  // parameter of the (fp32 or 16-bit) gradient: the NaN check's norm, the
  // scaling by 1 / D, the gradient norm for clipping, the zeroing.
  double step_grad_pass_bytes = 0.0;

  friend bool operator==(const Framework&, const Framework&) = default;
};

// The profiles, in the order --help lists them.
const std::vector<Framework>& framework_profiles();
std::optional<Framework> find_framework(std::string_view name);
// "megatron-core, nemo, ..." for messages.
std::string framework_names();
// One line on what a profile stands for (versions, the code read).
std::string_view framework_description(std::string_view name);

// The profile a scenario runs under when it names none: megatron-core on GPUs
// costed kernel by kernel, ideal elsewhere (TPUs, CPUs, the analytic
// roofline, a measured profile), where the host and framework are not
// modelled.
inline constexpr const char* kDefaultGpuFramework = "megatron-core";
inline constexpr const char* kIdealFramework = "ideal";

// A profile field that a scenario's training.framework object may override
// (the kernels' and the exchanges' are the model's and the cluster's own
// fields): a flag or a number (seconds, bytes).
struct FrameworkField {
  const char* key;  // "host_launch_s"
  bool Framework::*flag = nullptr;
  double Framework::*number = nullptr;
  double max = 0.0;      // a number's largest value
  bool overlap = false;  // a flag that overlaps communication with computation
};
const std::vector<FrameworkField>& framework_fields();

// What blocking launches (Framework::launch_blocking) leave of a profile:
// every overlap field false, and exchanges between stages blocking.
void drop_overlaps(Framework& fw);

}  // namespace pipescope
