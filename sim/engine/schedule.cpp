#include "sim/engine/schedule.h"

#include <algorithm>
#include <stdexcept>
#include <tuple>

#include "costmodels/check.h"
#include "sim/engine/schedule_builder.h"

namespace pipescope {

std::string_view to_string(OpKind k) {
  switch (k) {
    case OpKind::kForward:
      return "forward";
    case OpKind::kRecompute:
      return "recompute";
    case OpKind::kBackward:
      return "backward";
    case OpKind::kWeight:
      return "weight";
    case OpKind::kOptimizer:
      return "optimizer";
  }
  return "?";
}

char op_letter(OpKind k) {
  switch (k) {
    case OpKind::kForward:
      return 'F';
    case OpKind::kRecompute:
      return 'R';
    case OpKind::kBackward:
      return 'B';
    case OpKind::kWeight:
      return 'W';
    case OpKind::kOptimizer:
      return 'O';
  }
  return '?';
}

namespace {

// Stage s on device s, empty op lists with room for F, B (and R) per
// micro-batch and the optimizer step.
Schedule one_stage_per_device(ScheduleKind kind, int stages, int micro_batches, Remat remat) {
  PS_CHECK(stages >= 1 && micro_batches >= 1, "need K >= 1 and M >= 1");
  Schedule s;
  s.kind = kind;
  s.split = splits_backward(kind);
  s.stages = stages;
  s.micro_batches = micro_batches;
  s.remat = remat;
  s.stage_device.resize(static_cast<std::size_t>(stages));
  s.device_ops.resize(static_cast<std::size_t>(stages));
  for (int st = 0; st < stages; ++st) {
    s.stage_device[static_cast<std::size_t>(st)] = st;
    s.device_ops[static_cast<std::size_t>(st)].reserve(
        static_cast<std::size_t>(micro_batches) *
            (2 + (reruns_forwards(remat) ? 1 : 0) + (splits_backward(kind) ? 1 : 0)) +
        1);
  }
  return s;
}

}  // namespace

Schedule build_gpipe(int stages, int micro_batches, Remat remat) {
  Schedule s = one_stage_per_device(ScheduleKind::kGpipe, stages, micro_batches, remat);
  for (int st = 0; st < stages; ++st) {
    std::vector<Op>& ops = s.device_ops[static_cast<std::size_t>(st)];
    for (int m = 0; m < micro_batches; ++m) ops.push_back({OpKind::kForward, st, m});
    for (int m = micro_batches - 1; m >= 0; --m) push_backward(ops, s, st, m);
    ops.push_back({OpKind::kOptimizer, st, 0});
  }
  return s;
}

Schedule build_1f1b(int stages, int micro_batches, Remat remat) {
  Schedule s = one_stage_per_device(ScheduleKind::k1F1B, stages, micro_batches, remat);
  for (int st = 0; st < stages; ++st) {
    std::vector<Op>& ops = s.device_ops[static_cast<std::size_t>(st)];
    const int warmup = std::min(stages - st - 1, micro_batches);
    int next_f = 0, next_b = 0;
    while (next_f < warmup) ops.push_back({OpKind::kForward, st, next_f++});
    while (next_f < micro_batches) {  // steady state: one forward, one backward
      ops.push_back({OpKind::kForward, st, next_f++});
      push_backward(ops, s, st, next_b++);
    }
    while (next_b < micro_batches) push_backward(ops, s, st, next_b++);  // cool-down
    ops.push_back({OpKind::kOptimizer, st, 0});
  }
  return s;
}

Schedule build_zb_h1(int stages, int micro_batches, Remat remat) {
  Schedule s = one_stage_per_device(ScheduleKind::kZbH1, stages, micro_batches, remat);
  for (int st = 0; st < stages; ++st) {
    std::vector<Op>& ops = s.device_ops[static_cast<std::size_t>(st)];
    const int M = micro_batches;
    int next_f = 0, next_b = 0, next_w = 0;
    const auto weight = [&] { ops.push_back({OpKind::kWeight, st, next_w++}); };
    while (next_f < std::min(stages - st - 1, M)) ops.push_back({OpKind::kForward, st, next_f++});
    for (int round = 0; round < st && next_f < M; ++round) {  // W deferred
      ops.push_back({OpKind::kForward, st, next_f++});
      push_backward(ops, s, st, next_b++);
    }
    while (next_f < M) {  // steady state: F, B, W
      ops.push_back({OpKind::kForward, st, next_f++});
      push_backward(ops, s, st, next_b++);
      weight();
    }
    while (next_b < M) {  // cool-down: B, W
      push_backward(ops, s, st, next_b++);
      weight();
    }
    while (next_w < M) weight();  // the deferred W fill the tail
    ops.push_back({OpKind::kOptimizer, st, 0});
  }
  return s;
}

int stage_device_of(ScheduleKind kind, int stage, int devices) {
  if (v_shaped(kind) && stage >= devices) return 2 * devices - 1 - stage;
  return stage % devices;
}

std::vector<StashCount> held_at_peak(const Schedule& s, Checkpoint checkpoint) {
  const OpKind frees = s.split ? OpKind::kWeight : OpKind::kBackward;
  const bool bound_each =
      s.remat == Remat::kExceptLast || rebuilds_layer_by_layer(s.remat, checkpoint);
  std::vector<StashCount> at_peak(static_cast<std::size_t>(s.stages));
  std::vector<StashCount> held(static_cast<std::size_t>(s.stages));
  std::vector<std::vector<std::size_t>> stages_of(s.device_ops.size());
  for (std::size_t t = 0; t < held.size(); ++t) {
    stages_of[static_cast<std::size_t>(s.stage_device[t])].push_back(t);
  }
  for (std::size_t d = 0; d < s.device_ops.size(); ++d) {
    StashCount total;
    StashCount most;
    for (const Op& op : s.device_ops[d]) {
      StashCount& h = held[static_cast<std::size_t>(op.stage)];
      const bool recomputed = s.recomputes(op.micro_batch);
      const int sign = op.kind == frees ? -1 : 1;
      // A forward that keeps its stash, and the op that frees it; a recompute,
      // and the op that frees what it rebuilt.
      if ((op.kind == frees || op.kind == OpKind::kForward) && !recomputed) {
        h.stashes += sign;
        total.stashes += sign;
      }
      if (op.kind == OpKind::kRecompute || (op.kind == frees && recomputed)) {
        h.rebuilt += sign;
        total.rebuilt += sign;
      }
      if ((op.kind == frees || op.kind == OpKind::kForward) && recomputed) {
        h.inputs += sign;
        total.inputs += sign;
      }
      if (sign < 0) continue;
      if (bound_each) {
        // The most kept stashes, and beside them as many rebuilt ones as make
        // the most stashes of either kind: a bound however the two weigh.
        StashCount& bound = at_peak[static_cast<std::size_t>(op.stage)];
        const int most_stashes = std::max(bound.all_stashes(), h.all_stashes());
        bound.stashes = std::max(bound.stashes, h.stashes);
        bound.rebuilt = most_stashes - bound.stashes;
        bound.inputs = std::max(bound.inputs, h.inputs);
        continue;
      }
      if (std::pair(total.all_stashes(), total.inputs) <=
          std::pair(most.all_stashes(), most.inputs)) {
        continue;
      }
      most = total;
      for (const std::size_t t : stages_of[d]) at_peak[t] = held[t];
    }
  }
  return at_peak;
}

int most_stashes_held(const Schedule& s) {
  const std::vector<StashCount> at_peak = held_at_peak(s);
  std::vector<int> per_device(s.device_ops.size(), 0);
  for (std::size_t t = 0; t < at_peak.size(); ++t) {
    per_device[static_cast<std::size_t>(s.stage_device[t])] += at_peak[t].all_stashes();
  }
  return *std::max_element(per_device.begin(), per_device.end());
}

std::string_view schedule_shape_rule(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kInterleaved1F1B:
      return "M >= K and a multiple of its rounds, max(1, M / K) (what both PyTorch's "
             "ScheduleInterleaved1F1B and Megatron-LM run)";
    case ScheduleKind::kInterleavedZb:
      return "M to be a multiple of its rounds, max(1, M / K) (as PyTorch's "
             "ScheduleInterleavedZeroBubble)";
    case ScheduleKind::kDualPipeV:
      return "M >= 2K, its stage count (as PyTorch's ScheduleDualPipeV)";
    case ScheduleKind::kGpipe:
    case ScheduleKind::k1F1B:
    case ScheduleKind::kZbH1:
    case ScheduleKind::kLoopedBfs:
    case ScheduleKind::kZbV:
    case ScheduleKind::kCustom:
      break;
  }
  return {};
}

