#include "sim/custom_schedule.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <string_view>
#include <unordered_map>

#include "sim/input_file.h"
#include "sim/scenario_io.h"

namespace pipescope {

namespace {

// Bounds that keep a typo ("0F99999999") from asking for absurd tables; real
// pipelines are far below them.
constexpr int kMaxStage = 1 << 16;
constexpr int kMaxMicroBatch = 1 << 20;

// One parsed cell: the op, or for W the op with kind kWeight.
struct Action {
  Op op;
  std::string where;  // "row 2, column 5"
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// Digits at the front of `s` as a number below `limit`, consumed; nothing when
// there are none (a sign is not a digit: "-1F0" would index below the tables)
// or the number is too large.
std::optional<int> take_number(std::string_view& s, int limit) {
  if (s.empty() || s.front() < '0' || s.front() > '9') return std::nullopt;
  int value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end == s.data() || value >= limit) return std::nullopt;
  s.remove_prefix(static_cast<std::size_t>(end - s.data()));
  return value;
}

class Reader {
 public:
  Reader(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const std::string& where, const std::string& message) const {
    throw ScenarioError(file_, where, message);
  }

  // Parses one non-empty cell of rank `rank` into ranks_.
  void cell(std::string_view text, int rank, const std::string& where) {
    const std::string cell(text);
    std::string_view s = text;
    const std::optional<int> stage = take_number(s, kMaxStage);
    if (!stage) {
      fail(where, "'" + cell +
                      "' is not an action: expected <stage><F|B|I|W><micro-batch>, e.g. "
                      "0F1 (stages below " +
                      std::to_string(kMaxStage) + ")");
    }
    std::size_t letters = 0;
    while (letters < s.size() &&
           (std::isalpha(static_cast<unsigned char>(s[letters])) != 0 || s[letters] == '_')) {
      ++letters;
    }
    const std::string kind(s.substr(0, letters));
    s.remove_prefix(letters);
    for (const char* comm : {"SEND_F", "RECV_F", "SEND_B", "RECV_B", "UNSHARD", "RESHARD"}) {
      if (kind == comm) {
        fail(where, "'" + cell +
                        "' is a communication action; give the compute-only form (F, B, I, W), "
                        "the transfers follow from it");
      }
    }
    Op op;
    op.stage = *stage;
    if (kind == "F") {
      op.kind = OpKind::kForward;
    } else if (kind == "B" || kind == "FULL_BACKWARD") {
      op.kind = OpKind::kBackward;
      full_ = true;
    } else if (kind == "I") {
      op.kind = OpKind::kBackward;
      split_ = true;
    } else if (kind == "W") {
      op.kind = OpKind::kWeight;
      split_ = true;
    } else {
      fail(where, "'" + cell + "': unknown action kind '" + kind + "' (expected F, B, I or W)");
    }
    const std::optional<int> mb = take_number(s, kMaxMicroBatch);
    if (!mb || !s.empty()) {
      fail(where, "'" + cell + "' needs a micro-batch number after its kind, e.g. " +
                      std::to_string(*stage) + kind + "0 (below " + std::to_string(kMaxMicroBatch) +
                      ")");
    }
    op.micro_batch = *mb;
    if (full_ && split_) {
      fail(where, "'" + cell + "' mixes whole backwards (B) with split ones (I and W)");
    }
    ranks_[static_cast<std::size_t>(rank)].push_back({op, where});
  }

  void add_rank() { ranks_.emplace_back(); }

  CustomSchedule finish() const;

 private:
  struct Index;
  Index index_actions() const;
  void check_complete(const Index& index) const;
  void check_order(const Index& index) const;
  void check_deadlock(const Index& index) const;

  std::string file_;
  std::vector<std::vector<Action>> ranks_;
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

// Every action by its key: the rank it is on and its index there; and how many
// stages and micro-batches the actions name.
struct Reader::Index {
  std::unordered_map<std::uint64_t, std::pair<int, std::size_t>> seen;
  int stages = 0;
  int micro_batches = 0;

