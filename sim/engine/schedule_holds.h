#pragma once
// What a built-in schedule's order holds, read off the order once per shape
// and remembered: the planner asks for the same few shapes (kind, K, M, remat,
// v, checkpoint) thousands of times, and building an order of K x v x M ops to count them
// cost a sixth of its search.

#include <vector>

#include "sim/engine/schedule.h"
#include "sim/scenario/scenario.h"

namespace pipescope {

struct ScheduleHolds {
  // most_stashes_held of the order with every micro-batch keeping its stash.
  int most = 0;
  // held_at_peak of the order under the remat asked for: with several
  // chunks, and with one where the backward is split and remat recomputes
  // (each rebuilt stash then lives until its W, which the remat formulas of
  // `most` alone miss); empty otherwise.
  std::vector<StashCount> at_peak;
};

// The holds of build_schedule(kind, devices, micro_batches, remat, chunks), a
// built-in kind (not kCustom), at_peak as `checkpoint` weighs them. Thread-safe;
// throws what build_schedule throws.
ScheduleHolds schedule_holds(ScheduleKind kind, int devices, int micro_batches, Remat remat,
                             int chunks, Checkpoint checkpoint = Checkpoint::kStage);

}  // namespace pipescope
