// The machine's GEMM rate and each layer's share of it: the arithmetic on fixed
// measurements worked out by hand, the layers' FLOPs as the cost model counts
// them, and the micro-benchmark's result being one of the shapes it timed.
// Nothing here depends on how fast the machine is.

#include "exec/compute/gemm_rate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "costmodels/model_families.h"

namespace pipescope::exec {
namespace {

TEST(GemmFlops, TwoPerMultiplyAdd) {
  EXPECT_EQ(gemm_flops({256, 384, 512}), 2.0 * 256 * 384 * 512);  // 100,663,296
  EXPECT_EQ(gemm_flops({512, 512, 512}), 268435456.0);
  EXPECT_EQ(gemm_flops({1, 1, 1}), 2.0);
}

TEST(BestGemmRate, TheFastestShapeWins) {
  // 256^3 in 2 ms: 16.78 GFLOP/s; 512^3 in 10 ms: 26.84 GFLOP/s; a zero time
  // (no measurement) is skipped.
  const std::vector<GemmTiming> timings{
      {{256, 256, 256}, 0.002}, {{512, 512, 512}, 0.010}, {{384, 384, 384}, 0.0}};
  const GemmRate r = best_gemm_rate(timings);
  EXPECT_EQ(r.shape, (GemmShape{512, 512, 512}));
  EXPECT_DOUBLE_EQ(r.flop_s, 268435456.0 / 0.010);
  EXPECT_THROW(best_gemm_rate({}), std::invalid_argument);
  EXPECT_THROW(best_gemm_rate({{{256, 256, 256}, 0.0}}), std::invalid_argument);
}

TEST(AchievedRate, FlopsOverTimeAndItsShareOfTheMachine) {
  // 2 MFLOP in 1 us is 2 TFLOP/s, half of a 4 TFLOP/s machine.
  const AchievedRate r = achieved_rate(2e6, 1e-6, 4e12);
  EXPECT_DOUBLE_EQ(r.flop_s, 2e12);
  EXPECT_DOUBLE_EQ(r.fraction, 0.5);
  EXPECT_DOUBLE_EQ(r.fraction * 4e12, r.flop_s);
  // An unmeasured machine rate gives no share; a zero time no rate.
  EXPECT_DOUBLE_EQ(achieved_rate(2e6, 1e-6, 0.0).fraction, 0.0);
  EXPECT_DOUBLE_EQ(achieved_rate(2e6, 0.0, 4e12).flop_s, 0.0);
}

TEST(LayerRates, TheCostModelsFlopsOverTheProfilesTimes) {
  LayerSpec layer;
  layer.name = "block0";
  layer.fwd_flops = 1e6;  // per sample
  layer.bwd_flops = 2e6;
  LayerProfile entry;
  entry.batch_sizes = {2, 4};
  entry.forward = {1000, 1600};  // ns
  entry.backward = {4000, 8000};
  entry.recompute = {1000, 1600};
  // At batch 4: 4 MFLOP forward in 1.6 us = 2.5 TFLOP/s, 2.5 x a 1 TFLOP/s
  // machine; 8 MFLOP backward in 8 us = 1 TFLOP/s, all of it.
  const LayerRates r = layer_rates(layer, entry, 1, 1e12);
  EXPECT_DOUBLE_EQ(r.forward_flops, 4e6);
  EXPECT_DOUBLE_EQ(r.backward_flops, 8e6);
  EXPECT_DOUBLE_EQ(r.forward.flop_s, 2.5e12);
  EXPECT_DOUBLE_EQ(r.forward.fraction, 2.5);
  EXPECT_DOUBLE_EQ(r.backward.flop_s, 1e12);
  EXPECT_DOUBLE_EQ(r.backward.fraction, 1.0);
  // At batch 2: 2 MFLOP in 1 us.
  EXPECT_DOUBLE_EQ(layer_rates(layer, entry, 0, 1e12).forward.flop_s, 2e12);
  EXPECT_THROW(layer_rates(layer, entry, 2, 1e12), std::out_of_range);
}

// scenarios/cpu-small.json's model: a block's FLOPs are the cost model's,
// 4sh(h + h) + 4shf + 4s^2h with s = 32, h = 64, f = 256.
TEST(MeasuredLayer, TheFirstLayerOfTheEntrysSignature) {
  TransformerParams p;
  p.layers = 4;
  p.d_model = 64;
  p.heads = 4;
  p.seq_len = 32;
  p.vocab = 64;
  const ModelSpec model = make_transformer(p, "cpu-small");
  LayerProfile entry;
  entry.signature = layer_signature(model.layers[3]);  // block2: every block's signature
  const LayerSpec* layer = measured_layer(model, entry);
  ASSERT_NE(layer, nullptr);
  EXPECT_EQ(layer->name, "block0");
  EXPECT_EQ(layer->fwd_flops, 4.0 * 32 * 64 * 128 + 4.0 * 32 * 64 * 256 + 4.0 * 32 * 32 * 64);
  EXPECT_EQ(layer->fwd_flops, 3407872.0);
  EXPECT_EQ(layer->bwd_flops, 2 * 3407872.0);
  entry.signature = "no such layer";
  EXPECT_EQ(measured_layer(model, entry), nullptr);
}

TEST(MeasureGemmRate, ReportsOneOfTheShapesItTimed) {
  GemmRateOptions o;
  o.sizes = {16, 32};
  o.repeats = 1;
  const GemmRate r = measure_gemm_rate(o);
  EXPECT_TRUE(r.shape == (GemmShape{16, 16, 16}) || r.shape == (GemmShape{32, 32, 32}))
      << r.shape.m;
  EXPECT_TRUE(std::isfinite(r.flop_s));
  EXPECT_GT(r.flop_s, 0.0);
}

TEST(MeasureGemmRate, RefusesBadOptions) {
  GemmRateOptions o;
  o.sizes = {};
  EXPECT_THROW(measure_gemm_rate(o), std::invalid_argument);
  o.sizes = {0};
  EXPECT_THROW(measure_gemm_rate(o), std::invalid_argument);
  o.sizes = {8192};
  EXPECT_THROW(measure_gemm_rate(o), std::invalid_argument);
  o.sizes = {16};
  o.repeats = 0;
  EXPECT_THROW(measure_gemm_rate(o), std::invalid_argument);
}

}  // namespace
}  // namespace pipescope::exec
