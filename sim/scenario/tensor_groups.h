#pragma once
// A scenario under tensor parallelism: the model becomes one device's share of
// every layer and the cluster's devices groups of T (Megatron-LM's layout).
// What the groups exchange is priced in sim/engine/tensor_parallel.h.

#include <string>
#include <vector>

#include "sim/scenario/scenario.h"

namespace pipescope {

// Why the layers of `sc` (whole: T = 1) cannot split over T devices, with
// sequence parallelism or not: a model that is not a transformer, a T that
// does not divide its heads, key/value heads, d_ff (or seq_len), or the
// cluster's devices. Empty when they can.
std::string tensor_parallel_problem(const Scenario& sc, int T, bool sequence);

// `sc` (whole) with its model one device's share under T and its devices
// groups of T (TrainingConfig::tensor_parallel). tensor_parallel_problem must
// be empty.
Scenario with_tensor_parallel(const Scenario& sc, int T, bool sequence);

// Whether `sc` (whole) splits its layers over T with sequence parallelism:
// as the scenario says, else wherever it can, since sequence parallelism
// moves what the all-reduces move, splits the layer norms' and dropouts'
// work and their activations by T, and so is never slower nor larger
// (docs/models.md, "Tensor parallelism").
bool sequence_parallel_choice(const Scenario& sc, int T);

// The T the planner tries on `sc` (whole) when none is given: 1, and on a
// cluster of nodes every T > 1 that divides a node's devices and that
// tensor_parallel_problem allows (with sequence_parallel_choice), so that a
// group stays on one node's links. A measured profile times whole layers:
// 1 alone.
std::vector<int> tensor_parallel_choices(const Scenario& sc);

}  // namespace pipescope
