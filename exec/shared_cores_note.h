#pragma once
// The report's line on how a prediction modelled stages that share the
// machine's cores (or GPUs).

#include <string>

#include "costmodels/profile.h"

namespace pipescope::exec {

// One line on how shared cores (or GPUs: `what` is "GPU") were modelled, for
// the report: `stages`, each of `ranks` threads (tensor, context or expert
// ranks; `processes`: the MPI backend's), on `cores` in all; `sliced`: the
// slowdown the profile measured for a time-sliced group, which the
// prediction took (GroupSlowdownFigures::time_sliced), or null.
std::string shared_cores_note(int stages, int cores, const std::string& what = "core",
                              int ranks = 1, bool processes = false,
                              const GroupSlowdownFigures* sliced = nullptr);

}  // namespace pipescope::exec
