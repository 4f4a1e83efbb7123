#pragma once
// A plan's op lists run by a group of ranks that trade rows inside each
// device (T = 1): the C context shares, whose attention passes keys and
// values round a ring or trades heads, or the E expert ranks, whose
// mixtures send tokens to their experts. Every device's ranks at once (or
// one device's after another's), each a thread pinned as a step's workers
// are, with its rank's layers (build_context_ranks, build_expert_ranks) and
// its part of each micro-batch, running its device's op list (run_op_list)
// with every micro-batch's stash kept from op to op and its exchanges
// counted by the thread's tally and left out of each op's time. A step
// meets the caches so, behind M stashes, which passes of one micro-batch
// (share_exchange_profile.h, expert_load_profile.h) do not show.

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "costmodels/model.h"
#include "costmodels/profile.h"
#include "costmodels/units.h"
#include "exec/compute/layer.h"
#include "exec/compute/moe_layers.h"
#include "exec/op_list_profile.h"
#include "exec/share_exchange_profile.h"

namespace pipescope::exec {

// What one rank counted in one run of its op lists, over its devices.
struct GroupRun {
  std::vector<ExpertTally::Call> calls;  // its mixtures' (none without a mixture)
  ExchangeTimes exchanges;               // its all-to-alls or its ring's takes
  // Its forward-direction ops' (F, R) and backward ones' (B, W, a fused
  // backward) times on the run's clock, each op's less its exchanges (ns).
  std::array<SimTime, 2> compute{0, 0};
};

// The pairs of runs a profile takes of a group's op lists beside a rank
// alone's (paired_group_runs), and the runs of one device's ranks at a time.
inline constexpr int kGroupOpListRuns = 5;

// How the ranks run a plan's op lists (group_op_list_runs' arguments).
// `crowded`: a device's ranks outnumber the cores, so the OS time-slices
// them and a rank waiting in an exchange for a partner that has no core
// gives its own to another: each op timed on the wall clock with its
// exchanges' waits in it (what the slicing costs the group), `clock` left
// for the rank alone; group_op_list_runs then runs one device's ranks at a
// time (the MPI profile, mpi_plan_runs, every device's at once).
struct GroupPlanRuns {
  const PlanStages& plan;
  std::int64_t batch;
  std::uint64_t seed;
  const std::vector<Tensor>& inputs;
  OpClock clock;
  int runs;
  bool crowded = false;
};

// The ranks of `model`'s group running `r.plan`'s op lists: `model` one rank
// of model.expert_parallel x model.context_parallel > 1 of a transformer at
// T = 1, rank g = e C + c share c of expert rank e. Each rank's part of a
// micro-batch of `r.batch` sequences an expert rank (its samples of E batch,
// of each of them its share's rows, as a step cuts them).
// `r.inputs` as the profiler keeps them for a rank alone (layer_inputs at
// the batch: every stage's first layer's input); stage 0 takes each rank's
// own part instead. `r.runs` timed runs, each on micro-batches of its own
// and just after an untimed one (its layers and stashes into its core's
// caches); ops timed on `r.clock` (the thread's CPU time on the host, so
// that a core's sharing between threads stays out: the simulator's pool of
// cores adds it), less their exchanges. `together`: every device's ranks at
// once, as a step runs them; otherwise one device's after another's, each
// rank on a core of its own while they fit. `r.crowded` times as it says,
// one device's ranks at a time. Returns [rank][run]. Throws std::invalid_argument for another model
// and for runs < 1.
std::vector<std::vector<GroupRun>> group_op_list_runs(const ModelSpec& model,
                                                      const GroupPlanRuns& r, bool together = true);

// Throws std::invalid_argument unless `model` is one rank of a group of
// context shares, expert ranks or both of a transformer at T = 1, and
// runs >= 1: what group_op_list_runs can run.
void check_group_model(const ModelSpec& model, int runs);

// One thread's (or one process's) part of group_op_list_runs: rank g of the
// group running device d's op list over `layers` (rank g's of the group),
// its exchanges counted by `tally`, the calling thread's installed one.
// Returns its r.runs runs. Throws as group_op_list_runs does.
std::vector<GroupRun> group_device_runs(LayerList& layers, const ModelSpec& model,
                                        const GroupPlanRuns& r, int d, int g,
                                        CollectiveTally& tally);

// Each rank's runs over its devices from every device's ranks' runs
// (by_device[d * G + g]: rank g's of device d's op list, all of as many runs):
// [rank][run], its calls in device order (every rank's pair up so), its
// exchanges and compute summed.
std::vector<std::vector<GroupRun>> runs_over_devices(
    const std::vector<std::vector<GroupRun>>& by_device, int G);

// The group's compute in run `run` of `ranks` (group_op_list_runs'), the
// ranks' mean, over a rank alone's op lists (`alone`: op_lists_alone's) in
// each direction; nullopt-like {0, 0} where a side timed nothing in a
// direction.
struct ComputeRatio {
  double forward = 0.0;
  double backward = 0.0;
};
ComputeRatio group_over_alone(const std::vector<std::vector<GroupRun>>& ranks, std::size_t run,
                              const std::array<SimTime, 2>& alone);
inline ComputeRatio group_over_alone(const std::vector<std::vector<GroupRun>>& ranks,
                                     std::size_t run, const OpListTimes& alone) {
  return group_over_alone(ranks, run, {alone.forward_total(), alone.backward_total()});
}

// `r.runs` pairs of runs: one of a rank alone's op lists (`alone`), then one
// of the group's (group_op_list_runs, every device's ranks at once), so that
// a machine whose speed moves moves both sides of each ratio. Returns the
// group's runs ([rank][run], one a pair) and each pair's ratio
// (group_over_alone) where both directions timed something.
struct PairedGroupRuns {
  std::vector<std::vector<GroupRun>> ranks;
  std::vector<ComputeRatio> ratios;
};
PairedGroupRuns paired_group_runs(const ModelSpec& model, const GroupPlanRuns& r,
                                  const std::function<OpListTimes()>& alone);

// The group's slowdown together from `pairs`: each direction's median ratio,
// at micro-batch `batch`, measured over op lists; `experts`, `shares` and
// `time_sliced` (runs of GroupPlanRuns::crowded) as GroupSlowdownFigures
// has them. ranks 0 without a ratio.
GroupSlowdownFigures paired_slowdown(const PairedGroupRuns& pairs, int ranks, std::int64_t batch,
                                     bool experts, int shares = 1, bool time_sliced = false);

}  // namespace pipescope::exec
