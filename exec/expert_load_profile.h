#pragma once
// The expert ranks' routed load timed as their layers run it: the E ranks
// of a plan (T = C = 1), each a thread with its rank's layers and its
// samples of a micro-batch, running a forward and a backward as a step's F
// and B ops do, every mixture's experts counted by an ExpertTally
// (exec/compute/moe_layers.h). The router sends each rank's experts the
// rows its tokens pick, which are rarely a rank's mean share; at the
// all-to-all that brings the experts' outputs back every rank waits for the
// busiest. The profiler's rank alone computes the mean share (a balanced
// rank), so a run's mixtures take longer than its profile by what the
// busiest rank's experts take beyond it.

#include <cstdint>
#include <vector>

#include "costmodels/model.h"
#include "costmodels/profile.h"
#include "exec/compute/layer.h"
#include "exec/compute/moe_layers.h"
#include "exec/compute/tensor_group.h"
#include "exec/group_op_lists.h"
#include "exec/share_exchange_profile.h"

namespace pipescope::exec {

// The routed load of the E = model.expert_parallel ranks of `model` (one
// rank's share of a transformer with a mixture, T = C = 1; its whole
// transformer split as a plan's run splits it) on micro-batches of `batch`
// sequences a rank (E batch in all): `passes` passes after one untimed, each
// on a micro-batch of its own, combined by expert_load_timing. In each
// mixture call (a forward's or a backward's), the busiest rank's received
// rows over the ranks' mean, and the extra time: the rows beyond the mean
// at the time a further row takes (the slope of the calls' time against
// their rows, over every rank's calls of the pass in that direction).
// Throws std::invalid_argument for another model and for passes < 1.
struct ExpertLoadTiming {
  ExpertLoadFigures load;
  // Every rank's all-to-alls in the kept pass, summed: the waits for the
  // busiest rank included.
  ExchangeTimes alltoalls;
  // Of alltoalls.wall, seconds that are those waits: in each mixture call
  // the busiest rank's extra time, which every rank but it waits out in
  // part (the ranks' mean wait is the busiest's time over the mean), times
  // the ranks.
  double load_waits_s = 0.0;
  // The ranks' compute in a pass, a forward's and a backward's time less
  // their all-to-alls (the waits for the busiest rank with them), the ranks'
  // mean (a rank of the mean load), the median over the passes; ns.
  SimTime forward_compute = 0;
  SimTime backward_compute = 0;
};
ExpertLoadTiming time_expert_load(const ModelSpec& model, std::int64_t batch, std::uint64_t seed,
                                  int passes);

// Rank e's passes over `layers` (its list of build_expert_ranks), as
// time_expert_load runs each rank's: 1 + `passes` forward-and-backward
// passes on its samples of a micro-batch of E `batch` sequences, its
// all-to-alls counted by `group`, the calling thread's installed tally
// (reset before each pass). One GroupRun a pass (the first warms up): its
// mixture calls (ExpertTally), its all-to-alls, and its forward's and
// backward's times less their all-to-alls (ns). For ranks that are
// processes, each calls it on its own rank and one gathers the results.
// Throws std::invalid_argument as time_expert_load does.
std::vector<GroupRun> expert_rank_passes(LayerList& layers, const ModelSpec& model, int e,
                                         std::int64_t batch, std::uint64_t seed, int passes,
                                         CollectiveTally& group);

// time_expert_load's figures from every rank's passes (ranks[e] rank e's, all
// of as many passes, the first `warm_ups` of which are left out, at least
// one after them): the load of the pass of the median extra
// time, the all-to-alls and the ranks' waits for the busiest of the pass of
// the median time in all-to-alls beyond those waits, and the median of the
// passes' compute. Throws
// std::invalid_argument for fewer than 2 ranks or passes that do not pair up.
ExpertLoadTiming expert_load_timing(const std::vector<std::vector<GroupRun>>& ranks,
                                    std::int64_t batch, std::size_t warm_ups = 1);

// Writes the expert ranks' figures `t` of `model` at micro-batch `batch`
// into `profile`: their load (expert_load), their all-to-all
// (alltoall_group: in_step_alltoall over the bare group's figures `bare`),
// and, where `profile` has the layers' times alone, how much slower the
// ranks computed among each other (group_slowdown, keep_group_slowdown).
void write_expert_figures(Profile& profile, const ModelSpec& model, const ExpertLoadTiming& t,
                          std::int64_t batch, const TransportFigures& bare);

// write_expert_figures' figures for a plan from `pairs`, the ranks' runs of
// its op lists on micro-batches of `batch` sequences a rank, each beside a
// rank alone's (paired_group_runs, every device's ranks at once; or
// mpi_plan_runs, processes): their
// slowdown together (paired_slowdown); their load and all-to-all from the
// runs together (expert_load_timing). Where the ranks of every device
// outnumber the cores, an all-to-all also waits for a partner whose core
// another stage's rank holds, which the simulator's pool of cores adds: the
// caller then gives `apart`, runs of one device's ranks at a time on cores
// of their own (group_op_list_runs, together false; [rank][run]), and the
// load and the all-to-alls come from those.
void write_expert_plan_figures(Profile& profile, const ModelSpec& model,
                               const PairedGroupRuns& pairs,
                               const std::vector<std::vector<GroupRun>>& apart, std::int64_t batch,
                               const TransportFigures& bare);

// One pass's calls, rank by rank: calls[e] is rank e's ExpertTally calls,
// every rank's in the same order. Returns the figures of the pass (ranks,
// imbalance, forward_s, backward_s; micro_batch 0). Throws
// std::invalid_argument when the ranks' calls do not pair up.
ExpertLoadFigures expert_load_of(const std::vector<std::vector<ExpertTally::Call>>& calls);

}  // namespace pipescope::exec
