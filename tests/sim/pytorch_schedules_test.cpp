// Schedule CSVs that PyTorch 2.15 itself wrote (tests/data/pytorch-2.15) for
// each of its seven schedules, compute-only and with communication: each
// imports with the placement PyTorch used (a loop or a V), both forms of a
// schedule give the same compute, and the actions besides compute are checked
// where they stand.

#include <gtest/gtest.h>

#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "sim/base/input_file.h"
#include "sim/engine/custom_schedule.h"
#include "sim/engine/schedule_actions.h"
#include "sim/engine/simulator.h"
#include "sim/export/plan_export.h"
#include "sim/formats/plan_io.h"
#include "sim/plan/plan.h"
#include "sim/scenario/scenario_io.h"
#include "sim_fixtures.h"

namespace pipescope {
namespace {

using testing::schedule_csv_error;

constexpr int kRanks = 4;
constexpr int kMicroBatches = 8;

CustomSchedule written_by_pytorch(const std::string& name) {
  return read_schedule_csv(std::string(PIPESCOPE_TEST_DATA_DIR) + "/pytorch-2.15/" + name + ".csv");
}

// A CSV's non-empty cells, row by row.
std::vector<std::vector<std::string>> non_empty_cells(const std::string& csv) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream lines(csv);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();  // PyTorch ends rows with CR LF
    std::vector<std::string>& row = rows.emplace_back();
    std::istringstream cells(line);
    for (std::string cell; std::getline(cells, cell, ',');) {
      if (!cell.empty()) row.push_back(cell);
    }
  }
  return rows;
}

const std::vector<int> kLoop{0, 1, 2, 3, 0, 1, 2, 3};
const std::vector<int> kV{0, 1, 2, 3, 3, 2, 1, 0};

struct Written {
  std::string name;
  int stages;
  std::vector<int> placement;
  bool split;
};

void PrintTo(const Written& w, std::ostream* os) {
  *os << w.name;
}

class PyTorchSchedule : public ::testing::TestWithParam<Written> {};
// The schedules that write a CSV with communication too.
class PyTorchRuntimeSchedule : public PyTorchSchedule {};

TEST_P(PyTorchSchedule, ImportsWithItsPlacementAndBuildsAValidSchedule) {
  const Written& w = GetParam();
  const CustomSchedule c = written_by_pytorch(w.name);
  EXPECT_EQ(c.devices(), kRanks);
  EXPECT_EQ(c.micro_batches, kMicroBatches);
  EXPECT_EQ(c.stages, w.stages);
  EXPECT_EQ(c.split, w.split);
  if (w.stages == 2 * kRanks) {
    EXPECT_EQ(c.stage_rank, w.placement);
  }
  const Schedule s = build_custom(c, Remat::kNever);
  EXPECT_EQ(check_schedule(s), "");
  EXPECT_EQ(s.stage_device, c.stage_rank);
}

TEST_P(PyTorchRuntimeSchedule, WithCommunicationItHasTheSameComputeAsWithout) {
  const Written& w = GetParam();
  const CustomSchedule compute = written_by_pytorch(w.name);
  const CustomSchedule comms = written_by_pytorch(w.name + "-comms");
  EXPECT_EQ(comms.ranks, compute.ranks);
  EXPECT_EQ(comms.stage_rank, compute.stage_rank);
  EXPECT_EQ(compute.side.transfers, 0);
  // Each stage unshards and reshards once and reduces its gradients once; every
  // activation and gradient crossing ranks is sent, received and waited for.
  EXPECT_EQ(comms.side.fsdp, 2 * w.stages);
  EXPECT_EQ(comms.side.reductions, w.stages);
  EXPECT_GT(comms.side.transfers, 0);
  EXPECT_EQ(comms.side.transfers % 3, 0);
}

