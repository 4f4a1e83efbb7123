#pragma once
// Contiguous cuts of a model's layers into pipeline stages (docs/models.md, "The
// partitioner").

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "costmodels/units.h"
#include "sim/scenario/scenario.h"
#include "sim/scenario/stage_range.h"

namespace pipescope {

enum class PartitionMethod {
  kOptimal,  // minimal slowest stage within memory (exact)
  kUniform,  // equal layer counts
  kParams,   // balanced parameter counts (DeepSpeed's partition_method="parameters")
  kGpipe,    // minimal variance of stage costs (the GPipe paper's heuristic)
};
std::string_view to_string(PartitionMethod p);
std::optional<PartitionMethod> parse_partition_method(std::string_view name);
inline constexpr const char* kPartitionMethodNames = "optimal, uniform, params, gpipe";

// Per-layer inputs of the other methods, all for one micro-batch.
struct LayerCost {
  // A micro-batch's forward, averaged over the step's micro-batches: those that
  // remat recomputes drop their stash, the others keep it (CostModel::
  // forward_keeping_stash).
  SimTime forward = 0;
  SimTime backward = 0;
  SimTime recompute = 0;
  // Its parameters; the routed experts' under expert parallelism weighed as
  // the bytes a device keeps of them (dense_equivalent_params, sim/engine/zero.h).
  std::int64_t params = 0;
  Bytes stash_bytes = 0;  // for the micro-batch
  // The least a micro-batch's forward takes, keeping its stash or dropping
  // it: what one micro-batch waits for on its way through the layer (the
  // planner's step floors, sim/plan/step_floor.h). 0: not known.
  SimTime least_forward = 0;
};

// What the optimal partitioner minimises and respects.
struct PartitionProblem {
  std::vector<LayerCost> layers;
  // cut_bytes[i]: bytes crossing a cut before layer i for one micro-batch
  // (cut_bytes[0] the model input, cut_bytes[L] the last output); L + 1 entries.
  std::vector<Bytes> cut_bytes;
  // Each device sends cut_bytes / cut_split of a cut (sim/engine/tensor_parallel.h);
  // the receiving group's all-gather is left to the simulation.
  int cut_split = 1;
  int stages = 1;
  // The device of each stage when several share one (partition_devices); empty:
  // stage s on device s mod the devices.
  std::vector<int> stage_device;
  int micro_batches = 1;
  Remat remat = Remat::kAlways;
  // What a recomputed micro-batch keeps and rebuilds (stage_memory).
  Checkpoint checkpoint = Checkpoint::kStage;
  // Whether every forward runs before any backward (GPipe): then under remat
  // except-last the last micro-batch's stash is freed before the first recompute
  // rebuilds another; under the other schedules the two can coexist.
  bool forwards_first = true;
  // Micro-batches whose stash (or, when recomputed, input) a stage holds at once:
  // M under GPipe; under 1F1B stage s holds K - s, bounded here for every stage
  // by stage 0's min(K, M). Unset: M.
  std::optional<int> in_flight;
  // When each device runs several stages: what stage s holds when its device
  // holds the most (held_at_peak, read off the schedule's order, remat
  // included); the memory of stage s in partition_devices. Empty: in_flight
  // for every stage, by the remat formulas below.
  std::vector<StashCount> stage_held;
  // With one stage a device, where the remat formulas below miss what a stage
  // holds (a split backward under remat keeps each rebuilt stash until its
  // W): the most of each kind any stage holds in the schedule's order
  // (held_at_peak), which every stage is priced at when it is more.
  std::optional<StashCount> order_held;
  double bytes_per_param = 0.0;
  // ZeRO-3 (sim/engine/zero.h): weight bytes per parameter of the layers a stage
  // holds whole at once, the most of one layer or two adjacent ones; 0
  // otherwise.
  double gathered_bytes_per_param = 0.0;
  // Whether the schedule splits each backward into B and W (zero bubble): then
  // a layer's backward is the two summed, and only B passes the gradient on.
  bool backward_split = false;
  // ZeRO-3 (zero_gathers): each layer's all-gather of its weights, which runs
  // before each forward and backward that computes with it; empty otherwise.
  // The step floors count it (sim/plan/step_floor.h); the cuts do not.
  std::vector<SimTime> gathers;
  // Expert parallelism (layer_alltoalls, sim/engine/expert_parallel.h): each
  // layer's all-to-alls in a forward, as many again in its backward, which
  // its ops wait for beyond their compute unless the framework overlaps a
  // DualPipe pair's (then empty, as without experts). The step floors count
  // them; the cuts do not.
  std::vector<SimTime> exchanges;
  // The least factor the simulation may scale the layers' compute by (a
  // profile's concurrency slowdown below 1 where a stage's share of the
  // layers runs faster than the whole model; sim/engine/simulator.h): the
  // step floors scale the compute they count by it (sim/plan/step_floor.h),
  // not the links' gathers and reduce-scatters. 1 otherwise.
  double compute_scale = 1.0;
  // ZeRO-2/3 (add_zero_reduce_scatters, sim/engine/simulator.h): after
  // every backward a stage reduce-scatters its gradients on its device's
  // link to the replicas, one after another: each layer's bytes of them, the
  // dense and the routed experts', and the time of one reduce-scatter of a
  // stage's dense and experts' bytes. The step floors count them; the cuts
  // do not. Empty otherwise.
  std::vector<Bytes> dense_grad_bytes;
  std::vector<Bytes> expert_grad_bytes;
  std::function<SimTime(Bytes dense, Bytes experts)> reduce_scatter;
  // The reduce-scatter of layers [first, last]'s gradients; 0 without.
  SimTime stage_reduce_scatter(int first, int last) const;
  std::optional<Bytes> memory_capacity;  // none: no memory limit
  // Time to move `bytes` between neighbouring stages (latency + bytes / bandwidth).
  double link_latency_s = 0.0;
  double link_bandwidth = 0.0;  // bytes/s; 0 means transfers are free
};

struct PartitionResult {
  std::vector<StageRange> stages;  // empty when nothing fits
  SimTime bottleneck = 0;          // the slowest stage's time (optimal only)
  // When no cut fits: the smallest memory that would, and a sentence on why.
  std::optional<Bytes> memory_needed;
  std::optional<int> fullest_stage;  // which stage of that cut needs it
  std::string why;
  // Whether the search proved it: the cut optimal, or that nothing fits.
  // partition_devices' search may stop short (its max_exhaustive_nodes).
  bool exact = true;
};

// Stage time used by the optimal partitioner, per micro-batch: forward +
// backward + recompute (its share (M-1)/M under remat except-last, none without
// remat) + the transfer time of its input cut and of its output cut.
SimTime stage_time(const PartitionProblem& p, int first, int last);
// Peak memory of a stage (docs/models.md, "The partitioner"): weights, gradients and
// optimizer state (under ZeRO-3 with the layers it gathers), plus, n being
// in_flight (M under GPipe):
//   remat never:       n stashes;
//   remat always:      n checkpoints and one rebuilt stash;
//   remat except-last: n - 1 checkpoints and the last micro-batch's stash, plus
//                      the stash a recompute rebuilds while it lives (not under
//                      forwards_first, nor when n = 1).
// A checkpoint is the stage's input and a rebuilt stash the stage's whole one
// under Checkpoint::kStage; every layer's input and the largest layer's stash
// under kLayer (the whole stash when backward_split: W reads every layer's).
Bytes stage_memory(const PartitionProblem& p, int first, int last);

// stage_time and stage_memory of one problem, O(1) each after O(layers) to
// set up; the problem must outlive it.
class StagePrices {
 public:
  explicit StagePrices(const PartitionProblem& p);
  ~StagePrices();
  StagePrices(const StagePrices&) = delete;
  StagePrices& operator=(const StagePrices&) = delete;
  SimTime time(int first, int last) const;
  // With in_flight micro-batches, as every stage of partition_optimal.
  Bytes memory(int first, int last) const;
  // Stage `stage`'s, with its stage_held counts when set.
  Bytes memory(int stage, int first, int last) const;
  // With the least count of any stage: no stage of these layers needs less.
  Bytes least_memory(int first, int last) const;
  // time() without the transfers: never less for a stage with more layers.
  SimTime compute(int first, int last) const;
  // Moving cut `boundary` (before layer `boundary`) between devices; 0 at the
  // model's ends.
  SimTime cut_time(int boundary) const;
  // What a layer adds to the memory of any stage that holds it, at least:
  // its weights (rounded down, less a byte: the stage rounds their sum) and,
  // for each micro-batch the stage counts, its stash and, under layer
  // checkpoints, its input. A stage's memory is at least the sum over its
  // layers of layer_floor at its counts (what that leaves out, the stage's
  // input and the most it gathers or rebuilds at once, is not negative).
  struct LayerFloor {
    Bytes weights = 0;
    Bytes stash = 0;
    Bytes input = 0;
  };
  LayerFloor layer_floor(int layer) const;
  // What `f` comes to in a stage holding `counts` micro-batches of each kind.
  Bytes floor_bytes(const LayerFloor& f, StashCount counts) const;
  // Stage `stage`'s counts: its stage_held entry when set.
  StashCount counts(int stage) const;
  // floor_bytes of layer `layer` at the least count of any stage.
  Bytes layer_memory_floor(int layer) const;
  // What each stage holds at least beyond its layers' floors, whatever layers
  // it takes: under stage checkpoints the inputs it keeps (its cut, at least
  // the smallest inside the model; the model's input for the first stage),
  // under layer checkpoints with the backward whole its rebuilt stash (at
  // least the smallest), under ZeRO-3 the layer it gathers (at least the
  // smallest, less a byte for rounding).
  std::vector<Bytes> stage_floors() const;

