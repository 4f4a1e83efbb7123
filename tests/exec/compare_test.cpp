// compare_run against runs whose every op time is known: a "measured" step that
// is the simulator's own timeline must compare with zero error, a slower median
// step with exactly its error, and CPU times below the wall times must show as
// time taken away from the ops.

#include "exec/compare.h"
#include "exec/shared_cores_note.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "../tiny_models.h"
#include "compare_helpers.h"
#include "costmodels/model_families.h"
#include "exec/plan_runner.h"
#include "sim/engine/simulator.h"
#include "sim/plan/plan.h"
#include "sim/scenario/model_json.h"

namespace pipescope::exec {
namespace {

using namespace compare_helpers;
using testing::tiny_transformer;

TEST(Compare, TheSimulatorsOwnTimelineComparesWithoutError) {
  const ModelSpec m = tiny_transformer(2);
  for (const Remat remat : kScheduleRemats) {
    const Plan plan = plan_of(m, 2, 4, remat);
    const Scenario sc = cpu_scenario(plan, m, known_profile(m, 2), "known.json");
    EXPECT_EQ(sc.cluster.devices, 2);
    EXPECT_EQ(sc.training.global_batch, 8);
    const SimResult r = predicted(sc, plan);
    const Comparison c = compare_run(sc, plan, {as_measured(r, 1.0, 1.0)}, 0);
    EXPECT_DOUBLE_EQ(c.predicted_step_s, r.metrics.step_time_s());
    EXPECT_DOUBLE_EQ(c.measured_step_s, r.metrics.step_time_s());
    EXPECT_EQ(c.relative_error, 0.0);
    EXPECT_DOUBLE_EQ(c.replayed_step_s, c.measured_step_s);
    EXPECT_EQ(c.runtime_overhead, 0.0);
    EXPECT_EQ(c.steal_fraction, 0.0);
    EXPECT_DOUBLE_EQ(c.measured_bubble, r.metrics.bubble_fraction);
    ASSERT_EQ(c.per_stage.size(), 2u);
    for (const StageComparison& s : c.per_stage) {
      EXPECT_DOUBLE_EQ(s.measured_busy_s, s.predicted_busy_s);
      EXPECT_EQ(s.relative_error, 0.0);
    }
    EXPECT_FALSE(c.shared_cores);
  }
}

TEST(Compare, TheMedianStepAfterWarmUpStandsForTheRun) {
  const ModelSpec m = tiny_transformer(2);
  const Plan plan = plan_of(m, 2, 2, Remat::kNever);
  const Scenario sc = cpu_scenario(plan, m, known_profile(m, 2), "known.json");
  const SimResult r = predicted(sc, plan);
  // A slow warm-up step, then steps 1.1x, 1.25x and 1.2x the prediction.
  const std::vector<StepResult> steps{as_measured(r, 9.0, 1.0), as_measured(r, 1.1, 1.0),
                                      as_measured(r, 1.25, 1.0), as_measured(r, 1.2, 1.0)};
  const Comparison c = compare_run(sc, plan, steps, 1);
  EXPECT_EQ(c.warmup_steps, 1);
  EXPECT_EQ(c.measured_steps, 3);
  EXPECT_DOUBLE_EQ(c.measured_step_s, simtime_to_seconds(steps[3].step_time));
  EXPECT_NEAR(c.relative_error, 1.0 / 1.2 - 1.0, 1e-6);
  EXPECT_NEAR(c.measured_throughput, 4.0 / c.measured_step_s, 1e-9);
  // Every op 1.2x as long: the replay is the measurement, no overhead.
  EXPECT_NEAR(c.runtime_overhead, 0.0, 1e-6);
}

TEST(Compare, CpuTimeBelowWallTimeIsTimeTakenFromTheOps) {
  const ModelSpec m = tiny_transformer(2);
  const Plan plan = plan_of(m, 2, 4, Remat::kNever);
  const Scenario sc = cpu_scenario(plan, m, known_profile(m, 2), "known.json");
  const SimResult r = predicted(sc, plan);
  // The ops ran 1.25x long on the wall clock but used only their predicted CPU time.
  const Comparison c = compare_run(sc, plan, {as_measured(r, 1.25, 0.8)}, 0);
  EXPECT_NEAR(c.steal_fraction, 0.2, 1e-3);
  EXPECT_NEAR(c.relative_error, 1.0 / 1.25 - 1.0, 1e-6);
  EXPECT_NEAR(c.cpu_relative_error, 0.0, 1e-3);
  EXPECT_NEAR(c.cpu_replayed_step_s, c.predicted_step_s, 1e-3 * c.predicted_step_s);
}

// Each kind of op of each stage, its predicted duration beside the measured
// mean: here every op ran 1.25x its prediction on 0.8x of it in CPU time.
TEST(Compare, EachKindOfOpIsComparedWithItsPrediction) {
  const ModelSpec m = tiny_transformer(2);
  struct Case {
    Remat remat;
    ScheduleKind schedule;
    std::vector<std::string> kinds;  // of one stage, in the order reported
  };
  const std::vector<Case> cases{
      {Remat::kNever, ScheduleKind::kGpipe, {"F kept", "B", "optimizer"}},
      {Remat::kAlways, ScheduleKind::kGpipe, {"F", "R", "B", "optimizer"}},
      {Remat::kNever, ScheduleKind::kZbH1, {"F kept", "B input", "W", "optimizer"}}};
  for (const Case& k : cases) {
    Plan plan = plan_of(m, 2, 4, k.remat);
    plan.schedule = k.schedule;
    auto profile = std::make_shared<Profile>(*known_profile(m, 2));
    profile->optimizer_overhead = 500000;
    const Scenario sc = cpu_scenario(plan, m, profile, "known.json");
    const SimResult r = predicted(sc, plan);
    const Comparison c = compare_run(sc, plan, {as_measured(r, 1.25, 0.8)}, 0);
    ASSERT_EQ(c.per_op.size(), 2 * k.kinds.size()) << to_string(k.schedule);
    for (std::size_t i = 0; i < c.per_op.size(); ++i) {
      const OpComparison& op = c.per_op[i];
      SCOPED_TRACE(std::string(to_string(k.schedule)) + " " + op.kind);
      EXPECT_EQ(op.stage, static_cast<int>(i / k.kinds.size()));
      EXPECT_EQ(op.kind, k.kinds[i % k.kinds.size()]);
      EXPECT_EQ(op.count, op.kind == "optimizer" ? 1 : 4);
      EXPECT_GT(op.predicted_s, 0.0);
      EXPECT_NEAR(op.measured_s, 1.25 * op.predicted_s, 1e-8);
      EXPECT_NEAR(op.measured_cpu_s, op.predicted_s, 1e-8);
      EXPECT_NEAR(op.relative_error, 1.0 / 1.25 - 1.0, 1e-6);
    }
    // A split backward's two halves are the whole backward.
    if (k.schedule == ScheduleKind::kZbH1) {
      EXPECT_NEAR(c.per_op[1].predicted_s + c.per_op[2].predicted_s,
                  simtime_to_seconds(r.stage_costs[0].backward), 1e-9);
    }
  }
  // Unless the profile timed B as a stage runs it: then B is that, and the
  // halves come to more than the whole.
  Plan plan = plan_of(m, 2, 4, Remat::kNever);
  plan.schedule = ScheduleKind::kZbH1;
  auto profile = std::make_shared<Profile>(*known_profile(m, 2));
  for (LayerProfile& l : profile->layers) {
    l.weight = l.backward;
    for (SimTime& w : l.weight) w /= 2;
    l.input = l.backward;  // B the whole backward, W half of it again
  }
  const Scenario sc = cpu_scenario(plan, m, profile, "known.json");
  const SimResult r = predicted(sc, plan);
  const Comparison c = compare_run(sc, plan, {as_measured(r, 1.0, 1.0)}, 0);
  ASSERT_EQ(c.per_op[1].kind, "B input");
  EXPECT_NEAR(c.per_op[1].predicted_s, simtime_to_seconds(r.stage_costs[0].input), 1e-9);
  EXPECT_NEAR(c.per_op[1].predicted_s, simtime_to_seconds(r.stage_costs[0].backward), 1e-9);
  EXPECT_GT(c.per_op[1].predicted_s + c.per_op[2].predicted_s,
            1.4 * simtime_to_seconds(r.stage_costs[0].backward));
  EXPECT_NEAR(c.per_op[1].measured_s, c.per_op[1].predicted_s, 1e-8);
}

TEST(Compare, MoreStagesThanCoresAreSaidToShareThem) {
  const ModelSpec m = tiny_transformer(2);
  const Plan plan = plan_of(m, 4, 4, Remat::kNever);
  const Scenario sc = cpu_scenario(plan, m, known_profile(m, 2), "known.json");
  EXPECT_EQ(sc.cluster.shared_cores, 2);
  const SimResult r = predicted(sc, plan);
  const Comparison c = compare_run(sc, plan, {as_measured(r, 1.0, 1.0)}, 0);
  EXPECT_TRUE(c.shared_cores);
  EXPECT_EQ(c.cores, 2);
  EXPECT_NE(shared_cores_note(4, 2).find("4 stages share 2 cores: predicted with a pool of that "
                                         "many cores"),
            std::string::npos);
  // Stages of ranks: each rank's stages have their share of the cores.
  EXPECT_NE(shared_cores_note(2, 2, "core", 2)
                .find("2 stages of 2 ranks each (4 threads) share 2 cores: predicted with a "
                      "pool of 1 core for each rank's stages"),
            std::string::npos);
  EXPECT_NE(shared_cores_note(2, 2, "core", 2).find("partners' cores run their other stages"),
            std::string::npos);
  EXPECT_EQ(shared_cores_note(4, 2).find("partners"), std::string::npos);
  // Two cores for four stages: slower than four dedicated cores would be.
  Scenario dedicated = sc;
  dedicated.cluster.shared_cores = 0;
  EXPECT_GT(r.metrics.step_time, predicted(dedicated, plan).metrics.step_time);
}

// What `run` checks against the machine before it allocates: fp32 weights,
// gradients and Adam's two slots, and what the schedule keeps, which remat cuts.
TEST(PlanRunner, HostMemoryIsThePlansSimulatedPeakInFp32) {
  const ModelSpec m = tiny_transformer(2);
  Plan plan = plan_of(m, 2, 4, Remat::kNever);
  plan.model_spec = model_spec_json(m);
  const HostMemoryNeed kept = plan_host_memory(plan);
  EXPECT_EQ(kept.state, m.total_params() * 16);
  EXPECT_GT(kept.activations, 0);
  plan.remat = Remat::kAlways;
  const HostMemoryNeed remat = plan_host_memory(plan);
  EXPECT_EQ(remat.state, kept.state);
  EXPECT_LT(remat.activations, kept.activations);
  // Twice the batch, twice the activations; the state stays.
  plan.global_batch *= 2;
  plan.micro_batch_size *= 2;
  const HostMemoryNeed twice = plan_host_memory(plan);
  EXPECT_EQ(twice.state, remat.state);
  EXPECT_EQ(twice.activations, 2 * remat.activations);
}

// Each device holds its stages' state and what its schedule keeps; the sum is
// the host's need.
TEST(PlanRunner, DeviceMemoryIsEachDevicesPeak) {
  const ModelSpec m = tiny_transformer(4);
  Plan plan = plan_of(m, 2, 4, Remat::kNever);
  plan.model_spec = model_spec_json(m);
  const std::vector<HostMemoryNeed> each = plan_device_memory(plan);
  ASSERT_EQ(each.size(), 2u);
  const HostMemoryNeed all = plan_host_memory(plan);
  EXPECT_EQ(each[0].state + each[1].state, all.state);
  EXPECT_EQ(each[0].activations + each[1].activations, all.activations);
  EXPECT_GT(each[0].state, 0);
  EXPECT_GT(each[1].state, 0);
}

// A pool that holds exactly what its devices need passes; one byte less is
// refused, naming the pool, its source and the plan; other pools' devices do not
// count against it.
TEST(PlanRunner, EachMemoryPoolMustHoldItsDevices) {
  const ModelSpec m = tiny_transformer(4);
  Plan plan = plan_of(m, 2, 4, Remat::kNever);
  plan.model_spec = model_spec_json(m);
  const std::vector<HostMemoryNeed> each = plan_device_memory(plan);
  const Bytes first = each[0].total();
  const Bytes second = each[1].total();
  EXPECT_NO_THROW(check_plan_fits(
      plan, "p.json", {{"on GPU 0", first, "test", {0}}, {"on GPU 1", second, "test", {1}}}));
  EXPECT_NO_THROW(check_plan_fits(plan, "p.json", {{"here", first + second, "test", {0, 1}}}));
  try {
    check_plan_fits(plan, "p.json",
                    {{"on GPU 0", first, "test", {0}}, {"on GPU 1", second - 1, "probe", {1}}});
    FAIL() << "expected the second pool to be refused";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("p.json: this plan of scenario '", 0), 0u) << what;
    EXPECT_NE(what.find("to run on GPU 1 ("), std::string::npos) << what;
    EXPECT_NE(what.find(" available (probe)"), std::string::npos) << what;
  }
}

// Device d on GPU d mod G; a GPU whose free memory is unknown is not a pool.
TEST(PlanRunner, GpuPoolsFollowThePlacement) {
  const auto free = [](int gpu) -> std::optional<Bytes> {
    if (gpu == 1) return std::nullopt;
    return Bytes{1000} * (gpu + 1);
  };
  const std::vector<MemoryPool> pools = gpu_memory_pools(5, 3, free);
  ASSERT_EQ(pools.size(), 2u);
  EXPECT_EQ(pools[0].name, "on GPU 0");
  EXPECT_EQ(pools[0].available, 1000);
  EXPECT_EQ(pools[0].devices, (std::vector<int>{0, 3}));
  EXPECT_EQ(pools[1].name, "on GPU 2");
  EXPECT_EQ(pools[1].available, 3000);
  EXPECT_EQ(pools[1].devices, (std::vector<int>{2}));
  // More GPUs than devices: the spare GPUs hold nothing and are left out.
  EXPECT_EQ(gpu_memory_pools(2, 4, free).size(), 1u);
}

TEST(PlanRunner, MeasuredStepsAreNamedForAnyNumberOfSteps) {
  EXPECT_EQ(measured_steps_label(20, 1), "median of steps 2-20");
  EXPECT_EQ(measured_steps_label(2, 1), "step 2");
  EXPECT_EQ(measured_steps_label(5, 0), "median of steps 1-5");
  EXPECT_EQ(measured_steps_label(1, 1),
            "step 1, warm-up included (a median needs --steps 3 or more)");
}

TEST(Compare, RelativeError) {
  EXPECT_EQ(relative_error(1.1, 1.0), 1.1 / 1.0 - 1.0);
  EXPECT_EQ(relative_error(0.0, 0.0), 0.0);
  EXPECT_EQ(relative_error(0.5, 2.0), -0.75);
}

}  // namespace
}  // namespace pipescope::exec
