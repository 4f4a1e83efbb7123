#pragma once
// Where a framework runs an exported plan otherwise than it was planned: the
// schedule it runs (framework_schedule), how its stages send
// (framework_sends), and the comment lines an export carries about them, with
// the plan simulated as the framework would run it when the scenario is given
// (docs/commands.md, "`pipescope export`").

#include <string>
#include <string_view>

#include "sim/export/plan_export.h"
#include "sim/plan/plan.h"
#include "sim/scenario/scenario.h"

namespace pipescope {

// "torchgpipe", "DeepSpeed", "Megatron-LM", "PyTorch pipelining".
std::string_view framework_label(ExportFormat f);

// Comment lines: the schedule the framework runs and, when it is not the
// plan's, what the plan becomes under it (with the framework's sends).
std::string schedule_note(const Plan& p, ExportFormat format, const Scenario* scenario);

// Comment lines when the framework's stages exchange tensors otherwise than
// the plan's (docs/models.md, "How stages exchange tensors"): what differs
// and, when the scenario is given, what the plan takes there.
std::string sends_note(const Plan& p, ExportFormat format, const Scenario* scenario);

// DeepSpeed and Megatron-LM recompute every micro-batch or none: under remat
// except-last, what that costs beside the plan.
std::string except_last_note(const Plan& p, ExportFormat format);

}  // namespace pipescope
