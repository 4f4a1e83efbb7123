// compare_run with T = 2 tensor ranks a stage: the simulator's all-reduces (one
// tensor event for each F, R and B, with their bytes) against those a real run
// records, op for op; the simulator's own timeline compares without error. The
// structure is checked, not the speed.

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "../tiny_models.h"
#include "compare_helpers.h"
#include "costmodels/model_families.h"
#include "exec/compare.h"
#include "exec/plan_runner.h"
#include "exec/profiler.h"
#include "exec/transport_profile.h"
#include "sim/engine/simulator.h"
#include "sim/engine/tensor_parallel.h"

namespace pipescope::exec {
namespace {

using namespace compare_helpers;

constexpr int kT = 2;

// One rank's share of the executor's tiny transformer (embed, 2 blocks, head).
ModelSpec share() {
  return make_transformer(testing::tiny_executor_transformer_params(2), "tiny", {kT, false});
}

// known_profile with all-reduces that take time: 0.1 ms a hop, 1 GB/s.
std::shared_ptr<const Profile> profile_with_ring(const ModelSpec& m) {
  auto p = std::make_shared<Profile>(*known_profile(m, 4));
  p->transport_latency_s = 1e-4;
  p->transport_bandwidth = 1e9;
  return p;
}

TEST(TensorParallelCompare, TheScenarioIsGroupsOfTCores) {
  const ModelSpec m = share();
  const Plan plan = plan_of(m, 2, 2, Remat::kNever, kT);
  const Scenario sc = cpu_scenario(plan, m, profile_with_ring(m), "known.json");
  EXPECT_EQ(sc.cluster.devices, 2);
  EXPECT_EQ(sc.cluster.tensor_parallel, kT);
  EXPECT_EQ(sc.training.tensor_parallel, kT);
  EXPECT_EQ(sc.cluster.physical_devices(), 4);
  // 4 cores hold 2 groups of 2.
  EXPECT_EQ(sc.cluster.shared_cores, 2);
}

// A group's all-reduce timed at 1 KiB .. 1 MiB as 20 us + bytes at 4 GB/s:
// fitted, it gives the ring a link whose all-reduces take exactly that, one
// latency each, and the optimizer step takes the group's slowdown.
TEST(TensorParallelCompare, AMeasuredGroupsAllReduceIsWhatTheRingTakes) {
  const std::vector<double> bytes{1024, 16384, 131072, 1048576};
  std::vector<double> seconds;
  for (const double b : bytes) seconds.push_back(20e-6 + b / 4e9);
  const TransportFigures fit = fit_transport(bytes, seconds);
  const ModelSpec m = share();
  auto p = std::make_shared<Profile>(*profile_with_ring(m));
  p->tensor_group = {kT, fit.latency_s, fit.bandwidth, 1.5};
  const Scenario sc = cpu_scenario(plan_of(m, 2, 2, Remat::kNever, kT), m, p, "known.json");
  const DataParallel ring = tensor_ring(sc.cluster);
  constexpr Bytes kBytes = 3 << 20;  // over 6 all-reduces
  EXPECT_NEAR(static_cast<double>(allreduce_time(ring, kBytes, 6)),
              (6 * 20e-6 + static_cast<double>(kBytes) / 4e9) * 1e9, 2.0);
  EXPECT_DOUBLE_EQ(sc.cluster.profile->optimizer_ns_per_param, 1.5 * p->optimizer_ns_per_param);
  // T = 4 likewise, from the link alone.
  const Interconnect four = tensor_group_link({4, 20e-6, 4e9, 1.0}, 4);
  DataParallel four_ring;
  four_ring.replicas = 4;
  four_ring.bandwidth = four.bandwidth;
  four_ring.latency_s = four.latency_s;
  EXPECT_NEAR(static_cast<double>(allreduce_time(four_ring, kBytes, 6)),
              (6 * 20e-6 + static_cast<double>(kBytes) / 4e9) * 1e9, 2.0);
  // A group measured for another T is not this plan's: the transport's ring.
  p->tensor_group.ranks = 4;
  const Scenario other = cpu_scenario(plan_of(m, 2, 2, Remat::kNever, kT), m, p, "known.json");
  EXPECT_EQ(other.cluster.interconnect.latency_s, 1e-4);
  EXPECT_EQ(other.cluster.profile->optimizer_ns_per_param, p->optimizer_ns_per_param);
}

TEST(TensorParallelCompare, TheSimulatorsOwnTimelineMatchesItsAllReducesOpForOp) {
  const ModelSpec m = share();
  for (const Remat remat : kScheduleRemats) {
    SCOPED_TRACE(std::string(remat_label(remat)));
    const Plan plan = plan_of(m, 2, 4, remat, kT);
    const Scenario sc = cpu_scenario(plan, m, profile_with_ring(m), "known.json");
    const SimResult r = predicted(sc, plan);
    const Comparison c = compare_run(sc, plan, {as_measured(r, 1.0, 1.0)}, 0);
    EXPECT_EQ(c.tensor_parallel, kT);
    EXPECT_EQ(c.relative_error, 0.0);
    EXPECT_NEAR(c.runtime_overhead, 0.0, 1e-9);
    // F and B of 4 micro-batches on 2 stages, and R where they recompute.
    const int recomputed = remat == Remat::kAlways ? 4 : remat == Remat::kExceptLast ? 3 : 0;
    EXPECT_EQ(c.collectives.predicted, 2 * (4 + 4 + recomputed));
    EXPECT_EQ(c.collectives.measured, c.collectives.predicted);
    EXPECT_EQ(c.collectives.matched, c.collectives.predicted);
    EXPECT_EQ(c.collectives.measured_bytes, c.collectives.predicted_bytes);
    int rows = 0;
    for (const OpComparison& op : c.per_op) {
      if (op.kind.find("all-reduce") == std::string::npos) continue;
      ++rows;
      EXPECT_GT(op.predicted_s, 0.0) << op.kind;
      EXPECT_NEAR(op.relative_error, 0.0, 1e-9) << op.kind;
    }
    EXPECT_EQ(rows, 2 * (recomputed > 0 ? 3 : 2));
  }
}

TEST(TensorParallelCompare, ARealRunsAllReducesAreThePredictedOnes) {
  const ModelSpec m = share();
  for (const ScheduleKind schedule : {ScheduleKind::kGpipe, ScheduleKind::kZbH1}) {
    SCOPED_TRACE(std::string(to_string(schedule)));
    Plan plan = plan_of(m, 2, 2, Remat::kExceptLast, kT);
    plan.schedule = schedule;
    PlanRunOptions o;
    o.steps = 2;
    const std::vector<StepResult> steps = run_plan(plan, m, o);
    const Scenario sc = cpu_scenario(plan, m, profile_with_ring(m), "known.json");
    const Comparison c = compare_run(sc, plan, steps, 1);
    // F and B of 2 micro-batches on 2 stages, R of the first.
    EXPECT_EQ(c.collectives.predicted, 2 * (2 + 2 + 1));
    EXPECT_EQ(c.collectives.measured, c.collectives.predicted);
    EXPECT_EQ(c.collectives.matched, c.collectives.predicted);
    EXPECT_EQ(c.collectives.measured_bytes, c.collectives.predicted_bytes);
    EXPECT_GT(c.collectives.measured_bytes, 0);
    std::vector<std::string> kinds;
    for (const OpComparison& op : c.per_op) {
      if (op.stage == 0) kinds.push_back(op.kind);
    }
    const bool split = schedule == ScheduleKind::kZbH1;
    const std::vector<std::string> want =
        split ? std::vector<std::string>{"F",
                                         "F kept",
                                         "R",
                                         "B input",
                                         "W",
                                         "optimizer",
                                         "F all-reduce",
                                         "R all-reduce",
                                         "B all-reduce"}
              : std::vector<std::string>{
                    "F",           "F kept", "R", "B", "optimizer", "F all-reduce", "R all-reduce",
                    "B all-reduce"};
    EXPECT_EQ(kinds, want);
  }
}

}  // namespace
}  // namespace pipescope::exec
