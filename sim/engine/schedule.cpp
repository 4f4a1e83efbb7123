#include "sim/engine/schedule.h"

#include <algorithm>
#include <array>
#include <stdexcept>
#include <tuple>

#include "costmodels/check.h"

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

// B(st, m), preceded by its recompute when remat recomputes m.
void push_backward(std::vector<Op>& ops, const Schedule& s, int st, int m) {
  if (s.recomputes(m)) ops.push_back({OpKind::kRecompute, st, m});
  ops.push_back({OpKind::kBackward, st, m});
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

namespace {

// K devices, v chunks each, stage s on device stage_device_of(kind, s, K),
// empty op lists with room for F, R, B and W per chunk micro-batch and the
// optimizer steps; throws when the shape does not suit `kind`.
Schedule placed_stages(ScheduleKind kind, int devices, int micro_batches, int chunks, Remat remat) {
  const std::string problem = schedule_shape_problem(kind, devices, micro_batches, chunks);
  if (!problem.empty()) throw std::invalid_argument(problem);
  const int K = devices, v = chunks;
  Schedule s;
  s.kind = kind;
  s.split = splits_backward(kind);
  s.stages = K * v;
  s.chunks = v;
  s.micro_batches = micro_batches;
  s.remat = remat;
  s.stage_device.resize(static_cast<std::size_t>(K * v));
  for (int st = 0; st < K * v; ++st) {
    s.stage_device[static_cast<std::size_t>(st)] = stage_device_of(kind, st, K);
  }
  s.device_ops.resize(static_cast<std::size_t>(K));
  for (std::vector<Op>& ops : s.device_ops) {
    ops.reserve(static_cast<std::size_t>(micro_batches * v) *
                    (2 + (reruns_forwards(remat) ? 1 : 0) + (s.split ? 1 : 0)) +
                static_cast<std::size_t>(v));
  }
  return s;
}

}  // namespace

Schedule build_interleaved_1f1b(int devices, int micro_batches, int chunks, Remat remat) {
  Schedule s = placed_stages(ScheduleKind::kInterleaved1F1B, devices, micro_batches, chunks, remat);
  const int K = devices, M = micro_batches, v = chunks;
  const int total = M * v;  // chunk micro-batches per device
  // Micro-batches run in rounds of per_round through each chunk in turn: K
  // when K divides M, as Megatron-LM's default; PyTorch's rounds otherwise.
  const int per_round = interleaved_round_size(K, M);
  for (int d = 0; d < K; ++d) {
    std::vector<Op>& ops = s.device_ops[static_cast<std::size_t>(d)];
    // Per stage, the next micro-batch forward and backward.
    std::vector<int> forwarded(static_cast<std::size_t>(K * v), 0), backwarded(forwarded);
    // Virtual step k's stage.
    const auto stage_of = [&](int k, bool forward) {
      const int chunk = (k / per_round) % v;
      return (forward ? chunk : v - 1 - chunk) * K + d;
    };
    const int warmup = M == K ? total : std::min(2 * (K - d - 1) + (v - 1) * per_round, total);
    int next_f = 0, next_b = 0;
    const auto forward = [&] {
      const int stage = stage_of(next_f++, true);
      ops.push_back({OpKind::kForward, stage, forwarded[static_cast<std::size_t>(stage)]++});
    };
    const auto backward = [&] {
      const int stage = stage_of(next_b++, false);
      push_backward(ops, s, stage, backwarded[static_cast<std::size_t>(stage)]++);
    };
    while (next_f < warmup) forward();
    while (next_f < total) {  // steady state: one forward, one backward
      forward();
      backward();
    }
    while (next_b < total) backward();  // cool-down
    for (int c = 0; c < v; ++c) ops.push_back({OpKind::kOptimizer, c * K + d, 0});
  }
  return s;
}

Schedule build_looped_bfs(int devices, int micro_batches, int chunks, Remat remat) {
  Schedule s = placed_stages(ScheduleKind::kLoopedBfs, devices, micro_batches, chunks, remat);
  const int K = devices, M = micro_batches, v = chunks;
  for (int d = 0; d < K; ++d) {
    std::vector<Op>& ops = s.device_ops[static_cast<std::size_t>(d)];
    for (int c = 0; c < v; ++c) {
      for (int m = 0; m < M; ++m) ops.push_back({OpKind::kForward, c * K + d, m});
    }
    for (int c = v - 1; c >= 0; --c) {
      for (int m = M - 1; m >= 0; --m) push_backward(ops, s, c * K + d, m);
    }
    for (int c = 0; c < v; ++c) ops.push_back({OpKind::kOptimizer, c * K + d, 0});
  }
  return s;
}

namespace {

// One device's op list under ZB-V: counts of F, B and W per chunk (0: stage d,
// 1: stage 2K - 1 - d) and the op of each, dropped when its micro-batch is past
// M (PyTorch writes the order for n = max(2K - 1, M) micro-batches, then drops
// the rest).
struct VDevice {
  const Schedule& s;
  std::vector<Op>& ops;
  int K, d, n;
  std::array<int, 2> stage{d, 2 * K - 1 - d};
  std::array<int, 2> f{}, b{}, w{};

  void forward(std::size_t c) { add(OpKind::kForward, stage[c], f[c]++); }
  void input_gradient(std::size_t c) { add(OpKind::kBackward, stage[c], b[c]++); }
  void weight(std::size_t c) { add(OpKind::kWeight, stage[c], w[c]++); }
  void add(OpKind kind, int st, int m) {
    if (m >= s.micro_batches) return;
    if (kind == OpKind::kBackward) {
      push_backward(ops, s, st, m);
    } else {
      ops.push_back({kind, st, m});
    }
  }

  void warm_up() {
    for (int i = 0; i < 2 * (K - d) - 1; ++i) forward(0);
    for (int i = 0; i < d; ++i) {
      forward(1);
      forward(0);
    }
    for (int i = 0; i < K - d; ++i) {  // the V turns: the second chunk's first backwards
      forward(1);
      input_gradient(1);
      weight(1);
    }
  }
  void steady() {
    while (f[1] < f[0] || f[0] < n) {
      if (f[0] < n) forward(0);
      input_gradient(0);
      weight(0);
      forward(1);
      input_gradient(1);
      weight(1);
    }
  }
  void cool_down() {
    for (int i = 0; i < d; ++i) {  // their W wait
      input_gradient(0);
      input_gradient(1);
    }
    for (int i = 0; i < K - d; ++i) {
      input_gradient(0);
      weight(0);
    }
    while (w[1] < b[1]) weight(1);
    while (w[0] < b[0]) weight(0);
    ops.push_back({OpKind::kOptimizer, stage[0], 0});
    ops.push_back({OpKind::kOptimizer, stage[1], 0});
  }
};

}  // namespace

Schedule build_zb_v(int devices, int micro_batches, Remat remat) {
  Schedule s = placed_stages(ScheduleKind::kZbV, devices, micro_batches, 2, remat);
  const int K = devices;
  for (int d = 0; d < K; ++d) {
    VDevice v{s, s.device_ops[static_cast<std::size_t>(d)], K, d,
              std::max(2 * K - 1, micro_batches)};
    v.warm_up();
    v.steady();
    v.cool_down();
  }
  return s;
}

namespace {

// One device's ops under interleaved-zb, in PyTorch's order: the k-th forward
// and the j-th backward step's chunks, per-chunk micro-batch counters, and the
// W owed in the order of their B.
struct InterleavedZbDevice {
  InterleavedZbDevice(Schedule& schedule, int device, int per_round_)
      : s(schedule),
        ops(schedule.device_ops[static_cast<std::size_t>(device)]),
        K(schedule.devices()),
        d(device),
        v(schedule.chunks),
        per_round(per_round_),
        warmup(std::min((v - 1) * per_round + K - 1 - d, schedule.micro_batches * v)),
        f(static_cast<std::size_t>(v)),
        b(f),
        w(f) {}

  Schedule& s;
  std::vector<Op>& ops;
  int K, d, v, per_round, warmup;
  std::vector<int> f, b, w;  // per chunk, the next micro-batch of each kind
  std::vector<int> owed;     // chunk of each B whose W is still to run, oldest first
  std::size_t next_owed = 0;

  int stage(int chunk) const { return chunk * K + d; }
  void forward(int k) {
    const int c = (k / per_round) % v;
    ops.push_back({OpKind::kForward, stage(c), f[static_cast<std::size_t>(c)]++});
  }
  void input_gradient(int j) {
    const int c = v - 1 - (j / per_round) % v;
    push_backward(ops, s, stage(c), b[static_cast<std::size_t>(c)]++);
    owed.push_back(c);
  }
  void weight() {
    const int c = owed[next_owed++];
    ops.push_back({OpKind::kWeight, stage(c), w[static_cast<std::size_t>(c)]++});
  }
  void run(int total) {
    for (int k = 0; k < warmup; ++k) forward(k);
    for (int op = warmup; op < total + warmup; ++op) {
      if (op < total) forward(op);
      input_gradient(op - warmup);
      if (op - warmup >= d) weight();
    }
    while (next_owed < owed.size()) weight();
    for (int c = 0; c < v; ++c) ops.push_back({OpKind::kOptimizer, stage(c), 0});
  }
};

}  // namespace

Schedule build_interleaved_zb(int devices, int micro_batches, int chunks, Remat remat) {
  Schedule s = placed_stages(ScheduleKind::kInterleavedZb, devices, micro_batches, chunks, remat);
  const int K = devices, M = micro_batches;
  const int per_round = interleaved_round_size(K, M);
  for (int d = 0; d < K; ++d) InterleavedZbDevice(s, d, per_round).run(M * chunks);
  return s;
}

namespace {

// One device's ops under dualpipe-v, in PyTorch's order: chunk 0 is stage d,
// chunk 1 stage 2K - 1 - d; per-chunk micro-batch counters and the W owed by
// backwards that ran split, oldest first.
struct DualPipeVDevice {
  DualPipeVDevice(Schedule& schedule, int device)
      : s(schedule),
        ops(schedule.device_ops[static_cast<std::size_t>(device)]),
        K(schedule.devices()),
        d(device) {}

  Schedule& s;
  std::vector<Op>& ops;
  int K, d;
  std::array<int, 2> stage{d, 2 * K - 1 - d};
  std::array<int, 2> f{}, b{}, w{};
  std::vector<std::size_t> owed;
  std::size_t next_owed = 0;

  void forward(std::size_t c) { ops.push_back({OpKind::kForward, stage[c], f[c]++}); }
  // The input gradient, its W owed.
  void input_gradient(std::size_t c) {
    push_backward(ops, s, stage[c], b[c]++);
    owed.push_back(c);
  }
  // A whole backward: B and its W back to back.
  void whole_backward(std::size_t c) {
    push_backward(ops, s, stage[c], b[c]++);
    ops.back().whole = true;
    ops.push_back({OpKind::kWeight, stage[c], w[c]++});
  }
  void backward(std::size_t c, bool split) { split ? input_gradient(c) : whole_backward(c); }
  // A DualPipe pair: F of chunk `fwd`, then a whole backward of chunk `bwd`, all but
  // its last op (the W) paired.
  void pair(std::size_t fwd, std::size_t bwd) {
    const std::size_t first = ops.size();
    forward(fwd);
    whole_backward(bwd);
    for (std::size_t i = first; i + 1 < ops.size(); ++i) ops[i].paired = true;
  }
  void weight_owed() {
    if (next_owed == owed.size()) return;
    const std::size_t c = owed[next_owed++];
    ops.push_back({OpKind::kWeight, stage[c], w[c]++});
  }

  void run(int M) {
    const int tail = K - d - 1;
    for (int i = 0; i < 2 * tail; ++i) forward(0);
    for (int i = 0; i <= d; ++i) {
      forward(0);
      forward(1);
    }
    for (int i = 0; i < tail; ++i) {
      input_gradient(1);
      weight_owed();
      forward(1);
    }
    for (int i = 0; i < M - 2 * K + d + 1; ++i) {  // the DualPipe pairs
      if (i == 0 && d == K - 1) {                  // the bottom of the V starts unpaired
        forward(0);
        whole_backward(1);
      } else {
        pair(0, 1);
      }
      pair(1, 0);
    }
    for (int i = 0; i < tail; ++i) {
      whole_backward(1);
      pair(1, 0);
    }
    bool split = false;  // the second half of these backwards run split
    for (int i = 0; i <= d; ++i) {
      if (i == (d + 1) / 2 && d % 2 == 1) split = true;
      backward(1, split);
      if (i == (d + 1) / 2 && d % 2 == 0) split = true;
      backward(0, split);
    }
    for (int i = 0; i < tail; ++i) {
      weight_owed();
      backward(0, split);
    }
    while (next_owed < owed.size()) weight_owed();
    ops.push_back({OpKind::kOptimizer, stage[0], 0});
    ops.push_back({OpKind::kOptimizer, stage[1], 0});
  }
};

}  // namespace

Schedule build_dualpipe_v(int devices, int micro_batches, Remat remat) {
  Schedule s = placed_stages(ScheduleKind::kDualPipeV, devices, micro_batches, 2, remat);
  for (int d = 0; d < devices; ++d) DualPipeVDevice(s, d).run(micro_batches);
  return s;
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
