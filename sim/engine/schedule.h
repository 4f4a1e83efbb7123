#pragma once
// A schedule is data: for every device the ordered list of compute ops it runs.
// The simulator and the executor interpret the same lists. Transfers are not
// listed: finishing F(s,m) sends its activation to stage s+1, finishing B(s,m)
// sends its gradient to stage s-1. Schedules that split the backward
// (splits_backward) run B(s,m) as the input gradient only and W(s,m), later on
// the same device, as the weight gradient.

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "sim/scenario/scenario.h"

namespace pipescope {

enum class OpKind : std::uint8_t {
  kForward,    // F(s,m)
  kRecompute,  // R(s,m): the forward again, to rebuild the stash before B
  kBackward,   // B(s,m): the whole backward, or its input gradient when split
  kWeight,     // W(s,m): the weight gradient of a split backward
  kOptimizer,  // the stage's optimizer step; micro_batch is unused (0)
};

// Every kind, in the order above.
inline constexpr std::array<OpKind, 5> kOpKinds{
    OpKind::kForward, OpKind::kRecompute, OpKind::kBackward, OpKind::kWeight, OpKind::kOptimizer};

std::string_view to_string(OpKind k);
char op_letter(OpKind k);  // F, R, B, W, O

struct Op {
  OpKind kind = OpKind::kForward;
  int stage = 0;
  int micro_batch = 0;
  // Runs as part of an overlapped pair with the ops after it on its device, up
  // to the first that is not paired (DualPipe's F&B: a forward and another
  // micro-batch's backward, PyTorch's OVERLAP_F_B): what it sends leaves when
  // the pair ends, as PyTorch's runtime sends a pair's outputs after it.
  bool paired = false;
  // A split schedule's B that runs with its W, the next op, as one whole
  // backward (what DualPipeV does with those it does not split): for exports,
  // which write the two as PyTorch's B; the timing is the B's and the W's.
  bool whole = false;

  friend bool operator==(const Op&, const Op&) = default;
};

// Model stages and devices: stage s runs on device stage_device[s]. Without
// chunks (v = 1) there are K stages on K devices; interleaved-1f1b,
// interleaved-zb and looped-bfs cut the model into K x v stages, stage s on
// device s mod K; zb-v and dualpipe-v into 2K stages in a V (stage_device_of).
struct Schedule {
  ScheduleKind kind = ScheduleKind::kGpipe;
  int stages = 1;         // model stages: K x chunks
  int chunks = 1;         // v, stages per device
  int micro_batches = 1;  // M
  Remat remat = Remat::kNever;
  bool split = false;                       // B is the input gradient, W the weight gradient
  std::vector<int> stage_device;            // device that runs each stage
  std::vector<std::vector<Op>> device_ops;  // per device, in execution order

