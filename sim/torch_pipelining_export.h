#pragma once
// A plan as PyTorch pipelining's per-rank action CSV (what `export --to
// torch-pipelining` writes and a schedule's _load_csv reads): a row per rank,
// one action per time step, a cell left empty where the rank waits.

#include <string>

#include "sim/plan.h"

namespace pipescope {

// Each rank's actions in the schedule's order, aligned in steps: an action runs
// in the first step after its inputs arrived. Cells: "0F1"; "2I3" and "2W3" for
// a split backward, "2B3" for a whole one; "(0F7;7B3)OVERLAP_F_B" for an
// overlapped pair. Recomputes and optimizer steps are not actions.
std::string export_torch_pipelining(const Plan& p);

}  // namespace pipescope
