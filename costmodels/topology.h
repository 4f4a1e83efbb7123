#pragma once
// A cluster's network as a graph (Boost.Graph): devices, node switches and a
// spine are vertices, each direction of a cable a weighted edge. Routes are
// shortest paths by latency (fewest hops among equals), found by Dijkstra's
// algorithm; each edge is one directed link, which transfers share and queue
// on (the engine's contention).
//
// The `nodes` topology (Interconnect::devices_per_node): devices sit in nodes of
// devices_per_node behind a node switch (NVSwitch: bandwidth, latency_s per hop),
// and every device has its own NIC to a spine switch (InfiniBand:
// inter_node_bandwidth, inter_node_latency_s per hop). Inside a node a transfer
// goes device -> node switch -> device; between nodes device -> spine -> device.
//
// The `torus` topology: devices on a W x H grid, each linked to its four
// neighbours with wrap-around, as TPU chips are; routes take the fewest hops.
// Device d sits on row d / W in snake order (left to right on even rows, right
// to left on odd ones), so a pipeline's consecutive devices are neighbours.
//
// The `pcie-host` tree (Interconnect::devices_per_switch > 0): devices in groups
// behind a PCIe switch, each switch on one uplink to the host. There is no
// peer-to-peer: a copy goes device -> switch -> host memory -> switch -> device,
// even between two devices of one switch, so devices of a switch share its
// uplink each way. A switch is two vertices, one per direction, which is how the
// graph forbids the peer path; latency_s is charged on the device's link (DMA
// setup), the switch hop adds none.

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "costmodels/device.h"

namespace pipescope {

struct Hop;  // costmodels/cluster.h

class TopologyGraph {
 public:
  // The `nodes` topology of `devices` devices. Throws std::invalid_argument on
  // a non-positive size, bandwidth or per-node count.
  static std::shared_ptr<const TopologyGraph> nodes(int devices, const Interconnect& ic);
  // A 2-D torus of `devices` devices in rows of ic.torus_width (0: the most
  // nearly square grid), each linked to its right and lower neighbours with
  // wrap-around, both directions, at bandwidth and latency_s. Throws
  // std::invalid_argument when the width does not divide the device count.
  static std::shared_ptr<const TopologyGraph> torus(int devices, const Interconnect& ic);
  // The PCIe tree of `devices` devices in groups of ic.devices_per_switch.
  // Links 2d and 2d + 1 are device d's up and down; the switches' uplinks
  // follow. Throws std::invalid_argument on a non-positive group or bandwidth.
  static std::shared_ptr<const TopologyGraph> pcie_tree(int devices, const Interconnect& ic);

  TopologyGraph();
  ~TopologyGraph();
  TopologyGraph(const TopologyGraph&) = delete;
  TopologyGraph& operator=(const TopologyGraph&) = delete;

  int devices() const { return devices_; }
  std::int64_t link_count() const { return static_cast<std::int64_t>(links_.size()); }
  // The hops from device src to dst, in order; empty when src == dst. Each
  // pair's path is found once and kept (a planner asks for the same few
  // routes hundreds of thousands of times); safe to call from several threads.
  std::vector<Hop> route(int src, int dst) const;
  // "3->nvswitch0", "ib->9", "pcie1->host".
  std::string link_name(std::int64_t link) const;
  // Nodes with shared NICs: the link from src's NIC up to the spine and the
  // one down to dst's NIC, which a transfer between different nodes takes
  // (and one inside a node does not); none otherwise. O(1), for counting
  // the copies on a NIC without a route each (Cluster::add_load).
  std::optional<std::pair<std::int64_t, std::int64_t>> nic_links(int src, int dst) const;

 private:
  struct Link {
    int from = 0;
    int to = 0;
    double bandwidth = 0.0;
    double latency_s = 0.0;
    bool network = false;  // a NIC's cable to the spine: between nodes
  };
  struct Adjacency;  // the links as a Boost graph, built once
  // Builds the adjacency from links_: the factories' last step.
  void connect();
  // The links of the shortest path, by Dijkstra's algorithm.
  std::vector<std::int64_t> shortest_links(int src, int dst) const;

  int devices_ = 0;
  int devices_per_node_ = 0;          // nodes only
  std::vector<std::int64_t> nic_up_;  // nodes with shared NICs: device -> its NIC's uplink
  mutable std::mutex routes_mutex_;
  mutable std::unordered_map<std::int64_t, std::vector<std::int64_t>>
      routes_;  // src * devices + dst
  std::vector<std::string> vertex_names_;
  std::vector<Link> links_;  // edge index = link id
  std::unique_ptr<const Adjacency> adjacency_;
};

}  // namespace pipescope
