// check_schedule (sim/engine/schedule.h): whether a schedule's op lists hold every op
// once, on its stage's device, in an order the dependency rules allow.

#include <array>
#include <string>
#include <vector>

#include "sim/engine/op_dependencies.h"
#include "sim/engine/schedule.h"

namespace pipescope {
namespace {

// Where each op of a schedule stands in its device's list, -1 where it is absent.
struct Positions {
  std::size_t M = 0;
  std::array<std::vector<long>, 5> at;  // per OpKind: per (stage, micro-batch), or per stage

  long of(OpKind k, std::size_t stage, std::size_t m) const {
    const auto& v = at[static_cast<std::size_t>(k)];
    return k == OpKind::kOptimizer ? v[stage] : v[stage * M + m];
  }
};

// Fills `p` from the device lists; the first op that is out of range, on the
// wrong device or there twice is the problem returned.
std::string find_positions(const Schedule& s, Positions& p) {
  const auto K = static_cast<std::size_t>(s.stages);
  p.M = static_cast<std::size_t>(s.micro_batches);
  for (auto& v : p.at) v.assign(K * p.M, -1);
  p.at[static_cast<std::size_t>(OpKind::kOptimizer)].assign(K, -1);
  for (std::size_t d = 0; d < s.device_ops.size(); ++d) {
    const auto& ops = s.device_ops[d];
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      const auto where = [&] { return "device " + std::to_string(d) + " op " + std::to_string(i); };
      if (op.stage < 0 || static_cast<std::size_t>(op.stage) >= K)
        return where() + ": stage out of range";
      if (s.stage_device[static_cast<std::size_t>(op.stage)] != static_cast<int>(d))
        return where() + ": stage " + std::to_string(op.stage) + " does not run on this device";
      const bool step = op.kind == OpKind::kOptimizer;
      if (!step && (op.micro_batch < 0 || static_cast<std::size_t>(op.micro_batch) >= p.M))
        return where() + ": micro-batch out of range";
      const std::size_t key = static_cast<std::size_t>(op.stage) * (step ? 1 : p.M) +
                              (step ? 0 : static_cast<std::size_t>(op.micro_batch));
      long& slot = p.at[static_cast<std::size_t>(op.kind)][key];
      if (slot >= 0)
        return where() + (step ? ": second optimizer step"
                               : ": duplicate " + std::string(to_string(op.kind)));
      slot = static_cast<long>(i);
    }
  }
  return {};
}

// Which ops micro-batch m of a stage must have, and must not.
std::string check_presence(const Schedule& s, const Positions& p, std::size_t st, std::size_t m) {
  const bool recomputed = s.recomputes(static_cast<int>(m));
  if (p.of(OpKind::kForward, st, m) < 0) return "missing forward";
  if (p.of(OpKind::kBackward, st, m) < 0) return "missing backward";
  if (recomputed && p.of(OpKind::kRecompute, st, m) < 0) return "missing recompute";
  if (!recomputed && p.of(OpKind::kRecompute, st, m) >= 0)
    return "recompute that remat " + std::string(to_string(s.remat)) + " does not ask for";
  if (s.split && p.of(OpKind::kWeight, st, m) < 0) return "missing weight gradient";
  if (!s.split && p.of(OpKind::kWeight, st, m) >= 0)
    return "weight gradient in a schedule that does not split the backward";
  return {};
}

// The dependency rules of the stage's own ops (the others are waited for at
// run time): each op after what it depends on, in its device's order.
std::string check_order(const Schedule& s, const Positions& p, std::size_t st, std::size_t m) {
  const bool recomputed = s.recomputes(static_cast<int>(m));
  for (const OpKind k : kOpKinds) {
    const long mine = p.of(k, st, m);
    if (mine < 0) continue;
    for (const Dependency& d : op_dependencies(k)) {
      if (d.stage_offset != 0 || !applies(d, static_cast<int>(st), s.stages, s.split, recomputed))
        continue;
      const long theirs = p.of(d.on, st, m);
      if (theirs >= 0 && mine < theirs) return std::string(d.broken);
    }
  }
  return {};
}

}  // namespace

std::string check_schedule(const Schedule& s) {
  const auto K = static_cast<std::size_t>(s.stages);
  const auto M = static_cast<std::size_t>(s.micro_batches);
  if (s.stage_device.size() != K) return "stage_device has the wrong size";
  Positions p;
  if (std::string problem = find_positions(s, p); !problem.empty()) return problem;
  for (std::size_t st = 0; st < K; ++st) {
    for (std::size_t m = 0; m < M; ++m) {
      std::string problem = check_presence(s, p, st, m);
      if (problem.empty()) problem = check_order(s, p, st, m);
      if (!problem.empty())
        return "stage " + std::to_string(st) + " micro-batch " + std::to_string(m) + ": " + problem;
    }
    if (p.of(OpKind::kOptimizer, st, 0) < 0)
      return "stage " + std::to_string(st) + ": missing optimizer step";
  }
  return {};
}

}  // namespace pipescope
