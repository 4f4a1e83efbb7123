#include "sim/engine/custom_schedule.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string_view>
#include <unordered_map>

#include "sim/base/input_file.h"
#include "sim/base/scenario_error.h"
#include "sim/engine/pair_hold.h"
#include "sim/engine/schedule_actions.h"

namespace pipescope {

namespace {

// One compute action of a rank. `seq` is its cell's position on the rank (the
// actions of an OVERLAP_F_B group share it), to order it against the other
// actions of the rank.
struct Action {
  Op op;
  bool full = false;     // a whole backward (B) in a file that also splits them
  bool grouped = false;  // in an OVERLAP_F_B group (the group's last has op.paired unset)
  int seq = 0;
  std::string where;  // "row 2, column 5"
};

// A transfer, FSDP or gradient-reduction action, checked against the compute.
struct SideAction {
  ScheduleAction action;
  int rank = 0;
  int seq = 0;
  std::string where;
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

class Reader {
 public:
  Reader(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const std::string& where, const std::string& message) const {
    throw ScenarioError(file_, where, message);
  }

  // Parses one non-empty cell of rank `rank`.
  void cell(std::string_view text, int rank, const std::string& where) {
    std::vector<ScheduleAction> parsed;
    try {
      parsed = parse_action_cell(text);
    } catch (const std::invalid_argument& e) {
      fail(where, e.what());
    }
    const auto r = static_cast<std::size_t>(rank);
    const int seq = seq_[r]++;
    const bool grouped = parsed.size() > 1;
    if (grouped) ++side_counts_.overlapped;
    std::vector<Action>& actions = ranks_[r];
    const std::size_t first = actions.size();
    for (const ScheduleAction& a : parsed) {
      if (!is_compute(a.kind)) {
        count_side_action(a.kind);
        side_.push_back({a, rank, seq, where});
        continue;
      }
      actions.push_back({compute_op(a), a.kind == ActionKind::kFullBackward, grouped, seq, where});
    }
    // A group runs as an overlapped pair: its outputs leave when it ends.
    for (std::size_t i = first; grouped && i + 1 < actions.size(); ++i) actions[i].op.paired = true;
  }

  void add_rank() {
    ranks_.emplace_back();
    seq_.push_back(0);
  }

  CustomSchedule finish();

 private:
  struct Index;
  Op compute_op(const ScheduleAction& a);
  void expand_full_backwards();
  Index index_actions() const;
  void check_complete(const Index& index) const;
  void check_placement(const Index& index) const;
  void check_order(const Index& index) const;
  void check_deadlock(const Index& index) const;
  void check_side_actions(const Index& index) const;
  void count_side_action(ActionKind kind) {
    if (kind == ActionKind::kUnshard || kind == ActionKind::kReshard) ++side_counts_.fsdp;
    if (is_transfer(kind)) ++side_counts_.transfers;
    if (kind == ActionKind::kReduceGrad) ++side_counts_.reductions;
  }
  void check_transfer(const Index& index, const SideAction& side) const;

  std::string file_;
  std::vector<std::vector<Action>> ranks_;
  std::vector<int> seq_;
  std::vector<SideAction> side_;
  SideActionCounts side_counts_;
  bool full_ = false;
  bool split_ = false;
};

std::string name_of(const Op& op, bool split) {
  const char* kind = op.kind == OpKind::kForward  ? "F"
                     : op.kind == OpKind::kWeight ? "W"
                     : split                      ? "I"
                                                  : "B";
  return std::to_string(op.stage) + kind + std::to_string(op.micro_batch);
}

// Key of (kind, stage, micro-batch); each action at most once.
std::uint64_t action_key(OpKind kind, int stage, int mb) {
  return (static_cast<std::uint64_t>(kind) << 56) | (static_cast<std::uint64_t>(stage) << 28) |
         static_cast<std::uint64_t>(mb);
}

// Every action by its key: the rank it is on and its index there; the rank of
// each stage (where its actions are); and how many stages and micro-batches
// the actions name.
struct Reader::Index {
  std::unordered_map<std::uint64_t, std::pair<int, std::size_t>> seen;
  std::vector<int> stage_rank;  // -1 where a stage has no action
  int stages = 0;
  int micro_batches = 0;

