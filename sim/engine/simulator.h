#pragma once
// One simulated training step of a scenario: cost model -> partition -> schedule
// -> engine -> metrics, memory curves and timeline.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "costmodels/collective.h"
#include "costmodels/cost_model.h"
#include "costmodels/profile.h"
#include "sim/engine/custom_schedule.h"
#include "sim/engine/metrics.h"
#include "sim/engine/partition.h"
#include "sim/engine/schedule.h"
#include "sim/engine/stage_costs.h"
#include "sim/engine/timeline.h"
#include "sim/scenario/config_error.h"
#include "sim/scenario/scenario.h"

namespace pipescope {

// Stage x micro-batch pairs one simulation holds (its op lists and arrival
// tables grow with K x M): 2^27, far above what pipelines use.
inline constexpr std::int64_t kMaxStageMicroBatches = std::int64_t{1} << 27;

// D data-parallel replicas of the pipeline and the ring that all-reduces each
// stage's gradients among them: device d of each replica sends to device d of
// the next over `bandwidth` and `latency_s` (the cluster's route between them).
// A ring all-reduce of B bytes takes 2 (D - 1) (latency + B / (D bandwidth)).
struct DataParallel {
  int replicas = 1;  // D
  double bandwidth = 0.0;
  double latency_s = 0.0;
  // On GPUs (Cluster::nccl), collectives are timed as NCCL runs them
  // (costmodels/collective.h) over the nodes the ring spans, its hops inside
  // a node over `intra`; elsewhere by the ring formula above.
  bool nccl = false;
  int nodes = 1;
  LinkClass intra = LinkClass::kNvlink;
  // Expert parallelism (sim/engine/expert_parallel.h): the E of the D
  // replicas (of the D x C devices, shares first, under context
  // parallelism) among which each mixture layer's all-to-alls run (the
  // first E), their links, and the latency of a step between them.
  // experts.ranks = 1: none.
  AllToAllGroup experts;
  double experts_latency_s = 0.0;
  // The group's all-to-all as a CPU profile measured it, threads of one
  // process or the MPI backend's processes (Profile::alltoall_group; ranks
  // 0: none): at its micro-batch
  // size it prices the group's all-to-alls (measured_alltoalls,
  // sim/engine/expert_parallel.h).
  GroupAllToAllFigures measured_alltoall;
  // Context parallelism: the devices of each replica's group that hold the
  // same weights (its C shares of the sequence), whose gradients reduce with
  // the replicas': the reductions run over replicas x context devices, and
  // `bandwidth`, `latency_s` and `nodes` are those of that ring.
  int context = 1;
  int reducers() const { return replicas * context; }
  // The gradient sum of these ranks as the cluster's CPU profile measured it
  // at T = 1 (Profile::gradient_sum), which times their all-reduce
  // (allreduce_time) in place of the ring's links; ranks 0: none.
  GradientSumFigures measured_sum;
  // Whether allreduce_time takes measured_sum: the CPU executor's ranks sum
  // their gradients on their own threads, in the optimizer op.
  bool sums_on_threads() const {
    return measured_sum.ranks > 1 && measured_sum.ranks == reducers();
  }
  // The nodes spanned by the D x C x fold / E devices that hold the same
  // experts (expert ranks 0, E, 2E, ... of the D x C x fold), whose ring
  // reduces their gradients; fold is Cluster::expert_fold (T where each
  // device holds whole experts, else 1).
  int expert_ring_nodes = 1;
  int expert_fold = 1;
  // The expert ranks' tokens travel by DeepEP's kernels (Cluster::deepep).
  bool deepep = false;
};
// The NCCL fields of a ring over `members` (physical devices of `cluster`):
// whether it is timed as NCCL, the nodes it spans, its links inside a node.
void set_collective_links(const Cluster& cluster, const std::vector<int>& members,
                          DataParallel& ring);
// The all-to-all group over `members` (physical devices of `cluster`; route(i)
// the hops from the first to the i-th): dp.experts and dp.experts_latency_s,
// how many share the first member's node, the least bandwidth to a peer there
// and to one on another node, the longest route's latency; and
// dp.measured_alltoall, the cluster's profile's at T = 1 when it measured
// this kind of group (`experts`: the expert ranks, else the context
// shares) or its figures are held by the ops (within_ops). Throws ConfigError
// naming `what` ("expert-parallel devices") when a link the group needs has
// no bandwidth.
void set_alltoall_group(const Cluster& cluster, const std::vector<int>& members,
                        const std::function<std::vector<Hop>(int)>& route, DataParallel& dp,
                        const std::string& what, bool experts);

// The ring of `replicas` copies of a `stages`-device pipeline on `whole`, the
// cluster of all K x D devices: replica r's device d is whole's device r K + d,
// and a hop is the route from device 0 to device K. With `expert_parallel` E
// > 1, also the all-to-all group of the first E replicas (DataParallel::experts).
// Throws ConfigError when the cluster has fewer than K x D devices, or E
// does not divide D.
DataParallel data_parallel_ring(const Cluster& whole, int stages, int replicas,
                                int expert_parallel = 1);

// Ring all-reduce time of `bytes` over `dp` (0 for one replica), or its
// measured gradient sum's where it has one of its ranks; `count`
// all-reduces of `bytes` in all pay the latency `count` times.
SimTime allreduce_time(const DataParallel& dp, Bytes bytes, int count = 1);

// The all-gather of a stage's updated weights after a ZeRO-1 or 2 step, over
// `dp`: the weights in the model's dtype. Where the framework gathers them
// during the next step's first forward (Framework::overlap_param_gather),
// only what outlasts that forward (StageCost::forward, one micro-batch's).
// The routed experts' weights gather over the D x C / E devices that hold them
// (expert_reduction_ring, sim/engine/expert_parallel.h).
SimTime step_gather(const Scenario& sc, const DataParallel& dp, const StageCost& c);

// The parameters of the token table's copy that a tied head keeps
// (ModelSpec::tied_table_params) where `stage_device` places the last stage
// on another device than the first; 0 where they share one or the model is
// untied. The simulation's stages and the partitioner's problem both hold it.
std::int64_t tied_copy_params(const ModelSpec& model, const std::vector<int>& stage_device);

// The all-reduce of `bytes` between pipeline devices `a` and `b` of
// `cluster` (the replica's): a ring of two over the route between them, as
// NCCL runs it where the cluster's collectives are NCCL's. Throws
// ConfigError where the route has no bandwidth.
SimTime pair_allreduce_time(const Cluster& cluster, int a, int b, Bytes bytes);

// Ring reduce-scatter (or all-gather) time of `bytes` over `dp`: half an
// all-reduce, (D - 1) (latency + B / (D bandwidth)); 0 for one replica.
SimTime reduce_scatter_time(const DataParallel& dp, Bytes bytes);
// `collective` (allreduce_time's one call, reduce_scatter_time) over a
// stage's gradients or weights: its `dense` bytes over dp's replicas and,
// where there are any, its routed experts' `experts` bytes over
// `expert_ring` (expert_reduction_ring(dp)).
using RingCollective = SimTime (*)(const DataParallel&, Bytes);
SimTime dense_and_experts(RingCollective collective, const DataParallel& dp,
                          const DataParallel& expert_ring, Bytes dense, Bytes experts);
// Under ZeRO-3 over dp's replicas, each layer's all-gather of its weights
// before every forward and backward that computes with it (what
// PartitionProblem::gathers holds); empty otherwise.
std::vector<SimTime> zero_gathers(const Scenario& replica, const DataParallel& dp);
// Under ZeRO-2/3 over dp's replicas, the reduce-scatters after every
// backward as add_gradient_reductions prices them, into p's
// dense_grad_bytes, expert_grad_bytes and reduce_scatter; nothing otherwise.
void add_zero_reduce_scatters(PartitionProblem& p, const Scenario& replica, const DataParallel& dp);

// What to simulate; unset fields come from the scenario (K defaults to the
// cluster's device count).
struct SimConfig {
  std::optional<int> stages;
  std::optional<int> micro_batches;
  std::optional<ScheduleKind> schedule;
  std::optional<int> chunks;  // v, interleaved-1f1b only
  std::optional<Remat> remat;
  // A custom schedule's actions (schedule custom); fixes K, M and the chunks.
  std::shared_ptr<const CustomSchedule> custom;
  PartitionMethod partition = PartitionMethod::kOptimal;
  // Replicas whose gradients each stage all-reduces before its optimizer step;
  // the scenario is then one replica's (K devices, its share of the batch).
  DataParallel data_parallel;
  // Cuts given explicitly (from a plan) instead of by `partition`.
  std::optional<std::vector<StageRange>> stage_ranges;
  bool record_timeline = true;  // events and memory curves; off for sweeps
  // When set, the timeline goes here as the engine runs (names, events, memory
  // curves) and SimResult::timeline stays empty: a trace of millions of ops is
  // written without being held (ChromeTraceWriter).
  TimelineSink* timeline_sink = nullptr;
};

struct SimResult {
  int stages = 1;  // K, the pipeline's devices
  int chunks = 1;  // v: stage_costs holds K x v model stages, stage s on device s mod K
  int micro_batches = 1;
  ScheduleKind schedule = ScheduleKind::kGpipe;
  Remat remat = Remat::kNever;
  Checkpoint checkpoint = Checkpoint::kStage;    // what remat keeps
  std::shared_ptr<const CustomSchedule> custom;  // schedule custom only
  int data_parallel = 1;  // D; metrics are one replica's, all-reduces included
  // T; stage costs, memory and metrics are one device's of each group
  int tensor_parallel = 1;
  bool sequence_parallel = false;
  // E; each device holds experts / E of a mixture's routed experts, and
  // stage costs include their all-to-alls
  int expert_parallel = 1;
  // C; each device holds seq / C of every sample, and stage costs include
  // what the ring's exchanges add beyond the attention they overlap
  int context_parallel = 1;
  int zero = 0;  // ZeRO stage; shards over data_parallel replicas (x C)
  std::int64_t micro_batch_size = 1;
  std::string cost_model;
  std::vector<StageCost> stage_costs;
  Metrics metrics;
  Timeline timeline;  // empty unless record_timeline
  std::int64_t compute_ops = 0;
  std::int64_t transfers = 0;
  // Whether the schedule runs each backward as B and W.
  bool split_backward() const { return splits_backward(schedule, custom.get()); }
};

// partition_problem's memory alone: every layer's time 0 and no link, what
// the proof that no cut fits (no_cut_fits, sim/engine/device_partition.h)
// reads.
PartitionProblem memory_problem(const Scenario& scenario, int stages, int micro_batches,
                                Remat remat, ScheduleKind schedule = ScheduleKind::kGpipe,
                                int chunks = 1, const CustomSchedule* custom = nullptr);

// The optimal partitioner's inputs for a scenario at `stages` model stages (K x
// chunks) and M micro-batches: per-layer times from `cost`, cut sizes, the
// device's memory and the link between neighbouring stages. With v chunks a
// device holds v stages: each gets 1/v of its memory and the micro-batches in
// flight on device 0's busiest chunk. `custom`, for a custom schedule, puts each
// stage on its rows' device (otherwise the schedule's, stage_device_of) and says
// whether the backward is split (otherwise splits_backward(schedule)).
PartitionProblem partition_problem(const Scenario& scenario, const CostModel& cost, int stages,
                                   int micro_batches, Remat remat,
                                   ScheduleKind schedule = ScheduleKind::kGpipe, int chunks = 1,
                                   const CustomSchedule* custom = nullptr);

// The least memory some device of `devices` needs on any cut of the
// scenario's layers, under any schedule, M and remat: its share of what every
// stage keeps per parameter (partition_problem's params at bytes_per_param,
// the weights, gradients and optimizer state), less a byte a layer for the
// stages' rounding. The tied head's copy and all activations come on top.
Bytes least_weight_share(const Scenario& scenario, int devices);

// The cut `method` makes. The optimal method respects memory and, when nothing
// fits, returns its best cut without the memory limit (the simulation then shows
// by how much it does not fit).
std::vector<StageRange> choose_partition(const Scenario& scenario, const CostModel& cost,
                                         PartitionMethod method, int stages, int micro_batches,
                                         Remat remat, ScheduleKind schedule = ScheduleKind::kGpipe,
                                         int chunks = 1, const CustomSchedule* custom = nullptr);

// With several stages a device (stage s on device s mod K): of the cut with
// the least slowest stage (partition_optimal), `device_cut` (the cut with the
// least busy busiest device, partition_devices) and the cut of least
// stage-time variance, the simulation under `config` (without a timeline) of
// the one whose step is shortest, a cut that fits in memory before one that
// does not; its stage_costs name the cut. No one of those objectives predicts
// the step: a device's total sets its share, but in an interleaved schedule a
// chunk much slower than its neighbours also stalls the devices after it.
// Empty when neither of the first two is a cut that fits.
std::optional<SimResult> fastest_chunked_cut(const Scenario& scenario, SimConfig config,
                                             const CostModel& cost, const PartitionProblem& p,
                                             std::vector<StageRange> device_cut);

// The slowdown of an op when `computing` devices compute at once on average:
// linear between the cluster's measured points (concurrency_slowdown[n - 1] for
// n devices), the last one beyond them, 1 for one device or none measured.
double concurrency_slowdown_at(const std::vector<double>& slowdown, double computing);
// The least factor apply_concurrency_slowdown may scale an op by on
// `cluster`: its least measured slowdown where below 1, else 1.
double least_concurrency_factor(const Cluster& cluster);

// Devices that share caches and memory bandwidth (the cores of one CPU) slow
// each other down. With the cluster's concurrency_slowdown measured, every op of
// `stages` is stretched by the slowdown at the step's mean number of computing
// devices (busy time over step time), found by running the engine (twice: the
// stretch changes the mean a little); all but a split backward's B and W when
// the profile timed them with cold caches (Profile::split_unstretched). A no-op
// without a measured slowdown.
void apply_concurrency_slowdown(const Schedule& schedule, const Cluster& cluster,
                                std::vector<StageCost>& stages);

// The scenario's cost model: the profile's measurements when the cluster carries
// one (`--cost-model`), with the routed load of the scenario's expert ranks
// where the profile measured it (Profile::routed_load), else the kernel-level
// model or the device's roofline, as the cluster's cost_model says.
std::unique_ptr<CostModel> make_cost_model(const Scenario& scenario);

// What device `device` of a run holds at its peak: its stages' weights,
// gradients and optimizer state, and the rest of its peak, activations.
struct MemorySplit {
  Bytes weights = 0;
  Bytes gradients = 0;
  Bytes optimizer = 0;
  Bytes activations = 0;
};
MemorySplit memory_split(const SimResult& result, int device);
// The same for every device, in one pass over the stages.
std::vector<MemorySplit> memory_splits(const SimResult& result);

// Uses make_cost_model(scenario).
SimResult simulate(const Scenario& scenario, const SimConfig& config);
SimResult simulate(const Scenario& scenario, const SimConfig& config, const CostModel& cost);

}  // namespace pipescope
