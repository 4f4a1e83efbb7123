#pragma once
// The expert ranks' routed load and their all-to-all measured as the MPI
// backend runs them: E processes, each with one expert rank's layers, their
// all-to-alls over a communicator of their own (MpiGroupLink), timed as
// exec/expert_load_profile.h times the threads' (the same passes, the same
// figures).

#include <cstdint>

#include "costmodels/model.h"
#include "costmodels/profile.h"

namespace pipescope::exec {

// When `spec` is one expert rank of E >= 2 at T = C = 1, the job has E or
// more ranks and E ranks' layers fit rank 0's memory (share_exchanges_unfit):
// ranks 0 to E - 1 each run their expert rank's passes on micro-batches of
// `batch` sequences a rank (expert_rank_passes, kExchangePasses of them) and
// time the group's bare all-to-all (profile_linked_alltoall); rank 0 gathers
// the passes and writes `expert_load` and `alltoall_group` into `profile`
// (expert_load_timing, in_step_alltoall less the waits for the busiest
// rank). Otherwise nothing. Every rank calls it; the others wait.
void measure_mpi_experts(Profile& profile, const ModelSpec& spec, std::int64_t batch,
                         std::uint64_t seed);

}  // namespace pipescope::exec
