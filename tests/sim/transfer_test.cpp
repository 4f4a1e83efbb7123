// Transfers (docs/models.md, "What the models assume", Transfers): summed latency of the route plus
// bytes over its bottleneck bandwidth, two hops through the host, FIFO queueing on a shared link
// direction, full duplex links, and overlap with compute or, with blocking sends, none.

#include <gtest/gtest.h>

#include <algorithm>

#include "sim/engine/engine.h"
#include "sim/engine/simulator.h"
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
  const TimelineEvent& send = find(r.timeline, Lane::kSend, EventKind::kActivation, 0);
  const TimelineEvent& recv = find(r.timeline, Lane::kRecv, EventKind::kActivation, 0);
  // The bytes leave over [1000, 1200] and land over [1100, 1300].
  EXPECT_EQ(send.device, 0);
  EXPECT_EQ(send.start, 1000);
  EXPECT_EQ(send.end, 1200);
  EXPECT_EQ(recv.device, 1);
  EXPECT_EQ(recv.start, 1100);
  EXPECT_EQ(recv.end, 1300);
  EXPECT_EQ(recv.bytes, 200);
  EXPECT_EQ(r.timeline.route_names[0], "0->1");
  EXPECT_EQ(r.timeline.route_names[1], "1->0");
}

TEST(Transfer, ThroughTheHostCostsTwoLatencies) {
  // Device -> host -> device: latency 2 x 100 ns, the bytes stream over both links
  // at once (200 ns), and both links are occupied.
  const SimResult r = simulate(two_stages(1, 200, 100e-9, TopologyKind::kPcieHost), SimConfig{});
  EXPECT_EQ(r.metrics.step_time, 6600 + 2 * 100);
  EXPECT_EQ(r.metrics.comm_time, 2 * 2 * 200);
  const TimelineEvent& send = find(r.timeline, Lane::kSend, EventKind::kActivation, 0);
  const TimelineEvent& recv = find(r.timeline, Lane::kRecv, EventKind::kActivation, 0);
  EXPECT_EQ(send.start, 1000);
  EXPECT_EQ(recv.end, 1400);
  EXPECT_EQ(send.flow, recv.flow);
  EXPECT_EQ(r.timeline.route_names[0], "0->host, host->1");
}

