#pragma once
// How long the executor's optimizer steps a model's parameters: alone, from
// cold caches (as a stage steps after its backward pass has filled them), and
// in shares stepped by several threads at once (the ranks of a tensor-parallel
// group); and the profile's optimizer figures taken from those timings.

#include <vector>

#include "costmodels/units.h"
#include "exec/compute/layer.h"
#include "exec/compute/optimizer.h"

namespace pipescope {
struct Profile;  // costmodels/profile.h
}

namespace pipescope::exec {

// The median of `repeats` steps of `params`, each from cold caches, after one
// that allocates the state: on the host each on the thread's CPU clock (what
// other work took from it left out), on a device on the wall clock.
SimTime time_optimizer(const std::vector<Param*>& params, Optimizer kind, int repeats);

// How much slower the optimizer steps `params` split in `ranks` shares of
// about equal size while `ranks` threads each step theirs at once than when
// each steps alone, every step from cold caches (a rank steps after its
// backward pass has filled them): the sum of the shares' median times
// together over the sum alone, at least 1 (a faster "together" is noise). Throws
// std::invalid_argument unless ranks >= 1 and repeats >= 1.
double measure_optimizer_slowdown(const std::vector<Param*>& params, Optimizer kind, int ranks,
                                  int repeats);

// A profile's optimizer figures (Profile::optimizer_overhead and
// optimizer_ns_per_param): overhead + cost per parameter, from `repeats`
// timings (time_optimizer) of the step of all of `layers`' parameters and of
// those of its smallest layer with any.
void add_optimizer_figures(Profile& p, LayerList& layers, Optimizer kind, int repeats);

}  // namespace pipescope::exec
