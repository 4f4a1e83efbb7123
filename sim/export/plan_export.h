#pragma once
// A plan in the forms other tools take (docs/commands.md, "`pipescope export`"):
//   torchgpipe       the `balance` list: layers per stage;
//   deepspeed        PipelineModule(partition_method="type:...") is not exact, so
//                    the stage boundaries as `parts` for a custom partition;
//   megatron         the command-line flags for pipeline size, micro-batches and
//                    uneven first and last stages;
//   torch-pipelining the per-rank action schedule as PyTorch pipelining's CSV, and
//                    beside it the device mesh (dp x pp x tp) and how tensor and data
//                    parallelism map onto PyTorch (export_torch_device_mesh).

#include <optional>
#include <string>
#include <string_view>

#include "sim/plan/plan.h"

namespace pipescope {

enum class ExportFormat { kTorchGpipe, kDeepSpeed, kMegatron, kTorchPipelining };

std::string_view to_string(ExportFormat f);
std::optional<ExportFormat> parse_export_format(std::string_view name);

// The schedule a framework runs an exported plan with (with framework_sends,
// beside the export notes that use them: sim/export/framework_runs.h).
struct FrameworkSchedule {
  ScheduleKind schedule = ScheduleKind::kGpipe;
  int chunks = 1;
  friend bool operator==(const FrameworkSchedule&, const FrameworkSchedule&) = default;
};

// torchgpipe runs GPipe only; DeepSpeed's PipelineEngine its TrainSchedule, 1F1B's
// order; Megatron-LM 1F1B, or interleaved 1F1B with the plan's virtual stages (its
// standard schedules have neither GPipe nor ZB-H1); PyTorch pipelining the plan's
// own, from the CSV.
FrameworkSchedule framework_schedule(ExportFormat format, const Plan& plan);

// How the framework's stages exchange tensors (Cluster::p2p, p2p_split):
// DeepSpeed's pipeline engine and Megatron-LM's non-interleaved schedule wait
// for every send; Megatron-LM's interleaved schedule overlaps them unless told
// not to (--no-overlap-p2p-communication, which the export writes for a plan
// whose sends block: the plan's mode); torchgpipe and PyTorch's pipelining
// overlap theirs. DeepSpeed partitions a cut over the tensor-parallel ranks
// (pipe_partitioned, grad_partitioned); megatron-core (0.16.1) and PyTorch
// send each rank's whole copy. Where it is not the plan's, the export says
// what the plan takes there.
struct FrameworkSends {
  P2pMode mode = P2pMode::kOverlapped;
  bool split = false;
};
FrameworkSends framework_sends(ExportFormat format, const Plan& plan);

// The text to write or print; ends with a newline. Each export but the CSV says
// which schedule the framework runs; when that is not the plan's, and the plan's
// scenario is given (the one it was planned on, whole cluster), it gives the
// plan's step time and peak memory under that schedule, simulated with the plan's
// K, M, cut and remat, beside the plan's own.
std::string export_plan(const Plan& plan, ExportFormat format, const Scenario* scenario = nullptr);

// What goes beside the torch-pipelining CSV: a Python module with the plan's
// DeviceMesh (MESH_SHAPE (D, K, T), MESH_DIM_NAMES ("dp", "pp", "tp"),
// pipescope_device_mesh()), each pipeline rank's stages, and for T > 1 the
// tensor-parallel styles, for D > 1 the data-parallel wrapper (ZeRO stage 1:
// fully_shard over "dp"). Throws std::invalid_argument where export_plan refuses
// the plan for torch-pipelining.
std::string export_torch_device_mesh(const Plan& plan);

// The file the device mesh goes to beside the CSV `csv_path`: its name less ".gz"
// and ".csv", with ".mesh.py" ("out/plan.csv" -> "out/plan.mesh.py").
std::string torch_device_mesh_path(const std::string& csv_path);

// For the exports: the comment lines naming the plan ("# model '...' ..."), and
// a stage's layers in words ("layers 0-2: embed, block0, block1").
std::string export_summary(const Plan& plan);
std::string describe_stage_layers(const Plan& plan, const StageRange& layers);

}  // namespace pipescope
