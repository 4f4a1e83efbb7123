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

#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "costmodels/model.h"
#include "costmodels/profile.h"
#include "exec/compute/layer.h"
#include "exec/compute/moe_layers.h"
#include "exec/compute/tensor_group.h"
#include "exec/op_list_profile.h"
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

// What one expert rank's passes counted: [pass] (the first warms up) its
// mixture calls (ExpertTally), its all-to-alls, and its forward's and
// backward's times less their all-to-alls (ns).
struct ExpertRankPasses {
  std::vector<std::vector<ExpertTally::Call>> calls;
  std::vector<ExchangeTimes> alltoalls;
  std::vector<std::array<SimTime, 2>> compute;
};

// Rank e's passes over `layers` (its list of build_expert_ranks), as
// time_expert_load runs each rank's: 1 + `passes` forward-and-backward
// passes on its samples of a micro-batch of E `batch` sequences, its
// all-to-alls counted by `group`, the calling thread's installed tally
// (reset before each pass). For ranks that are processes, each calls it on
// its own rank and one gathers the results. Throws std::invalid_argument as
// time_expert_load does.
ExpertRankPasses expert_rank_passes(LayerList& layers, const ModelSpec& model, int e,
                                    std::int64_t batch, std::uint64_t seed, int passes,
                                    CollectiveTally& group);

// time_expert_load's figures from every rank's passes (ranks[e] rank e's, all
// of as many passes, at least 2): the load of the pass of the median extra
// time, the all-to-alls and the ranks' waits for the busiest of the pass of
// the median time in all-to-alls beyond those waits, and the median of the
// passes' compute. Throws
// std::invalid_argument for fewer than 2 ranks or passes that do not pair up.
ExpertLoadTiming expert_load_timing(const std::vector<ExpertRankPasses>& ranks, std::int64_t batch);

// Writes the expert ranks' figures `t` of `model` at micro-batch `batch`
// into `profile`: their load (expert_load), their all-to-all
// (alltoall_group: in_step_alltoall over the bare group's figures `bare`),
// and, where `profile` has the layers' times alone, how much slower the
// ranks computed among each other (group_slowdown, keep_group_slowdown).
void write_expert_figures(Profile& profile, const ModelSpec& model, const ExpertLoadTiming& t,
                          std::int64_t batch, const TransportFigures& bare);

// The E = model.expert_parallel ranks running a plan's op lists as a step
// of the plan runs them: every device's E ranks at once (`together`; one
// device's after another's otherwise), each a thread (pinned as a step's
// workers are) with its rank's layers (as
// build_expert_ranks builds them) and its samples of a micro-batch of E
// `batch` sequences, running its device's op list of `plan` (run_op_list),
// the device's ranks' all-to-alls between them; an untimed run and then a
// timed one each. A step keeps every micro-batch's stash in flight on every
// rank's core, the stages' threads share the cores where they outnumber
// them, and its all-to-alls meet the other rank where the op lists bring
// it, none of which the passes of one micro-batch (time_expert_load) show.
// 1 + `runs` runs (the first warms up), each on samples of its own; every
// rank's, over its devices, as expert_rank_passes gives a pass: its mixture
// calls, its all-to-alls, and its compute, the forward-direction ops' (F,
// R) and the backward ones' (B, W, a fused backward) times on `clock` (the
// thread's CPU time on the host: a core's sharing between threads left
// out, as the simulator's pool of cores adds it), each op's less its
// all-to-alls. `inputs` as the profiler keeps them for a rank alone
// (layer_inputs at `batch`: every stage's first layer's input and its last
// one's output); stage 0 takes each rank's samples instead.
// expert_load_timing combines the ranks'. Throws std::invalid_argument as
// time_expert_load does.
std::vector<ExpertRankPasses> expert_op_list_runs(const ModelSpec& model, const PlanStages& plan,
                                                  std::int64_t batch, std::uint64_t seed,
                                                  const std::vector<Tensor>& inputs,
                                                  const OpClock& clock, int runs,
                                                  bool together = true);

// How much slower the E expert ranks computed a plan's op lists (`t`:
// expert_load_timing of expert_op_list_runs; its compute the ranks' mean)
// than a rank of the mean load alone (`alone`: its op lists of the same
// plan, op_lists_alone, in one run or more; the median of their totals in
// each direction): the ranks' GroupSlowdownFigures at
// `batch`. ranks 0 when `alone` is empty or a direction timed nothing.
GroupSlowdownFigures expert_op_list_slowdown(int E, const ExpertLoadTiming& t,
                                             const std::vector<const OpListTimes*>& alone,
                                             std::int64_t batch);

// How the expert ranks run a plan's op lists (expert_op_list_runs' arguments).
struct ExpertPlanRuns {
  const PlanStages& plan;
  std::int64_t batch;
  std::uint64_t seed;
  const std::vector<Tensor>& inputs;
  OpClock clock;
  int runs;
};

// write_expert_figures' figures for a plan, from `r.runs` runs of its op
// lists by the ranks (expert_op_list_runs, every device's ranks at once),
// each just after a run of a rank alone's (`alone`: op_lists_alone's
// times): their slowdown together, the median over the runs of each run's
// over the rank alone's beside it (expert_op_list_slowdown), so that a
// machine whose speed moves moves both; their load and all-to-all from the
// runs together (expert_load_timing). Where those threads outnumber the
// `cores`, an all-to-all also waits for a partner whose core another
// stage's thread holds, which the simulator's pool of cores adds: the load
// and the all-to-alls then come from runs of one device's ranks at a time,
// on cores of their own.
void write_expert_plan_figures(Profile& profile, const ModelSpec& model, const ExpertPlanRuns& r,
                               const std::function<OpListTimes()>& alone,
                               const TransportFigures& bare, int cores);

// One pass's calls, rank by rank: calls[e] is rank e's ExpertTally calls,
// every rank's in the same order. Returns the figures of the pass (ranks,
// imbalance, forward_s, backward_s; micro_batch 0). Throws
// std::invalid_argument when the ranks' calls do not pair up.
ExpertLoadFigures expert_load_of(const std::vector<std::vector<ExpertTally::Call>>& calls);

}  // namespace pipescope::exec