// Imported, simulated and planned, the schedule exports as a CSV that reads
// back as the same ops on the same ranks (overlapped pairs as pairs).
TEST_P(PyTorchSchedule, ItsPlanExportsAndReadsBackTheSame) {
  const Written& w = GetParam();
  const auto theirs = std::make_shared<const CustomSchedule>(written_by_pytorch(w.name));
  const Scenario sc = testing::uniform_scenario(16, kRanks, 1000.0, 16, kMicroBatches, false);
  SimConfig cfg;
  cfg.custom = theirs;
  const Plan plan = make_plan(sc, simulate(sc, cfg), 1, "optimal");
  const std::string csv = export_plan(plan, ExportFormat::kTorchPipelining);
  const CustomSchedule back = parse_schedule_csv(csv, "export.csv");
  EXPECT_EQ(back.stage_rank, theirs->stage_rank);
  EXPECT_EQ(back.side.overlapped, theirs->side.overlapped) << csv;
  for (const Remat remat : kScheduleRemats) {
    EXPECT_EQ(build_custom(back, remat).device_ops, build_custom(*theirs, remat).device_ops)
        << to_string(remat) << "\n"
        << csv;
  }
}

const auto kRuntimeSchedules =
    ::testing::Values(Written{"ScheduleInterleaved1F1B", 2 * kRanks, kLoop, false},
                      Written{"ScheduleLoopedBFS", 2 * kRanks, kLoop, false},
                      Written{"ScheduleInterleavedZeroBubble", 2 * kRanks, kLoop, true},
                      Written{"ScheduleZBVZeroBubble", 2 * kRanks, kV, true},
                      Written{"ScheduleDualPipeV", 2 * kRanks, kV, true});
const auto kName = [](const auto& info) { return info.param.name; };

INSTANTIATE_TEST_SUITE_P(Single, PyTorchSchedule,
                         ::testing::Values(Written{"ScheduleGPipe", kRanks, {}, false}), kName);
INSTANTIATE_TEST_SUITE_P(Runtime, PyTorchSchedule, kRuntimeSchedules, kName);
INSTANTIATE_TEST_SUITE_P(Runtime, PyTorchRuntimeSchedule, kRuntimeSchedules, kName);

TEST(PyTorchSchedules, OneFOneBAsPyTorchOrdersItIsRefusedForItsMissingForward) {
  // PyTorch 2.15's Schedule1F1B._get_pipeline_order() numbers the last rank's
  // forwards 1..M (it increments the micro-batch before its first steady-state
  // forward when there is no warm-up): 3F8 and no 3F0. The file names a
  // micro-batch 8 that no other stage has.
  try {
    written_by_pytorch("Schedule1F1B");
    ADD_FAILURE() << "accepted";
  } catch (const ScenarioError& e) {
    EXPECT_NE(std::string(e.what()).find("'0F8' is missing: every stage 0..3 needs F, B for every "
                                         "micro-batch 0..8"),
              std::string::npos)
        << e.what();
  }
}

TEST(PyTorchSchedules, GPipeReducesEachStageOnceAndTransfersNothing) {
  // Its CSV comes from _get_pipeline_order(): compute and REDUCE_GRAD.
  const CustomSchedule c = written_by_pytorch("ScheduleGPipe");
  EXPECT_EQ(c.side.reductions, kRanks);  // each with its WAIT_REDUCE_GRAD after it
  EXPECT_EQ(c.side.transfers, 0);
  EXPECT_EQ(c.side.fsdp, 0);
}

TEST(PyTorchSchedules, DualPipeVOverlapsRunInOrderAndWholeBackwardsSplit) {
  // Rank 0 starts 0F0..0F6, then stage 7's F, I, W of micro-batch 0; the
  // overlapped pair (0F7;7B3) is 0F7 then 7B3 as its I and W back to back, the
  // two first paired with the W, which ends the pair, the I marked whole.
  const CustomSchedule c = written_by_pytorch("ScheduleDualPipeV");
  EXPECT_TRUE(c.split);
  EXPECT_GT(c.side.overlapped, 0);
  const std::vector<Op>& rank0 = c.ranks[0];
  std::size_t at = 0;
  while (at < rank0.size() && !(rank0[at].stage == 0 && rank0[at].micro_batch == 7)) ++at;
  ASSERT_LT(at + 2, rank0.size());
  EXPECT_EQ(rank0[at], (Op{OpKind::kForward, 0, 7, true}));
  EXPECT_EQ(rank0[at + 1], (Op{OpKind::kBackward, 7, 3, true, true}));
  EXPECT_EQ(rank0[at + 2], (Op{OpKind::kWeight, 7, 3, false}));
}

