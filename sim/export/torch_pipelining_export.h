#pragma once
// A plan as PyTorch pipelining's per-rank action CSV (what `export --to
// torch-pipelining` writes and a schedule's _load_csv reads): a row per rank,
// one action per time step, a cell left empty where the rank waits; and the
// device mesh and parallel styles that run it in three dimensions.

#include <string>

#include "sim/plan/plan.h"

namespace pipescope {

// Each rank's actions in the schedule's order, aligned in steps: an action runs
// in the first step after its inputs arrived. Cells: "0F1"; "2I3" and "2W3" for
// a split backward, "2B3" for a whole one; "(0F7;7B3)OVERLAP_F_B" for an
// overlapped pair. Recomputes and optimizer steps are not actions.
std::string export_torch_pipelining(const Plan& p);

// The Python module that goes beside the CSV (checked by export_torch_device_mesh
// in sim/export/plan_export.h, which calls this): the plan's D x K x T ranks as a
// DeviceMesh of shape (D, K, T) named ("dp", "pp", "tp"), which is the order the
// plan places them in (Cluster: groups of T consecutive devices; the pipeline's
// K groups; D replicas of it, replica r on groups r K .. r K + K - 1);
// each pipeline rank's stages and M; for T > 1 Megatron-LM's split as
// torch.distributed.tensor.parallel styles (with sequence parallelism, the
// sequence-sharded layouts and SequenceParallel); for D > 1 the data-parallel
// wrapper over "dp": DistributedDataParallel, FSDP's replicate under tensor
// parallelism, fully_shard for ZeRO stage 1.
std::string torch_device_mesh(const Plan& p);

}  // namespace pipescope
