// Transfers: latency + bytes / bandwidth per hop, two hops through the host,
// FIFO queueing on a shared link direction, and overlap with compute.

#include <gtest/gtest.h>

#include <algorithm>

#include "sim/simulator.h"
#include "sim_fixtures.h"

namespace pipescope {
namespace {

// Two stages of one layer each: t_f = 1000 ns, t_b = 2000 ns at micro-batch 1;
// each activation is `bytes` bytes; links of 1 GB/s (1 byte per ns).
Scenario two_stages(int micro_batches, Bytes bytes, double latency_s, TopologyKind topo) {
  Scenario sc = testing::uniform_scenario(2, 2, 1000.0, micro_batches, micro_batches, false);
  for (LayerSpec& l : sc.model.layers) l.out_bytes = bytes;
  sc.cluster.interconnect = Interconnect{topo, 1e9, latency_s};
  return sc;
}

const TimelineEvent& find(const Timeline& t, Lane lane, EventKind kind, int mb) {
  const auto it = std::find_if(t.events.begin(), t.events.end(), [&](const TimelineEvent& e) {
    return e.lane == lane && e.kind == kind && e.micro_batch == mb;
  });
  if (it == t.events.end()) throw std::runtime_error("event not found");
  return *it;
}

TEST(Transfer, OneHopCostsLatencyPlusBytesOverBandwidth) {
  // F0 [0,1000], act 100 ns latency + 200 ns, F1 [1300,2300], B1 [2300,4300],
  // grad 300 ns, B0 [4600,6600].
  const SimResult r = simulate(two_stages(1, 200, 100e-9, TopologyKind::kAllToAll), SimConfig{});
  EXPECT_EQ(r.metrics.step_time, 6600);
  EXPECT_EQ(r.metrics.comm_time, 400);  // link occupancy excludes latency
  const TimelineEvent& act = find(r.timeline, Lane::kRecv, EventKind::kActivation, 0);
  EXPECT_EQ(act.start, 1000);
  EXPECT_EQ(act.end, 1300);
  EXPECT_EQ(act.device, 1);
  EXPECT_EQ(act.bytes, 200);
}

TEST(Transfer, ThroughTheHostCostsTwoHops) {
  const SimResult r = simulate(two_stages(1, 200, 100e-9, TopologyKind::kPcieHost), SimConfig{});
  EXPECT_EQ(r.metrics.step_time, 6600 + 2 * 300);
  const TimelineEvent& send = find(r.timeline, Lane::kSend, EventKind::kActivation, 0);
  const TimelineEvent& recv = find(r.timeline, Lane::kRecv, EventKind::kActivation, 0);
  EXPECT_EQ(send.start, 1000);
  EXPECT_EQ(send.end, 1300);  // device 0 -> host
  EXPECT_EQ(recv.start, 1300);
  EXPECT_EQ(recv.end, 1600);  // host -> device 1
  EXPECT_EQ(send.flow, recv.flow);
}

TEST(Transfer, OverlapsWithCompute) {
  // M=2: the send of activation 0 runs while F(0,1) computes. Hand timeline with
  // c = 300: step = 3 t_f + 2c + 3 t_b.
  const SimResult r = simulate(two_stages(2, 200, 100e-9, TopologyKind::kAllToAll), SimConfig{});
  EXPECT_EQ(r.metrics.step_time, 3 * 1000 + 2 * 300 + 3 * 2000);
  const TimelineEvent& send = find(r.timeline, Lane::kSend, EventKind::kActivation, 0);
  const TimelineEvent& f1 = find(r.timeline, Lane::kCompute, EventKind::kForward, 1);
  EXPECT_EQ(f1.device, 0);
  EXPECT_EQ(send.start, f1.start);
  EXPECT_LT(send.start, f1.end);
}

TEST(Transfer, SharedLinkDirectionQueuesFifo) {
  // 1500 B take 1500 ns, longer than t_f: activation 1 waits for the link until
  // activation 0 is through.
  const SimResult r = simulate(two_stages(2, 1500, 0.0, TopologyKind::kAllToAll), SimConfig{});
  const TimelineEvent& a0 = find(r.timeline, Lane::kRecv, EventKind::kActivation, 0);
  const TimelineEvent& a1 = find(r.timeline, Lane::kRecv, EventKind::kActivation, 1);
  EXPECT_EQ(a0.start, 1000);
  EXPECT_EQ(a0.end, 2500);
  EXPECT_EQ(a1.start, 2500);
  EXPECT_EQ(a1.end, 4000);
}

TEST(Transfer, OppositeDirectionsDoNotContend) {
  // Full duplex: a gradient going back does not wait for activations going forward.
  const SimResult r = simulate(two_stages(4, 1500, 0.0, TopologyKind::kAllToAll), SimConfig{});
  for (const TimelineEvent& e : r.timeline.events) {
    if (e.lane != Lane::kSend || e.kind != EventKind::kGradient) continue;
    // Each gradient leaves when its backward on stage 1 ends.
    const auto b =
        std::find_if(r.timeline.events.begin(), r.timeline.events.end(), [&](const auto& x) {
          return x.lane == Lane::kCompute && x.kind == EventKind::kBackward && x.device == 1 &&
                 x.micro_batch == e.micro_batch;
        });
    ASSERT_NE(b, r.timeline.events.end());
    EXPECT_EQ(e.start, b->end);
  }
}

TEST(Transfer, RingNeighboursAreOneHop) {
  const SimResult r = simulate(two_stages(1, 200, 100e-9, TopologyKind::kRing), SimConfig{});
  EXPECT_EQ(r.metrics.step_time, 6600);
}

}  // namespace
}  // namespace pipescope
