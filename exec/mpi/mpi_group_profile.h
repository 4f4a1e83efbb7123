#pragma once
// A group's exchanges measured as the MPI backend runs them: the context
// shares or the expert ranks of a plan as processes, each with its share's or
// rank's layers, their exchanges over a communicator of their own
// (MpiGroupLink), timed as the threaded profiler times them
// (exec/share_exchange_profile.h, exec/expert_load_profile.h,
// exec/group_op_lists.h: the same passes and a plan's same op lists, the
// same figures; a time-sliced group's devices at once, where the threads
// run one device's at a time: mpi_plan_runs).

#include <cstdint>
#include <vector>

#include "costmodels/model.h"
#include "costmodels/profile.h"
#include "exec/group_op_lists.h"
#include "exec/op_list_profile.h"

namespace pipescope::exec {

// What the processes' runs of a plan's op lists give rank 0 (mpi_plan_runs).
struct MpiPlanRuns {
  bool ran = false;  // on every rank
  // Each pair's runs [rank][pair] and ratios, as paired_group_runs'.
  PairedGroupRuns pairs;
  // kGroupOpListRuns runs of one device's ranks at a time [rank][run], for
  // expert ranks whose processes outnumber the cores they may run on (empty
  // otherwise).
  std::vector<std::vector<GroupRun>> apart;
  // Expert ranks of shares whose G processes outnumber the cores: the pairs'
  // group runs went on the wall clock with their exchanges in
  // (GroupPlanRuns::crowded), every device's processes at once, each device's
  // spread over the cores, and each ratio over how many devices ran at once
  // (paired_process_runs' `at_once`).
  bool time_sliced = false;
};

// `plan`'s op lists run by a group (`spec` one share of C >= 2, one expert
// rank of E >= 2 or one of E x C, T = 1) as a step's processes run them, when the job has
// K G of them and their layers and the M micro-batches' stashes of `batch`
// sequences fit (share_exchanges_unfit): process p is rank p / K of device
// p % K (MpiTransport::link_group's placing), its exchanges over a link of
// its device's G processes. kGroupOpListRuns pairs, as paired_group_runs
// pairs the threads': the rank alone's op lists (device d's by process d,
// one device after another, the others sleeping), then every process's at
// once (group_device_runs). Where the K G processes of expert ranks
// outnumber the cores they may run on, then the runs of one device's
// processes at a time; where a device's E x C processes do, each pair's
// group runs are time-sliced (`time_sliced`). Every rank calls it; rank 0 gets the
// runs, the others `ran` alone. Throws std::invalid_argument on every rank, before any collective,
// for a model group_op_list_runs refuses (check_group_model).
MpiPlanRuns mpi_plan_runs(const ModelSpec& spec, const PlanStages& plan, std::int64_t batch,
                          std::uint64_t seed);

// Rank 0's pairs from the K G processes' runs ([process][pair], process p
// rank p / K of device p % K) and each pair's rank-alone (forward, backward)
// totals over the devices (alone[2 i], alone[2 i + 1]): each rank's runs
// over its devices (runs_over_devices) and each pair's ratio
// (group_over_alone) where both directions timed something, as
// paired_group_runs gives the threads'. `at_once`: the K devices' groups
// ran at once on shared cores, where the prediction runs one stage's ops at
// a time, so each ratio is divided by how many devices ran at once on the
// mean: the devices' spans (each its longest process's compute, forward
// and backward) over the longest.
PairedGroupRuns paired_process_runs(std::vector<std::vector<GroupRun>>&& processes,
                                    const std::vector<std::int64_t>& alone, int K, int G,
                                    bool at_once = false);

// When `spec` is one share of C >= 2 at T = E = 1, the job has C or more
// ranks and the C processes' layers fit rank 0's machine (share_exchanges_unfit,
// each process building every share's):
// ranks 0 to C - 1 each run their share's passes on its rows of micro-batches
// of `batch` sequences (share_passes, kExchangePasses of them), and rank 0
// writes the last share's median pass into `profile` (write_context_figures:
// the ring's takes, or the all-to-all of shares that trade heads, its bare
// group timed over the communicator, profile_linked_alltoall). Otherwise
// nothing. With a `plan` whose K devices' C ranks the job has as processes
// (and whose M micro-batches' stashes fit), the shares' slowdown together
// then comes from the plan's op lists as a step's processes run them, each
// beside a rank alone's (group_slowdown, "measured": "op lists"; the ring's
// takes stay the passes'). Every rank calls it; the others wait.
void measure_mpi_context(Profile& profile, const ModelSpec& spec, std::int64_t batch,
                         std::uint64_t seed, const PlanStages* plan = nullptr);

// The same for one expert rank of E >= 2 at T = C = 1: ranks 0 to E - 1 each
// run their expert rank's passes on micro-batches of `batch` sequences a rank
// (expert_rank_passes) and time the group's bare all-to-all
// (profile_linked_alltoall); rank 0 gathers the passes and writes
// `expert_load` and `alltoall_group` (expert_load_timing, in_step_alltoall
// less the waits for the busiest rank). With a `plan` as above, the plan's
// op lists instead of the passes: its K devices' E ranks as processes, each
// pair of runs beside a rank alone's (write_expert_plan_figures).
void measure_mpi_experts(Profile& profile, const ModelSpec& spec, std::int64_t batch,
                         std::uint64_t seed, const PlanStages* plan = nullptr);

// The same for one rank of E x C >= 2 x 2 at T = 1, when the job has E x C
// or more ranks and their layers fit: ranks 0 to E C - 1 time the gradient
// sum over all of them (profile_linked_gradient_sum), and with a `plan` as
// above the group's slowdown comes from the plan's op lists (group_slowdown
// with `shares` C; time-sliced where a device's processes outnumber the
// cores). Their ring, all-to-alls and routed load stay unmeasured, as the
// threads' (ModelProfiler). Every rank calls it; the others wait.
void measure_mpi_expert_shares(Profile& profile, const ModelSpec& spec, std::int64_t batch,
                               std::uint64_t seed, const PlanStages* plan = nullptr);

}  // namespace pipescope::exec
