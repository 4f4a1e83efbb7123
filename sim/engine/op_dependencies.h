#pragma once
// What each op of a schedule needs done before it can run: the one statement of
// the rules that the event engine waits on, check_schedule verifies and the
// desktop app draws (docs/schedules.md, "What an op waits for").
//
//   F(s,m)  the forward F(s-1,m), through the activation it sends over the boundary
//   R(s,m)  F(s,m) of its own stage
//   B(s,m)  the backward B(s+1,m), through the gradient it sends back; F(s,m); and
//           R(s,m) when micro-batch m is recomputed
//   W(s,m)  B(s,m), when the schedule splits the backward
//   O(s)    every B(s,.) and, when split, every W(s,.), through the stage's
//           gradient all-reduce across data-parallel replicas
//
// The first stage's forward and the last stage's backward have no neighbour to
// wait for. Ops of one stage run on one device, so the schedule's order on that
// device is what makes a same-stage dependency hold.

#include <cstdint>
#include <span>
#include <string_view>

#include "sim/engine/schedule.h"

namespace pipescope {

// How a dependency's result reaches the op that needs it.
enum class Via : std::uint8_t {
  kSameStage,   // made earlier on the same stage: the device's order
  kActivation,  // the previous stage's output, sent forward over the boundary
  kGradient,    // the next stage's input gradient, sent back over the boundary
  kAllReduce,   // the stage's gradients of every micro-batch, summed across replicas
};

// Which schedules and micro-batches a dependency holds for.
enum class When : std::uint8_t {
  kAlways,
  kRecomputed,  // micro-batches that remat recomputes
  kSplit,       // schedules that split the backward into B and W
};

struct Dependency {
  OpKind on = OpKind::kForward;  // the op depended on
  int stage_offset = 0;          // its stage relative to the dependent op's: -1, 0, +1
  Via via = Via::kSameStage;
  When when = When::kAlways;
  bool every_micro_batch = false;  // all micro-batches of that stage, not the same one
  std::string_view broken;         // check_schedule's words when the device's order breaks it
};

// The dependencies of an op of kind `k`, under every condition; applies() says
// which hold for a given op.
std::span<const Dependency> op_dependencies(OpKind k);

// Whether `d` binds an op of stage `stage` of a schedule with `stages` stages
// (a neighbour that does not exist binds nothing).
constexpr bool applies(const Dependency& d, int stage, int stages, bool split, bool recomputed) {
  const int other = stage + d.stage_offset;
  if (other < 0 || other >= stages) return false;
  switch (d.when) {
    case When::kAlways:
      return true;
    case When::kRecomputed:
      return recomputed;
    case When::kSplit:
      return split;
  }
  return false;
}

// The transfer, if any, that an op of kind `k` sends when it finishes (the
// forward's activation to the next stage, the backward's gradient to the
// previous one), with the direction it goes: +1 or -1. Via::kSameStage: none.
struct Sends {
  Via via = Via::kSameStage;
  int direction = 0;
};
Sends sends_after(OpKind k);

// Whether finishing an op of kind `k` brings its stage's all-reduce closer.
bool feeds_all_reduce(OpKind k);

}  // namespace pipescope