// PipeScope's own multi-chunk schedules run PyTorch's orders, op for op (a
// whole backward in DualPipeV, and each in an overlapped pair, as B then W).
TEST(PyTorchSchedules, BuiltInSchedulesAreTheOrdersPyTorchWrites) {
  for (const auto& [name, kind] :
       {std::pair{"ScheduleLoopedBFS", ScheduleKind::kLoopedBfs},
        std::pair{"ScheduleZBVZeroBubble", ScheduleKind::kZbV},
        std::pair{"ScheduleInterleavedZeroBubble", ScheduleKind::kInterleavedZb},
        std::pair{"ScheduleDualPipeV", ScheduleKind::kDualPipeV}}) {
    SCOPED_TRACE(name);
    const Schedule theirs = build_custom(written_by_pytorch(name), Remat::kNever);
    const Schedule ours = build_schedule(kind, kRanks, kMicroBatches, Remat::kNever, 2);
    EXPECT_EQ(theirs.device_ops, ours.device_ops);
    EXPECT_EQ(theirs.stage_device, ours.stage_device);
    // And a plan of it exports the actions PyTorch writes, cell for cell once
    // the empty (waiting) cells are left out: DualPipeV's pairs as OVERLAP_F_B
    // groups, its unsplit backwards as B.
    const Scenario sc = testing::uniform_scenario(16, kRanks, 1000.0, 16, kMicroBatches, false);
    SimConfig cfg;
    cfg.schedule = kind;
    cfg.chunks = 2;
    const Plan plan = make_plan(sc, simulate(sc, cfg), 1, "optimal");
    EXPECT_EQ(non_empty_cells(export_plan(plan, ExportFormat::kTorchPipelining)),
              non_empty_cells(read_input_file(
                  std::string(PIPESCOPE_TEST_DATA_DIR) + "/pytorch-2.15/" + name + ".csv", name,
                  1 << 20, "a schedule CSV")));
  }
}

// A plan of a V-placed file keeps each stage on the device that runs it, and
// its file round trip keeps the placement.
TEST(PyTorchSchedules, APlanOfAVKeepsItsPlacement) {
  const Scenario sc = testing::uniform_scenario(16, kRanks, 1000.0, 16, kMicroBatches, false);
  SimConfig cfg;
  cfg.custom = std::make_shared<const CustomSchedule>(written_by_pytorch("ScheduleDualPipeV"));
  const SimResult r = simulate(sc, cfg);
  EXPECT_GT(r.metrics.step_time, 0);
  const Plan plan = make_plan(sc, r, 1, "optimal");
  ASSERT_EQ(plan.stage_plans.size(), kV.size());
  for (std::size_t s = 0; s < kV.size(); ++s) EXPECT_EQ(plan.stage_plans[s].device, kV[s]);
  const Plan back = plan_from_json(plan_to_json(plan), "plan.json");
  for (std::size_t s = 0; s < kV.size(); ++s) EXPECT_EQ(back.stage_plans[s].device, kV[s]);
  // Moved off its rank, a stage is refused.
  nlohmann::json doc = plan_to_json(plan);
  doc["stages"][1]["device"] = 2;
  try {
    plan_from_json(doc, "plan.json");
    ADD_FAILURE() << "accepted";
  } catch (const ScenarioError& e) {
    EXPECT_NE(
        std::string(e.what()).find("expected 1, got 2: PipeScope runs model stage 1 on device "
                                   "1 (the rank whose actions list it)"),
        std::string::npos)
        << e.what();
  }
}