  bool has(OpKind kind, int s, int m) const { return seen.count(action_key(kind, s, m)) > 0; }
};

Reader::Index Reader::index_actions() const {
  const auto K = static_cast<int>(ranks_.size());
  Index index;
  for (int r = 0; r < K; ++r) {
    const auto& actions = ranks_[static_cast<std::size_t>(r)];
    if (actions.empty())
      fail("row " + std::to_string(r + 1), "rank " + std::to_string(r) + " has no actions");
    for (std::size_t i = 0; i < actions.size(); ++i) {
      const Op& op = actions[i].op;
      if (op.stage % K != r) {
        fail(actions[i].where,
             "stage " + std::to_string(op.stage) + " is on rank " + std::to_string(r) +
                 ", but stage s runs on rank s mod K = " + std::to_string(op.stage % K) +
                 " (K = " + std::to_string(K) + " rows)");
      }
      if (!index.seen.emplace(action_key(op.kind, op.stage, op.micro_batch), std::pair{r, i})
               .second) {
        fail(actions[i].where, "'" + name_of(op, split_) + "' appears twice");
      }
      index.stages = std::max(index.stages, op.stage + 1);
      index.micro_batches = std::max(index.micro_batches, op.micro_batch + 1);
    }
  }
  return index;
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
        next_(ranks.size(), 0) {
    for (const auto& a : ranks) remaining_ += a.size();
  }

  bool done() const { return remaining_ == 0; }
  // One pass over the ranks; whether any action ran.
  bool advance();
  // The action `op` waits for, when it cannot run yet.
  std::optional<Op> waits_for(const Op& op) const;
  // The index of rank r's next action (its size when it is through).
  std::size_t next(std::size_t r) const { return next_[r]; }

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
      const Op& op = actions[n].op;
      if (op.kind == OpKind::kForward) f_done_[cell(op.stage, op.micro_batch)] = 1;
      if (op.kind == OpKind::kBackward) b_done_[cell(op.stage, op.micro_batch)] = 1;
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
      stuck += (stuck.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) +
               " waits at '" + name_of(actions[n].op, split_) + "' (" + actions[n].where +
               ") for '" + name_of(*replay.waits_for(actions[n].op), split_) + "'";
    }
    fail("", "the schedule deadlocks: " + stuck);
  }
}

CustomSchedule Reader::finish() const {
  const auto K = static_cast<int>(ranks_.size());
  if (K == 0) fail("", "no ranks: expected one row of actions per device");
  const Index index = index_actions();
  check_complete(index);
  if (index.stages % K != 0) {
    fail("", std::to_string(index.stages) + " stages over " + std::to_string(K) +
                 " ranks: the stages must fill every rank equally (K x v of them)");
  }
  check_order(index);
  check_deadlock(index);
  CustomSchedule out;
  out.stages = index.stages;
  out.micro_batches = index.micro_batches;
  out.split = split_;
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

Schedule build_custom(const CustomSchedule& c, Remat remat) {
  Schedule s;
  s.kind = ScheduleKind::kCustom;
  s.stages = c.stages;
  s.chunks = c.chunks();
  s.micro_batches = c.micro_batches;
  s.remat = remat;
  s.split = c.split;
  const int K = c.devices();
  for (int st = 0; st < c.stages; ++st) s.stage_device.push_back(st % K);
  for (int d = 0; d < K; ++d) {
    std::vector<Op>& ops = s.device_ops.emplace_back();
    for (const Op& op : c.ranks[static_cast<std::size_t>(d)]) {
      if (op.kind == OpKind::kBackward && s.recomputes(op.micro_batch)) {
        ops.push_back({OpKind::kRecompute, op.stage, op.micro_batch});
      }
      ops.push_back(op);
    }
    for (int st = d; st < c.stages; st += K) ops.push_back({OpKind::kOptimizer, st, 0});
  }
  return s;
}

}  // namespace pipescope
