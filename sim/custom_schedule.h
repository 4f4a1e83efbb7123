#pragma once
// A custom schedule: each device's compute actions in order, as PyTorch
// pipelining's per-rank action CSV lists them (the compute-only form that
// `export --to torch-pipelining` writes). A row per rank (device); a cell per
// time slot, empty or an action "<stage><kind><micro-batch>": F forward, B
// whole backward, I input gradient and W weight gradient of a split backward.
// Recomputes and optimizer steps are not actions: build_custom adds them (R
// before each backward remat asks for, the stages' optimizer steps last).
//
// Validation (parse_schedule_csv, custom_from_actions) rejects, naming the row
// and column: bad cells, stages not on rank s mod K (the looped placement
// PyTorch's interleaved schedules use, K = the number of rows), stages or
// micro-batches with no actions, a missing or duplicated F, B, I or W, B mixed
// with I / W, W before its I, and a deadlock: an order in which some rank waits
// for an action that can never run (F(s,m) waits for F(s-1,m), a backward for
// the backward of s+1, both across ranks; every action for the one before it on
// its rank). The error of a deadlock names each stuck rank's waiting action.

#include <filesystem>
#include <string>
#include <vector>

#include "sim/schedule.h"

namespace pipescope {

struct CustomSchedule {
  // Per device, its F, B (or B and W when split) actions in order; B stands for
  // PyTorch's I when split.
  std::vector<std::vector<Op>> ranks;
  int stages = 0;         // K x v
  int micro_batches = 0;  // M
  bool split = false;     // I and W rather than B
  std::string file;       // where it was read from, for errors about its K and M

  int devices() const { return static_cast<int>(ranks.size()); }
  int chunks() const { return devices() == 0 ? 0 : stages / devices(); }
};

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

// The schedule the simulator and the executor run: the actions with R before
// each backward that `remat` recomputes and each stage's optimizer step at the
// end of its device's list. Stage s runs on device s mod K.
Schedule build_custom(const CustomSchedule& c, Remat remat);

}  // namespace pipescope