  int devices() const { return static_cast<int>(device_ops.size()); }
  // Whether micro-batch m runs R before its B.
  bool recomputes(int m) const { return pipescope::recomputes(remat, m, micro_batches); }
};

// The device of model stage `stage` when `kind` runs on K devices: s mod K (one
// stage per device, and the looped placement of the chunked schedules and of
// custom ones), except under zb-v and dualpipe-v, whose V puts stages d and
// 2K - 1 - d on device d (the first and the last stage on device 0). The one home of the
// placement rule: schedules, partitioner, plans and tables ask it.
int stage_device_of(ScheduleKind kind, int stage, int devices);

// GPipe (fill-drain): every forward in micro-batch order, then every backward in
// reverse micro-batch order, each preceded by its recompute when remat asks for it,
// then the optimizer step. Stage s runs on device s.
Schedule build_gpipe(int stages, int micro_batches, Remat remat);

// 1F1B (PipeDream-Flush, Narayanan et al. 2021): stage s runs min(K-s-1, M)
// warm-up forwards, then alternates one forward and one backward (oldest
// micro-batch first) until the forwards run out, then the remaining backwards,
// then the optimizer step. At most K-s micro-batches are in flight on stage s,
// so its activation memory does not grow with M. With remat each backward is
// preceded by its recompute. Stage s runs on device s.
Schedule build_1f1b(int stages, int micro_batches, Remat remat);

// ZB-H1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", the handcrafted
// schedule H1): 1F1B's K-s-1 warm-up forwards on stage s, then s rounds of one
// forward and one B whose W waits, then rounds of F, B, W, then B and W pairs,
// then the W still owed and the optimizer step. The deferred W fill the cool-down
// that 1F1B leaves idle while every stage holds at most K micro-batches whose W
// is still to run, 1F1B's peak on its first stage. With uniform stages (T_F =
// T_B = T_W, no communication) the bubble per device is (K-1) T instead of
// 1F1B's 3 (K-1) T. With remat each B is preceded by its recompute.
Schedule build_zb_h1(int stages, int micro_batches, Remat remat);

// Interleaved 1F1B (Megatron-LM, Narayanan et al. 2021, "Efficient Large-Scale
// Language Model Training on GPU Clusters"): K devices, v chunks each, stage s =
// c K + d on device d. Device d sees the v M chunk micro-batches in rounds of
// N = M / R micro-batches, R = max(1, M / K) (N = K when K divides M): virtual
// step k is of chunk (k / N) mod v going forward, chunk v - 1 - that going
// backward, each stage's micro-batches in order. It runs
// min(2 (K - d - 1) + (v - 1) N, vM) warm-up forwards (all of them when M = K),
// then one forward and one backward until the forwards run out, then the rest
// of the backwards, then each chunk's optimizer step. Needs M >= K and a
// multiple of R, what both frameworks run: PyTorch's ScheduleInterleaved1F1B
// takes any multiple of R, Megatron-LM groups of N >= K (a multiple of K at its
// default N = K; any N through --microbatch-group-size-per-virtual-pipeline-
// stage, from megatron-core core_r0.10). With equal stages the bubble is 1/v
// of 1F1B's.
Schedule build_interleaved_1f1b(int devices, int micro_batches, int chunks, Remat remat);

// Looped BFS (Lamy-Poirier 2023, "Breadth-First Pipeline Parallelism"; PyTorch's
// ScheduleLoopedBFS): K devices, v chunks each, stage s = c K + d on device d, as
// interleaved-1f1b places them. Device d runs, chunk by chunk (c = 0 .. v - 1),
// every forward of stage c K + d in micro-batch order, then, from the last chunk
// down, every backward of that chunk's stage in reverse micro-batch order (each
// after its recompute when remat asks for it), then each chunk's optimizer step:
// GPipe's order over the chunks. With equal chunks (T_F, T_B) and no
// communication the step is (K - 1 + (v - 1) max(M, K) + M) (T_F + T_B): for M >=
// K the bubble is (K - 1) (T_F + T_B), 1/v of GPipe's on the same devices, while a
// device holds all v M chunk micro-batches when its backwards begin. Any M.
Schedule build_looped_bfs(int devices, int micro_batches, int chunks, Remat remat);

// ZB-V (Qi et al. 2024, "Pipeline Parallelism with Controllable Memory", and the
// zero-bubble paper's ZB-V; PyTorch's ScheduleZBVZeroBubble): K devices, two
// chunks each in a V, stage d and stage 2K - 1 - d on device d, the backward
// split into B (input gradient) and W (weight gradient). PyTorch's per-device
// order, with n = max(2K - 1, M): device d runs 2 (K - d) - 1 forwards of its
// first chunk, d pairs of forwards (second chunk, first chunk), K - d rounds of
// F, B, W of the second chunk; then, while forwards remain, F of the first chunk
// (while there are n), B and W of the first chunk, F, B and W of the second; then
// d pairs of B (first chunk, second chunk) whose W wait, K - d rounds of B and W
// of the first chunk, the second chunk's W still owed, the first chunk's; ops of
// micro-batches past M are dropped, as PyTorch does. Each B after its recompute
// when remat asks for it; then the two optimizer steps. With T_F = T_B = T_W per
// chunk, no communication and M >= 2K - 1 the step is 6MT + (K - 1) T (the
// start-up alone), and every device holds at most 2K chunk micro-batches
// awaiting W, 1F1B's peak on K devices.
Schedule build_zb_v(int devices, int micro_batches, Remat remat);

// Interleaved Zero Bubble (Qi et al. 2024's ZB-1p over v chunks; PyTorch's
// ScheduleInterleavedZeroBubble): K devices, v chunks each, stage s = c K + d on
// device d, the backward split into B (input gradient) and W (weight gradient).
// The M micro-batches run in R = max(1, M / K) rounds of M / R (M must be a
// multiple of R); a device's k-th forward is of chunk (k / (M / R)) mod v, its
// k-th backward of chunk v - 1 - that. Device d runs min((v - 1) M / R + K - 1 -
// d, vM) warm-up forwards, then one forward and one B, each followed after the
// first d by the oldest W still owed, then the remaining B the same way, then
// the W still owed and each chunk's optimizer step: PyTorch's order, op for op.
// With T_F = T_B = T_W per chunk, no communication and M a multiple of K, the
// step is 3vMT + (K - 1) T: ZB-H1's bubble at a chunk's scale.
Schedule build_interleaved_zb(int devices, int micro_batches, int chunks, Remat remat);

// DualPipeV (DeepSeek-AI 2024, "DeepSeek-V3 Technical Report", cut in half into
// a V by Sea AI Lab; PyTorch's ScheduleDualPipeV): K devices, two chunks each in
// zb-v's V (stages d and 2K - 1 - d on device d). PyTorch's per-device order,
// chunk 0 the stage d, chunk 1 the other: 2 (K - d - 1) forwards of chunk 0; d +
// 1 pairs F0 F1; K - d - 1 rounds of B1 (input gradient), the oldest W owed, F1;
// then M - 2K + d + 1 rounds of the DualPipe pairs, F0 with a whole backward of
// chunk 1 (unpaired in the last device's first round) and F1 with a whole
// backward of chunk 0; K - d - 1 rounds of a whole B1 and the pair F1, whole B0;
// d + 1 rounds of a backward of chunk 1 then one of chunk 0, the first d + 1 of
// these 2(d + 1) backwards whole and the rest split; K - d - 1 rounds of the oldest W owed and a
// backward of chunk 0; the W still owed; the two optimizer steps. A whole backward is B then its W.
// A DualPipe pair overlaps one micro-batch's computation with the other's communication (expert
// all-to-all on the models it was made for); here its ops run one after the other (Op::paired) and
// what they send leaves when the pair ends, as PyTorch's runtime sends it. Needs M >= 2K, as
// PyTorch does. With T_F = T_B = T_W per chunk and no communication the step is 6MT + 2 (K - 1) T:
// the published bubble (PP/2 - 1) (F&B + B - 3W) with PP = 2K stages, F&B = F + B (nothing to
// overlap) and B the whole backward, 2T.
Schedule build_dualpipe_v(int devices, int micro_batches, Remat remat);

// The schedule `kind` over K devices (K stages unless kind takes chunks, then K
// x chunks). Throws std::invalid_argument when the shape does not suit the kind
// (chunks > 1 for a kind that does not take chunks, chunks other than 2 with
// zb-v and dualpipe-v, M < 2K with dualpipe-v, M not a multiple of its rounds
// with interleaved-1f1b and interleaved-zb, M < K with interleaved-1f1b).
Schedule build_schedule(ScheduleKind kind, int devices, int micro_batches, Remat remat,
                        int chunks = 1);

// The most chunk micro-batches whose stash one device holds at once when every
// micro-batch keeps its stash: each from its F until its B frees it (its W when
// the backward is split), counted in the device's own order. The one home of
// the schedules' memory bounds.
int most_stashes_held(const Schedule& s);
// For each stage, what it holds at the first moment its device holds the most
// stashes, kept or rebuilt (of those, the most inputs), counted in the device's
// order as the memory tracker counts: a forward keeps its stash, or its
// input(s) alone when remat recomputes the micro-batch; a recompute rebuilds
// the stash (StashCount::rebuilt); the backward (W when split) frees both.
// Where which moment weighs most depends on the sizes of what is held (under
// remat except-last one micro-batch's whole stash meets the others' inputs;
// under Checkpoint::kLayer every layer's input meets one layer's rebuilt
// stash), each stage's own most of each instead (a bound). The counts the
// device partitioner prices a device's stages at (docs/models.md, "The
// partitioner").
std::vector<StashCount> held_at_peak(const Schedule& s, Checkpoint checkpoint = Checkpoint::kStage);

// The interleaved schedules' rounds (interleaved-1f1b, interleaved-zb, as
// PyTorch runs them): R = max(1, M / K) rounds of M / R micro-batches each,
// which schedule_shape_problem asks to be whole.
int interleaved_rounds(int devices, int micro_batches);
int interleaved_round_size(int devices, int micro_batches);

// Why `kind` cannot run K devices, M micro-batches and v chunks, or an empty
// string: the rules build_schedule enforces, for callers that report them.
std::string schedule_shape_problem(ScheduleKind kind, int devices, int micro_batches, int chunks);
// What `kind` asks of M and K beyond K >= 1 and M >= 1, in the words of
// schedule_shape_problem's message (e.g. "M >= 2K, its stage count (as
// PyTorch's ScheduleDualPipeV)"); empty when nothing.
std::string_view schedule_shape_rule(ScheduleKind kind);

// Checks that every stage has exactly one F and one B per micro-batch (and one R
// for each micro-batch that remat recomputes, none for the others, one W after the B when the
// schedule splits the backward) on its own device, R before B, F before B, and one optimizer step
// after them. Returns the first problem found, or an empty string.
std::string check_schedule(const Schedule& s);

}  // namespace pipescope
