#pragma once
// A group's exchanges measured as the MPI backend runs them: the context
// shares or the expert ranks of a plan as processes, each with its share's or
// rank's layers, their exchanges over a communicator of their own
// (MpiGroupLink), timed as the threaded profiler times them
// (exec/share_exchange_profile.h, exec/expert_load_profile.h: the same
// passes, the same figures).

#include <cstdint>

#include "costmodels/model.h"
#include "costmodels/profile.h"

namespace pipescope::exec {

// When `spec` is one share of C >= 2 at T = E = 1, the job has C or more
// ranks and the C processes' layers fit rank 0's machine (share_exchanges_unfit,
// each process building every share's):
// ranks 0 to C - 1 each run their share's passes on its rows of micro-batches
// of `batch` sequences (share_passes, kExchangePasses of them), and rank 0
// writes the last share's median pass into `profile` (write_context_figures:
// the ring's takes, or the all-to-all of shares that trade heads, its bare
// group timed over the communicator, profile_linked_alltoall). Otherwise
// nothing. Every rank calls it; the others wait.
void measure_mpi_context(Profile& profile, const ModelSpec& spec, std::int64_t batch,
                         std::uint64_t seed);

// The same for one expert rank of E >= 2 at T = C = 1: ranks 0 to E - 1 each
// run their expert rank's passes on micro-batches of `batch` sequences a rank
// (expert_rank_passes) and time the group's bare all-to-all
// (profile_linked_alltoall); rank 0 gathers the passes and writes
// `expert_load` and `alltoall_group` (expert_load_timing, in_step_alltoall
// less the waits for the busiest rank).
void measure_mpi_experts(Profile& profile, const ModelSpec& spec, std::int64_t batch,
                         std::uint64_t seed);

}  // namespace pipescope::exec