TEST(Transfer, ThroughAPcieSwitchCostsWhatTheFlatHostRouteCosts) {
  // Alone on the tree a copy pays the same two DMA latencies; the trace names
  // the switch hops.
  Scenario sc = two_stages(1, 200, 100e-9, TopologyKind::kPcieHost);
  sc.cluster.interconnect.devices_per_switch = 2;
  sc.cluster.build_topology();
  const SimResult r = simulate(sc, SimConfig{});
  EXPECT_EQ(r.metrics.step_time, 6600 + 2 * 100);
  EXPECT_EQ(r.timeline.route_names[0], "0->pcie0, pcie0->host, host->pcie0, pcie0->1");
  EXPECT_EQ(r.timeline.route_names[1], "1->pcie0, pcie0->host, host->pcie0, pcie0->0");
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

TEST(Transfer, BlockingSendsHoldTheSenderUntilTheyArrive) {
  // The case above with cluster.p2p blocking, c = 300 ns a transfer. Device 0:
  // F(0,0) [0, 1000], blocked to 1300, F(0,1) [1300, 2300], blocked to 2600.
  // Device 1: F(1,0) [1300, 2300], F(1,1) [2600, 3600], B(1,1) [3600, 5600],
  // blocked to 5900, B(1,0) [5900, 7900]. Device 0: B(0,1) [5900, 7900],
  // B(0,0) once gradient 0 lands at 8200: [8200, 10200].
  Scenario sc = two_stages(2, 200, 100e-9, TopologyKind::kAllToAll);
  sc.cluster.p2p = P2pMode::kBlocking;
  const SimResult r = simulate(sc, SimConfig{});
  const TimelineEvent& f01 = find(r.timeline, Lane::kCompute, EventKind::kForward, 1);
  EXPECT_EQ(f01.device, 0);
  EXPECT_EQ(f01.start, 1300);
  EXPECT_EQ(r.metrics.step_time, 10200);
  EXPECT_EQ(r.metrics.comm_time, 4 * 200);  // the same transfers as overlapped
  // The sender's wait is idle time, not compute.
  EXPECT_EQ(r.metrics.devices[0].busy, 2 * 1000 + 2 * 2000);
}

TEST(Transfer, OverlappedSteadySendsBlockInTheWarmUpAndCoolDownOnly) {
  // 1F1B, K = 2, M = 3, c = 1500 ns a transfer (1400 ns on the link, 100 ns
  // latency). Device 0 runs F0 F1 B0 F2 B1 B2: F0 is its warm-up (F1, the
  // last forward before its first backward, opens the steady state); device
  // 1 runs F0 B0 F1 B1 F2 B2, B2 its cool-down. Device 0: F(0,0) [0, 1000],
  // held until its send lands at 2500, F(0,1) [2500, 3500]. Device 1:
  // F(1,0) [2500, 3500], B(1,0) [3500, 5500], its send not waited for,
  // F(1,1) [5500, 6500] (blocking: held to 7000), B(1,1) [6500, 8500]. Device
  // 0: B(0,0) once gradient 0 lands at 7000 [7000, 9000], F(0,2) [9000,
  // 10000], B(0,1) at 10000 [10000, 12000]. Device 1: F(1,2) at 11500
  // [11500, 12500], B(1,2) [12500, 14500], held until 16000, then its
  // optimizer step; device 0: B(0,2) [16000, 18000].
  Scenario sc = two_stages(3, 1400, 100e-9, TopologyKind::kAllToAll);
  SimConfig cfg;
  cfg.schedule = ScheduleKind::k1F1B;
  const auto start = [&](P2pMode mode, EventKind kind, int device, int mb) {
    sc.cluster.p2p = mode;
    const SimResult r = simulate(sc, cfg);
    for (const TimelineEvent& e : r.timeline.events) {
      if (e.lane == Lane::kCompute && e.kind == kind && e.device == device && e.micro_batch == mb) {
        return e.start;
      }
    }
    throw std::runtime_error("event not found");
  };
  const P2pMode steady = P2pMode::kOverlappedSteady;
  EXPECT_EQ(start(steady, EventKind::kForward, 0, 1), 2500);
  EXPECT_EQ(start(P2pMode::kOverlapped, EventKind::kForward, 0, 1), 1000);
  EXPECT_EQ(start(steady, EventKind::kForward, 1, 1), 5500);
  EXPECT_EQ(start(P2pMode::kBlocking, EventKind::kForward, 1, 1), 7000);
  EXPECT_EQ(start(steady, EventKind::kOptimizer, 1, 0), 16000);
  EXPECT_EQ(start(P2pMode::kOverlapped, EventKind::kOptimizer, 1, 0), 14500);
  sc.cluster.p2p = steady;
  EXPECT_EQ(simulate(sc, cfg).metrics.step_time, 18000);
}

TEST(Transfer, BlockingSendsToTheSameDeviceCostNothing) {
  // Interleaved stages 0 and 2 on device 0: nothing crosses a link between
  // them, so blocking and overlapped agree when the route is empty.
  Scenario sc = two_stages(2, 200, 100e-9, TopologyKind::kAllToAll);
  const AnalyticCostModel cost(sc.cluster.device, sc.model.dtype, 0.0);
  const auto stages =
      compute_stage_costs(sc.model, partition_uniform(2, 2), cost, 1, 0.0, Remat::kNever);
  Schedule s = build_gpipe(2, 2, Remat::kNever);
  s.stage_device = {0, 0};
  s.device_ops = {{{OpKind::kForward, 0, 0},
                   {OpKind::kForward, 0, 1},
                   {OpKind::kForward, 1, 0},
                   {OpKind::kForward, 1, 1},
                   {OpKind::kBackward, 1, 1},
                   {OpKind::kBackward, 1, 0},
                   {OpKind::kBackward, 0, 1},
                   {OpKind::kBackward, 0, 0},
                   {OpKind::kOptimizer, 0, 0},
                   {OpKind::kOptimizer, 1, 0}}};
  ASSERT_EQ(check_schedule(s), "");
  const SimTime overlapped = run_engine(s, stages, sc.cluster, nullptr).step_time;
  sc.cluster.p2p = P2pMode::kBlocking;
  EXPECT_EQ(run_engine(s, stages, sc.cluster, nullptr).step_time, overlapped);
  EXPECT_EQ(overlapped, 4 * 1000 + 4 * 2000);
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

// Runs two stages of `sc` on a hand-written op list in which stage 1 sends
// gradient 0 back before activation 1 has come forward: device 0 runs F0 F1 B0
// B1, device 1 F0 B0 F1 B1.
EngineResult run_crossing(const Scenario& sc, Timeline& t) {
  const AnalyticCostModel cost(sc.cluster.device, sc.model.dtype, 0.0);
  const auto stages =
      compute_stage_costs(sc.model, partition_uniform(2, 2), cost, 1, 0.0, Remat::kNever);
  Schedule s = build_gpipe(2, 2, Remat::kNever);
  s.device_ops[0] = {{OpKind::kForward, 0, 0},
                     {OpKind::kForward, 0, 1},
                     {OpKind::kBackward, 0, 0},
                     {OpKind::kBackward, 0, 1},
                     {OpKind::kOptimizer, 0, 0}};
  s.device_ops[1] = {{OpKind::kForward, 1, 0},
                     {OpKind::kBackward, 1, 0},
                     {OpKind::kForward, 1, 1},
                     {OpKind::kBackward, 1, 1},
                     {OpKind::kOptimizer, 1, 0}};
  EXPECT_EQ(check_schedule(s), "");
  TimelineCollector collect(t);
  TimelineRecorder rec(collect);
  return run_engine(s, stages, sc.cluster, &rec);
}

// Two stages with a hand-written op list in which stage 1 sends a gradient back
// while an activation is still coming forward. t_f = 1000, t_b = 2000, 5000 B at
// 1 B/ns, no latency:
//   act 0 on 0->1 [1000, 6000]; act 1 queues behind it [6000, 11000];
//   device 1: F0 [6000, 7000], B0 [7000, 9000], grad 0 on 1->0 [9000, 14000]
//   (a half-duplex link would hold it until 11000); F1 [11000, 12000],
//   B1 [12000, 14000], grad 1 [14000, 19000]; device 0: B0 [14000, 16000],
//   B1 [19000, 21000].
TEST(Transfer, LinksAreFullDuplex) {
  Scenario sc = two_stages(2, 5000, 0.0, TopologyKind::kAllToAll);
  Timeline t;
  const EngineResult r = run_crossing(sc, t);
  EXPECT_EQ(find(t, Lane::kRecv, EventKind::kGradient, 0).end, 14000);
  EXPECT_EQ(find(t, Lane::kRecv, EventKind::kActivation, 1).end, 11000);
  EXPECT_EQ(r.step_time, 21000);
}

// The LinksAreFullDuplex op list on a PCIe tree. With both devices behind one
// switch, the activations going up and the gradient going up share the switch's
// uplink to the host (no peer-to-peer): grad 0 waits for act 1 to clear it,
// [11000, 16000], grad 1 follows [16000, 21000], and device 0 runs B0 [16000,
// 18000] and B1 [21000, 23000]. Behind two switches nothing is shared and the
// step is the full-duplex 21000.
TEST(Transfer, DevicesBehindOnePcieSwitchShareItsUplink) {
  for (const int per_switch : {2, 1}) {
    Scenario sc = two_stages(2, 5000, 0.0, TopologyKind::kPcieHost);
    sc.cluster.interconnect.devices_per_switch = per_switch;
    sc.cluster.build_topology();
    Timeline t;
    const EngineResult r = run_crossing(sc, t);
    EXPECT_EQ(find(t, Lane::kRecv, EventKind::kActivation, 1).end, 11000) << per_switch;
    if (per_switch == 2) {
      EXPECT_EQ(find(t, Lane::kRecv, EventKind::kGradient, 0).end, 16000);
      EXPECT_EQ(r.step_time, 23000);
    } else {
      EXPECT_EQ(find(t, Lane::kRecv, EventKind::kGradient, 0).end, 14000);
      EXPECT_EQ(r.step_time, 21000);
    }
  }
}

TEST(Transfer, MultiHopRouteSumsLatencies) {
  // Stages on devices 0 and 2 of a 4-device ring: two hops each way, 100 ns each.
  Scenario sc = two_stages(1, 200, 100e-9, TopologyKind::kRing);
  sc.cluster.devices = 4;
  const AnalyticCostModel cost(sc.cluster.device, sc.model.dtype, 0.0);
  const auto stages =
      compute_stage_costs(sc.model, partition_uniform(2, 2), cost, 1, 0.0, Remat::kNever);
  Schedule s = build_gpipe(2, 1, Remat::kNever);
  s.stage_device = {0, 2};
  s.device_ops = {s.device_ops[0], {}, s.device_ops[1]};
  ASSERT_EQ(check_schedule(s), "");
  const EngineResult r = run_engine(s, stages, sc.cluster, nullptr);
  EXPECT_EQ(r.step_time, 1000 + (200 + 200) + 1000 + 2000 + (200 + 200) + 2000);
  EXPECT_EQ(r.comm_time, 2 * 2 * 200);
  EXPECT_EQ(r.device_busy[1], 0);
}

TEST(Transfer, RingNeighboursAreOneHop) {
  const SimResult r = simulate(two_stages(1, 200, 100e-9, TopologyKind::kRing), SimConfig{});
  EXPECT_EQ(r.metrics.step_time, 6600);
}

}  // namespace
}  // namespace pipescope
