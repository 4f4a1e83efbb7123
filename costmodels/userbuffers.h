#pragma once
// What Transformer Engine's userbuffers cost the GEMMs they overlap (Megatron-
// Core's --tp-comm-overlap, NeMo's performance recipes; Framework::
// tp_forward_overlap). Each of a block's tensor-parallel collectives runs as a
// kernel of its own on some of the device's SMs beside one GEMM: the
// reduce-scatters after the row-split projections' forward (proj_fprop,
// fc2_fprop, TE's "pipeline" method) and, in the backward, the gather of a
// column-split projection's input beside its input gradient (qkv_dgrad,
// fc1_dgrad) and the reduce-scatter of that gradient beside its weight
// gradient (qkv_wgrad, fc1_wgrad, TE's "bulk" method). The ring exchanges of
// qkv_fprop, fc1_fprop, proj_dgrad and fc2_dgrad take one SM and the copy
// engines, and cost nothing here. docs/models.md, "Tensor parallelism".

#include "costmodels/units.h"

namespace pipescope {

struct Framework;

// The times of the GEMMs that userbuffers kernels run beside, on a device of
// `multiprocessors` SMs.
struct TeGemmTimes {
  SimTime proj_fprop = 0;
  SimTime fc2_fprop = 0;
  SimTime qkv_dgrad = 0;
  SimTime qkv_wgrad = 0;
  SimTime fc1_dgrad = 0;
  SimTime fc1_wgrad = 0;
  int multiprocessors = 0;
};

// What a GEMM of time `gemm` loses to a communication kernel on `sms` of the
// device's `multiprocessors` that runs beside it for `comm`: with an SM
// margin (set_sm_margin) the GEMM runs on the SMs left (at least half) from
// start to end; without, on all of them, losing those the kernel holds while
// it runs: comm x sms / multiprocessors, at most what the margin would cost.
SimTime sm_share_cost(SimTime gemm, double sms, int multiprocessors, bool margin, SimTime comm);

struct UserbufferCost {
  SimTime forward = 0;
  SimTime backward = 0;
};

// What the userbuffers kernels of one layer cost its GEMMs under `framework`,
// when each of the forward's four collectives (two gathers, two
// reduce-scatters, equal in size under sequence parallelism) takes
// `forward_collective` and each of the backward's `backward_collective`.
// Nothing without Framework::tp_forward_overlap.
UserbufferCost userbuffers_cost(const TeGemmTimes& gemms, const Framework& framework,
                                SimTime forward_collective, SimTime backward_collective);

}  // namespace pipescope