int interleaved_rounds(int devices, int micro_batches) {
  return std::max(1, micro_batches / devices);
}

int interleaved_round_size(int devices, int micro_batches) {
  return micro_batches / interleaved_rounds(devices, micro_batches);
}

std::string schedule_shape_problem(ScheduleKind kind, int devices, int micro_batches, int chunks) {
  if (devices < 1 || micro_batches < 1) return "need K >= 1 and M >= 1";
  if (chunks < 1) return "chunks must be at least 1, got " + std::to_string(chunks);
  if (kind == ScheduleKind::kCustom) {
    return "a custom schedule is read from its action file (--schedule-file), not built";
  }
  if (!takes_chunks(kind)) {
    if (chunks != 1) {
      return std::string(to_string(kind)) + " runs one chunk per device; " +
             std::to_string(chunks) + " chunks need one of " + chunked_schedule_names();
    }
    return {};
  }
  if (v_shaped(kind) && chunks != kDefaultChunks) {
    return std::string(to_string(kind)) +
           " runs exactly 2 chunks per device (its V, as PyTorch's " +
           (kind == ScheduleKind::kZbV ? "ScheduleZBVZeroBubble" : "ScheduleDualPipeV") +
           "), got " + std::to_string(chunks);
  }
  const int rounds = interleaved_rounds(devices, micro_batches);
  const bool in_rounds =
      kind == ScheduleKind::kInterleavedZb || kind == ScheduleKind::kInterleaved1F1B;
  const bool breaks_rule = (kind == ScheduleKind::kDualPipeV && micro_batches < 2 * devices) ||
                           (in_rounds && micro_batches % rounds != 0) ||
                           (kind == ScheduleKind::kInterleaved1F1B && micro_batches < devices);
  if (!breaks_rule) return {};
  return std::string(to_string(kind)) + " needs " + std::string(schedule_shape_rule(kind)) +
         ": M=" + std::to_string(micro_batches) + ", K=" + std::to_string(devices) +
         (in_rounds ? ", rounds " + std::to_string(rounds) : "");
}

