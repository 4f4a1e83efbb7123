#pragma once
// Cutting a model into the stages of a schedule that runs several stages on
// each device (interleaved 1F1B and looped BFS with v chunks, ZB-V, and custom
// schedules): device d of K runs the stages PartitionProblem::stage_device puts
// on it (d, d + K, d + 2K, ... when it is empty; d and 2K - 1 - d under ZB-V's
// V). Its work in a step is the sum of its stages', and so is its memory. The cut that minimises
// the slowest single stage (partition_optimal) can still put two large stages on one device; this
// one balances the devices.

#include <optional>
#include <vector>

#include "costmodels/units.h"
#include "sim/engine/partition.h"

namespace pipescope {

// The device of stage `stage` in p: p.stage_device's, or stage mod `devices`
// when that is empty.
std::size_t device_of_stage(const PartitionProblem& p, std::size_t stage, int devices);

// A device's share of a cut: the summed stage_time and stage_memory of its
// stages.
struct DeviceLoad {
  SimTime time = 0;
  Bytes memory = 0;
};
std::vector<DeviceLoad> device_loads(const PartitionProblem& p, const std::vector<StageRange>& cut,
                                     int devices);

// Objective: the least busy time of the busiest device (its stages' stage_time
// summed), among the cuts of p.stages stages whose every device's summed
// stage_memory fits `device_capacity` (none: no limit); ties go to the cut
// whose device times spread least (sum of squares), which also shortens the
// other devices' share of the step.
//
// Method: exact where the cuts are few enough, a local search beyond.
// - First, a problem that cannot fit is refused at once: over any cut the
//   stages' memory sums to at least one stage's holding every layer (less a
//   byte a stage for rounding), so when that is more than `devices` times the
//   capacity, the fullest device overflows whatever the cut; nor when the
//   devices' memory holds fewer of the larger layers than there are
//   (sim/engine/layer_count_bound.h).
// - The local search starts from three cuts (partition_optimal's, which
//   minimises the slowest stage; the cut of least stage-time variance; the even
//   split by layer count), each in turn until the count below proves the best
//   busiest time so far optimal (so the spread tie-break sees only the starts
//   tried), or where none of those fits, from the cut of least peak memory, and moves one stage
//   boundary by one layer at a time while that lowers (busiest time, sum of squares); where no such
//   move helps, it moves one layer from a stage of the busiest device to any other device's stage,
//   the stages between shifting by one layer (up to 128 stages), and starts over. Every step
//   strictly improves that pair, so it ends. Tests bound it by brute force: within one layer's
//   stage time of the optimum.
// - Then a depth-first search over every cut proves the local search's answer
//   optimal or finds a better cut. It drops a partial cut when (a) a device's
//   time reaches the best busiest time so far (a device's time only grows as
//   its stages take layers); (b) the layers left, spread evenly over the
//   devices that still have stages to come, would lift them to it (each stage
//   takes at least its layers' compute); (b') under a limit, the layers left
//   need more memory, as one stage of least memory (less a byte a stage), than
//   those devices have room left, which settles problems where little fits
//   within a small budget; or (c) it has been at this stage and
//   first layer before with every device's time (and, under a limit, memory)
//   the same: what follows can do no better than it did then. Language
//   models' equal blocks make (c) common. And (d) the devices with stages to
//   come can hold, below the best time and within memory, fewer of the
//   larger layers left than there are (sim/engine/layer_count_bound.h), which proves
//   most cuts of equal blocks optimal before the search starts: 96 blocks
//   and a head on 16 devices cannot all stay under 6 blocks and the head. It remembers up to 32,768
//   such states (and 2^20 device loads in all), not at the last two stages, whose subtrees are
//   small, and stops looking where partial cuts do not repeat (fewer than 1 look in 64 after the
//   first 4,096). It gives up past `max_exhaustive_nodes` partial cuts: models of tens of layers
//   are solved exactly; for larger ones the better of the local search's cut and the best the
//   cut-short search found stands (PartitionResult::exact false).
//
// Whether no cut of p on `devices` keeps every device's time below
// `busiest`, as counting whole layers shows (sim/engine/layer_count_bound.h; no
// memory limit): false says nothing.
bool no_cut_is_faster(const PartitionProblem& p, int devices, SimTime busiest);

// The proof partition_devices tries before it searches (the stages' least
// memory shared out, and the larger layers counted whole): where it shows
// that no cut of p on `devices` fits, partition_devices' answer (no stages,
// memory_needed every cut needs at least); none where it does not.
std::optional<PartitionResult> no_cut_fits(const PartitionProblem& p, int devices,
                                           std::optional<Bytes> device_capacity);

// With one stage a device (devices == p.stages) the cut is partition_optimal's
// under p.memory_capacity, and `device_capacity` is not read.
inline constexpr long kMaxExhaustiveNodes = 200000;
PartitionResult partition_devices(const PartitionProblem& p, int devices,
                                  std::optional<Bytes> device_capacity,
                                  long max_exhaustive_nodes = kMaxExhaustiveNodes);

}  // namespace pipescope
