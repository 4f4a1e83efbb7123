// The host that feeds the device (sim/engine/host_dispatch.h): the wait's formula,
// when ops start drained, and a stage whose small kernels the host issues
// more slowly than the GPU runs them.

#include "sim/engine/host_dispatch.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "sim/engine/simulator.h"
#include "sim/scenario/scenario_io.h"

namespace pipescope {
namespace {

TEST(HostDispatch, TheDeviceWaitsForWhatTheHostHasNotIssued) {
  // Host ahead: no wait; behind: the difference.
  EXPECT_EQ(host_wait(1000, 400, 8, HostPace::kAhead), 0);
  EXPECT_EQ(host_wait(1000, 1600, 8, HostPace::kAhead), 600);
  // After a synchronisation the first launch is on the path too.
  EXPECT_EQ(host_wait(1000, 400, 8, HostPace::kDrained), 8);
  EXPECT_EQ(host_wait(1000, 1005, 8, HostPace::kDrained), 8);
  EXPECT_EQ(host_wait(1000, 1600, 8, HostPace::kDrained), 600);
  // Blocking launches: the host's whole time is the device's wait.
  EXPECT_EQ(host_wait(1000, 400, 8, HostPace::kBlocking), 400);
  EXPECT_EQ(host_wait(1000, 1600, 8, HostPace::kBlocking), 1600);
}

TEST(HostDispatch, BlockingLaunchesSetEveryOpsPace) {
  Framework fw = *find_framework("megatron-core");
  EXPECT_EQ(leading_pace(fw, true), HostPace::kDrained);
  EXPECT_EQ(leading_pace(fw, false), HostPace::kAhead);
  EXPECT_EQ(following_pace(fw), HostPace::kAhead);
  fw.launch_blocking = true;
  EXPECT_EQ(leading_pace(fw, true), HostPace::kBlocking);
  EXPECT_EQ(leading_pace(fw, false), HostPace::kBlocking);
  EXPECT_EQ(following_pace(fw), HostPace::kBlocking);
}

TEST(HostDispatch, OpsStartDrainedWhereTheFrameworkSynchronises) {
  const Framework mc = *find_framework("megatron-core");
  EXPECT_TRUE(ops_start_drained(mc, false, 4));
  EXPECT_FALSE(ops_start_drained(mc, true, 4));   // interleaved: overlapped exchanges
  EXPECT_FALSE(ops_start_drained(mc, false, 1));  // no exchanges without stages
  EXPECT_TRUE(ops_start_drained(*find_framework("megatron-lm-2022"), true, 4));
  EXPECT_FALSE(ops_start_drained(*find_framework("deepspeed"), false, 4));
}

// A block of width 64 runs kernels of a few microseconds on an A100: at 8 us
// a launch the host is behind, and the stage's forward lasts the host's time.
Scenario tiny(const nlohmann::json& framework) {
  nlohmann::json doc = nlohmann::json::parse(R"({
    "model": { "family": "transformer", "layers": 4, "d_model": 64, "heads": 4,
               "seq_len": 32, "vocab": 100, "dtype": "bf16" },
    "cluster": { "preset": "a100-80g", "devices": 2 },
    "training": { "global_batch": 8, "micro_batches": 4, "schedule": "1f1b", "remat": false }
  })");
  doc["training"]["framework"] = framework;
  return parse_scenario(doc, "tiny.json");
}

TEST(HostDispatch, AStageOfSmallKernelsLastsTheHostsTime) {
  SimConfig config;
  config.stages = 2;
  const Scenario ideal = tiny("ideal");
  const Scenario host = tiny({{"profile", "ideal"}, {"host_launch_s", 8e-6}});
  const SimResult a = simulate(ideal, config);
  const SimResult b = simulate(host, config);
  ASSERT_EQ(a.stage_costs.size(), 2u);
  const std::unique_ptr<CostModel> cost = make_cost_model(host);
  for (std::size_t s = 0; s < 2; ++s) {
    SCOPED_TRACE(s);
    const StageCost& x = a.stage_costs[s];
    const StageCost& y = b.stage_costs[s];
    EXPECT_EQ(x.host_wait_forward, 0);
    SimTime host_fwd = 0, host_bwd = 0;
    int kernels = 0;
    for (int l = y.layers.first_layer; l <= y.layers.last_layer; ++l) {
      const OpTimes t = cost->op_times(host.model.layers[static_cast<std::size_t>(l)], 2);
      host_fwd += t.host_forward;
      host_bwd += t.host_backward;
      kernels += static_cast<int>(host.model.layers[static_cast<std::size_t>(l)].kernels->size());
    }
    // 8 us a forward kernel: the forward launches one per kernel of the list.
    EXPECT_EQ(host_fwd, seconds_to_simtime(8e-6) * kernels);
    EXPECT_GT(host_fwd, x.forward);  // the host is behind
    EXPECT_EQ(y.host_wait_forward, host_fwd - x.forward);
    EXPECT_EQ(y.forward, host_fwd);
    EXPECT_EQ(y.backward, std::max(x.backward, host_bwd));
  }
  EXPECT_GT(b.metrics.step_time, a.metrics.step_time);
}

// Stage 0 of `sc` under zero-bubble's split backward with every layer rerun.
StageCost blocking_stage(const Scenario& sc) {
  SimConfig config;
  config.stages = 2;
  config.schedule = ScheduleKind::kZbH1;
  config.remat = Remat::kAlways;
  return simulate(sc, config).stage_costs.at(0);
}

// Blocking launches: the device runs nothing while the host issues, so every
// op lasts its device time and its host time together.
TEST(HostDispatch, BlockingLaunchesAddTheHostsTimeToTheDevices) {
  SimConfig config;
  config.stages = 2;
  const Scenario ideal = tiny("ideal");
  const Scenario blocking =
      tiny({{"profile", "ideal"}, {"host_launch_s", 8e-6}, {"launch_blocking", true}});
  const SimResult a = simulate(ideal, config);
  const SimResult b = simulate(blocking, config);
  const std::unique_ptr<CostModel> cost = make_cost_model(blocking);
  for (std::size_t s = 0; s < 2; ++s) {
    SCOPED_TRACE(s);
    const StageCost& x = a.stage_costs[s];
    const StageCost& y = b.stage_costs[s];
    SimTime host_fwd = 0, host_bwd = 0;
    for (int l = y.layers.first_layer; l <= y.layers.last_layer; ++l) {
      const OpTimes t = cost->op_times(blocking.model.layers[static_cast<std::size_t>(l)], 2);
      host_fwd += t.host_forward;
      host_bwd += t.host_backward;
    }
    EXPECT_GT(host_fwd, 0);
    EXPECT_EQ(y.forward, x.forward + host_fwd);
    EXPECT_EQ(y.backward, x.backward + host_bwd);
  }
  // A recompute and a split backward's two halves pay theirs too.
  const Scenario ideal_remat = tiny("ideal");
  const StageCost z = blocking_stage(blocking);
  const StageCost w = blocking_stage(ideal_remat);
  EXPECT_EQ(z.host_wait_recompute, z.recompute - w.recompute);
  EXPECT_GT(z.host_wait_recompute, 0);
  EXPECT_EQ(z.input, w.input + z.host_wait_input);
  EXPECT_EQ(z.weight, w.weight + z.host_wait_weight);
  EXPECT_GT(z.host_wait_weight, 0);
  EXPECT_GT(z.host_wait_input, 0);
}

// Where the framework synchronises after each exchange, a forward on a
// device the host keeps up with still waits for its first launch.
TEST(HostDispatch, AfterASynchronisationTheFirstLaunchWaits) {
  SimConfig config;
  config.stages = 2;
  const SimResult r = simulate(
      tiny({{"profile", "ideal"}, {"host_launch_s", 1e-9}, {"sync_after_p2p", true}}), config);
  for (const StageCost& c : r.stage_costs) {
    EXPECT_EQ(c.host_wait_forward, 1);  // 1 ns: h, the device being ahead
    EXPECT_EQ(c.host_wait_backward, 1);
    EXPECT_EQ(c.host_wait_weight, 0);  // no W ops under 1F1B
  }
}

}  // namespace
}  // namespace pipescope