Schedule build_schedule(ScheduleKind kind, int devices, int micro_batches, Remat remat,
                        int chunks) {
  const std::string problem = schedule_shape_problem(kind, devices, micro_batches, chunks);
  if (!problem.empty()) throw std::invalid_argument(problem);
  const int stages = devices;
  switch (kind) {
    case ScheduleKind::kGpipe:
      return build_gpipe(stages, micro_batches, remat);
    case ScheduleKind::k1F1B:
      return build_1f1b(stages, micro_batches, remat);
    case ScheduleKind::kZbH1:
      return build_zb_h1(stages, micro_batches, remat);
    case ScheduleKind::kInterleaved1F1B:
      return build_interleaved_1f1b(devices, micro_batches, chunks, remat);
    case ScheduleKind::kLoopedBfs:
      return build_looped_bfs(devices, micro_batches, chunks, remat);
    case ScheduleKind::kZbV:
      return build_zb_v(devices, micro_batches, remat);
    case ScheduleKind::kInterleavedZb:
      return build_interleaved_zb(devices, micro_batches, chunks, remat);
    case ScheduleKind::kDualPipeV:
      return build_dualpipe_v(devices, micro_batches, remat);
    case ScheduleKind::kCustom:
      break;  // schedule_shape_problem said so
  }
  fail_check("kind is built in", __FILE__, __LINE__, "unknown schedule kind");
}

}  // namespace pipescope
