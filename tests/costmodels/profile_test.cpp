// The profiled cost model: which layers share a measurement, how measured
// sizes are interpolated, and that times come back exactly as measured.

#include "costmodels/profile.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>

#include "../tiny_models.h"
#include "costmodels/model_families.h"

namespace pipescope {
namespace {

using testing::tiny_transformer;

TEST(LayerSignature, BlocksOfOneShapeShareItAndOtherLayersDoNot) {
  const ModelSpec m = tiny_transformer(3);
  ASSERT_EQ(m.layers.size(), 5u);  // embed, 3 blocks, head
  EXPECT_EQ(layer_signature(m.layers[1]), layer_signature(m.layers[2]));
  EXPECT_EQ(layer_signature(m.layers[1]), layer_signature(m.layers[3]));
  EXPECT_NE(layer_signature(m.layers[0]), layer_signature(m.layers[1]));
  EXPECT_NE(layer_signature(m.layers[3]), layer_signature(m.layers[4]));
  EXPECT_EQ(layer_signature(m.layers[2]).rfind("block|", 0), 0u) << layer_signature(m.layers[2]);
  // A wider block is another layer.
  EXPECT_NE(layer_signature(tiny_transformer(3, 32).layers[1]), layer_signature(m.layers[1]));
}

TEST(InterpolateTime, ExactAtMeasuredSizesLinearBetweenAndBeyond) {
  const std::vector<std::int64_t> sizes{2, 4, 8};
  const std::vector<SimTime> times{100, 300, 500};
  EXPECT_EQ(interpolate_time(sizes, times, 2), 100);
  EXPECT_EQ(interpolate_time(sizes, times, 4), 300);
  EXPECT_EQ(interpolate_time(sizes, times, 8), 500);
  EXPECT_EQ(interpolate_time(sizes, times, 3), 200);   // between 2 and 4
  EXPECT_EQ(interpolate_time(sizes, times, 6), 400);   // between 4 and 8
  EXPECT_EQ(interpolate_time(sizes, times, 16), 900);  // the last segment extended
  EXPECT_EQ(interpolate_time(sizes, times, 1), 1);     // 0 on the first segment: floor 1 ns
}

TEST(InterpolateTime, OneMeasuredSizeScalesWithTheBatch) {
  EXPECT_EQ(interpolate_time({4}, {1000}, 4), 1000);
  EXPECT_EQ(interpolate_time({4}, {1000}, 2), 500);
  EXPECT_EQ(interpolate_time({4}, {1000}, 12), 3000);
}

Profile profile_of(const ModelSpec& m) {
  Profile p;
  p.machine = "test";
  p.cores = 2;
  SimTime t = 1000;
  for (const LayerSpec& l : m.layers) {
    if (p.find(l) != nullptr) continue;
    LayerProfile e;
    e.signature = layer_signature(l);
    e.example = l.name;
    e.batch_sizes = {1, 2};
    e.forward = {t, 2 * t};
    e.backward = {3 * t, 6 * t};
    e.recompute = {t + 1, 2 * t + 1};
    p.layers.push_back(e);
    t += 1000;
  }
  p.optimizer = "adam";
  p.optimizer_overhead = 500;
  p.optimizer_ns_per_param = 0.25;
  return p;
}

TEST(ProfiledCostModel, AnswersWithTheMeasuredTimes) {
  const ModelSpec m = tiny_transformer(2);
  const ProfiledCostModel cost(std::make_shared<const Profile>(profile_of(m)));
  EXPECT_EQ(cost.name(), "profiled");
  EXPECT_EQ(cost.forward(m.layers[0], 1), 1000);   // embed
  EXPECT_EQ(cost.forward(m.layers[1], 2), 4000);   // block0
  EXPECT_EQ(cost.forward(m.layers[2], 2), 4000);   // block1 shares block0's entry
  EXPECT_EQ(cost.backward(m.layers[3], 1), 9000);  // head
  EXPECT_EQ(cost.recompute(m.layers[1], 1), 2001);
  EXPECT_EQ(cost.backward(m.layers[1], 3), 18000);  // extrapolated: 6000 + 6000
  EXPECT_EQ(cost.optimizer_step(1000), 500 + 250);
  EXPECT_NE(std::string(cost.description()).find("test"), std::string::npos);
}

TEST(ProfiledCostModel, CoverageNamesTheFirstLayerNotMeasured) {
  const Profile p = profile_of(tiny_transformer(2));
  EXPECT_NO_THROW(check_profile_covers(p, tiny_transformer(7)));  // more blocks of one shape
  try {
    check_profile_covers(p, tiny_transformer(2, 32));
    FAIL() << "a wider model is not covered";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("layer 'embed'"), std::string::npos) << e.what();
  }
}

// MFU's peak: the GEMM rate when every op is slower; the fastest op's rate
// when one is priced faster (here the blocks' backward, 6 us for a sample's
// FLOPs at 2 samples, and the limit of the last segment, 3 us a sample); that
// divided by a slowdown below 1.
TEST(Profile, MfuPeakIsTheGemmRateOrAnyFasterOp) {
  const ModelSpec m = tiny_transformer(2);
  Profile p = profile_of(m);
  double fastest = 0.0;
  for (const LayerSpec& l : m.layers) {
    const LayerProfile& e = *p.find(l);
    // forward t, 2t at 1, 2: rate F / t; recompute t + 1, 2t + 1: a little
    // slower; backward 3t, 6t: rate 2F / (3t) per sample, the last segment's
    // slope 3t per sample too.
    const double t = static_cast<double>(e.forward[0]) * 1e-9;
    fastest = std::max({fastest, l.fwd_flops / t, l.bwd_flops / (3.0 * t)});
  }
  ASSERT_GT(fastest, 0.0);
  EXPECT_DOUBLE_EQ(p.mfu_peak_flop_s(m), fastest);  // no GEMM rate: the fastest op
  p.gemm.flop_s = 2.0 * fastest;
  EXPECT_EQ(p.mfu_peak_flop_s(m), 2.0 * fastest);
  p.gemm.flop_s = 0.5 * fastest;
  EXPECT_DOUBLE_EQ(p.mfu_peak_flop_s(m), fastest);
  p.concurrency_slowdown = {1.0, 0.8};  // stretched below 1: faster still
  EXPECT_DOUBLE_EQ(p.mfu_peak_flop_s(m), fastest / 0.8);
  EXPECT_EQ(p.mfu_peak_flop_s(tiny_transformer(2, 32)), 0.5 * fastest);  // no layer covered
}

// A split backward's halves stay out of the slowdown only when it was not
// measured on them.
TEST(Profile, SplitBackwardIsLeftUnstretchedOnlyWithoutASlowdownOfStages) {
  Profile p = profile_of(tiny_transformer(2));
  EXPECT_FALSE(p.split_unstretched());  // no B, W measured
  for (LayerProfile& l : p.layers) {
    l.input = l.forward;
    l.weight = l.forward;
  }
  EXPECT_TRUE(p.split_unstretched());
  p.rounds.slowdown_of_stages = true;
  EXPECT_FALSE(p.split_unstretched());
}

}  // namespace
}  // namespace pipescope
