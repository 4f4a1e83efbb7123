// Profiles as the simulator's cost model: exact step times from measured
// figures, with and without cores shared between devices, the split
// backward's halves, MFU against the profiled GEMM rate, and what
// apply_profile takes and refuses.

#include "sim/formats/profile_io.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "profile_fixtures.h"
#include "sim/engine/simulator.h"
#include "sim/formats/result_json.h"
#include "sim/scenario/scenario_io.h"
#include "sim_fixtures.h"

namespace pipescope {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

using testing::split_profile;
using testing::split_scenario;
using testing::uniform_profile;

// The partitioner prices a layer of a split schedule with its B and W, which
// here come to more than the fused backward it prices under 1F1B.
TEST(ProfiledSimulation, PartitionerPricesASplitBackwardsHalves) {
  Scenario sc = split_scenario();
  const auto profile = std::make_shared<const Profile>(split_profile(sc));
  apply_profile(sc, profile, "p.json");
  const ProfiledCostModel cost(profile);
  const LayerSpec& layer = sc.model.layers[0];
  const PartitionProblem split =
      partition_problem(sc, cost, 2, 4, Remat::kNever, ScheduleKind::kZbH1);
  const PartitionProblem fused =
      partition_problem(sc, cost, 2, 4, Remat::kNever, ScheduleKind::k1F1B);
  EXPECT_EQ(split.layers[0].backward, cost.input_grad(layer, 2) + cost.weight_grad(layer, 2));
  EXPECT_EQ(fused.layers[0].backward, cost.backward(layer, 2));
  EXPECT_GT(split.layers[0].backward, fused.layers[0].backward);
  // A custom schedule says for itself whether it splits.
  CustomSchedule custom;
  custom.stages = 2;
  custom.micro_batches = 4;
  custom.stage_rank = {0, 1};
  custom.split = true;
  const PartitionProblem custom_split =
      partition_problem(sc, cost, 2, 4, Remat::kNever, ScheduleKind::kCustom, 1, &custom);
  EXPECT_EQ(custom_split.layers[0].backward, split.layers[0].backward);
  custom.split = false;
  EXPECT_EQ(partition_problem(sc, cost, 2, 4, Remat::kNever, ScheduleKind::kCustom, 1, &custom)
                .layers[0]
                .backward,
            fused.layers[0].backward);
}

// Under a split schedule each B lasts its stage's measured input gradients and
// each W its weight gradients, while a fused backward keeps the whole: K=2
// stages of two layers, micro-batches of 2 samples (B 2 x 2 x 150 ... 700
// interpolated: 150 + (700 - 150) / 3 = 333 a layer at 2 samples).
TEST(ProfiledSimulation, SplitBackwardRunsTheMeasuredHalves) {
  Scenario sc = split_scenario();
  apply_profile(sc, std::make_shared<const Profile>(split_profile(sc)), "p.json");
  SimConfig config;
  config.schedule = ScheduleKind::kZbH1;
  config.record_timeline = true;
  const SimResult r = simulate(sc, config);
  ASSERT_EQ(r.stage_costs.size(), 2u);
  const SimTime input = 2 * (150 + (700 - 150) / 3);  // two layers at 2 samples
  const SimTime weight = 2 * (90 + (300 - 90) / 3);
  EXPECT_EQ(r.stage_costs[0].input, input);
  EXPECT_EQ(r.stage_costs[0].weight, weight);
  EXPECT_EQ(r.stage_costs[0].backward, 2 * 400);
  int backwards = 0, weights = 0;
  for (const TimelineEvent& e : r.timeline.events) {
    if (e.lane != Lane::kCompute) continue;
    if (e.kind == EventKind::kBackward) {
      EXPECT_EQ(e.end - e.start, input);
      ++backwards;
    } else if (e.kind == EventKind::kWeight) {
      EXPECT_EQ(e.end - e.start, weight);
      ++weights;
    }
  }
  EXPECT_EQ(backwards, 2 * 4);
  EXPECT_EQ(weights, 2 * 4);
  // What the result says a stage's backward costs is what it runs: B + W.
  EXPECT_TRUE(r.split_backward());
  EXPECT_DOUBLE_EQ(to_json(r)["stages"][0]["bwd_s"].get<double>(),
                   simtime_to_seconds(input + weight));
  // 1F1B runs the whole backward.
  config.schedule = ScheduleKind::k1F1B;
  for (const TimelineEvent& e : simulate(sc, config).timeline.events) {
    if (e.lane == Lane::kCompute && e.kind == EventKind::kBackward) {
      EXPECT_EQ(e.end - e.start, 2 * 400);
    }
  }
}

// A CPU plan's MFU is measured against the profile's GEMM rate, or the
// fastest op's rate when one beat it, so never above 1; a GPU profile's
// devices keep their own peak. The uniform layers do 1000 FLOPs a sample
// forward in 100 ns and 2000 backward in 200 ns: 10 GFLOP/s each.
TEST(ApplyProfile, MfuAgainstTheProfiledGemmRate) {
  const auto mfu_of = [](const Scenario& sc, double peak) {
    const SimResult r = simulate(sc, SimConfig{});
    const double flops = 3000.0 * 4 * 8;  // 4 layers, 8 samples
    EXPECT_DOUBLE_EQ(r.metrics.mfu, flops / (r.metrics.step_time_s() * peak * 2));
    EXPECT_LE(r.metrics.mfu, 1.0);
    return r.metrics.mfu;
  };
  Scenario base = testing::uniform_scenario(4, 2, 1000.0, 8, 4, false);
  Profile p = uniform_profile(base, 2);
  p.gemm.flop_s = 2e10;
  Scenario sc = base;
  apply_profile(sc, std::make_shared<const Profile>(p), "p.json");
  EXPECT_EQ(sc.cluster.device.peak_flops_fp32, 2e10);
  EXPECT_EQ(sc.cluster.device.peak_flops_16bit, 2e10);
  const double at_gemm = mfu_of(sc, 2e10);
  EXPECT_GT(at_gemm, 0.0);
  // A GEMM rate below the ops' (measured while the core was taken): the ops'.
  p.gemm.flop_s = 5e9;
  Scenario fast_ops = base;
  apply_profile(fast_ops, std::make_shared<const Profile>(p), "p.json");
  EXPECT_DOUBLE_EQ(fast_ops.cluster.device.peak_flops_fp32, 1e10);
  EXPECT_DOUBLE_EQ(mfu_of(fast_ops, 1e10), 2.0 * at_gemm);
  // M = 8 micro-batches of one sample: the step is all ops but the bubble.
  Scenario busy = testing::uniform_scenario(4, 2, 1000.0, 8, 8, false);
  apply_profile(busy, std::make_shared<const Profile>(p), "p.json");
  EXPECT_LE(simulate(busy, SimConfig{}).metrics.mfu, 1.0);
  EXPECT_GT(simulate(busy, SimConfig{}).metrics.mfu, 0.8);
  p.backend = "cuda";
  Scenario gpu = base;
  apply_profile(gpu, std::make_shared<const Profile>(p), "p.json");
  EXPECT_EQ(gpu.cluster.device.peak_flops_fp32, base.cluster.device.peak_flops_fp32);
}

TEST(ApplyProfile, TakesTheTransportAndCoresAndRefusesUnmeasuredLayers) {
  Scenario sc = testing::uniform_scenario(4, 2, 1000.0, 8, 4, false);
  Profile p = uniform_profile(sc, 1);
  p.transport_latency_s = 3e-6;
  p.transport_bandwidth = 7e9;
  apply_profile(sc, std::make_shared<const Profile>(p), "p.json");
  EXPECT_EQ(sc.cluster.interconnect.latency_s, 3e-6);
  EXPECT_EQ(sc.cluster.interconnect.bandwidth, 7e9);
  EXPECT_EQ(sc.cluster.shared_cores, 1);
  EXPECT_EQ(sc.cluster.concurrency_slowdown, (std::vector<double>{1.0}));
  ASSERT_NE(sc.cluster.profile, nullptr);
  EXPECT_EQ(make_cost_model(sc)->name(), "profiled");

  Scenario other = testing::uniform_scenario(4, 2, 2000.0, 8, 4, false);  // other FLOPs
  try {
    apply_profile(other, std::make_shared<const Profile>(p), "p.json");
    FAIL() << "a profile of other layers was applied";
  } catch (const ScenarioError& e) {
    EXPECT_EQ(e.file(), "p.json");
    EXPECT_EQ(e.json_path(), "layers");
    EXPECT_NE(std::string(e.what()).find("no measurement for layer 'l0'"), std::string::npos)
        << e.what();
  }
}

// With measured times GPipe's closed form holds exactly: K=2 stages of two
// layers, M=4 micro-batches of 2 samples, so t_f = 2 x 200 ns and t_b = 2 x 400.
TEST(ProfiledSimulation, GpipeClosedFormFromMeasuredTimes) {
  Scenario sc = testing::uniform_scenario(4, 2, 1000.0, 8, 4, false);
  apply_profile(sc, std::make_shared<const Profile>(uniform_profile(sc, 2)), "p.json");
  const SimResult r = simulate(sc, SimConfig{});
  EXPECT_EQ(r.cost_model, "profiled");
  const SimTime tf = 2 * 200;  // interpolated between 1 (100 ns) and 4 (400 ns)
  const SimTime tb = 2 * 400;
  ASSERT_EQ(r.stage_costs.size(), 2u);
  EXPECT_EQ(r.stage_costs[0].forward, tf);
  EXPECT_EQ(r.stage_costs[1].backward, tb);
  EXPECT_EQ(r.metrics.step_time, (4 + 2 - 1) * (tf + tb));
}

// One core for two devices: every op waits for the core, so the step is the sum
// of all ops, K x M x (t_f + t_b), instead of (M + K - 1)(t_f + t_b).
TEST(ProfiledSimulation, DevicesSharingOneCoreRunOneOpAtATime) {
  Scenario sc = testing::uniform_scenario(4, 2, 1000.0, 8, 4, false);
  apply_profile(sc, std::make_shared<const Profile>(uniform_profile(sc, 1)), "p.json");
  const SimResult r = simulate(sc, SimConfig{});
  const SimTime tf = 400;
  const SimTime tb = 800;
  EXPECT_EQ(r.metrics.step_time, 2 * 4 * (tf + tb));
  // Never two ops at once.
  std::vector<TimelineEvent> ops;
  for (const TimelineEvent& e : r.timeline.events) {
    if (e.lane == Lane::kCompute) ops.push_back(e);
  }
  std::sort(ops.begin(), ops.end(),
            [](const TimelineEvent& a, const TimelineEvent& b) { return a.start < b.start; });
  for (std::size_t i = 1; i < ops.size(); ++i) EXPECT_GE(ops[i].start, ops[i - 1].end);
}

// Four devices on two cores: between the two bounds (the work over two cores,
// and the dedicated-core pipeline), never more than two ops at once.
TEST(ProfiledSimulation, FourDevicesOnTwoCores) {
  Scenario dedicated = testing::uniform_scenario(4, 4, 1000.0, 8, 8, false);
  apply_profile(dedicated, std::make_shared<const Profile>(uniform_profile(dedicated, 4)), "p");
  Scenario shared = dedicated;
  shared.cluster.shared_cores = 2;
  const SimResult a = simulate(dedicated, SimConfig{});
  const SimResult b = simulate(shared, SimConfig{});
  const SimTime tf = 100;  // one layer per stage, one sample per micro-batch
  const SimTime tb = 200;
  EXPECT_EQ(a.metrics.step_time, (8 + 4 - 1) * (tf + tb));
  EXPECT_GE(b.metrics.step_time, 4 * 8 * (tf + tb) / 2);
  EXPECT_GT(b.metrics.step_time, a.metrics.step_time);
  std::vector<std::pair<SimTime, int>> edges;
  for (const TimelineEvent& e : b.timeline.events) {
    if (e.lane != Lane::kCompute) continue;
    edges.emplace_back(e.start, +1);
    edges.emplace_back(e.end, -1);
  }
  std::sort(edges.begin(), edges.end());  // an end (-1) sorts before a start at the same time
  int running = 0;
  int most = 0;
  for (const auto& [t, d] : edges) {
    running += d;
    most = std::max(most, running);
  }
  EXPECT_EQ(most, 2);
}

// The profiler times R as a forward that keeps every stash: a forward without
// remat, which keeps its stash for B, costs that; one under remat, which drops
// it as it goes, costs the forward's figure. K=2 stages of two layers, M=4
// micro-batches of 2: forward 2 x 200 ns, kept 2 x 300, backward 2 x 400.
TEST(ProfiledSimulation, ForwardThatKeepsItsStashCostsTheRecompute) {
  Scenario sc = testing::uniform_scenario(4, 2, 1000.0, 8, 4, false);
  Profile p = uniform_profile(sc, 2);
  p.layers[0].recompute = {150, 600};
  apply_profile(sc, std::make_shared<const Profile>(p), "p.json");
  const SimTime tf = 400, tk = 600, tb = 800;
  SimConfig never;
  never.remat = Remat::kNever;
  const SimResult off = simulate(sc, never);
  EXPECT_EQ(off.stage_costs[0].forward, tf);
  EXPECT_EQ(off.stage_costs[0].forward_kept, tk);
  EXPECT_EQ(off.metrics.step_time, (4 + 2 - 1) * (tk + tb));
  // Remat always: every F drops its stash, every B is preceded by R (= tk).
  SimConfig always;
  always.remat = Remat::kAlways;
  const SimResult on = simulate(sc, always);
  SimTime forwards = 0;
  for (const TimelineEvent& e : on.timeline.events) {
    if (e.lane == Lane::kCompute && e.kind == EventKind::kForward) {
      EXPECT_EQ(e.end - e.start, tf);
      ++forwards;
    }
  }
  EXPECT_EQ(forwards, 2 * 4);
  // Except-last: the last micro-batch keeps its stash.
  SimConfig except_last;
  except_last.remat = Remat::kExceptLast;
  const SimResult el = simulate(sc, except_last);
  for (const TimelineEvent& e : el.timeline.events) {
    if (e.lane == Lane::kCompute && e.kind == EventKind::kForward) {
      EXPECT_EQ(e.end - e.start, e.micro_batch == 3 ? tk : tf) << "F" << e.micro_batch;
    }
  }
}

TEST(ApplyProfile, RefusesMeasurementsThatWouldOverflowTheClock) {
  // An hour a layer at one sample, three million samples a step.
  Scenario sc = testing::uniform_scenario(4, 2, 1000.0, 3'000'000, 1, false);
  Profile p = uniform_profile(sc, 2);
  p.layers[0].batch_sizes = {1};
  p.layers[0].forward = {3'600'000'000'000};
  p.layers[0].backward = {3'600'000'000'000};
  p.layers[0].recompute = {3'600'000'000'000};
  try {
    apply_profile(sc, std::make_shared<const Profile>(p), "p.json");
    FAIL() << "a step of centuries was accepted";
  } catch (const ScenarioError& e) {
    EXPECT_EQ(e.json_path(), "layers");
    EXPECT_NE(std::string(e.what()).find("could take over 30 years"), std::string::npos)
        << e.what();
  }
  // A batch of 30 takes 30 x 3 x 4 hours: fine.
  Scenario small = testing::uniform_scenario(4, 2, 1000.0, 30, 1, false);
  EXPECT_NO_THROW(apply_profile(small, std::make_shared<const Profile>(p), "p.json"));
  // A split backward's halves count where they exceed the whole: a
  // nanosecond's backward, B and W of an hour each.
  Profile split = uniform_profile(sc, 2);
  split.layers[0].batch_sizes = {1};
  split.layers[0].forward = {1};
  split.layers[0].backward = {1};
  split.layers[0].recompute = {1};
  split.layers[0].input = {3'600'000'000'000};
  split.layers[0].weight = {3'600'000'000'000};
  EXPECT_THROW(apply_profile(sc, std::make_shared<const Profile>(split), "p.json"), ScenarioError);
}

TEST(ConcurrencySlowdown, InterpolatesBetweenMeasuredCounts) {
  const std::vector<double> f{1.0, 1.2, 1.6};
  EXPECT_EQ(concurrency_slowdown_at(f, 1.0), 1.0);
  EXPECT_EQ(concurrency_slowdown_at(f, 0.5), 1.0);
  EXPECT_DOUBLE_EQ(concurrency_slowdown_at(f, 1.5), 1.1);
  EXPECT_DOUBLE_EQ(concurrency_slowdown_at(f, 2.0), 1.2);
  EXPECT_DOUBLE_EQ(concurrency_slowdown_at(f, 2.25), 1.3);
  EXPECT_EQ(concurrency_slowdown_at(f, 3.0), 1.6);
  EXPECT_EQ(concurrency_slowdown_at(f, 7.0), 1.6);
  EXPECT_EQ(concurrency_slowdown_at({}, 2.0), 1.0);
}

// K=2, M=1: one device computes at a time, so no slowdown. K=2, M=64: the two
// devices compute together nearly all the step (64 of 65 slots), and every op is
// stretched by the slowdown at that mean.
TEST(ConcurrencySlowdown, StretchesOpsByTheMeanNumberComputing) {
  Scenario one = testing::uniform_scenario(2, 2, 1000.0, 1, 1, false);
  Profile p = uniform_profile(one, 2);
  p.concurrency_slowdown = {1.0, 1.5};
  apply_profile(one, std::make_shared<const Profile>(p), "p.json");
  const SimResult r1 = simulate(one, SimConfig{});
  EXPECT_EQ(r1.stage_costs[0].forward, 100);
  EXPECT_EQ(r1.metrics.step_time, 2 * (100 + 200));

  Scenario many = testing::uniform_scenario(2, 2, 1000.0, 64, 64, false);
  apply_profile(many, std::make_shared<const Profile>(p), "p.json");
  const SimResult r64 = simulate(many, SimConfig{});
  // Mean computing devices 2 * 64 / 65 before the stretch; the stretch keeps it.
  const double factor = concurrency_slowdown_at({1.0, 1.5}, 2.0 * 64 / 65);
  EXPECT_EQ(r64.stage_costs[0].forward, std::llround(100 * factor));
  EXPECT_EQ(r64.stage_costs[1].backward, std::llround(200 * factor));
  EXPECT_EQ(r64.metrics.step_time, 65 * (r64.stage_costs[0].forward + r64.stage_costs[0].backward));
}

// Under a split schedule B and W keep their measured times while the other
// ops stretch: the profile times them with their operands already out of the
// caches, which the other cores' work cannot push out again.
TEST(ConcurrencySlowdown, LeavesASplitBackwardsHalvesAsMeasured) {
  Scenario plain = split_scenario();
  apply_profile(plain, std::make_shared<const Profile>(split_profile(plain)), "p.json");
  Scenario shared = split_scenario();
  Profile p = split_profile(shared);
  p.concurrency_slowdown = {1.0, 1.5};
  apply_profile(shared, std::make_shared<const Profile>(p), "p.json");
  SimConfig config;
  config.schedule = ScheduleKind::kZbH1;
  const StageCost base = simulate(plain, config).stage_costs[0];
  const StageCost stretched = simulate(shared, config).stage_costs[0];
  EXPECT_GT(static_cast<double>(stretched.forward), 1.05 * static_cast<double>(base.forward));
  EXPECT_GT(stretched.backward, base.backward);
  EXPECT_EQ(stretched.input, base.input);
  EXPECT_EQ(stretched.weight, base.weight);
  // A profile that did not time B (written before it was): both stretch.
  Profile old = p;
  for (LayerProfile& l : old.layers) l.input.clear();
  Scenario old_shared = split_scenario();
  apply_profile(old_shared, std::make_shared<const Profile>(old), "p.json");
  old.concurrency_slowdown = {1.0};
  Scenario old_plain = split_scenario();
  apply_profile(old_plain, std::make_shared<const Profile>(old), "p.json");
  const StageCost old_base = simulate(old_plain, config).stage_costs[0];
  const StageCost old_stretched = simulate(old_shared, config).stage_costs[0];
  EXPECT_GT(static_cast<double>(old_stretched.input), 1.05 * static_cast<double>(old_base.input));
  EXPECT_GT(static_cast<double>(old_stretched.weight), 1.05 * static_cast<double>(old_base.weight));
  // A profile whose slowdown was measured on every op as the stages run them,
  // B and W included: they stretch like the rest.
  Profile staged = p;
  staged.rounds = ProfileRounds{3, 3, 0.05, 0.0, true};
  Scenario staged_shared = split_scenario();
  apply_profile(staged_shared, std::make_shared<const Profile>(staged), "p.json");
  const StageCost staged_stretched = simulate(staged_shared, config).stage_costs[0];
  EXPECT_GT(static_cast<double>(staged_stretched.forward),
            1.05 * static_cast<double>(base.forward));
  EXPECT_GT(static_cast<double>(staged_stretched.input), 1.05 * static_cast<double>(base.input));
  EXPECT_GT(static_cast<double>(staged_stretched.weight), 1.05 * static_cast<double>(base.weight));
}

}  // namespace
}  // namespace pipescope
