#pragma once
// A plan's ops timed as its devices run them (profiler.h, ProfileOptions::
// stages): every device's op list in order and back to back, each op standing
// in for its payload with a tensor of the right shape (no waiting on the other
// devices), every layer's op timed on its own, and every stage's stashes and
// deferred weight-gradient work kept from op to op as a step keeps them: under
// GPipe a backward finds its stash behind the M - 1 forwards that followed it,
// under 1F1B behind a few, and under zero-bubble orders W behind later B. A
// stage's op thus meets the caches as in a step, which a pass over one
// micro-batch does not show (profile_passes.h).

#include <cstddef>
#include <cstdint>
#include <vector>

#include "costmodels/units.h"
#include "exec/compute/layer.h"
#include "exec/compute/tensor_group.h"
#include "exec/profile_passes.h"
#include "sim/engine/schedule.h"

namespace pipescope::exec {

// What the profiler needs of a plan (T = 1): its op lists, and each model
// stage's layers of the whole model.
struct PlanStages {
  Schedule schedule;
  std::vector<LayerRange> stage_layers;  // [model stage]
};

// One kind of op's times per layer over a run of op lists: their sum and how
// many there were.
struct KindTimes {
  std::vector<SimTime> sum;  // ns, [layer]
  std::vector<int> count;    // [layer]
  explicit KindTimes(std::size_t layers = 0) : sum(layers, 0), count(layers, 0) {}
  void add(std::size_t layer, SimTime t);
  // sum / count, or nullopt-like 0 where none ran.
  SimTime mean(std::size_t layer) const;
};

// Every layer's op times over a run of op lists, by kind: F that drops its
// stash (remat), F that keeps it, R, the whole backward, a split backward's B
// and W. The optimizer step is timed apart (optimizer_timing.h).
struct OpListTimes {
  KindTimes forward, kept, recompute, backward, input, weight;
  explicit OpListTimes(std::size_t layers = 0);
  SimTime total() const;  // every op of every kind
  // Every F, R (kept or not): the forward direction's ops.
  SimTime forward_total() const;
  // Every fused backward, B and W: the backward direction's.
  SimTime backward_total() const;
};

// Runs device `device`'s op list of `plan` on `layers` (the whole model;
// stage s computes plan.stage_layers[s]) once, timing every layer's op on
// `clock` into `times` (null: untimed) and adding to `clocks` (null: not
// kept). `inputs` from layer_inputs, holding at least every stage's first
// layer's input; a backward's output gradient is a small normal stand-in (the
// last stage's, the loss's gradient 1). Every output is checked for being
// finite, as the runtime does. The stages' parameters' gradients are zeroed at
// the end. With `exchanges` (the calling thread's installed tally, of layers
// whose ranks trade rows: expert ranks), an op's time leaves out the time
// the tally counted during it (on the op's clock: CPU time, or wall time
// with a clock without), its compute alone.
void run_op_list(LayerList& layers, const PlanStages& plan, int device,
                 const std::vector<Tensor>& inputs, const Context& ctx, std::uint64_t seed,
                 const OpClock& clock, OpListTimes* times, PassClocks* clocks,
                 const CollectiveTally* exchanges = nullptr);

// Each device's op list alone, one device after another, device d's on a
// thread on cpus[d] (unpinned when cpus is empty), each after an untimed run
// of it (its layers and stashes into its core's caches). Times go to `times`,
// clocks to `clocks`.
void op_lists_alone(LayerList& layers, const PlanStages& plan, const std::vector<Tensor>& inputs,
                    const Context& ctx, const std::vector<int>& cpus, std::uint64_t seed,
                    const OpClock& clock, OpListTimes& times, PassClocks& clocks);

// Every device's op list at once, device d's on a thread on cpus[d]: an
// untimed run each, then a timed one started together, then untimed ones until
// every device has finished its timed run, so that every timed op runs while
// the other devices compute too (concurrent_passes' way).
void op_lists_together(LayerList& layers, const PlanStages& plan, const std::vector<Tensor>& inputs,
                       const Context& ctx, const std::vector<int>& cpus, std::uint64_t seed,
                       const OpClock& clock, OpListTimes& times, PassClocks& clocks);

}  // namespace pipescope::exec