  bool has(OpKind kind, int s, int m) const { return seen.count(action_key(kind, s, m)) > 0; }
};

Op Reader::compute_op(const ScheduleAction& a) {
  Op op{OpKind::kForward, a.stage, a.micro_batch};
  if (a.kind == ActionKind::kFullBackward) {
    op.kind = OpKind::kBackward;
    full_ = true;
  } else if (a.kind == ActionKind::kBackwardInput) {
    op.kind = OpKind::kBackward;
    split_ = true;
  } else if (a.kind == ActionKind::kBackwardWeight) {
    op.kind = OpKind::kWeight;
    split_ = true;
  }
  return op;
}

// A file that splits some backwards (I, W) and not others (B, as DualPipeV's
// overlapped pairs): each B is its I and its W, run back to back, the I paired
// with the W when the B is in an overlapped pair.
void Reader::expand_full_backwards() {
  if (!(full_ && split_)) return;
  for (auto& actions : ranks_) {
    std::vector<Action> out;
    for (Action& a : actions) {
      const bool full = a.full;
      const bool pair_goes_on = a.op.paired;
      a.full = false;
      if (full) {
        a.op.paired = a.grouped;
        a.op.whole = true;
      }
      out.push_back(a);
      if (full) {
        out.push_back({{OpKind::kWeight, a.op.stage, a.op.micro_batch, pair_goes_on},
                       false,
                       a.grouped,
                       a.seq,
                       a.where});
      }
    }
    actions = std::move(out);
  }
}

Reader::Index Reader::index_actions() const {
  const auto K = static_cast<int>(ranks_.size());
  Index index;
  std::unordered_map<int, std::pair<int, std::string>> placed;  // stage: rank, where first
  for (int r = 0; r < K; ++r) {
    const auto& actions = ranks_[static_cast<std::size_t>(r)];
    if (actions.empty()) {
      fail("row " + std::to_string(r + 1),
           "rank " + std::to_string(r) + " has no compute actions (F, B, I, W)");
    }
    for (std::size_t i = 0; i < actions.size(); ++i) {
      const Op& op = actions[i].op;
      const auto [at, fresh] = placed.try_emplace(op.stage, r, actions[i].where);
      if (!fresh && at->second.first != r) {
        fail(actions[i].where, "stage " + std::to_string(op.stage) + " is on rank " +
                                   std::to_string(r) + " here but on rank " +
                                   std::to_string(at->second.first) + " at " + at->second.second +
                                   ": each stage runs on one rank");
      }
      if (!index.seen.emplace(action_key(op.kind, op.stage, op.micro_batch), std::pair{r, i})
               .second) {
        fail(actions[i].where, "'" + name_of(op, split_) + "' appears twice");
      }
      index.stages = std::max(index.stages, op.stage + 1);
      index.micro_batches = std::max(index.micro_batches, op.micro_batch + 1);
    }
  }
  index.stage_rank.assign(static_cast<std::size_t>(index.stages), -1);
  for (const auto& [stage, where] : placed) {
    index.stage_rank[static_cast<std::size_t>(stage)] = where.first;
  }
  return index;
}

// Every rank holds the same number of stages, K x v in all: in a loop (stage
// s on rank s mod K, as interleaved schedules place them), in a V (stages d
// and 2K-1-d on rank d) or in any other placement.
void Reader::check_placement(const Index& index) const {
  const auto K = static_cast<int>(ranks_.size());
  if (index.stages % K != 0) {
    fail("", std::to_string(index.stages) + " stages over " + std::to_string(K) +
                 " ranks: the stages must fill every rank equally (K x v of them)");
  }
  std::vector<int> held(static_cast<std::size_t>(K), 0);
  for (const int r : index.stage_rank) ++held[static_cast<std::size_t>(r)];
  for (int r = 0; r < K; ++r) {
    const int n = held[static_cast<std::size_t>(r)];
    if (n != index.stages / K) {
      fail("row " + std::to_string(r + 1),
           "rank " + std::to_string(r) + " holds " + std::to_string(n) + " of the " +
               std::to_string(index.stages) + " stages; each of the " + std::to_string(K) +
               " ranks must hold " + std::to_string(index.stages / K));
    }
  }
}

// Each (stage, micro-batch) has its F, its backward and, when split, its W.
// `seen` holds every F, so a gap shows within its size + 1 pairs: the loop
// never walks a huge, mostly empty table.
void Reader::check_complete(const Index& index) const {
  for (int s = 0; s < index.stages; ++s) {
    for (int m = 0; m < index.micro_batches; ++m) {
      for (const OpKind kind : {OpKind::kForward, OpKind::kBackward, OpKind::kWeight}) {
        if (kind == OpKind::kWeight && !split_) continue;
        if (index.has(kind, s, m)) continue;
        fail("", "'" + name_of(Op{kind, s, m}, split_) + "' is missing: every stage 0.." +
                     std::to_string(index.stages - 1) + " needs F, " + (split_ ? "I and W" : "B") +
                     " for every micro-batch 0.." + std::to_string(index.micro_batches - 1));
      }
    }
  }
}

// Order on a rank: the backward after the forward, W after its I.
void Reader::check_order(const Index& index) const {
  for (const auto& actions : ranks_) {
    for (std::size_t i = 0; i < actions.size(); ++i) {
      const Op& op = actions[i].op;
      if (op.kind == OpKind::kForward) continue;
      const OpKind before = op.kind == OpKind::kWeight ? OpKind::kBackward : OpKind::kForward;
      if (index.seen.at(action_key(before, op.stage, op.micro_batch)).second > i) {
        fail(actions[i].where, "'" + name_of(op, split_) + "' comes before '" +
                                   name_of(Op{before, op.stage, op.micro_batch}, split_) +
                                   "' on its rank");
      }
    }
  }
}

// The ranks run, each as far as its next action's inputs allow.
class Replay {
 public:
  Replay(const std::vector<std::vector<Action>>& ranks, int stages, int micro_batches)
      : ranks_(ranks),
        stages_(stages),
        micro_batches_(micro_batches),
        f_done_(cell(stages, 0), 0),
        b_done_(cell(stages, 0), 0),
        next_(ranks.size(), 0),
        pairs_(ranks.size()) {
    for (const auto& a : ranks) remaining_ += a.size();
  }

