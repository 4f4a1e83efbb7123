// ZB-H1 (Qi et al. 2024): the op order, W after its B, at most K micro-batches
// awaiting W on any stage (1F1B's peak), and a bubble a third of 1F1B's when
// T_F = T_B = T_W.

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "sim/engine/schedule.h"
#include "sim/engine/simulator.h"
#include "sim_fixtures.h"

namespace pipescope {
namespace {

using testing::ops_text;

TEST(ZeroBubbleH1, OpOrder) {
  const Schedule s = build_zb_h1(3, 4, Remat::kNever);
  EXPECT_EQ(s.kind, ScheduleKind::kZbH1);
  ASSERT_EQ(s.devices(), 3);
  // Stage 0: 1F1B's warm-up, then F B W; stage s first defers s W.
  EXPECT_EQ(ops_text(s.device_ops[0]), "F0 F1 F2 B0 W0 F3 B1 W1 B2 W2 B3 W3 O");
  EXPECT_EQ(ops_text(s.device_ops[1]), "F0 F1 B0 F2 B1 W0 F3 B2 W1 B3 W2 W3 O");
  EXPECT_EQ(ops_text(s.device_ops[2]), "F0 B0 F1 B1 F2 B2 W0 F3 B3 W1 W2 W3 O");
  EXPECT_EQ(ops_text(build_zb_h1(2, 2, Remat::kAlways).device_ops[1]), "F0 R0 B0 F1 R1 B1 W0 W1 O");
  EXPECT_EQ(ops_text(build_zb_h1(4, 2, Remat::kNever).device_ops[3]), "F0 B0 F1 B1 W0 W1 O");
  EXPECT_EQ(build_schedule(ScheduleKind::kZbH1, 3, 4, Remat::kNever).device_ops,
            build_zb_h1(3, 4, Remat::kNever).device_ops);
}

TEST(ZeroBubbleH1, ValidAndAtMostKAwaitingW) {
  for (int K : {1, 2, 3, 4, 8}) {
    for (int M : {1, 2, 3, 8, 17}) {
      for (const Remat remat : kScheduleRemats) {
        const Schedule s = build_zb_h1(K, M, remat);
        EXPECT_EQ(check_schedule(s), "") << K << " " << M;
        for (int st = 0; st < K; ++st) {
          int held = 0, most = 0;
          for (const Op& op : s.device_ops[static_cast<std::size_t>(st)]) {
            if (op.kind == OpKind::kForward) most = std::max(most, ++held);
            if (op.kind == OpKind::kWeight) --held;
          }
          EXPECT_EQ(most, std::min(K, M)) << "K=" << K << " M=" << M << " stage " << st;
        }
      }
    }
  }
}

TEST(ZeroBubbleH1, CheckScheduleWantsOneWAfterEachB) {
  const Schedule s = build_zb_h1(2, 2, Remat::kNever);
  ASSERT_EQ(ops_text(s.device_ops[1]), "F0 B0 F1 B1 W0 W1 O");
  // Drop W1: missing.
  Schedule missing = s;
  auto& m_ops = missing.device_ops[1];
  m_ops.erase(std::find(m_ops.begin(), m_ops.end(), Op{OpKind::kWeight, 1, 1}));
  EXPECT_EQ(check_schedule(missing), "stage 1 micro-batch 1: missing weight gradient");
  // W0 before B0.
  Schedule early = s;
  auto& e_ops = early.device_ops[1];
  std::iter_swap(std::find(e_ops.begin(), e_ops.end(), Op{OpKind::kWeight, 1, 0}),
                 std::find(e_ops.begin(), e_ops.end(), Op{OpKind::kBackward, 1, 0}));
  EXPECT_EQ(check_schedule(early), "stage 1 micro-batch 0: weight gradient before backward");
  // A W in a schedule that does not split the backward.
  Schedule one = build_1f1b(2, 2, Remat::kNever);
  one.device_ops[0].insert(one.device_ops[0].end() - 1, Op{OpKind::kWeight, 0, 0});
  EXPECT_EQ(check_schedule(one),
            "stage 0 micro-batch 0: weight gradient in a schedule that does not split the "
            "backward");
}

// Uniform stages of two layers whose forward takes T = 6,000 ns; the backward
// 2T, split into B = W = T because every layer has parameters.
Scenario uniform(int K, int M) {
  Scenario sc = testing::uniform_scenario(2 * K, K, 1000.0, 3 * M, M, false);
  for (LayerSpec& l : sc.model.layers) l.params = 1;
  return sc;
}

using testing::KxM;

class ZeroBubbleClosedForm : public ::testing::TestWithParam<KxM> {};

// 1F1B's step is (M + K - 1) 3T, its bubble 3 (K - 1) T per device; ZB-H1 fills
// all but (K - 1)(T_F + T_B - T_W) = (K - 1) T of it: a third.
TEST_P(ZeroBubbleClosedForm, BubbleIsAThirdOf1F1B) {
  const auto [K, M] = GetParam();
  const Scenario sc = uniform(K, M);
  const SimTime T = 2 * 1000 * 3;
  SimConfig config;
  config.schedule = ScheduleKind::k1F1B;
  const SimResult one = simulate(sc, config);
  config.schedule = ScheduleKind::kZbH1;
  const SimResult zb = simulate(sc, config);
  EXPECT_EQ(zb.schedule, ScheduleKind::kZbH1);
  EXPECT_EQ(one.metrics.step_time, (M + K - 1) * 3 * T);
  EXPECT_EQ(zb.metrics.step_time, 3 * M * T + (K - 1) * T);
  const SimTime one_idle = one.metrics.step_time - 3 * M * T;
  const SimTime zb_idle = zb.metrics.step_time - 3 * M * T;
  EXPECT_EQ(3 * zb_idle, one_idle);
  EXPECT_DOUBLE_EQ(zb.metrics.bubble_fraction,
                   static_cast<double>(K - 1) / static_cast<double>(3 * M + K - 1));
}

// Without remat a stage holds a micro-batch's stash until its W: min(K, M)
// stashes on every stage, 1F1B's peak (on its first stage).
TEST_P(ZeroBubbleClosedForm, PeakMemoryIs1F1BPeak) {
  const auto [K, M] = GetParam();
  Scenario sc = uniform(K, M);
  for (LayerSpec& l : sc.model.layers) l.stash_bytes = 100;  // per sample
  const Bytes stash = 2 * 100 * 3;                           // a stage, a micro-batch
  SimConfig config;
  config.schedule = ScheduleKind::kZbH1;
  const SimResult zb = simulate(sc, config);
  config.schedule = ScheduleKind::k1F1B;
  const SimResult one = simulate(sc, config);
  Bytes zb_peak = 0, one_peak = 0;
  for (int s = 0; s < K; ++s) {
    const auto d = static_cast<std::size_t>(s);
    EXPECT_EQ(zb.metrics.devices[d].peak_memory, std::min(K, M) * stash) << "stage " << s;
    zb_peak = std::max(zb_peak, zb.metrics.devices[d].peak_memory);
    one_peak = std::max(one_peak, one.metrics.devices[d].peak_memory);
  }
  EXPECT_EQ(zb_peak, one_peak);
}

INSTANTIATE_TEST_SUITE_P(KxM, ZeroBubbleClosedForm,
                         ::testing::Values(KxM{1, 1}, KxM{1, 8}, KxM{2, 2}, KxM{2, 4}, KxM{4, 4},
                                           KxM{4, 16}, KxM{8, 8}, KxM{8, 32}, KxM{3, 7}),
                         testing::kxm_name);

// The weight-gradient ops show in the timeline as W, on the compute lane.
TEST(ZeroBubbleH1, TimelineHasWeightOps) {
  const Scenario sc = uniform(2, 2);
  SimConfig config;
  config.schedule = ScheduleKind::kZbH1;
  const SimResult r = simulate(sc, config);
  int weights = 0;
  for (const TimelineEvent& e : r.timeline.events) {
    if (e.kind != EventKind::kWeight) continue;
    ++weights;
    EXPECT_EQ(e.lane, Lane::kCompute);
    EXPECT_EQ(e.end - e.start, 6000);
    EXPECT_EQ(event_name(e), "W" + std::to_string(e.micro_batch));
  }
  EXPECT_EQ(weights, 4);
}

}  // namespace
}  // namespace pipescope
