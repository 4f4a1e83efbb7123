#include "sim/torch_pipelining_export.h"

#include <algorithm>
#include <string>
#include <vector>

#include "costmodels/check.h"
#include "sim/schedule.h"

namespace pipescope {
namespace {

// Whether `w` is the W of `b`, a B that runs with it as one whole backward.
bool weight_of(const Op& b, const Op& w) {
  return b.kind == OpKind::kBackward && b.whole && w.kind == OpKind::kWeight &&
         w.stage == b.stage && w.micro_batch == b.micro_batch;
}

// A rank's actions: one op, or the ops of an overlapped pair (Op::paired, up to
// the first op that is not), which PyTorch runs as one OVERLAP_F_B action, or a
// whole backward (Op::whole, a B and its W), PyTorch's B.
std::vector<std::vector<Op>> action_cells(const std::vector<Op>& device_ops) {
  std::vector<std::vector<Op>> cells;
  bool in_pair = false;
  for (const Op& op : device_ops) {
    if (op.kind != OpKind::kForward && op.kind != OpKind::kBackward && op.kind != OpKind::kWeight) {
      continue;
    }
    const bool joins =
        !cells.empty() && cells.back().size() == 1 && weight_of(cells.back().back(), op);
    if (!in_pair && !joins) cells.emplace_back();
    cells.back().push_back(op);
    in_pair = op.paired;
  }
  return cells;
}

// A cell's text: "0F1", "2I3" (a split backward's input gradient), "2W3",
// "2B3" (a B and its W, one whole backward); a pair "(0F7;7B3)OVERLAP_F_B".
std::string cell_text(const std::vector<Op>& cell, bool split) {
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < cell.size(); ++i) {
    const Op& op = cell[i];
    const bool whole = i + 1 < cell.size() && weight_of(op, cell[i + 1]);
    const char* action = op.kind == OpKind::kForward  ? "F"
                         : op.kind == OpKind::kWeight ? "W"
                         : split && !whole            ? "I"
                                                      : "B";
    parts.push_back(std::to_string(op.stage) + action + std::to_string(op.micro_batch));
    if (whole) ++i;
  }
  if (parts.size() == 1) return parts[0];
  std::string out = "(";
  for (std::size_t i = 0; i < parts.size(); ++i) out += (i ? ";" : "") + parts[i];
  return out + ")OVERLAP_F_B";
}

// Each rank runs its actions in the schedule's order, one per step, as soon as
// their inputs arrived in an earlier step (F(s,m) after F(s-1,m), B(s,m) after
// B(s+1,m)); a rank that must wait leaves the cell empty. Recompute and
// optimizer steps are not actions (PyTorch recomputes inside a stage's
// backward, with checkpointing).
std::vector<std::vector<std::string>> aligned_actions(const Plan& p) {
  const Schedule sched = p.schedule_ops();
  const auto K = static_cast<std::size_t>(sched.stages);  // model stages, K x v
  const auto M = static_cast<std::size_t>(p.micro_batches);
  const auto ranks = static_cast<std::size_t>(sched.devices());  // one per device
  std::vector<std::vector<std::vector<Op>>> cells(ranks);
  std::size_t remaining = 0;
  for (std::size_t d = 0; d < ranks; ++d) {
    cells[d] = action_cells(sched.device_ops[d]);
    remaining += cells[d].size();
  }
  constexpr long kNotYet = -1;
  std::vector<long> f_step(K * M, kNotYet), b_step(K * M, kNotYet);
  const auto at = [&](int stage, int mb) {
    return static_cast<std::size_t>(stage) * M + static_cast<std::size_t>(mb);
  };
  const auto ready = [&](const Op& op, long step) {
    const bool fwd = op.kind == OpKind::kForward;
    const int from = fwd ? op.stage - 1 : op.stage + 1;
    if (op.kind == OpKind::kWeight || from < 0 || from >= sched.stages) return true;
    const long done = (fwd ? f_step : b_step)[at(from, op.micro_batch)];
    return done != kNotYet && done < step;
  };
  std::vector<std::size_t> next(ranks, 0);
  std::vector<std::vector<std::string>> rows(ranks);
  for (long step = 0; remaining > 0; ++step) {
    bool progressed = false;
    for (std::size_t r = 0; r < ranks; ++r) {
      if (next[r] == cells[r].size()) continue;
      const std::vector<Op>& cell = cells[r][next[r]];
      if (!std::all_of(cell.begin(), cell.end(), [&](const Op& op) { return ready(op, step); })) {
        rows[r].emplace_back();
        continue;
      }
      for (const Op& op : cell) {
        if (op.kind == OpKind::kWeight) continue;
        (op.kind == OpKind::kForward ? f_step : b_step)[at(op.stage, op.micro_batch)] = step;
      }
      rows[r].push_back(cell_text(cell, sched.split));
      ++next[r];
      --remaining;
      progressed = true;
    }
    // A step where no rank can act repeats forever: only actions run before it count.
    PS_CHECK(progressed, "the schedule deadlocks");
  }
  return rows;
}

}  // namespace

std::string export_torch_pipelining(const Plan& p) {
  std::string out;
  for (const std::vector<std::string>& row : aligned_actions(p)) {
    for (std::size_t i = 0; i < row.size(); ++i) out += (i ? "," : "") + row[i];
    out += "\n";
  }
  return out;
}

}  // namespace pipescope
