#pragma once
// A plan in the forms other tools take (docs/commands.md, "`pipescope export`"):
//   torchgpipe       the `balance` list: layers per stage;
//   deepspeed        PipelineModule(partition_method="type:...") is not exact, so
//                    the stage boundaries as `parts` for a custom partition;
//   megatron         the command-line flags for pipeline size, micro-batches and
//                    uneven first and last stages;
//   torch-pipelining the per-rank action schedule as PyTorch pipelining's CSV.

#include <optional>
#include <string>
#include <string_view>

#include "sim/plan.h"

namespace pipescope {

enum class ExportFormat { kTorchGpipe, kDeepSpeed, kMegatron, kTorchPipelining };

std::string_view to_string(ExportFormat f);
std::optional<ExportFormat> parse_export_format(std::string_view name);

// The text to write or print; ends with a newline.
std::string export_plan(const Plan& plan, ExportFormat format);

}  // namespace pipescope
