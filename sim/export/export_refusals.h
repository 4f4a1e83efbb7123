#pragma once
// What each export format cannot express: one rule per refusal, each naming
// the format, why, and where the plan can go instead.

#include "sim/export/plan_export.h"
#include "sim/plan/plan.h"

namespace pipescope {

// Throws std::invalid_argument, saying where else it can go, when `format` cannot
// express the plan.
void check_exportable(const Plan& plan, ExportFormat format);

}  // namespace pipescope
