// The schedule each framework runs an exported plan with, and what the export
// says when it is not the plan's: the plan's figures simulated under the
// framework's schedule.

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "sim/base/format.h"
#include "sim/engine/simulator.h"
#include "sim/export/plan_export.h"
#include "sim/plan/planner.h"

#include "export_fixtures.h"
#include "sim_fixtures.h"

namespace pipescope {
namespace {

using testing::golden_plan;
using testing::interleaved_plan;
using testing::plan_with;

TEST(PlanExport, FrameworkSchedules) {
  for (const ScheduleKind k : {ScheduleKind::kGpipe, ScheduleKind::k1F1B, ScheduleKind::kZbH1}) {
    Plan p = golden_plan();
    p.schedule = k;
    EXPECT_EQ(framework_schedule(ExportFormat::kTorchGpipe, p),
              (FrameworkSchedule{ScheduleKind::kGpipe, 1}));
    EXPECT_EQ(framework_schedule(ExportFormat::kDeepSpeed, p),
              (FrameworkSchedule{ScheduleKind::k1F1B, 1}));
    EXPECT_EQ(framework_schedule(ExportFormat::kMegatron, p),
              (FrameworkSchedule{ScheduleKind::k1F1B, 1}));
    EXPECT_EQ(framework_schedule(ExportFormat::kTorchPipelining, p), (FrameworkSchedule{k, 1}));
  }
  Plan interleaved = golden_plan();
  interleaved.schedule = ScheduleKind::kInterleaved1F1B;
  interleaved.chunks = 2;
  EXPECT_EQ(framework_schedule(ExportFormat::kMegatron, interleaved),
            (FrameworkSchedule{ScheduleKind::kInterleaved1F1B, 2}));
  EXPECT_EQ(framework_schedule(ExportFormat::kTorchPipelining, interleaved),
            (FrameworkSchedule{ScheduleKind::kInterleaved1F1B, 2}));
}

// 4 layers on K=2 stages, M=8 micro-batches, no remat: GPipe keeps all eight
// micro-batches' activations on stage 0, 1F1B two.
Scenario schedule_scenario() {
  return testing::memory_scenario(8, false);
}

Plan planned_as(const Scenario& sc, ScheduleKind schedule) {
  SimConfig config;
  config.schedule = schedule;
  return make_plan(sc, simulate(sc, config), 1, "optimal");
}

// What `simulate` gives for the plan's cut, K, M and remat under `schedule`.
Metrics simulated_as(const Scenario& sc, const Plan& p, ScheduleKind schedule) {
  SimConfig config = plan_sim_config(p);
  config.schedule = schedule;
  return simulate(sc, config).metrics;
}

std::string figures_line(const Metrics& m) {
  return "this plan there takes " + format_seconds(m.step_time_s()) + " a step (plan: ";
}

// "X on device D": the largest peak and the first device that has it.
std::string largest_peak(const Metrics& m) {
  std::size_t worst = 0;
  for (std::size_t d = 0; d < m.devices.size(); ++d) {
    if (m.devices[d].peak_memory > m.devices[worst].peak_memory) worst = d;
  }
  return format_bytes(static_cast<double>(m.devices[worst].peak_memory)) + " on device " +
         std::to_string(worst);
}

std::string peak_words(const Metrics& m) {
  return "# and peaks at " + largest_peak(m) + " (plan: ";
}

TEST(PlanExport, AOneFOneBPlanRunsAsPlannedWhereOneFOneBRuns) {
  // Planned with DeepSpeed's and Megatron-LM's blocking sends, so that only
  // the schedule is compared (p2p_mode_test.cpp compares the sends).
  Scenario sc = schedule_scenario();
  sc.cluster.p2p = P2pMode::kBlocking;
  const Plan p = planned_as(sc, ScheduleKind::k1F1B);
  for (const ExportFormat f :
       {ExportFormat::kTorchGpipe, ExportFormat::kDeepSpeed, ExportFormat::kMegatron}) {
    const std::string text = export_plan(p, f, &sc);
    EXPECT_EQ(text.find("fewer activations"), std::string::npos) << text;
  }
  EXPECT_NE(export_plan(p, ExportFormat::kMegatron, &sc)
                .find("# Megatron-LM runs 1F1B, the plan's schedule: the plan's step time and "
                      "memory hold there.\n"),
            std::string::npos);
  const std::string ds = export_plan(p, ExportFormat::kDeepSpeed, &sc);
  EXPECT_NE(ds.find("# DeepSpeed runs 1F1B, the plan's schedule"), std::string::npos) << ds;
  EXPECT_EQ(ds.find("a step (plan: "), std::string::npos) << ds;
}

TEST(PlanExport, AGpipePlanOnMegatronGetsTheOneFOneBFigures) {
  const Scenario sc = schedule_scenario();
  const Plan p = planned_as(sc, ScheduleKind::kGpipe);
  const Metrics there = simulated_as(sc, p, ScheduleKind::k1F1B);
  const std::string text = export_plan(p, ExportFormat::kMegatron, &sc);
  EXPECT_NE(text.find("# Megatron-LM runs 1F1B, not GPipe: " + figures_line(there) +
                      format_seconds(p.step_time_s) + ")\n" + peak_words(there)),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("fewer activations"), std::string::npos) << text;
  // Without the scenario the export cannot simulate, and says so.
  EXPECT_NE(export_plan(p, ExportFormat::kMegatron)
                .find("export with the plan's scenario (--scenario FILE) to see them simulated."),
            std::string::npos);
}

TEST(PlanExport, ZbH1AndOneFOneBPlansOnTorchgpipeGetTheGpipeFigures) {
  const Scenario sc = schedule_scenario();
  for (const ScheduleKind k : {ScheduleKind::kZbH1, ScheduleKind::k1F1B}) {
    const Plan p = planned_as(sc, k);
    const Metrics gpipe = simulated_as(sc, p, ScheduleKind::kGpipe);
    const Metrics own = simulated_as(sc, p, k);
    // The figures differ, so the test tells the schedules apart.
    ASSERT_GT(gpipe.devices[0].peak_memory, own.devices[0].peak_memory);
    ASSERT_NE(largest_peak(gpipe), largest_peak(own));
    const std::string text = export_plan(p, ExportFormat::kTorchGpipe, &sc);
    const std::string plan_peak = largest_peak(own) + ").";
    EXPECT_NE(text.find("# torchgpipe runs GPipe, not " +
                        std::string(k == ScheduleKind::kZbH1 ? "ZB-H1" : "1F1B") + ": " +
                        figures_line(gpipe) + format_seconds(p.step_time_s) + ")\n" +
                        peak_words(gpipe) + plan_peak),
              std::string::npos)
        << text;
  }
}

// Chunked schedules other than interleaving are named as they are: in the
// refusal of one-stage-a-device targets and in the note of the schedule
// Megatron-LM runs instead.
TEST(PlanExport, ChunkedPlansAreNamedByTheirOwnSchedule) {
  for (const auto& [kind, label] :
       {std::pair{ScheduleKind::kLoopedBfs, "looped BFS"},
        std::pair{ScheduleKind::kInterleavedZb, "interleaved zero bubble"}}) {
    Plan p = interleaved_plan({2, 2, 2, 2});
    p.schedule = kind;
    const std::string name(to_string(kind));
    try {
      export_plan(p, ExportFormat::kTorchGpipe);
      ADD_FAILURE() << "a " << name << " plan was exported to torchgpipe";
    } catch (const std::invalid_argument& e) {
      const std::string article = name.front() == 'i' ? "an " : "a ";
      EXPECT_EQ(std::string(e.what()).rfind(
                    "cannot export " + article + name + " plan to torchgpipe: ", 0),
                0u)
          << e.what();
    }
    const std::string megatron = export_plan(p, ExportFormat::kMegatron);
    EXPECT_NE(
        megatron.find("# Megatron-LM runs interleaved 1F1B, not " + std::string(label) + ": "),
        std::string::npos)
        << megatron;
    // M that K does not divide: Megatron-LM's groups of M / max(1, M / K)
    // micro-batches, the plan's rounds.
    p.micro_batches = 3;
    const std::string grouped = export_plan(p, ExportFormat::kMegatron);
    EXPECT_NE(grouped.find("--microbatch-group-size-per-virtual-pipeline-stage 3"),
              std::string::npos)
        << grouped;
    EXPECT_NE(grouped.find("megatron-core core_r0.10 and"), std::string::npos) << grouped;
    // M < K: Megatron-LM's groups hold at least K.
    p.micro_batches = 1;
    try {
      export_plan(p, ExportFormat::kMegatron);
      ADD_FAILURE() << "a " << name << " plan with M=1 on K=2 was exported to megatron";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()),
                "cannot export this " + name +
                    " plan to megatron: Megatron-LM runs it as interleaved 1F1B, and "
                    "interleaved-1f1b needs M >= K and a multiple of its rounds, max(1, M / K) "
                    "(what both PyTorch's ScheduleInterleaved1F1B and Megatron-LM run): M=1, K=2, "
                    "rounds 1; plan with such an M, or export it to torch-pipelining");
    }
  }
}

