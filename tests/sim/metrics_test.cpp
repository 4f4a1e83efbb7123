// Throughput, tokens, MFU and per-device bubble against hand computations.

#include <gtest/gtest.h>

#include "sim/engine/simulator.h"
#include "sim/scenario/scenario_io.h"
#include "sim_fixtures.h"

namespace pipescope {
namespace {

TEST(Metrics, ThroughputAndMfuOfOneDevice) {
  // One device, 4 layers of 1000 FLOPs per sample, batch 8 in 2 micro-batches:
  // the device computes all the time, so MFU is exactly 1.
  Scenario sc = testing::uniform_scenario(4, 1, 1000.0, 8, 2, false);
  sc.model.tokens_per_sample = 16;
  const SimResult r = simulate(sc, SimConfig{});
  const SimTime step = 8 * 4 * 3000;  // samples x layers x (fwd + bwd) FLOPs, 1 ns each
  EXPECT_EQ(r.metrics.step_time, step);
  EXPECT_DOUBLE_EQ(r.metrics.samples_per_s, 8 / (step * 1e-9));
  EXPECT_DOUBLE_EQ(r.metrics.tokens_per_s, 16 * 8 / (step * 1e-9));
  EXPECT_DOUBLE_EQ(r.metrics.mfu, 1.0);
  EXPECT_EQ(r.metrics.bubble_fraction, 0.0);
}

TEST(Metrics, MfuExcludesRecomputeAndCountsIdleDevices) {
  // K=2, M=1, remat: step = 2 (t_f + t_b) + t_r with t_f = 2000 ns, t_b = 4000,
  // t_r = 2000; model FLOPs are 4 layers x 3000 = 12000.
  const Scenario sc = testing::uniform_scenario(4, 2, 1000.0, 1, 1, true);
  const SimResult r = simulate(sc, SimConfig{});
  EXPECT_EQ(r.metrics.step_time, 14000);
  EXPECT_DOUBLE_EQ(r.metrics.mfu, 12000.0 / (14000.0 * 2));
  // Each device computes t_f + t_r + t_b = 8000 of 14000 ns.
  EXPECT_DOUBLE_EQ(r.metrics.devices[0].bubble_fraction, 6000.0 / 14000.0);
  EXPECT_DOUBLE_EQ(r.metrics.bubble_fraction, 6000.0 / 14000.0);
  EXPECT_EQ(r.metrics.recompute_time, 4000);
}

TEST(Metrics, SlowestStageSetsTheStep) {
  // Three layers on two stages: uniform gives stage 0 two layers; with M=1 the
  // step is t_f0 + t_f1 + t_b1 + t_b0 = 3 x 3000.
  const Scenario sc = testing::uniform_scenario(3, 2, 1000.0, 1, 1, false);
  const SimResult r = simulate(sc, SimConfig{});
  EXPECT_EQ(r.stage_costs[0].layers.layer_count(), 2);
  EXPECT_EQ(r.stage_costs[1].layers.layer_count(), 1);
  EXPECT_EQ(r.metrics.step_time, 9000);
  EXPECT_EQ(r.metrics.devices[0].busy, 6000);
  EXPECT_EQ(r.metrics.devices[1].busy, 3000);
}

// Where a model's GEMMs run in FP8 (model.fp8), MFU is measured against the
// device's FP8 peak, the fastest any of its work runs: 16 blocks of d_model
// 8192 at sequence 2048 on one H100 (NeMo's costs, 64 micro-batches) reach more than the 16-bit
// peak's worth, and stay below the FP8 peak's.
TEST(Metrics, Fp8MfuIsMeasuredAgainstTheFp8Peak) {
  const Scenario sc = parse_scenario_text(R"({
    "model": {"family": "transformer", "layers": 16, "d_model": 8192, "d_ff": 28672,
              "heads": 64, "seq_len": 2048, "vocab": 32000, "dtype": "bf16", "fp8": true,
              "positions": "sinusoidal", "dropout": false},
    "cluster": {"preset": "h100-sxm", "devices": 1},
    "training": {"global_batch": 64, "micro_batches": 64, "optimizer": "adam", "remat": "never",
                 "framework": "nemo"}
  })",
                                          "fp8.json");
  SimConfig config;
  config.record_timeline = false;
  const SimResult r = simulate(sc, config);
  const Device& h100 = sc.cluster.device;
  ASSERT_GT(h100.kernels.peak_flops_fp8, h100.peak_flops_16bit);
  const double flops = sc.model.model_flops_per_device_sample() * 64;
  const double step_s = r.metrics.step_time_s();
  EXPECT_DOUBLE_EQ(r.metrics.mfu, flops / (step_s * h100.kernels.peak_flops_fp8));
  EXPECT_GT(flops / (step_s * h100.peak_flops_16bit), 1.0);
  EXPECT_LT(r.metrics.mfu, 1.0);
}

}  // namespace
}  // namespace pipescope
