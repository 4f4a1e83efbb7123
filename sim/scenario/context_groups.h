#pragma once
// A scenario under context parallelism: each sample's sequence splits over C
// devices (the model becomes one device's share of it, and each of the
// cluster's groups C sets of T devices). What the C exchange is priced in
// sim/engine/context_parallel.h.

#include <cstdint>
#include <string>
#include <vector>

#include "sim/scenario/scenario.h"

namespace pipescope {

// Why the sequence of `sc` cannot split over C devices: a model that is not
// a transformer, a split its attention does not allow (tensor_split_problem:
// 2 C must divide seq_len, attention fused and not sliding), a C that does
// not divide the cluster's devices (or groups), or ZeRO-3 beside it (not
// modelled). Empty when it can, and for C = 1.
std::string context_parallel_problem(const Scenario& sc, int C);

// The fewest tokens of a sample the planner leaves a device when it tries
// context parallelism: below it a ring step's latency and launches weigh
// against an attention too short to hide them, and NeMo's long-context
// recipes keep context parallelism for sequences of 16K tokens and more
// (docs/models.md, "Context parallelism").
inline constexpr std::int64_t kMinContextTokens = 4096;

// The C the planner tries for `sc` (one T's and E's scenario, its sequence
// whole), smallest first: the scenario's own when it gives one
// (TrainingConfig::context_parallel_given); otherwise 1 and every power of
// two C that leaves each device at least kMinContextTokens of a sample and
// that context_parallel_problem allows.
std::vector<int> context_parallel_choices(const Scenario& sc);

// `sc` with its model one device's share of each sequence under C and its
// groups C times larger (TrainingConfig::context_parallel,
// Cluster::context_parallel), its other splits kept. sc's sequence must be
// whole; context_parallel_problem must be empty.
Scenario with_context_parallel(const Scenario& sc, int C);

}  // namespace pipescope
