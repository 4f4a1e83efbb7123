// The op-list builders of the schedules that run several model stages on each
// device (sim/engine/schedule.h): interleaved-1f1b, looped-bfs, zb-v,
// interleaved-zb and dualpipe-v.
#include "sim/engine/schedule.h"

#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/engine/schedule_builder.h"

namespace pipescope {

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

}  // namespace pipescope
