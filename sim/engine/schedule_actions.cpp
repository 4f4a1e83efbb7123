#include "sim/engine/schedule_actions.h"

#include <array>
#include <charconv>
#include <optional>
#include <stdexcept>
#include <utility>

namespace pipescope {

namespace {

constexpr std::array<std::pair<ActionKind, std::string_view>, 14> kKindNames{{
    {ActionKind::kForward, "F"},
    {ActionKind::kFullBackward, "B"},
    {ActionKind::kBackwardInput, "I"},
    {ActionKind::kBackwardWeight, "W"},
    {ActionKind::kSendF, "SEND_F"},
    {ActionKind::kRecvF, "RECV_F"},
    {ActionKind::kSendB, "SEND_B"},
    {ActionKind::kRecvB, "RECV_B"},
    {ActionKind::kWaitSendF, "WAIT_SEND_F"},
    {ActionKind::kWaitSendB, "WAIT_SEND_B"},
    {ActionKind::kUnshard, "UNSHARD"},
    {ActionKind::kReshard, "RESHARD"},
    {ActionKind::kReduceGrad, "REDUCE_GRAD"},
    {ActionKind::kWaitReduceGrad, "WAIT_REDUCE_GRAD"},
}};

constexpr std::string_view kOverlap = "OVERLAP_F_B";

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
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

std::optional<ActionKind> kind_of(std::string_view name) {
  if (name == "FULL_BACKWARD") return ActionKind::kFullBackward;  // older PyTorch
  for (const auto& [kind, spelled] : kKindNames) {
    if (spelled == name) return kind;
  }
  return std::nullopt;
}

bool takes_micro_batch(ActionKind k) {
  return is_compute(k) || is_transfer(k);
}

ScheduleAction parse_one(std::string_view text) {
  const std::string cell(text);
  std::string_view s = text;
  const std::optional<int> stage = take_number(s, kMaxActionStage);
  if (!stage) {
    throw std::invalid_argument("'" + cell +
                                "' is not an action: expected <stage><kind>[<micro-batch>], e.g. "
                                "0F1 (stages below " +
                                std::to_string(kMaxActionStage) + ")");
  }
  std::size_t letters = 0;
  while (letters < s.size() && ((s[letters] >= 'A' && s[letters] <= 'Z') ||
                                (s[letters] >= 'a' && s[letters] <= 'z') || s[letters] == '_')) {
    ++letters;
  }
  const std::string name(s.substr(0, letters));
  s.remove_prefix(letters);
  const std::optional<ActionKind> kind = kind_of(name);
  if (!kind) {
    throw std::invalid_argument("'" + cell + "': unknown action kind '" + name +
                                "' (expected F, B, I, W, SEND_F, RECV_F, SEND_B, RECV_B, "
                                "WAIT_SEND_F, WAIT_SEND_B, UNSHARD, RESHARD, REDUCE_GRAD or "
                                "WAIT_REDUCE_GRAD)");
  }
  ScheduleAction a{*kind, *stage, -1};
  if (!takes_micro_batch(*kind)) {
    if (!s.empty()) {
      throw std::invalid_argument("'" + cell + "': " + name +
                                  " acts on a whole stage and takes no micro-batch, e.g. " +
                                  std::to_string(*stage) + name);
    }
    return a;
  }
  const std::optional<int> mb = take_number(s, kMaxActionMicroBatch);
  if (!mb || !s.empty()) {
    throw std::invalid_argument("'" + cell + "' needs a micro-batch number after its kind, e.g. " +
                                std::to_string(*stage) + name + "0 (below " +
                                std::to_string(kMaxActionMicroBatch) + ")");
  }
  a.micro_batch = *mb;
  return a;
}

// "(0F7;7B3)OVERLAP_F_B": compute actions run one after the other.
std::vector<ScheduleAction> parse_group(std::string_view text) {
  const std::string cell(text);
  const std::size_t close = text.find(')');
  if (close == std::string_view::npos || text.substr(close + 1) != kOverlap) {
    throw std::invalid_argument("'" + cell +
                                "' is not an action group: expected (<action>;<action>)"
                                "OVERLAP_F_B, e.g. (0F7;7B3)OVERLAP_F_B");
  }
  std::string_view inner = text.substr(1, close - 1);
  std::vector<ScheduleAction> out;
  while (true) {
    const std::size_t semi = inner.find(';');
    const std::string_view part = trim(inner.substr(0, semi));
    if (!part.empty()) {
      const ScheduleAction a = parse_one(part);
      if (!is_compute(a.kind)) {
        throw std::invalid_argument("'" + cell +
                                    "': an OVERLAP_F_B group holds compute actions "
                                    "(F, B, I, W), not '" +
                                    std::string(part) + "'");
      }
      out.push_back(a);
    }
    if (semi == std::string_view::npos) break;
    inner.remove_prefix(semi + 1);
  }
  if (out.empty()) throw std::invalid_argument("'" + cell + "': the group has no actions");
  return out;
}

}  // namespace

bool is_compute(ActionKind k) {
  return k == ActionKind::kForward || k == ActionKind::kFullBackward ||
         k == ActionKind::kBackwardInput || k == ActionKind::kBackwardWeight;
}

bool is_transfer(ActionKind k) {
  return k == ActionKind::kSendF || k == ActionKind::kRecvF || k == ActionKind::kSendB ||
         k == ActionKind::kRecvB || k == ActionKind::kWaitSendF || k == ActionKind::kWaitSendB;
}

std::string_view action_kind_name(ActionKind k) {
  for (const auto& [kind, spelled] : kKindNames) {
    if (kind == k) return spelled;
  }
  return "?";
}

std::string action_name(const ScheduleAction& a) {
  std::string out = std::to_string(a.stage) + std::string(action_kind_name(a.kind));
  if (a.micro_batch >= 0) out += std::to_string(a.micro_batch);
  return out;
}

std::vector<ScheduleAction> parse_action_cell(std::string_view cell) {
  cell = trim(cell);
  if (cell.starts_with('(')) return parse_group(cell);
  return {parse_one(cell)};
}

}  // namespace pipescope
