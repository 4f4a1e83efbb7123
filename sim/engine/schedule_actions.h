#pragma once
// The action strings of PyTorch pipelining's per-rank schedule CSVs
// (torch.distributed.pipelining, `_Action`): "<stage><kind>[<micro-batch>]",
// e.g. "0F1", "2SEND_B3", "1REDUCE_GRAD", and an overlapped pair
// "(0F7;7B3)OVERLAP_F_B". This header reads one cell; what a schedule of them
// means is custom_schedule.h's.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pipescope {

enum class ActionKind : std::uint8_t {
  // Compute, with a micro-batch.
  kForward,         // F
  kFullBackward,    // B: input and weight gradient together
  kBackwardInput,   // I
  kBackwardWeight,  // W
  // Transfers of a stage's activation (F) or gradient (B), with a micro-batch.
  kSendF,
  kRecvF,
  kSendB,
  kRecvB,
  kWaitSendF,
  kWaitSendB,
  // Per stage, no micro-batch: FSDP's parameter all-gather and free, and the
  // data-parallel gradient reduction and its wait.
  kUnshard,
  kReshard,
  kReduceGrad,
  kWaitReduceGrad,
};

bool is_compute(ActionKind k);
bool is_transfer(ActionKind k);
// PyTorch's spelling: "F", "B", "I", "W", "SEND_F", ..., "WAIT_REDUCE_GRAD".
std::string_view action_kind_name(ActionKind k);

struct ScheduleAction {
  ActionKind kind = ActionKind::kForward;
  int stage = 0;
  int micro_batch = -1;  // -1 for the per-stage kinds
};

// "0F1", "2REDUCE_GRAD".
std::string action_name(const ScheduleAction& a);

// Bounds that keep a typo ("0F99999999") from asking for absurd tables; real
// pipelines are far below them.
inline constexpr int kMaxActionStage = 1 << 16;
inline constexpr int kMaxActionMicroBatch = 1 << 20;

// Reads one non-empty cell: one action, or an OVERLAP_F_B group's compute
// actions in the order the group runs them (PyTorch runs them one after the
// other on the rank). Throws std::invalid_argument with a message naming what
// is wrong and what was expected.
std::vector<ScheduleAction> parse_action_cell(std::string_view cell);

}  // namespace pipescope