  bool done() const { return remaining_ == 0; }
  // One pass over the ranks; whether any action ran.
  bool advance();
  // The action `op` waits for, when it cannot run yet.
  std::optional<Op> waits_for(const Op& op) const;
  // The index of rank r's next action (its size when it is through).
  std::size_t next(std::size_t r) const { return next_[r]; }
  // Whether `op` has run but its overlapped pair, still going on, holds its output.
  bool held(const Op& op) const {
    return std::any_of(pairs_.begin(), pairs_.end(),
                       [&](const PairHold<NoOutput>& p) { return p.holds(op); });
  }

 private:
  std::size_t cell(int s, int m) const {
    return static_cast<std::size_t>(s) * static_cast<std::size_t>(micro_batches_) +
           static_cast<std::size_t>(m);
  }

  const std::vector<std::vector<Action>>& ranks_;
  int stages_;
  int micro_batches_;
  std::vector<char> f_done_, b_done_;
  std::vector<std::size_t> next_;
  std::vector<PairHold<NoOutput>> pairs_;  // a rank's pair hands on its outputs when it ends
  std::size_t remaining_ = 0;
};

std::optional<Op> Replay::waits_for(const Op& op) const {
  if (op.kind == OpKind::kForward) {
    if (op.stage > 0 && f_done_[cell(op.stage - 1, op.micro_batch)] == 0) {
      return Op{OpKind::kForward, op.stage - 1, op.micro_batch};
    }
  } else if (op.kind == OpKind::kBackward) {
    if (op.stage + 1 < stages_ && b_done_[cell(op.stage + 1, op.micro_batch)] == 0) {
      return Op{OpKind::kBackward, op.stage + 1, op.micro_batch};
    }
  }
  return std::nullopt;  // W waits only for its I, earlier on its rank
}

bool Replay::advance() {
  bool progressed = false;
  for (std::size_t r = 0; r < ranks_.size(); ++r) {
    const auto& actions = ranks_[r];
    auto& n = next_[r];
    while (n < actions.size() && !waits_for(actions[n].op)) {
      pairs_[r].finished(actions[n].op, NoOutput{}, [this](const Op& op, NoOutput) {
        if (op.kind == OpKind::kForward) f_done_[cell(op.stage, op.micro_batch)] = 1;
        if (op.kind == OpKind::kBackward) b_done_[cell(op.stage, op.micro_batch)] = 1;
      });
      ++n;
      --remaining_;
      progressed = true;
    }
  }
  return progressed;
}

// Deadlock: run every rank as far as its next action's inputs allow.
void Reader::check_deadlock(const Index& index) const {
  Replay replay(ranks_, index.stages, index.micro_batches);
  while (!replay.done()) {
    if (replay.advance()) continue;
    std::string stuck;
    for (std::size_t r = 0; r < ranks_.size(); ++r) {
      const auto& actions = ranks_[r];
      const std::size_t n = replay.next(r);
      if (n == actions.size()) continue;
      const Op awaited = *replay.waits_for(actions[n].op);
      stuck +=
          (stuck.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + " waits at '" +
          name_of(actions[n].op, split_) + "' (" + actions[n].where + ") for '" +
          name_of(awaited, split_) + "'" +
          (replay.held(awaited) ? ", which its overlapped pair holds until the pair ends" : "");
    }
    fail("", "the schedule deadlocks: " + stuck);
  }
}

// Where a transfer may stand: a send after the action that produces what it
// sends, a receive before the action that uses it, on the stage's rank.
void Reader::check_transfer(const Index& index, const SideAction& side) const {
  const ScheduleAction& a = side.action;
  const std::string name = "'" + action_name(a) + "'";
  if (a.micro_batch >= index.micro_batches) {
    fail(side.where, name + " names micro-batch " + std::to_string(a.micro_batch) +
                         "; the schedule's micro-batches are 0.." +
                         std::to_string(index.micro_batches - 1));
  }
  const bool forward = a.kind == ActionKind::kSendF || a.kind == ActionKind::kRecvF;
  const bool send = a.kind == ActionKind::kSendF || a.kind == ActionKind::kSendB;
  // Forward activations go to stage s+1, gradients to stage s-1.
  const bool has_peer = forward == send ? a.stage + 1 < index.stages : a.stage > 0;
  if (!has_peer) {
    fail(side.where, name + ": stage " + std::to_string(a.stage) + " has no stage to " +
                         (send ? "send to" : "receive from") + " in that direction");
  }
  const Op op{forward ? OpKind::kForward : OpKind::kBackward, a.stage, a.micro_batch};
  const auto [rank, i] = index.seen.at(action_key(op.kind, op.stage, op.micro_batch));
  const int seq = ranks_[static_cast<std::size_t>(rank)][i].seq;
  if (send ? seq > side.seq : seq < side.seq) {
    fail(side.where, name + (send ? " comes before '" : " comes after '") + name_of(op, split_) +
                         "' on its rank: a " +
                         (send ? "send follows the action that produces what it sends"
                               : "receive comes before the action that uses it"));
  }
}

// Transfers, FSDP and gradient reductions: each on its stage's rank, where
// PyTorch's runtime could run it (check_transfer; a wait after what it waits
// for; a stage's REDUCE_GRAD after its last gradient), none repeated but
// UNSHARD and RESHARD.
void Reader::check_side_actions(const Index& index) const {
  std::vector<int> last_gradient(static_cast<std::size_t>(index.stages), -1);
  for (const auto& actions : ranks_) {
    for (const Action& a : actions) {
      if (a.op.kind == OpKind::kForward) continue;
      int& last = last_gradient[static_cast<std::size_t>(a.op.stage)];
      last = std::max(last, a.seq);
    }
  }
  std::unordered_map<std::string, int> done;  // action name: its seq
  for (const SideAction& side : side_) {
    const ScheduleAction& a = side.action;
    const std::string name = "'" + action_name(a) + "'";
    if (a.stage >= index.stages ||
        index.stage_rank[static_cast<std::size_t>(a.stage)] != side.rank) {
      fail(side.where,
           name + " is on rank " + std::to_string(side.rank) + ", but stage " +
               std::to_string(a.stage) + "'s compute is " +
               (a.stage >= index.stages
                    ? "nowhere (the stages are 0.." + std::to_string(index.stages - 1) + ")"
                    : "on rank " +
                          std::to_string(index.stage_rank[static_cast<std::size_t>(a.stage)])));
    }
    if (a.kind == ActionKind::kUnshard || a.kind == ActionKind::kReshard) continue;
    if (!done.emplace(action_name(a), side.seq).second) fail(side.where, name + " appears twice");
    if (a.kind == ActionKind::kSendF || a.kind == ActionKind::kRecvF ||
        a.kind == ActionKind::kSendB || a.kind == ActionKind::kRecvB) {
      check_transfer(index, side);
    } else if (a.kind == ActionKind::kReduceGrad) {
      if (last_gradient[static_cast<std::size_t>(a.stage)] > side.seq) {
        fail(side.where, name + " comes before stage " + std::to_string(a.stage) +
                             "'s last gradient on its rank: the reduction sums the finished "
                             "gradients of every micro-batch");
      }
    } else {
      // A wait after what it waits for.
      ScheduleAction awaited = a;
      awaited.kind = a.kind == ActionKind::kWaitSendF   ? ActionKind::kSendF
                     : a.kind == ActionKind::kWaitSendB ? ActionKind::kSendB
                                                        : ActionKind::kReduceGrad;
      const auto it = done.find(action_name(awaited));
      if (it == done.end() || it->second > side.seq) {
        fail(side.where, name + " waits for '" + action_name(awaited) +
                             "', which does not come before it on its rank");
      }
    }
  }
}

CustomSchedule Reader::finish() {
  const auto K = static_cast<int>(ranks_.size());
  if (K == 0) fail("", "no ranks: expected one row of actions per device");
  expand_full_backwards();
  const Index index = index_actions();
  check_complete(index);
  check_placement(index);
  check_order(index);
  check_deadlock(index);
  check_side_actions(index);
  CustomSchedule out;
  out.stages = index.stages;
  out.micro_batches = index.micro_batches;
  out.split = split_;
  out.stage_rank = index.stage_rank;
  out.side = side_counts_;
  for (const auto& actions : ranks_) {
    out.ranks.emplace_back();
    for (const Action& a : actions) out.ranks.back().push_back(a.op);
  }
  return out;
}

// The text's lines. Files saved by spreadsheets and editors on other systems end
// lines with CR LF (Windows) or CR alone (classic Mac OS), and may begin with a
// UTF-8 byte-order mark: each is read as the line ends and text it stands for.
std::vector<std::string_view> csv_lines(std::string_view text) {
  constexpr std::string_view kByteOrderMark = "\xEF\xBB\xBF";
  if (text.starts_with(kByteOrderMark)) text.remove_prefix(kByteOrderMark.size());
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    const std::size_t end = text.find_first_of("\r\n");
    lines.push_back(text.substr(0, end));
    if (end == std::string_view::npos) break;
    const bool crlf = text[end] == '\r' && text.substr(end + 1).starts_with('\n');
    text.remove_prefix(end + (crlf ? 2 : 1));
  }
  return lines;
}

}  // namespace

CustomSchedule parse_schedule_csv(const std::string& text, const std::string& file) {
  Reader reader(file);
  std::vector<std::string_view> lines = csv_lines(text);
  while (!lines.empty() && trim(lines.back()).empty()) lines.pop_back();  // trailing blank lines
  for (std::size_t row = 0; row < lines.size(); ++row) {
    reader.add_rank();
    std::string_view line = lines[row];
    for (std::size_t column = 1;; ++column) {
      const std::size_t comma = line.find(',');
      const std::string_view c = trim(line.substr(0, comma));
      if (!c.empty()) {
        reader.cell(c, static_cast<int>(row),
                    "row " + std::to_string(row + 1) + ", column " + std::to_string(column));
      }
      if (comma == std::string_view::npos) break;
      line.remove_prefix(comma + 1);
    }
  }
  CustomSchedule out = reader.finish();
  out.file = file;
  return out;
}

CustomSchedule read_schedule_csv(const std::filesystem::path& file) {
  const std::string label = file.string();
  return parse_schedule_csv(read_input_file(file, label, kMaxPlanBytes, "a schedule CSV"), label);
}

CustomSchedule custom_from_actions(const std::vector<std::vector<std::string>>& cells,
                                   const std::string& file, const std::string& where) {
  Reader reader(file);
  for (std::size_t r = 0; r < cells.size(); ++r) {
    reader.add_rank();
    for (std::size_t i = 0; i < cells[r].size(); ++i) {
      const std::string_view c = trim(cells[r][i]);
      if (!c.empty()) {
        reader.cell(c, static_cast<int>(r),
                    where + "[" + std::to_string(r) + "][" + std::to_string(i) + "]");
      }
    }
  }
  CustomSchedule out = reader.finish();
  out.file = file;
  return out;
}

std::vector<std::vector<std::string>> action_names(const CustomSchedule& c) {
  std::vector<std::vector<std::string>> out;
  for (const auto& ops : c.ranks) {
    out.emplace_back();
    for (const Op& op : ops) out.back().push_back(name_of(op, c.split));
  }
  return out;
}

int placed_device(ScheduleKind kind, const CustomSchedule* custom, int stage, int devices) {
  if (custom != nullptr) return custom->stage_rank.at(static_cast<std::size_t>(stage));
  return stage_device_of(kind, stage, devices);
}

std::string side_action_note(const CustomSchedule& c) {
  const SideActionCounts& n = c.side;
  std::string out;
  const auto add = [&out](int count, const std::string& text) {
    if (count > 0) out += (out.empty() ? "" : " ") + std::to_string(count) + " " + text;
  };
  add(n.transfers,
      "SEND/RECV actions stand where they can run; transfers start when the action that "
      "produces them ends.");
  add(n.fsdp,
      "UNSHARD/RESHARD actions cost nothing: each stage's weights stay whole on its device "
      "(no FSDP sharding).");
  add(n.reductions,
      "REDUCE_GRAD actions follow their stage's last gradient: the data-parallel all-reduce "
      "starts there.");
  add(n.overlapped,
      "OVERLAP_F_B groups run their actions one after the other and send their outputs when "
      "the group ends.");
  return out;
}

Schedule build_custom(const CustomSchedule& c, Remat remat) {
  Schedule s;
  s.kind = ScheduleKind::kCustom;
  s.stages = c.stages;
  s.chunks = c.chunks();
  s.micro_batches = c.micro_batches;
  s.remat = remat;
  s.split = c.split;
  const int K = c.devices();
  s.stage_device = c.stage_rank;
  for (int d = 0; d < K; ++d) {
    std::vector<Op>& ops = s.device_ops.emplace_back();
    for (const Op& op : c.ranks[static_cast<std::size_t>(d)]) {
      if (op.kind == OpKind::kBackward && s.recomputes(op.micro_batch)) {
        // Inside an overlapped pair the recompute is part of it.
        const bool in_pair = !ops.empty() && ops.back().paired;
        ops.push_back({OpKind::kRecompute, op.stage, op.micro_batch, in_pair});
      }
      ops.push_back(op);
    }
    for (int st = 0; st < c.stages; ++st) {
      if (c.stage_rank[static_cast<std::size_t>(st)] == d)
        ops.push_back({OpKind::kOptimizer, st, 0});
    }
  }
  return s;
}

}  // namespace pipescope
