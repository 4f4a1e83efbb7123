#include "costmodels/framework.h"

#include <algorithm>

namespace pipescope {

namespace {

// What PyTorch's eager mode costs the host per op launched: about 7 us for the
// simplest operation with autograd recording, 5 us without (pytorch/pytorch
// issue 41383, measured by the maintainers), 8 us a launch for an elementwise
// op measured on an A100 host. Training frameworks add their Python modules'
// work per layer on top; 8 us is taken for every framework that runs eagerly.
constexpr double kEagerLaunchS = 8e-6;

// Passes over the gradients in each step beyond the optimizer's own, bytes per
// gradient element (read 4 bytes, read and write 8, write 4 for fp32):
// Megatron-Core (core_r0.8 to core_v0.13, its gradient buffer and gradient
// clipping): the NaN check's norm (4), the scaling by 1 / D
// before the reduction (8), the gradient norm for clipping (4), the zeroing
// of the buffer for the next step (4).
constexpr double kMegatronCoreStepPasses = 20.0;
// Megatron-LM of 2021-2022 (its local DDP and mixed-precision optimizer): no
// NaN check, the rest as above.
constexpr double kMegatronLmStepPasses = 16.0;
// DeepSpeed's pipeline engine with its bf16 optimizer (BF16_Optimizer, the
// engine's buffered_allreduce_fallback): the fp32 gradients cast down into a
// flat bucket and back (6 + 6), their norm (4), the zeroing (4).
constexpr double kDeepSpeedStepPasses = 20.0;
// torch's clip_grad_norm_ (the norm, 4; the scaling, 8).
constexpr double kTorchClipPasses = 12.0;
// The most SMs a userbuffers overlap may take from its GEMM (Transformer
// Engine's configurations use 1 to 24).
constexpr double kMostOverlapSms = 32.0;

// DeepSpeed's bf16 optimizer after each backward of a non-last stage
// (update_hp_grads): each bf16 gradient cast to fp32 and added into the fp32
// copy: read 2, write the fp32 temporary 4, read it 4 and the copy 4, write 4.
// (Its fp16 runs keep fp16 gradients, which autograd accumulates in place.)
constexpr double kDeepSpeedAccumulationBytes = 18.0;

Framework ideal() {
  Framework f;
  f.name = kIdealFramework;
  return f;
}

// Megatron-Core's training loop (Megatron-LM core_r0.8.0 to core_v0.13.0)
// with Transformer Engine's layers, at its command line's defaults.
Framework megatron_core() {
  Framework f;
  f.name = "megatron-core";
  f.host_launch_s = kEagerLaunchS;
  // Its point-to-point module: batch_p2p_comm and batch_p2p_sync default true, and
  // _communicate then calls torch.cuda.synchronize(); its arguments turn
  // overlap_p2p_comm off for the non-interleaved schedule and on (without
  // batching, so without the synchronize) for the interleaved one, whose
  // warm-up and cool-down still wait on each exchange (its schedules:
  // overlap_p2p_comm_warmup_flush, off by default).
  f.sync_after_p2p = true;
  f.sync_after_p2p_interleaved = false;
  f.p2p = P2pMode::kBlocking;
  f.p2p_interleaved = P2pMode::kOverlappedSteady;
  f.rank_order = RankOrder::kTpDpPp;  // parallel_state's default order tp-cp-ep-dp-pp
  // TE's LayerNormLinear, fused attention; --cross-entropy-loss-fusion off.
  f.fused_attention = true;
  f.fused_norm = true;
  f.cross_entropy = CrossEntropy::kFp32;
  // The layer spec's TELayerNormColumnParallelLinear and
  // TERowParallelLinear (Transformer Engine's LayerNormLinear and Linear)
  // save FP8 copies of their GEMMs' inputs for the weight gradients: the
  // normalised input that the norm's kernel writes in FP8, the Linear's
  // input or its transpose cast to FP8 (TE 1.12, with the default recipe,
  // whose weight gradient runs in FP8).
  f.fp8_stash = true;
  // bf16 forces accumulate_allreduce_grads_in_fp32 (main_grads_dtype fp32 by
  // default in core_v0.13); --overlap-grad-reduce and --overlap-param-gather
  // default off; gradient_accumulation_fusion on.
  f.fp32_grads = true;
  f.fp32_grad_reduce = true;
  // LinearWithGradAccumulationAndAsyncCommunication: the input gradient's
  // all-reduce (reduce-scatter) runs while the weight gradient computes;
  // --tp-comm-overlap is off.
  f.tp_backward_overlap = true;
  // Where a run turns on --tp-comm-overlap (tp_forward_overlap) without a
  // config of its own: Transformer Engine's defaults (initialize_ub, TE 2.x):
  // every "pipeline" and "bulk" overlap on 16 SMs kept from its GEMM
  // (set_sm_margin), the reduce-scatters in 4 chunks. (TE 1.x, which
  // core_r0.8 ran, set no margin.)
  f.userbuffers_exposed_share = 0.25;
  f.userbuffers_proj_fprop_sms = f.userbuffers_fc2_fprop_sms = 16;
  f.userbuffers_qkv_dgrad_sms = f.userbuffers_qkv_wgrad_sms = 16;
  f.userbuffers_fc1_dgrad_sms = f.userbuffers_fc1_wgrad_sms = 16;
  f.userbuffers_fprop_sm_margin = f.userbuffers_bulk_sm_margin = true;
  f.step_grad_pass_bytes = kMegatronCoreStepPasses;
  return f;
}

// NeMo 2's performance recipes on Megatron-Core: the communication-overlap
// callback overlaps the gradient reduction and the weight gather with
// compute, Transformer Engine's userbuffers the tensor-parallel collectives;
// the gradients stay bf16 (grad_reduce_in_fp32 off); the loss fused.
Framework nemo() {
  Framework f = megatron_core();
  f.name = "nemo";
  f.cross_entropy = CrossEntropy::kFp32Fused;
  f.fp32_grads = false;
  f.fp32_grad_reduce = false;
  f.overlap_grad_reduce = true;
  f.overlap_param_gather = true;
  f.tp_forward_overlap = true;
  // NeMo's userbuffers configuration for the H100 (tp_overlap_configs,
  // userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192 and its siblings): the
  // output projection's reduce-scatter on 24 SMs, the MLP's on 16, each in 4
  // chunks, the GEMMs kept off those SMs (set_sm_margin); the bulk overlaps
  // on 4 (qkv_dgrad), 24 (qkv_wgrad), 2 (fc1_dgrad) and 4 (fc1_wgrad) SMs
  // that their GEMMs share (no margin).
  f.userbuffers_proj_fprop_sms = 24;
  f.userbuffers_fc2_fprop_sms = 16;
  f.userbuffers_qkv_dgrad_sms = 4;
  f.userbuffers_qkv_wgrad_sms = 24;
  f.userbuffers_fc1_dgrad_sms = 2;
  f.userbuffers_fc1_wgrad_sms = 4;
  f.userbuffers_bulk_sm_margin = false;
  return f;
}

// Megatron-LM from September 2021 to the end of 2022 (main after tag v2.6,
// v3.0): _communicate synchronises the device after every exchange, in every
// schedule; attention is its fused scale-mask-softmax between batched GEMMs
// (FlashAttention came in December 2022); each tensor-parallel rank sends
// 1 / T of a cut and the next group all-gathers it; the input gradient's
// all-reduce runs beside the weight gradient's GEMM (September 2021), which
// accumulates into the fp32 main_grad itself (gradient_accumulation_fusion,
// February 2022).
Framework megatron_lm_2022() {
  Framework f;
  f.name = "megatron-lm-2022";
  f.host_launch_s = kEagerLaunchS;
  f.sync_after_p2p = true;
  f.sync_after_p2p_interleaved = true;
  f.p2p = P2pMode::kBlocking;
  f.p2p_interleaved = P2pMode::kBlocking;
  f.p2p_split = true;
  f.rank_order = RankOrder::kTpDpPp;
  f.fused_attention = false;
  f.fused_norm = true;
  f.cross_entropy = CrossEntropy::kFp32;
  f.fp32_grads = true;
  f.fp32_grad_reduce = true;
  f.tp_backward_overlap = true;
  f.step_grad_pass_bytes = kMegatronLmStepPasses;
  return f;
}

// Megatron-LM v2.0 to v2.6 (January to August 2021), as the PTD-P paper
// (Narayanan et al. 2021) ran it: as above, but the tensor-parallel
// all-reduce of a backward's input gradient runs after its weight gradient
// (the backward of copy_to_tensor_model_parallel_region), and
// the local DDP's hook adds each backward's gradient into main_grad
// (its local DistributedDataParallel: main_grad.add_(grad); fp32 for bf16, the
// parameters' type otherwise).
Framework megatron_lm_2021() {
  Framework f = megatron_lm_2022();
  f.name = "megatron-lm-2021";
  f.tp_backward_overlap = false;
  f.grad_accumulation_pass = true;
  return f;
}

// DeepSpeed's pipeline engine (0.6 to 0.9) under Megatron-DeepSpeed, as
// BLOOM and MT-NLG ran it: blocking NCCL sends and receives (no host
// synchronisation), partitioned activations, Megatron's 2021 layers, and the
// bf16 optimizer's fp32 gradient copy filled after every backward and reduced
// in bf16 (communication_data_type).
Framework deepspeed() {
  Framework f;
  f.name = "deepspeed";
  f.host_launch_s = kEagerLaunchS;
  f.p2p = P2pMode::kBlocking;
  f.p2p_interleaved = P2pMode::kBlocking;
  f.p2p_split = true;
  f.rank_order = RankOrder::kTpDpPp;  // PipeModelDataParallelTopology: model, data, pipe
  f.fused_attention = false;
  f.fused_norm = true;
  f.cross_entropy = CrossEntropy::kFp32;
  f.fp32_grads = true;
  f.fp32_grad_reduce = false;
  f.grad_accumulation_pass = true;
  f.grad_accumulation_bytes = kDeepSpeedAccumulationBytes;
  f.step_grad_pass_bytes = kDeepSpeedStepPasses;
  // Stage 1 sets contiguous_gradients false for models without experts
  // (engine.py's _configure_zero_optimizer, 0.5 to 0.10), so reduce_gradients
  // all-reduces each bucket of 16-bit gradients whole
  // (buffered_reduce_fallback); the bf16 optimizer all-reduces its gradients
  // likewise (the pipeline engine's _bf16_reduce_grads). Both then all-gather
  // the updated 16-bit weights (all_gather_dp_groups).
  f.zero1_allreduce = true;
  return f;
}

// torchtitan (v0.2) in eager mode: torch.distributed.pipelining's
// asynchronous sends, FSDP2 (reduce-scatter in fp32, overlapped, weights
// gathered ahead), PyTorch's nn.RMSNorm as separate ops (before PyTorch 2.8's
// fused kernel), SDPA's flash attention, the loss over logits cast to fp32.
Framework torchtitan() {
  Framework f;
  f.name = "torchtitan";
  f.host_launch_s = kEagerLaunchS;
  f.rank_order = RankOrder::kTpDpPp;  // mesh pp, dp_replicate, dp_shard, cp, tp
  f.fused_attention = true;
  f.flash_attention_2 = true;  // SDPA's flash backend
  f.fused_norm = false;
  f.cross_entropy = CrossEntropy::kFp32Fused;
  f.fp32_grads = false;
  f.fp32_grad_reduce = true;
  f.overlap_grad_reduce = true;
  f.overlap_param_gather = true;
  f.step_grad_pass_bytes = kTorchClipPasses;
  return f;
}

// torchgpipe (0.0.7) on PyTorch's eager mode: copy streams that overlap the
// exchanges, one worker thread a partition.
Framework torchgpipe() {
  Framework f;
  f.name = "torchgpipe";
  f.host_launch_s = kEagerLaunchS;
  f.grad_accumulation_pass = true;  // autograd's AccumulateGrad
  return f;
}

struct Described {
  Framework profile;
  const char* description;
};

const std::vector<Described>& described() {
  static const std::vector<Described> all = {
      {megatron_core(),
       "Megatron-LM's training loop on megatron-core (core_r0.8 to core_v0.13) with "
       "Transformer Engine, at its defaults"},
      {nemo(),
       "NeMo 2's performance recipes on megatron-core: gradient, weight-gather and "
       "tensor-parallel communication overlapped"},
      {megatron_lm_2022(),
       "Megatron-LM from September 2021 to 2022 (after v2.6, v3.0): fused softmax between "
       "batched GEMMs, the device synchronised after every exchange"},
      {megatron_lm_2021(),
       "Megatron-LM v2.0 to v2.6 (2021), as the PTD-P paper ran it: as megatron-lm-2022, "
       "without its overlapped tensor-parallel backward and fused gradient accumulation"},
      {deepspeed(),
       "DeepSpeed's pipeline engine under Megatron-DeepSpeed (0.6 to 0.9), as "
       "BLOOM and MT-NLG ran it"},
      {torchtitan(), "torchtitan (v0.2) in eager mode: PyTorch pipelining, FSDP2"},
      {torchgpipe(), "torchgpipe (0.0.7): copy streams, eager PyTorch"},
      {ideal(), "no framework: the host never behind, everything fused, nothing extra"},
  };
  return all;
}

}  // namespace

const std::vector<Framework>& framework_profiles() {
  static const std::vector<Framework> all = [] {
    std::vector<Framework> out;
    for (const Described& d : described()) out.push_back(d.profile);
    return out;
  }();
  return all;
}

std::optional<Framework> find_framework(std::string_view name) {
  for (const Framework& f : framework_profiles()) {
    if (f.name == name) return f;
  }
  return std::nullopt;
}

std::string framework_names() {
  std::string out;
  for (const Framework& f : framework_profiles()) out += (out.empty() ? "" : ", ") + f.name;
  return out;
}

std::string_view framework_description(std::string_view name) {
  for (const Described& d : described()) {
    if (d.profile.name == name) return d.description;
  }
  return "";
}

const std::vector<FrameworkField>& framework_fields() {
  static const std::vector<FrameworkField> all = {
      {"host_launch_s", nullptr, &Framework::host_launch_s, 1e-3},
      {"sync_after_p2p", &Framework::sync_after_p2p, nullptr, 0.0},
      {"sync_after_p2p_interleaved", &Framework::sync_after_p2p_interleaved, nullptr, 0.0},
      {"launch_blocking", &Framework::launch_blocking, nullptr, 0.0},
      {"flash_attention_2", &Framework::flash_attention_2, nullptr, 0.0},
      {"grad_accumulation_pass", &Framework::grad_accumulation_pass, nullptr, 0.0},
      {"grad_accumulation_bytes", nullptr, &Framework::grad_accumulation_bytes, 64.0},
      {"fp32_grads", &Framework::fp32_grads, nullptr, 0.0},
      {"fp32_grad_reduce", &Framework::fp32_grad_reduce, nullptr, 0.0},
      {"overlap_grad_reduce", &Framework::overlap_grad_reduce, nullptr, 0.0, true},
      {"overlap_param_gather", &Framework::overlap_param_gather, nullptr, 0.0, true},
      {"zero1_allreduce", &Framework::zero1_allreduce, nullptr, 0.0},
      {"tp_backward_overlap", &Framework::tp_backward_overlap, nullptr, 0.0, true},
      {"tp_forward_overlap", &Framework::tp_forward_overlap, nullptr, 0.0, true},
      {"userbuffers_exposed_share", nullptr, &Framework::userbuffers_exposed_share, 1.0},
      {"userbuffers_proj_fprop_sms", nullptr, &Framework::userbuffers_proj_fprop_sms,
       kMostOverlapSms},
      {"userbuffers_fc2_fprop_sms", nullptr, &Framework::userbuffers_fc2_fprop_sms,
       kMostOverlapSms},
      {"userbuffers_qkv_dgrad_sms", nullptr, &Framework::userbuffers_qkv_dgrad_sms,
       kMostOverlapSms},
      {"userbuffers_qkv_wgrad_sms", nullptr, &Framework::userbuffers_qkv_wgrad_sms,
       kMostOverlapSms},
      {"userbuffers_fc1_dgrad_sms", nullptr, &Framework::userbuffers_fc1_dgrad_sms,
       kMostOverlapSms},
      {"userbuffers_fc1_wgrad_sms", nullptr, &Framework::userbuffers_fc1_wgrad_sms,
       kMostOverlapSms},
      {"userbuffers_fprop_sm_margin", &Framework::userbuffers_fprop_sm_margin, nullptr, 0.0},
      {"userbuffers_bulk_sm_margin", &Framework::userbuffers_bulk_sm_margin, nullptr, 0.0},
      {"pair_alltoall_overlap", &Framework::pair_alltoall_overlap, nullptr, 0.0, true},
      {"step_grad_pass_bytes", nullptr, &Framework::step_grad_pass_bytes, 256.0},
  };
  return all;
}

void drop_overlaps(Framework& fw) {
  for (const FrameworkField& field : framework_fields()) {
    if (field.overlap) fw.*field.flag = false;
  }
  fw.p2p = fw.p2p_interleaved = P2pMode::kBlocking;
}

}  // namespace pipescope