// Megatron-LM places virtual stage s on rank s mod K: the V of a zb-v or
// dualpipe-v plan cannot be written for it, nor for the one-stage-a-device
// frameworks.
TEST(PlanExport, TheVShapedPlansGoToPyTorchOnly) {
  for (const ScheduleKind kind : {ScheduleKind::kZbV, ScheduleKind::kDualPipeV}) {
    Plan p = interleaved_plan({2, 2, 2, 2});
    p.schedule = kind;
    p.stage_plans[2].device = 1;
    p.stage_plans[3].device = 0;
    const std::string name(to_string(kind));
    try {
      export_plan(p, ExportFormat::kMegatron);
      ADD_FAILURE() << "a " << name << " plan was exported to megatron";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()),
                "cannot export a " + name +
                    " plan to megatron: Megatron-LM places virtual stage s on rank s mod K, not "
                    "in " +
                    name + "'s V; export it to torch-pipelining");
    }
    try {
      export_plan(p, ExportFormat::kDeepSpeed);
      ADD_FAILURE() << "a " << name << " plan was exported to deepspeed";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()), "cannot export a " + name +
                                           " plan to deepspeed: it runs one stage per device; "
                                           "export it to torch-pipelining, or plan with another "
                                           "--schedule");
    }
  }
}

}  // namespace
}  // namespace pipescope
