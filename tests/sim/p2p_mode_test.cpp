// How stages exchange tensors (cluster.p2p, cluster.p2p_split): the scenario
// fields and their errors, plan files that record them and refuse a scenario
// that exchanges otherwise, and exports that say how each framework sends. The engine's blocking
// sends are timed by hand in transfer_test.cpp, the split cuts in tensor_parallel_test.cpp.

#include <gtest/gtest.h>

#include <string>

#include "export_fixtures.h"
#include "scenario_docs.h"
#include "sim/base/format.h"
#include "sim/engine/simulator.h"
#include "sim/export/plan_export.h"
#include "sim/formats/plan_io.h"
#include "sim/plan/plan.h"
#include "sim/scenario/scenario_io.h"
#include "sim_fixtures.h"

namespace pipescope {
namespace {

using testing::plan_mismatch;
using testing::docs::scenario_error;

TEST(P2pMode, ParsesAndNamesItsModes) {
  EXPECT_EQ(parse_p2p_mode("overlapped"), P2pMode::kOverlapped);
  EXPECT_EQ(parse_p2p_mode("blocking"), P2pMode::kBlocking);
  EXPECT_EQ(parse_p2p_mode("overlapped-steady"), P2pMode::kOverlappedSteady);
  EXPECT_FALSE(parse_p2p_mode("async").has_value());
  EXPECT_EQ(to_string(P2pMode::kBlocking), "blocking");
  EXPECT_EQ(to_string(P2pMode::kOverlappedSteady), "overlapped-steady");
  nlohmann::json doc = testing::docs::good_doc();
  // The framework's: megatron-core on a GPU, blocking in one chunk a device,
  // overlapped in the steady state of several, each rank's whole copy;
  // ideal's overlapped.
  const Scenario plain = parse_scenario(doc, "s.json");
  EXPECT_EQ(plain.cluster.p2p, P2pMode::kBlocking);
  EXPECT_EQ(plain.cluster.p2p_interleaved, P2pMode::kOverlappedSteady);
  EXPECT_EQ(plain.cluster.p2p_mode(true), P2pMode::kOverlappedSteady);
  EXPECT_FALSE(plain.cluster.p2p_split);
  doc["training"]["framework"] = "ideal";
  EXPECT_EQ(parse_scenario(doc, "s.json").cluster.p2p, P2pMode::kOverlapped);
  doc["training"]["framework"] = "megatron-lm-2022";
  const Scenario old = parse_scenario(doc, "s.json");
  EXPECT_EQ(old.cluster.p2p_interleaved, P2pMode::kBlocking);
  EXPECT_TRUE(old.cluster.p2p_split);
  doc["training"].erase("framework");
  doc["cluster"]["p2p"] = "blocking";
  doc["cluster"]["p2p_split"] = true;
  const Scenario megatron = parse_scenario(doc, "s.json");
  EXPECT_EQ(megatron.cluster.p2p, P2pMode::kBlocking);
  EXPECT_EQ(megatron.cluster.p2p_interleaved, P2pMode::kBlocking);  // the scenario's for both
  EXPECT_TRUE(megatron.cluster.p2p_split);
}

TEST(P2pMode, ScenarioErrorsNameTheField) {
  nlohmann::json doc = testing::docs::good_doc();
  doc["cluster"]["p2p"] = "async";
  EXPECT_EQ(scenario_error(doc),
            "s.json: cluster.p2p: unknown point-to-point mode 'async' (expected one of: "
            "overlapped, overlapped-steady, blocking)");
  doc["cluster"]["p2p"] = 1;
  EXPECT_NE(scenario_error(doc).find("s.json: cluster.p2p: "), std::string::npos);
  doc["cluster"].erase("p2p");
  doc["cluster"]["p2p_split"] = "yes";
  EXPECT_NE(scenario_error(doc).find("s.json: cluster.p2p_split: "), std::string::npos);
}

// Two stages of the sample scenario on dgx-h100 groups of T = 2.
nlohmann::json two_group_doc() {
  nlohmann::json doc = testing::docs::good_doc();
  doc["cluster"] = {{"preset", "dgx-h100"}, {"devices", 4}};
  doc["training"]["tensor_parallel"] = 2;
  return doc;
}

Plan two_stage_plan(const nlohmann::json& doc) {
  const Scenario sc = parse_scenario(doc, "p.json");
  SimConfig cfg;
  cfg.stages = 2;
  return make_plan(sc, simulate(sc, cfg), 1, "optimal");
}

TEST(P2pMode, PlanFilesRecordItAndRefuseAnotherScenarios) {
  nlohmann::json doc = two_group_doc();
  doc["cluster"]["p2p"] = "blocking";
  doc["cluster"]["p2p_split"] = true;
  const Plan p = two_stage_plan(doc);
  EXPECT_EQ(p.p2p, P2pMode::kBlocking);
  EXPECT_TRUE(p.p2p_split);
  nlohmann::json file = plan_to_json(p);
  EXPECT_EQ(file["cluster"]["p2p"], "blocking");
  EXPECT_EQ(file["cluster"]["p2p_split"], true);
  const Plan back = plan_from_json(file, "p.json");
  EXPECT_EQ(back.p2p, P2pMode::kBlocking);
  EXPECT_TRUE(back.p2p_split);
  file["cluster"].erase("p2p");  // plans written before the modes
  file["cluster"].erase("p2p_split");
  EXPECT_EQ(plan_from_json(file, "p.json").p2p, P2pMode::kOverlapped);
  EXPECT_FALSE(plan_from_json(file, "p.json").p2p_split);

  EXPECT_EQ(plan_mismatch(p, doc), "matches");
  nlohmann::json other = doc;
  other["cluster"].erase("p2p");
  other["training"]["framework"] = "ideal";
  EXPECT_EQ(plan_mismatch(p, other),
            "p.json: cluster.p2p: this plan's stages exchange tensors blocking, the scenario's "
            "overlapped (--set cluster.p2p=blocking runs the plan's)");
  other = doc;
  other["cluster"]["p2p_split"] = false;
  EXPECT_EQ(plan_mismatch(p, other),
            "p.json: cluster.p2p_split: this plan's devices send their cuts 1/T from each "
            "device, the scenario's whole (--set cluster.p2p_split=true runs the plan's)");
}

TEST(P2pMode, SequenceParallelPlansSplitEitherWay) {
  // Under sequence parallelism a cut is already 1/T a device: p2p_split
  // changes nothing, so neither setting refuses the plan.
  nlohmann::json doc = two_group_doc();
  doc["training"]["sequence_parallel"] = true;
  doc["cluster"]["p2p_split"] = true;
  const Plan p = two_stage_plan(doc);
  doc["cluster"]["p2p_split"] = false;
  EXPECT_EQ(plan_mismatch(p, doc), "matches");
}

TEST(P2pMode, OneStageExchangesNothing) {
  // A plan of one stage sends no tensors: any mode runs it.
  nlohmann::json doc = two_group_doc();
  const Scenario sc = parse_scenario(doc, "p.json");
  SimConfig cfg;
  cfg.stages = 1;
  const Plan p = make_plan(sc, simulate(sc, cfg), 1, "optimal");
  doc["cluster"]["p2p"] = "blocking";
  doc["cluster"]["p2p_split"] = true;
  EXPECT_EQ(plan_mismatch(p, doc), "matches");
}

// Two stages of two layers (1000 ns forward each), M = 4, whose 1500-byte
// activations take 1500 ns on the 1 GB/s link: long enough that a sender
// waiting for them loses time.
Scenario sending_scenario(P2pMode mode) {
  Scenario sc = testing::memory_scenario(4, false);
  for (LayerSpec& l : sc.model.layers) l.out_bytes = 750;
  sc.cluster.p2p = sc.cluster.p2p_interleaved = mode;
  return sc;
}

// Three stages of two layers each, for Megatron-LM's interleaved schedule,
// which waits for its sends only on more than two stages.
Scenario three_stage_scenario(P2pMode mode) {
  Scenario sc = testing::uniform_scenario(6, 3, 1000.0, 6, 3, false);
  for (LayerSpec& l : sc.model.layers) l.out_bytes = 750;
  sc.cluster.p2p = sc.cluster.p2p_interleaved = mode;
  return sc;
}

Plan planned(const Scenario& sc, ScheduleKind schedule, int chunks = 1, int stages = 2) {
  SimConfig config;
  config.stages = stages;
  config.schedule = schedule;
  config.chunks = chunks;
  return make_plan(sc, simulate(sc, config), 1, "optimal");
}

TEST(P2pMode, EachFrameworkSendsItsOwnWay) {
  const Plan overlapped = planned(sending_scenario(P2pMode::kOverlapped), ScheduleKind::k1F1B);
  EXPECT_EQ(framework_sends(ExportFormat::kDeepSpeed, overlapped).mode, P2pMode::kBlocking);
  EXPECT_EQ(framework_sends(ExportFormat::kMegatron, overlapped).mode, P2pMode::kBlocking);
  EXPECT_EQ(framework_sends(ExportFormat::kTorchGpipe, overlapped).mode, P2pMode::kOverlapped);
  EXPECT_EQ(framework_sends(ExportFormat::kTorchPipelining, overlapped).mode, P2pMode::kOverlapped);
  // Megatron-LM's interleaved schedule sends as the plan says (the export
  // sets its flags), except that it cannot wait for every send on two stages.
  for (const P2pMode mode :
       {P2pMode::kOverlapped, P2pMode::kBlocking, P2pMode::kOverlappedSteady}) {
    const Plan p = planned(three_stage_scenario(mode), ScheduleKind::kInterleaved1F1B, 2, 3);
    EXPECT_EQ(framework_sends(ExportFormat::kMegatron, p).mode, mode);
    const Plan two = planned(sending_scenario(mode), ScheduleKind::kInterleaved1F1B, 2);
    EXPECT_EQ(framework_sends(ExportFormat::kMegatron, two).mode,
              mode == P2pMode::kBlocking ? P2pMode::kOverlappedSteady : mode);
  }
}

TEST(P2pMode, AnExportSaysWhatTheFrameworksSendsCost) {
  const Scenario sc = sending_scenario(P2pMode::kOverlapped);
  const Plan p = planned(sc, ScheduleKind::k1F1B);
  Scenario blocking = sc;
  blocking.cluster.p2p = P2pMode::kBlocking;
  SimConfig config = plan_sim_config(p);
  const double there = simulate(blocking, config).metrics.step_time_s();
  EXPECT_GT(there, p.step_time_s);  // the waits cost time here
  const std::string text = export_plan(p, ExportFormat::kDeepSpeed, &sc);
  EXPECT_NE(
      text.find("# DeepSpeed runs 1F1B, the plan's schedule: the plan's memory holds "
                "there.\n# DeepSpeed waits for every send between stages, where the plan\n"
                "# overlaps its sends between stages with compute (cluster.p2p overlapped): this "
                "plan there "
                "takes " +
                format_seconds(there) + " a step\n# (plan: " + format_seconds(p.step_time_s) +
                "); plan with --set cluster.p2p=blocking for it.\n"),
      std::string::npos)
      << text;
  EXPECT_NE(export_plan(p, ExportFormat::kMegatron, &sc).find("# Megatron-LM waits for every send"),
            std::string::npos);
  EXPECT_EQ(export_plan(p, ExportFormat::kTorchGpipe, &sc).find("send"), std::string::npos);
  // Without the scenario the note says how to see it.
  EXPECT_NE(export_plan(p, ExportFormat::kDeepSpeed)
                .find("(cluster.p2p overlapped);\n# plan with --set cluster.p2p=blocking for "
                      "the step time there.\n"),
            std::string::npos);
  // A plan that blocks exports to DeepSpeed without a note, to torchgpipe
  // with one.
  const Plan waits = planned(blocking, ScheduleKind::k1F1B);
  EXPECT_EQ(export_plan(waits, ExportFormat::kDeepSpeed, &blocking).find("send"),
            std::string::npos);
  EXPECT_NE(export_plan(waits, ExportFormat::kTorchGpipe, &blocking)
                .find("# torchgpipe overlaps its sends between stages with compute, where the "
                      "plan\n# waits for every send between stages (cluster.p2p blocking)"),
            std::string::npos);
}

// Where the scenario's launches block, every framework's sends block too:
// no note proposes overlapped sends there.
TEST(P2pMode, BlockingLaunchesLeaveNoOverlappedSendsToPropose) {
  Scenario blocking = sending_scenario(P2pMode::kBlocking);
  const Plan waits = planned(blocking, ScheduleKind::k1F1B);
  ASSERT_NE(export_plan(waits, ExportFormat::kTorchGpipe, &blocking).find("overlaps its sends"),
            std::string::npos);
  blocking.training.framework.launch_blocking = true;
  const std::string out = export_plan(waits, ExportFormat::kTorchGpipe, &blocking);
  EXPECT_EQ(out.find("overlaps its sends"), std::string::npos) << out;
  EXPECT_EQ(out.find("cluster.p2p=overlapped"), std::string::npos) << out;
}

TEST(P2pMode, UnderAnotherScheduleTheScheduleLineCountsTheSends) {
  // A GPipe plan with overlapped sends on DeepSpeed: 1F1B and blocking sends
  // both differ; the schedule line simulates both, the sends line points to it.
  const Scenario sc = sending_scenario(P2pMode::kOverlapped);
  const Plan p = planned(sc, ScheduleKind::kGpipe);
  Scenario blocking = sc;
  blocking.cluster.p2p = P2pMode::kBlocking;
  SimConfig config = plan_sim_config(p);
  config.schedule = ScheduleKind::k1F1B;
  const double there = simulate(blocking, config).metrics.step_time_s();
  const std::string text = export_plan(p, ExportFormat::kDeepSpeed, &sc);
  EXPECT_NE(text.find("# DeepSpeed runs 1F1B, not GPipe: this plan there takes " +
                      format_seconds(there) + " a step"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("(cluster.p2p overlapped): the figures above count\n# them; plan with "
                      "--set cluster.p2p=blocking for them.\n"),
            std::string::npos)
      << text;
}

TEST(P2pMode, MegatronSendsWholeCopiesOfASplitPlansCuts) {
  // T = 2 without sequence parallelism, blocking like Megatron-LM's 1F1B:
  // only the split differs, megatron-core sending each rank's whole copy.
  nlohmann::json doc = two_group_doc();
  doc["training"]["schedule"] = "1f1b";
  doc["cluster"]["p2p"] = "blocking";
  doc["cluster"]["p2p_split"] = true;
  const Scenario sc = parse_scenario(doc, "p.json");
  const Plan p = two_stage_plan(doc);
  EXPECT_TRUE(framework_sends(ExportFormat::kDeepSpeed, p).split);
  EXPECT_FALSE(framework_sends(ExportFormat::kMegatron, p).split);
  Scenario whole = sc;
  whole.cluster.p2p_split = false;
  const double there = simulate(whole, plan_sim_config(p)).metrics.step_time_s();
  EXPECT_NE(there, p.step_time_s);
  const std::string text = export_plan(p, ExportFormat::kMegatron, &sc);
  EXPECT_NE(text.find("# Megatron-LM sends each device's whole copy of a cut, where the plan\n"
                      "# sends 1/T of it (cluster.p2p_split true): this plan there takes " +
                      format_seconds(there) + " a step\n# (plan: " + format_seconds(p.step_time_s) +
                      "); plan with --set cluster.p2p_split=false for it.\n"),
            std::string::npos)
      << text;
  // T > 1: Megatron-LM's tensor-parallel layers need one CUDA connection.
  EXPECT_NE(text.find("# With T > 1 Megatron-LM's tensor-parallel layers need "
                      "CUDA_DEVICE_MAX_CONNECTIONS=1\n# in the environment of every rank"),
            std::string::npos)
      << text;
}

TEST(P2pMode, MegatronsInterleavedScheduleWaitsWhenThePlanDoes) {
  const std::string flag = "--no-overlap-p2p-communication";
  const Scenario waits = sending_scenario(P2pMode::kBlocking);
  const std::string blocking = export_plan(
      planned(three_stage_scenario(P2pMode::kBlocking), ScheduleKind::kInterleaved1F1B, 2, 3),
      ExportFormat::kMegatron);
  EXPECT_NE(blocking.find(flag + " \\\n"), std::string::npos) << blocking;
  EXPECT_NE(blocking.find("# interleaved schedule does only with " + flag + ".\n"),
            std::string::npos);
  EXPECT_EQ(blocking.find("waits for every send"), std::string::npos) << blocking;
  // On two stages Megatron-LM refuses the flag (validate_args): the export
  // leaves it out, says why, and what the plan's sends become there.
  const std::string two =
      export_plan(planned(waits, ScheduleKind::kInterleaved1F1B, 2), ExportFormat::kMegatron);
  EXPECT_EQ(two.find(flag + " \\\n"), std::string::npos) << two;
  EXPECT_NE(two.find("# Megatron-LM accepts " + flag +
                     " with virtual stages only on\n# more than 2 pipeline stages (validate_args)"),
            std::string::npos)
      << two;
  EXPECT_NE(two.find("# Megatron-LM overlaps its sends between stages with compute but in the "
                     "warm-up and cool-down, where the plan\n# waits for every send between "
                     "stages (cluster.p2p blocking)"),
            std::string::npos)
      << two;
  // It waits in the warm-up and cool-down by default (overlapped-steady), and
  // overlaps them too with --overlap-p2p-communication-warmup-flush.
  const std::string flush = "--overlap-p2p-communication-warmup-flush";
  const Scenario steady = sending_scenario(P2pMode::kOverlappedSteady);
  const std::string by_default =
      export_plan(planned(steady, ScheduleKind::kInterleaved1F1B, 2), ExportFormat::kMegatron);
  EXPECT_EQ(by_default.find(flag), std::string::npos) << by_default;
  EXPECT_EQ(by_default.find(flush), std::string::npos) << by_default;
  EXPECT_EQ(by_default.find("send"), std::string::npos) << by_default;
  const Scenario overlaps = sending_scenario(P2pMode::kOverlapped);
  const std::string overlapped =
      export_plan(planned(overlaps, ScheduleKind::kInterleaved1F1B, 2), ExportFormat::kMegatron);
  EXPECT_EQ(overlapped.find(flag), std::string::npos) << overlapped;
  EXPECT_NE(overlapped.find(flush + " \\\n"), std::string::npos) << overlapped;
  EXPECT_EQ(overlapped.find("send"), std::string::npos) << overlapped;
  EXPECT_EQ(blocking.find(flush), std::string::npos) << blocking;
  EXPECT_EQ(overlapped.find("CUDA_DEVICE_MAX_CONNECTIONS"), std::string::npos);  // T = 1
  // Without virtual stages Megatron-LM always waits: no flag.
  EXPECT_EQ(export_plan(planned(waits, ScheduleKind::k1F1B), ExportFormat::kMegatron).find(flag),
            std::string::npos);
}

}  // namespace
}  // namespace pipescope