TEST(PyTorchSchedules, TheNoteSaysWhatTheOtherActionsMeanHere) {
  EXPECT_EQ(side_action_note(written_by_pytorch("ScheduleInterleaved1F1B")), "");
  const std::string note = side_action_note(written_by_pytorch("ScheduleDualPipeV-comms"));
  EXPECT_NE(note.find("16 UNSHARD/RESHARD actions cost nothing"), std::string::npos) << note;
  EXPECT_NE(note.find("8 REDUCE_GRAD actions follow"), std::string::npos) << note;
  EXPECT_NE(note.find("OVERLAP_F_B groups run their actions one after the other"),
            std::string::npos)
      << note;
}

TEST(ScheduleActions, CellsReadAsPyTorchWritesThem) {
  const auto one = [](const std::string& cell) {
    const std::vector<ScheduleAction> a = parse_action_cell(cell);
    EXPECT_EQ(a.size(), 1u) << cell;
    return a.at(0);
  };
  EXPECT_EQ(one("3SEND_B2").kind, ActionKind::kSendB);
  EXPECT_EQ(one("3SEND_B2").micro_batch, 2);
  EXPECT_EQ(one("12REDUCE_GRAD").stage, 12);
  EXPECT_EQ(one("12REDUCE_GRAD").micro_batch, -1);
  EXPECT_EQ(one("1WAIT_REDUCE_GRAD").kind, ActionKind::kWaitReduceGrad);
  EXPECT_EQ(one("0WAIT_SEND_F5").kind, ActionKind::kWaitSendF);
  EXPECT_EQ(one("0FULL_BACKWARD1").kind, ActionKind::kFullBackward);
  for (const char* cell : {"0F1", "2SEND_F3", "1UNSHARD", "7WAIT_REDUCE_GRAD", "4I0", "4W0"}) {
    EXPECT_EQ(action_name(one(cell)), cell);
  }
  const std::vector<ScheduleAction> pair = parse_action_cell("(0F7; 7B3)OVERLAP_F_B");
  ASSERT_EQ(pair.size(), 2u);
  EXPECT_EQ(action_name(pair[0]), "0F7");
  EXPECT_EQ(action_name(pair[1]), "7B3");
}

