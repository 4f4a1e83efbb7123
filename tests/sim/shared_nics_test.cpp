// Nodes whose devices share fewer NICs than they are (interconnect.
// nics_per_node): the graph's NIC vertices, and the share of a NIC's link that
// each copy of a transfer gets while a group's devices and the replicas all
// send theirs at once (Cluster::route, data_parallel_ring), by hand.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "costmodels/cluster.h"
#include "scenario_docs.h"
#include "sim/engine/simulator.h"
#include "sim/scenario/scenario_io.h"

namespace pipescope {
namespace {

// Nodes of 4 devices on a switch (450 GB/s, 2 us a hop) with 2 NICs each
// (50 GB/s, 5 us a hop to the spine); the analytic model's links at peak.
Cluster shared_nic_cluster(int devices, int T) {
  Cluster c;
  c.devices = devices;
  c.tensor_parallel = T;
  c.interconnect.topology = TopologyKind::kNodes;
  c.interconnect.bandwidth = 450e9;
  c.interconnect.latency_s = 2e-6;
  c.interconnect.devices_per_node = 4;
  c.interconnect.inter_node_bandwidth = 50e9;
  c.interconnect.inter_node_latency_s = 5e-6;
  c.interconnect.nics_per_node = 2;
  c.build_topology();
  return c;
}

std::vector<std::string> names(const Cluster& c, const std::vector<Hop>& hops) {
  std::vector<std::string> out;
  for (const Hop& h : hops) out.push_back(c.link_name(h.link));
  return out;
}

std::vector<double> bandwidths(const std::vector<Hop>& hops) {
  std::vector<double> out;
  for (const Hop& h : hops) out.push_back(h.bandwidth);
  return out;
}

TEST(SharedNics, DevicesReachTheSpineThroughTheirNodesNics) {
  const Cluster c = shared_nic_cluster(8, 1);
  ASSERT_TRUE(c.shares_nics());
  // 8 device <-> switch and 8 device <-> NIC cables, 4 NIC <-> spine cables.
  EXPECT_EQ(c.link_count(), 2 * (8 + 8 + 4));
  EXPECT_EQ(names(c, c.route(0, 4)),
            (std::vector<std::string>{"0->nic0.0", "nic0.0->ib", "ib->nic1.0", "nic1.0->4"}));
  EXPECT_EQ(names(c, c.route(3, 6)),
            (std::vector<std::string>{"3->nic0.1", "nic0.1->ib", "ib->nic1.1", "nic1.1->6"}));
  // Inside a node the switch is nearer; across, the latency is as with a NIC
  // per device: 5 us into the NIC, 5 us out of the far one.
  EXPECT_EQ(names(c, c.route(1, 0)), (std::vector<std::string>{"1->nvswitch0", "nvswitch0->0"}));
  double latency = 0.0;
  for (const Hop& h : c.route(0, 4)) latency += h.latency_s;
  EXPECT_DOUBLE_EQ(latency, 10e-6);
  // A transfer alone gets the NIC's whole link.
  EXPECT_EQ(bandwidths(c.route(0, 4)), (std::vector<double>{50e9, 50e9, 50e9, 50e9}));
}

TEST(SharedNics, TheNicLinksAreThoseTheRoutesTake) {
  // Cluster::add_load counts the copies on a NIC's links without a route
  // each: for every pair, the NIC-to-spine links of the route found by
  // Dijkstra are the two nic_links gives, or none inside a node.
  const Cluster c = shared_nic_cluster(12, 1);  // three nodes, the last full
  for (int src = 0; src < 12; ++src) {
    for (int dst = 0; dst < 12; ++dst) {
      if (src == dst) continue;
      std::vector<std::int64_t> on_spine;
      for (const Hop& h : c.route(src, dst)) {
        const std::string name = c.link_name(h.link);
        if (name.find("->ib") != std::string::npos || name.rfind("ib->", 0) == 0) {
          on_spine.push_back(h.link);
        }
      }
      const auto nics = c.graph->nic_links(src, dst);
      SCOPED_TRACE(std::to_string(src) + " -> " + std::to_string(dst));
      if (src / 4 == dst / 4) {
        EXPECT_FALSE(nics.has_value());
        EXPECT_TRUE(on_spine.empty());
      } else {
        ASSERT_TRUE(nics.has_value());
        EXPECT_EQ(on_spine, (std::vector<std::int64_t>{nics->first, nics->second}));
      }
    }
  }
}

TEST(SharedNics, AGroupsDevicesShareTheirNic) {
  // T = 2: groups 0 and 1 in node 0, 2 and 3 in node 1. Group 1 -> 2 sends
  // 2 -> 4 and 3 -> 5 at once; devices 2 and 3 share nic0.1, 4 and 5 nic1.0.
  const Cluster c = shared_nic_cluster(4, 2);
  const std::vector<Hop> hops = c.route(1, 2);
  EXPECT_EQ(names(c, hops),
            (std::vector<std::string>{"2->nic0.1", "nic0.1->ib", "ib->nic1.0", "nic1.0->4"}));
  EXPECT_EQ(bandwidths(hops), (std::vector<double>{50e9, 25e9, 25e9, 50e9}));
}

TEST(SharedNics, ReplicasBesideEachOtherShareTheNodesNics) {
  // T = 1, K = 2, D = 4 under tp-dp-pp: stage 0's replicas on devices 0-3,
  // stage 1's on 4-7. Replica r sends r -> 4 + r: two copies a NIC each way.
  Cluster replica = shared_nic_cluster(8, 1);
  replica.rank_order = RankOrder::kTpDpPp;
  replica.devices = 2;
  replica.group_stride = 4;
  replica.replicas = 4;
  EXPECT_EQ(replica.physical_device(1, 0, 2), 6);  // stage 1 of replica 2: group 1 x 4 + 2
  EXPECT_EQ(bandwidths(replica.route(0, 1)), (std::vector<double>{50e9, 25e9, 25e9, 50e9}));
  // One replica alone: the whole NIC.
  replica.replicas = 1;
  EXPECT_EQ(bandwidths(replica.route(0, 1)), (std::vector<double>{50e9, 50e9, 50e9, 50e9}));
  // Under tp-pp-dp replica r's stages are groups 2r and 2r + 1: stage 0 -> 1
  // stays inside a node for every replica.
  Cluster outer = shared_nic_cluster(8, 1);
  outer.devices = 2;
  outer.replicas = 4;
  EXPECT_EQ(outer.physical_device(1, 0, 2), 5);  // replica 2's stage 1: group 2 x 2 + 1
  EXPECT_EQ(names(outer, outer.route(0, 1)),
            (std::vector<std::string>{"0->nvswitch0", "nvswitch0->1"}));
}

TEST(SharedNics, TheReplicasRingSharesTheNicsItsHopsCross) {
  // K = 1, D = 8 groups of T = 2 on 16 devices: the hop from group 1 (devices
  // 2, 3) to group 2 (devices 4, 5) leaves node 0 through nic0.1 twice.
  const Cluster whole = shared_nic_cluster(8, 2);
  const DataParallel ring = data_parallel_ring(whole, 1, 8);
  EXPECT_DOUBLE_EQ(ring.bandwidth, 25e9);
  EXPECT_DOUBLE_EQ(ring.latency_s, 10e-6);
  // K = 2, D = 4, T = 1 on the 8 devices: under tp-pp-dp replica r's stage 0
  // is device 2r, two replicas a node, so the ring crosses each node once
  // out (devices 2 -> 4 and 6 -> 0, on nic0.1 and nic1.1 alone); under
  // tp-dp-pp the replicas of stage 0 are devices 0-3, one node: NVSwitch.
  Cluster pipelines = shared_nic_cluster(8, 1);
  const DataParallel across = data_parallel_ring(pipelines, 2, 4);
  EXPECT_DOUBLE_EQ(across.bandwidth, 50e9);
  EXPECT_DOUBLE_EQ(across.latency_s, 10e-6);
  pipelines.rank_order = RankOrder::kTpDpPp;
  const DataParallel inside = data_parallel_ring(pipelines, 2, 4);
  EXPECT_DOUBLE_EQ(inside.bandwidth, 450e9);
  EXPECT_DOUBLE_EQ(inside.latency_s, 4e-6);
  Cluster own = whole;  // a NIC per device: each rank's ring has its own
  own.interconnect.nics_per_node = 0;
  own.build_topology();
  EXPECT_FALSE(own.shares_nics());
  EXPECT_DOUBLE_EQ(data_parallel_ring(own, 1, 8).bandwidth, 50e9);
}

TEST(SharedNics, ScenariosNameTheFieldAndItsRange) {
  nlohmann::json doc = testing::docs::good_doc();
  doc["cluster"] = {{"preset", "a100-80g"},
                    {"devices", 16},
                    {"interconnect",
                     {{"topology", "nodes"},
                      {"bandwidth", 300e9},
                      {"latency_s", 2e-6},
                      {"devices_per_node", 8},
                      {"inter_node_bandwidth", 12.5e9},
                      {"inter_node_latency_s", 5e-6},
                      {"nics_per_node", 4}}}};
  const Scenario sc = parse_scenario(doc, "s.json");
  EXPECT_EQ(sc.cluster.interconnect.nics_per_node, 4);
  EXPECT_TRUE(sc.cluster.shares_nics());
  doc["cluster"]["interconnect"]["nics_per_node"] = 3;
  try {
    parse_scenario(doc, "s.json");
    ADD_FAILURE() << "accepted";
  } catch (const ScenarioError& e) {
    EXPECT_STREQ(e.what(),
                 "s.json: cluster.interconnect.nics_per_node: 3 NICs do not divide the node's 8 "
                 "devices (devices_per_node): each NIC serves as many devices");
  }
  doc["cluster"]["interconnect"]["nics_per_node"] = -1;
  EXPECT_THROW(parse_scenario(doc, "s.json"), ScenarioError);
}

}  // namespace
}  // namespace pipescope
