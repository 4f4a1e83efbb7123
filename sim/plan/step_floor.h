#pragma once
// Floors under a pipeline's step: what no schedule can run faster than, from
// the partition problem's costs alone. The planner leaves out a candidate
// whose floor cannot reach the best plans (sim/plan/planner.h).

#include <vector>

#include "costmodels/units.h"
#include "sim/engine/partition.h"

namespace pipescope {

// A floor under the step of any schedule that runs `cut` on `devices` with
// p's costs, the most over the devices of
//   fill + M x compute + drain:
// the device starts no op before micro-batch 0's forward has passed the
// stages before its first (fill: their forwards); it then computes its
// stages' forwards, backwards and recompute share for M micro-batches
// (StagePrices::compute), each forward and backward also waiting for its
// layers' all-to-alls under expert parallelism (p.exchanges: the ops hold
// the device through them); and after its last backward, that micro-batch's
// gradient still passes back through those stages (drain: their backwards;
// none when the backward is split, as its weight part may come last). Under
// ZeRO-3 (p.gathers) a forward or backward of a stage lasts at least the
// all-gathers of its layers, which run one after another on the link, so
// the M micro-batches keep the device at least max(M x compute, M x 2 x its
// layers' gathers less its first op's, which may run during the fill).
// Under ZeRO-2/3 (p.stage_reduce_scatter) each backward's reduce-scatter
// follows on that link: the step lasts at least the fill and the link's
// whole load, the last reduce-scatter beside the drain. Not the transfers,
// which may overlap, nor anything else the simulation adds (the rest of the
// bubble, collectives): those only lengthen the step. And at least the
// chain of one micro-batch, whatever the cut: its forward through every
// layer (LayerCost::least_forward) and then, unless the backward is split,
// its backward back through them, each op with its all-to-alls, after the
// M - 1 other micro-batches' forwards of the first layer (where M is small
// against the stages, the fill and drain the devices' sums leave out), all
// times p.compute_scale. Every compute term above is scaled by it too (a
// profile's concurrency slowdown below 1), the links' terms are not.
// Less a nanosecond a layer and micro-batch for the rounding of averaged
// forwards.
SimTime step_floor(const PartitionProblem& p, const std::vector<StageRange>& cut, int devices);
// A floor under step_floor of every cut: where device d runs stage d alone
// (GPipe, 1F1B, ZB-H1), the least step_floor over every cut, to 2^-24 of it
// below (without the gathers); otherwise, and at least, the devices' mean
// compute and all-to-alls for M micro-batches, or their links' mean load
// (ZeRO's gathers less each layer's forward one once, and one
// reduce-scatter of all the layers' gradients a micro-batch), or the chain
// of one micro-batch, whichever is more.
SimTime step_floor_any_cut(const PartitionProblem& p, int devices);

}  // namespace pipescope
