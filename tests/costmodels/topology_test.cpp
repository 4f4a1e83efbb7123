// The nodes topology as a Boost.Graph: shortest routes stay inside a node on
// its switch and cross nodes over the spine, links are directed and named, and
// the engine's contention sees transfers that share a NIC.

#include "costmodels/topology.h"

#include <gtest/gtest.h>

#include "costmodels/cluster.h"

namespace pipescope {
namespace {

Interconnect dgx_like() {
  Interconnect ic;
  ic.topology = TopologyKind::kNodes;
  ic.bandwidth = 450e9;
  ic.latency_s = 2e-6;
  ic.devices_per_node = 4;
  ic.inter_node_bandwidth = 50e9;
  ic.inter_node_latency_s = 5e-6;
  return ic;
}

std::vector<std::string> names(const Cluster& c, const std::vector<Hop>& hops) {
  std::vector<std::string> out;
  for (const Hop& h : hops) out.push_back(c.link_name(h.link));
  return out;
}

TEST(Topology, RoutesStayInsideANodeAndCrossOverTheSpine) {
  Cluster c;
  c.devices = 10;  // nodes of 4, 4 and 2
  c.interconnect = dgx_like();
  c.build_topology();
  ASSERT_TRUE(c.graph);
  // 10 device <-> switch cables and 10 device <-> spine cables, each two links.
  EXPECT_EQ(c.link_count(), 40);
  const std::vector<Hop> inside = c.route(1, 3);
  EXPECT_EQ(names(c, inside), (std::vector<std::string>{"1->nvswitch0", "nvswitch0->3"}));
  for (const Hop& h : inside) {
    EXPECT_EQ(h.bandwidth, 450e9);
    EXPECT_EQ(h.latency_s, 2e-6);
  }
  const std::vector<Hop> across = c.route(3, 9);
  EXPECT_EQ(names(c, across), (std::vector<std::string>{"3->ib", "ib->9"}));
  for (const Hop& h : across) EXPECT_EQ(h.bandwidth, 50e9);
  // Each direction is its own link.
  EXPECT_NE(c.route(9, 3)[0].link, across[1].link);
  EXPECT_TRUE(c.route(5, 5).empty());
}

TEST(Topology, OneNodeHasNoSpine) {
  Cluster c;
  c.devices = 4;
  c.interconnect = dgx_like();
  c.build_topology();
  EXPECT_EQ(c.link_count(), 8);
  EXPECT_EQ(names(c, c.route(0, 3)), (std::vector<std::string>{"0->nvswitch0", "nvswitch0->3"}));
}

TEST(Topology, ARouteOfAReplicaUsesTheWholeClustersGraph) {
  Cluster whole;
  whole.devices = 8;
  whole.interconnect = dgx_like();
  whole.build_topology();
  Cluster replica = whole;
  replica.devices = 2;  // one pipeline of a data-parallel job
  EXPECT_EQ(names(replica, replica.route(0, 1)),
            (std::vector<std::string>{"0->nvswitch0", "nvswitch0->1"}));
}

TEST(Topology, ImpossibleShapesAreRefused) {
  Interconnect ic = dgx_like();
  ic.devices_per_node = 0;
  EXPECT_THROW(TopologyGraph::nodes(8, ic), std::invalid_argument);
  ic = dgx_like();
  ic.inter_node_bandwidth = 0.0;
  EXPECT_THROW(TopologyGraph::nodes(8, ic), std::invalid_argument);
  EXPECT_THROW(TopologyGraph::nodes(0, dgx_like()), std::invalid_argument);
}

TEST(Topology, TorusRoutesTakeTheFewestHopsAroundTheWrap) {
  Cluster c;
  c.devices = 16;  // 4 x 4, the most nearly square grid
  c.interconnect = {TopologyKind::kTorus, 82e9, 1e-6};
  c.build_topology();
  EXPECT_EQ(c.link_count(), 16 * 2 * 2);  // a right and a down cable per device
  // Snake placement: rows 0 1 2 3 / 7 6 5 4 / 8 9 10 11 / 15 14 13 12, so
  // every pair of consecutive devices, a pipeline's neighbours, is one hop.
  for (int d = 0; d + 1 < 16; ++d) EXPECT_EQ(c.route(d, d + 1).size(), 1u) << d;
  EXPECT_EQ(names(c, c.route(3, 4)), (std::vector<std::string>{"3->4"}));
  EXPECT_EQ(c.route(0, 3).size(), 1u);   // around the row's wrap
  EXPECT_EQ(c.route(0, 15).size(), 1u);  // around the column's wrap
  EXPECT_EQ(c.route(0, 6).size(), 2u);   // (0,0) to (1,1)
  EXPECT_EQ(c.route(0, 10).size(), 4u);  // (0,0) to (2,2): two across, two down
  // 2 x 3: a dimension of two has one cable per pair.
  Cluster small;
  small.devices = 6;
  small.interconnect = {TopologyKind::kTorus, 82e9, 1e-6};
  small.interconnect.torus_width = 2;
  small.build_topology();
  EXPECT_EQ(small.link_count(), (3 + 6) * 2);  // 3 row cables, 6 column cables
  small.interconnect.torus_width = 4;
  EXPECT_THROW(small.build_topology(), std::invalid_argument);
  EXPECT_TRUE(find_device_preset("tpu-torus"));
  EXPECT_EQ(find_device_preset("tpu-torus")->interconnect.topology, TopologyKind::kTorus);
}

TEST(Topology, PcieTreeStagesEveryCopyThroughTheHost) {
  Cluster c;
  c.devices = 5;  // switches of 2, 2 and 1
  c.interconnect = {TopologyKind::kPcieHost, 12e9, 5e-6};
  c.interconnect.devices_per_switch = 2;
  c.build_topology();
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(c.link_count(), 5 * 2 + 3 * 2);
  // No peer path even inside a switch: up to the host and back down.
  const std::vector<Hop> same = c.route(0, 1);
  EXPECT_EQ(names(c, same),
            (std::vector<std::string>{"0->pcie0", "pcie0->host", "host->pcie0", "pcie0->1"}));
  double latency_s = 0.0;
  for (const Hop& h : same) {
    EXPECT_EQ(h.bandwidth, 12e9);
    latency_s += h.latency_s;
  }
  EXPECT_EQ(latency_s, 2 * 5e-6);  // DMA setup on each device's link, as without switches
  EXPECT_EQ(names(c, c.route(4, 2)),
            (std::vector<std::string>{"4->pcie2", "pcie2->host", "host->pcie1", "pcie1->2"}));
  // Devices 0 and 1 share their switch's uplink; 0 and 2 do not.
  EXPECT_EQ(c.route(0, 4)[1].link, c.route(1, 3)[1].link);
  EXPECT_NE(c.route(0, 4)[1].link, c.route(2, 4)[1].link);
  // Without switches: each device on its own root port, the closed form.
  Cluster flat = c;
  flat.interconnect.devices_per_switch = 0;
  flat.build_topology();
  EXPECT_FALSE(flat.graph);
  EXPECT_EQ(names(flat, flat.route(0, 1)), (std::vector<std::string>{"0->host", "host->1"}));
  Interconnect bad = c.interconnect;
  bad.bandwidth = 0.0;
  EXPECT_THROW(TopologyGraph::pcie_tree(4, bad), std::invalid_argument);
}

TEST(Topology, PcieHostPresetIsP100sTwoPerSwitch) {
  const std::optional<DevicePreset> p = find_device_preset("pcie-host");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->interconnect.topology, TopologyKind::kPcieHost);
  EXPECT_EQ(p->interconnect.devices_per_switch, 2);
  EXPECT_EQ(p->interconnect.bandwidth, 15.75e9);
  EXPECT_EQ(p->device.peak_flops_fp32, find_device_preset("p100-pcie")->device.peak_flops_fp32);
}

TEST(Topology, DgxH100PresetIsNodesOfEight) {
  const std::optional<DevicePreset> p = find_device_preset("dgx-h100");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->interconnect.topology, TopologyKind::kNodes);
  EXPECT_EQ(p->interconnect.devices_per_node, 8);
  EXPECT_EQ(p->interconnect.bandwidth, 450e9);
  EXPECT_EQ(p->interconnect.inter_node_bandwidth, 50e9);
  EXPECT_EQ(parse_topology("nodes"), TopologyKind::kNodes);
  EXPECT_EQ(to_string(TopologyKind::kNodes), "nodes");
}

}  // namespace
}  // namespace pipescope