TEST(ScheduleActions, BadCellsSayWhatIsExpected) {
  const auto message = [](const std::string& cell) -> std::string {
    try {
      parse_action_cell(cell);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "(accepted)";
  };
  EXPECT_EQ(message("0REDUCE_GRAD1"),
            "'0REDUCE_GRAD1': REDUCE_GRAD acts on a whole stage and takes no micro-batch, e.g. "
            "0REDUCE_GRAD");
  EXPECT_EQ(message("0SEND_F"),
            "'0SEND_F' needs a micro-batch number after its kind, e.g. 0SEND_F0 (below 1048576)");
  EXPECT_EQ(message("(0F1;0SEND_F1)OVERLAP_F_B"),
            "'(0F1;0SEND_F1)OVERLAP_F_B': an OVERLAP_F_B group holds compute actions (F, B, I, "
            "W), not '0SEND_F1'");
  EXPECT_EQ(message("(0F1;1B0)OVERLAP"),
            "'(0F1;1B0)OVERLAP' is not an action group: expected (<action>;<action>)OVERLAP_F_B, "
            "e.g. (0F7;7B3)OVERLAP_F_B");
  EXPECT_EQ(message("()OVERLAP_F_B"), "'()OVERLAP_F_B': the group has no actions");
}

TEST(CustomScheduleSideActions, OutOfPlaceActionsAreNamedWithTheirCell) {
  // Two stages on two ranks, two micro-batches.
  const std::string rank1 = "\n1RECV_F0,1F0,1RECV_F1,1F1,1B0,1SEND_B0,1B1,1SEND_B1\n";
  const std::string good = "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1" + rank1;
  EXPECT_EQ(schedule_csv_error(good), "(accepted)");
  EXPECT_EQ(schedule_csv_error("0SEND_F0,0F0,0F1,0B0,0B1" + rank1),
            "s.csv: row 1, column 1: '0SEND_F0' comes before '0F0' on its rank: a send follows "
            "the action that produces what it sends");
  EXPECT_EQ(schedule_csv_error("0F0,0F1,0B0,0RECV_B0,0B1" + rank1),
            "s.csv: row 1, column 4: '0RECV_B0' comes after '0B0' on its rank: a receive comes "
            "before the action that uses it");
  EXPECT_EQ(schedule_csv_error("0F0,0F1,0B0,0B1,0SEND_B0" + rank1),
            "s.csv: row 1, column 5: '0SEND_B0': stage 0 has no stage to send to in that "
            "direction");
  EXPECT_EQ(schedule_csv_error("0F0,1SEND_F0,0F1,0B0,0B1" + rank1),
            "s.csv: row 1, column 2: '1SEND_F0' is on rank 0, but stage 1's compute is on rank 1");
  EXPECT_EQ(schedule_csv_error("0F0,0F1,0B0,0B1,0SEND_F9" + rank1),
            "s.csv: row 1, column 5: '0SEND_F9' names micro-batch 9; the schedule's "
            "micro-batches are 0..1");
  EXPECT_EQ(schedule_csv_error("0F0,0SEND_F0,0SEND_F0,0F1,0B0,0B1" + rank1),
            "s.csv: row 1, column 3: '0SEND_F0' appears twice");
  EXPECT_EQ(schedule_csv_error("0F0,0WAIT_SEND_F0,0SEND_F0,0F1,0B0,0B1" + rank1),
            "s.csv: row 1, column 2: '0WAIT_SEND_F0' waits for '0SEND_F0', which does not come "
            "before it on its rank");
  EXPECT_EQ(schedule_csv_error("0F0,0F1,0B0,0REDUCE_GRAD,0B1" + rank1),
            "s.csv: row 1, column 4: '0REDUCE_GRAD' comes before stage 0's last gradient on its "
            "rank: the reduction sums the finished gradients of every micro-batch");
  EXPECT_EQ(schedule_csv_error("0F0,0F1,0B0,0B1,0WAIT_REDUCE_GRAD" + rank1),
            "s.csv: row 1, column 5: '0WAIT_REDUCE_GRAD' waits for '0REDUCE_GRAD', which does not "
            "come before it on its rank");
  EXPECT_EQ(schedule_csv_error("0F0,0F1,0B0,0B1,3UNSHARD" + rank1),
            "s.csv: row 1, column 5: '3UNSHARD' is on rank 0, but stage 3's compute is nowhere "
            "(the stages are 0..1)");
  // UNSHARD and RESHARD may repeat, as FSDP frees and fetches a stage again.
  EXPECT_EQ(schedule_csv_error("0UNSHARD,0F0,0RESHARD,0UNSHARD,0F1,0B0,0B1,0RESHARD" + rank1),
            "(accepted)");
}

TEST(CustomScheduleSideActions, PlacementIsWhereEachStagesActionsAre) {
  // A V over two ranks: stages 0 and 3 on rank 0, 1 and 2 on rank 1.
  const CustomSchedule v = parse_schedule_csv("0F0,,,3F0,3B0,,,0B0\n,1F0,2F0,,,2B0,1B0\n", "v.csv");
  EXPECT_EQ(v.stage_rank, (std::vector<int>{0, 1, 1, 0}));
  EXPECT_EQ(build_custom(v, Remat::kNever).stage_device, v.stage_rank);
  EXPECT_EQ(schedule_csv_error("0F0,1F0,1B0,0B0\n1F1,1B1,0F1,0B1\n"),
            "s.csv: row 2, column 1: stage 1 is on rank 1 here but on rank 0 at row 1, column 2: "
            "each stage runs on one rank");
  EXPECT_EQ(schedule_csv_error("0F0,1F0,2F0,2B0,1B0,0B0\n3F0,3B0\n"),
            "s.csv: row 1: rank 0 holds 3 of the 4 stages; each of the 2 ranks must hold 2");
}

}  // namespace
}  // namespace pipescope
