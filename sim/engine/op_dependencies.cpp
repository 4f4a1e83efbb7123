#include "sim/engine/op_dependencies.h"

#include <array>

namespace pipescope {
namespace {

constexpr std::string_view kRecomputeOrder = "recompute not between forward and backward";

constexpr std::array<Dependency, 1> kForward{{
    {OpKind::kForward, -1, Via::kActivation, When::kAlways, false, {}},
}};
constexpr std::array<Dependency, 1> kRecompute{{
    {OpKind::kForward, 0, Via::kSameStage, When::kAlways, false, kRecomputeOrder},
}};
constexpr std::array<Dependency, 3> kBackward{{
    {OpKind::kBackward, +1, Via::kGradient, When::kAlways, false, {}},
    {OpKind::kForward, 0, Via::kSameStage, When::kAlways, false, "backward before forward"},
    {OpKind::kRecompute, 0, Via::kSameStage, When::kRecomputed, false, kRecomputeOrder},
}};
constexpr std::array<Dependency, 1> kWeight{{
    {OpKind::kBackward, 0, Via::kSameStage, When::kSplit, false, "weight gradient before backward"},
}};
constexpr std::array<Dependency, 2> kOptimizer{{
    {OpKind::kBackward, 0, Via::kAllReduce, When::kAlways, true, "optimizer step before backward"},
    {OpKind::kWeight, 0, Via::kAllReduce, When::kSplit, true,
     "optimizer step before weight gradient"},
}};

}  // namespace

std::span<const Dependency> op_dependencies(OpKind k) {
  switch (k) {
    case OpKind::kForward:
      return kForward;
    case OpKind::kRecompute:
      return kRecompute;
    case OpKind::kBackward:
      return kBackward;
    case OpKind::kWeight:
      return kWeight;
    case OpKind::kOptimizer:
      return kOptimizer;
  }
  return {};
}

// Read off the table: an op sends what a neighbouring stage's op waits for from it.
Sends sends_after(OpKind k) {
  for (const OpKind dependent : kOpKinds) {
    for (const Dependency& d : op_dependencies(dependent)) {
      if (d.on == k && (d.via == Via::kActivation || d.via == Via::kGradient)) {
        return {d.via, -d.stage_offset};
      }
    }
  }
  return {};
}

bool feeds_all_reduce(OpKind k) {
  for (const OpKind dependent : kOpKinds) {
    for (const Dependency& d : op_dependencies(dependent)) {
      if (d.on == k && d.via == Via::kAllReduce) return true;
    }
  }
  return false;
}

}  // namespace pipescope