 private:
  struct Sums;
  const PartitionProblem& p_;
  std::unique_ptr<const Sums> sums_;
};

// Exact minimum of the slowest stage subject to memory, by dynamic programming
// over (stages, prefix) with pruning; ties go to the cut found first.
PartitionResult partition_optimal(const PartitionProblem& p);
// partition_optimal's cut alone, empty when nothing fits: without the search
// for what would, which costs as much again.
std::vector<StageRange> optimal_cut(const PartitionProblem& p);
// The least memory any cut needs on its fullest stage: the problem fits in
// memory_capacity exactly when this is at most it.
Bytes min_peak_memory(const PartitionProblem& p);
// Whether min_peak_memory(p) <= cap, decided without finding the cut: in
// O(L log L + K L) rather than the cut's O(K L^2) (capacity asks this of
// every model size it probes).
bool fits_memory(const PartitionProblem& p, Bytes cap);
// The cut that achieves min_peak_memory.
std::vector<StageRange> min_peak_memory_cut(const PartitionProblem& p);
// Exact minimum of the largest stage's parameter count.
std::vector<StageRange> partition_params(const PartitionProblem& p);
// Exact minimum of the variance of the stages' forward + backward times.
std::vector<StageRange> partition_min_variance(const PartitionProblem& p);

}  // namespace pipescope
