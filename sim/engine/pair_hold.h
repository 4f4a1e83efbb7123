#pragma once
// When an op of an overlapped pair hands on its output. The ops of a pair
// (Op::paired up to the first op that is not) run one after the other on
// their device, as one kernel would run them; what each produces leaves the
// device when the pair ends, as one kernel's outputs would. One rule for
// the engine, the executor's workers and the custom-schedule reader's
// deadlock check, so that they agree on which schedules deadlock.

#include <utility>
#include <vector>

#include "sim/engine/schedule.h"

namespace pipescope {

// The outputs of one device's pair so far. `Output` is what an op hands on
// (a tensor in the executor; nothing in the engine).
template <typename Output>
class PairHold {
 public:
  // `op` has finished with `out`: hands on, through send(op, out), every
  // output the pair now releases, in the order the ops ran (none while the
  // pair goes on).
  template <typename Send>
  void finished(const Op& op, Output out, Send&& send) {
    if (op.paired) {
      held_.emplace_back(op, std::move(out));
      return;
    }
    for (auto& [done, output] : held_) send(done, std::move(output));
    held_.clear();
    send(op, std::move(out));
  }
  // Whether the op of `op`'s kind, stage and micro-batch has finished and
  // waits for its pair to end.
  bool holds(const Op& op) const {
    for (const auto& [done, output] : held_) {
      if (done.kind == op.kind && done.stage == op.stage && done.micro_batch == op.micro_batch) {
        return true;
      }
    }
    return false;
  }

 private:
  std::vector<std::pair<Op, Output>> held_;
};

// What an op hands on where only the fact counts.
struct NoOutput {};

// The other half of ops[i]'s pair: the backward of a paired forward, the
// forward of a paired backward (a recompute may run between them); in a
// group of more (a custom schedule's OVERLAP_F_B), the k-th forward's is the
// k-th backward and back. Null for an op in no pair, of another kind, or
// without a counterpart.
inline const Op* pair_partner(const std::vector<Op>& ops, std::size_t i) {
  const OpKind kind = ops[i].kind;
  if (kind != OpKind::kForward && kind != OpKind::kBackward) return nullptr;
  if (!ops[i].paired && !(i > 0 && ops[i - 1].paired)) return nullptr;
  std::size_t first = i;  // the group's first op
  while (first > 0 && ops[first - 1].paired) --first;
  const OpKind other = kind == OpKind::kForward ? OpKind::kBackward : OpKind::kForward;
  std::size_t k = 0;  // ops[i] is its group's k-th of its kind
  for (std::size_t j = first; j < i; ++j) k += ops[j].kind == kind ? 1 : 0;
  for (std::size_t j = first; j < ops.size(); ++j) {
    if (ops[j].kind == other && k-- == 0) return &ops[j];
    if (!ops[j].paired) break;  // the group's last op
  }
  return nullptr;
}

}  // namespace pipescope
