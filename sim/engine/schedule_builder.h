#pragma once
// What the op-list builders of the built-in schedules share: schedule.cpp builds
// the schedules that run one stage a device, chunked_schedules.cpp those that
// run several.

#include <vector>

#include "sim/engine/schedule.h"

namespace pipescope {

// B(st, m), preceded by its recompute when remat recomputes m.
inline void push_backward(std::vector<Op>& ops, const Schedule& s, int st, int m) {
  if (s.recomputes(m)) ops.push_back({OpKind::kRecompute, st, m});
  ops.push_back({OpKind::kBackward, st, m});
}

}  // namespace pipescope
