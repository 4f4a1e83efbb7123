#pragma once
// A custom schedule: each device's actions in order, as PyTorch pipelining's
// per-rank action CSV lists them, in either of its forms: compute only (what
// `export --to torch-pipelining` writes) or with communication (what its
// runtime schedules dump by default). A row per rank (device); a cell per time
// slot, empty or an action (schedule_actions.h): F forward, B whole backward,
// I input gradient and W weight gradient of a split backward; an OVERLAP_F_B
// group's actions run one after the other; B in a file that also has I and W
// is its I and W back to back. Recomputes and optimizer steps are not actions:
// build_custom adds them (R before each backward remat asks for, the stages'
// optimizer steps last).
//
// The other actions change nothing the simulator does, and are checked:
// - SEND_F/RECV_F/SEND_B/RECV_B and their WAIT_SEND_*: the simulator sends an
//   activation or a gradient when the action that produces it ends, so these
//   only have to stand where they could run (a send after what it sends, a
//   receive before what uses it, a wait after its send, on the stage's rank).
// - UNSHARD/RESHARD (FSDP's all-gather and free of a stage's parameters): the
//   simulator keeps every stage's weights whole on its device, which is what
//   PyTorch does with them when the stage is not wrapped in FSDP; they cost
//   nothing here.
// - REDUCE_GRAD (and its wait): the stage's data-parallel gradient all-reduce,
//   which the simulator starts when the stage's last gradient is done; it must
//   come after that gradient on the rank, where PyTorch's own lowering puts it.
//
// Validation (parse_schedule_csv, custom_from_actions) rejects, naming the row
// and column: bad cells, a stage's actions on two ranks, ranks holding unequal
// numbers of stages (loops, s on rank s mod K, and Vs, d and 2K-1-d on rank d,
// both pass), stages or micro-batches with no actions, a missing or duplicated
// F, B, I or W, W before its I, the other actions out of place as above, and a
// deadlock: an order in which some rank waits for an action that can never run
// (F(s,m) waits for F(s-1,m), a backward for the backward of s+1, both across
// ranks; every action for the one before it on its rank). The error of a
// deadlock names each stuck rank's waiting action and the action it waits for.

#include <filesystem>
#include <string>
#include <vector>

#include "sim/engine/schedule.h"

namespace pipescope {

// How many of a file's actions were other than compute.
struct SideActionCounts {
  int transfers = 0;   // SEND_*, RECV_*, WAIT_SEND_*
  int fsdp = 0;        // UNSHARD, RESHARD
  int reductions = 0;  // REDUCE_GRAD
  int overlapped = 0;  // OVERLAP_F_B groups
};

struct CustomSchedule;
// Whether `schedule` runs each backward as B and W: the custom schedule's own
// say when there is one.
bool splits_backward(ScheduleKind schedule, const CustomSchedule* custom);

struct CustomSchedule {
  // Per device, its F, B (or B and W when split) actions in order; B stands for
  // PyTorch's I when split.
  std::vector<std::vector<Op>> ranks;
  int stages = 0;               // K x v
  int micro_batches = 0;        // M
  bool split = false;           // I and W rather than B
  std::vector<int> stage_rank;  // the rank (device) of each stage
  SideActionCounts side;
  std::string file;  // where it was read from, for errors about its K and M

  int devices() const { return static_cast<int>(ranks.size()); }
  int chunks() const { return devices() == 0 ? 0 : stages / devices(); }
};

inline bool splits_backward(ScheduleKind schedule, const CustomSchedule* custom) {
  return custom != nullptr ? custom->split : splits_backward(schedule);
}

// Reads the CSV text; errors are ScenarioErrors naming `file`, row and column.
CustomSchedule parse_schedule_csv(const std::string& text, const std::string& file);
CustomSchedule read_schedule_csv(const std::filesystem::path& file);

// The same from cells, one list per rank (empty strings allowed), as a plan
// file stores them; errors name `file` and `where` ("actions[1][4]").
CustomSchedule custom_from_actions(const std::vector<std::vector<std::string>>& cells,
                                   const std::string& file, const std::string& where);

// The action names of each rank, without empty cells: "0F1", "0B1" (or "0I1"
// and "0W1").
std::vector<std::vector<std::string>> action_names(const CustomSchedule& c);

// What the file's other actions mean here, one sentence each (empty when it
// has none), for the summary.
std::string side_action_note(const CustomSchedule& c);

// The device of model stage `stage` over `devices` devices: a custom
// schedule's row for it, otherwise `kind`'s placement (stage_device_of).
int placed_device(ScheduleKind kind, const CustomSchedule* custom, int stage, int devices);

// The schedule the simulator and the executor run: the actions with R before
// each backward that `remat` recomputes and each stage's optimizer step at the
// end of its device's list. Stage s runs on device stage_rank[s].
Schedule build_custom(const CustomSchedule& c, Remat remat);

}  // namespace pipescope
