#pragma once
// Which configurations the planner tries (sim/plan/planner.h): the T it splits the
// layers over, with or without the sequence, and the E it spreads a mixture's
// experts over; every K, D, M, schedule, v and remat mode the request allows
// for each; and the ZeRO stages each tries.

#include <memory>
#include <vector>

#include "sim/plan/planner.h"
#include "sim/scenario/scenario.h"

namespace pipescope {

// The (T, E, C) to plan, each with its scenario: split by T (and by the
// sequence, sequence_parallel_choice in sim/scenario/tensor_groups.h), devices grouped
// by T; for each T every E of expert_parallel_choices, the experts spread
// over E (sim/scenario/expert_groups.h); for each every C of
// context_parallel_choices, the sequence split over C
// (sim/scenario/context_groups.h). T outer, C inner, smallest first.
// Throws ConfigError for a T the request or scenario cannot have.
std::vector<std::shared_ptr<const Scenario>> parallel_splits(const Scenario& sc,
                                                             const PlanRequest& req);

// The candidates of one (T, E)'s scenario `split` on its N groups of T devices,
// each at every ZeRO stage it tries, with T and scenario set; a shape's
// candidates (its remat modes, each at its stages) one after another. Throws
// ConfigError when the request cannot be met on `split`.
std::vector<PlanCandidate> candidates_of(const std::shared_ptr<const Scenario>& split,
                                         const PlanRequest& req, int N);

}  // namespace pipescope
