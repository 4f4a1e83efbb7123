#include "costmodels/cluster.h"

#include <algorithm>
#include <bit>
#include <string>

#include "costmodels/check.h"
#include "costmodels/shared_memo.h"

namespace pipescope {

// Link numbering (cluster.h), n physical devices: all-to-all i*n + j for i -> j; pcie-host 2d for
// d -> host and 2d+1 for host -> d; ring 2d for d -> d+1 (clockwise) and 2d+1 for
// d -> d-1 (counter-clockwise), indices mod n.

namespace {

// All a network graph is made of: clusters of the same shape share one graph,
// and with it the routes it has found.
std::vector<std::int64_t> network_key(int devices, const Interconnect& ic) {
  return {static_cast<std::int64_t>(ic.topology),
          devices,
          std::bit_cast<std::int64_t>(ic.bandwidth),
          std::bit_cast<std::int64_t>(ic.latency_s),
          ic.devices_per_node,
          std::bit_cast<std::int64_t>(ic.inter_node_bandwidth),
          std::bit_cast<std::int64_t>(ic.inter_node_latency_s),
          ic.nics_per_node,
          ic.torus_width,
          ic.devices_per_switch};
}

std::shared_ptr<const TopologyGraph> make_network(int devices, const Interconnect& ic) {
  switch (ic.topology) {
    case TopologyKind::kNodes:
      return TopologyGraph::nodes(devices, ic);
    case TopologyKind::kTorus:
      return TopologyGraph::torus(devices, ic);
    case TopologyKind::kPcieHost:
      return TopologyGraph::pcie_tree(devices, ic);
    default:
      return nullptr;
  }
}

// A plan's candidates and a validation's cases meet a few shapes many times.
constexpr std::size_t kMaxNetworks = 64;

}  // namespace

void Cluster::build_topology() {
  if (!uses_graph()) {
    graph = nullptr;
    return;
  }
  static SharedMemo<std::vector<std::int64_t>, std::shared_ptr<const TopologyGraph>, WordsHash>
      networks(kMaxNetworks);
  const int physical = physical_devices();
  graph = networks.get(network_key(physical, interconnect),
                       [&] { return make_network(physical, interconnect); });
}

std::string Cluster::devices_text(std::int64_t n) const {
  if (group_size() == 1) return std::to_string(n) + " devices";
  std::string of = tensor_parallel > 1 ? "T=" + std::to_string(tensor_parallel) : "";
  if (context_parallel > 1) {
    of += (of.empty() ? "C=" : " x C=") + std::to_string(context_parallel);
  }
  return std::to_string(n) + " groups of " + of + " devices";
}

bool Cluster::uses_graph() const {
  switch (interconnect.topology) {
    case TopologyKind::kNodes:
    case TopologyKind::kTorus:
      return true;
    case TopologyKind::kPcieHost:
      return interconnect.devices_per_switch > 0;
    default:
      return false;
  }
}

std::string_view to_string(CostModelKind k) {
  return k == CostModelKind::kKernels ? "kernels" : "analytic";
}

std::optional<CostModelKind> parse_cost_model_kind(std::string_view name) {
  if (name == "analytic") return CostModelKind::kAnalytic;
  if (name == "kernels") return CostModelKind::kKernels;
  return std::nullopt;
}

double Cluster::achievable_fraction(bool network) const {
  if (!nccl()) return 1.0;
  return network ? device.kernels.network_efficiency : device.kernels.link_efficiency;
}

bool Cluster::nccl() const {
  return cost_model == CostModelKind::kKernels && !profile;
}

std::int64_t Cluster::link_count() const {
  const std::int64_t n = physical_devices();
  if (uses_graph()) {
    PS_CHECK(graph != nullptr, "a graph topology needs build_topology()");
    return graph->link_count();
  }
  switch (interconnect.topology) {
    case TopologyKind::kNodes:
    case TopologyKind::kTorus:
      return 0;  // above
    case TopologyKind::kAllToAll:
      return n * n;
    case TopologyKind::kPcieHost:
    case TopologyKind::kRing:
      return 2 * n;
  }
  return 0;
}

std::string_view to_string(RankOrder order) {
  return order == RankOrder::kTpDpPp ? "tp-dp-pp" : "tp-pp-dp";
}

std::string_view to_string(P2pMode mode) {
  switch (mode) {
    case P2pMode::kOverlapped:
      return "overlapped";
    case P2pMode::kBlocking:
      return "blocking";
    case P2pMode::kOverlappedSteady:
      return "overlapped-steady";
  }
  return "overlapped";
}

std::optional<P2pMode> parse_p2p_mode(std::string_view name) {
  for (const P2pMode m : {P2pMode::kOverlapped, P2pMode::kBlocking, P2pMode::kOverlappedSteady}) {
    if (name == to_string(m)) return m;
  }
  return std::nullopt;
}

std::optional<RankOrder> parse_rank_order(std::string_view name) {
  if (name == "tp-pp-dp") return RankOrder::kTpPpDp;
  if (name == "tp-dp-pp") return RankOrder::kTpDpPp;
  return std::nullopt;
}

std::vector<Hop> Cluster::route(int src, int dst) const {
  PS_CHECK(src >= 0 && src < devices && dst >= 0 && dst < devices,
           "route " + std::to_string(src) + " -> " + std::to_string(dst) + " outside " +
               std::to_string(devices) + " devices");
  // Flat topologies link every pair of groups alike, so their routes need not
  // know where a replica's groups sit.
  if (!uses_graph()) return physical_route(src * group_size(), dst * group_size());
  if (!shares_nics()) return physical_route(first_physical_device(src), first_physical_device(dst));
  LinkLoad load;
  for (int r = 0; r < replicas; ++r) {
    for (int t = 0; t < group_size(); ++t) {
      add_load(load, physical_device(src, t, r), physical_device(dst, t, r));
    }
  }
  return loaded_route(first_physical_device(src), first_physical_device(dst), load);
}

int Cluster::physical_device(int group, int rank, int replica) const {
  const int whole_group =
      rank_order == RankOrder::kTpDpPp ? group * group_stride + replica : replica * devices + group;
  return whole_group * group_size() + rank;
}

bool Cluster::shares_nics() const {
  return interconnect.topology == TopologyKind::kNodes && interconnect.nics_per_node > 0 &&
         interconnect.nics_per_node < interconnect.devices_per_node;
}

void Cluster::add_load(LinkLoad& load, int src, int dst) const {
  // Shared NICs: only their links to the spine carry more than one copy
  // (every other link is one device's), and a transfer between nodes
  // crosses two of them: counted without finding its route.
  if (shares_nics() && graph) {
    if (const auto nics = graph->nic_links(src, dst)) {
      ++load[nics->first];
      ++load[nics->second];
    }
    return;
  }
  for (const Hop& h : physical_route(src, dst)) ++load[h.link];
}

std::vector<Hop> Cluster::loaded_route(int src, int dst, const LinkLoad& load) const {
  std::vector<Hop> hops = physical_route(src, dst);
  for (Hop& h : hops) {
    const auto it = load.find(h.link);
    if (it != load.end() && it->second > 1) h.bandwidth /= it->second;
  }
  return hops;
}

std::vector<Hop> Cluster::physical_route(int src, int dst) const {
  // A replica's copy routes on the whole cluster's graph (group_stride).
  const int n =
      uses_graph() && graph ? std::max(graph->devices(), physical_devices()) : physical_devices();
  PS_CHECK(src >= 0 && src < n && dst >= 0 && dst < n, "route " + std::to_string(src) + " -> " +
                                                           std::to_string(dst) + " outside " +
                                                           std::to_string(n) + " physical devices");
  std::vector<Hop> hops;
  if (src == dst) return hops;
  if (uses_graph()) {
    PS_CHECK(graph != nullptr && graph->devices() >= n, "a graph topology needs build_topology()");
    hops = graph->route(src, dst);
    for (Hop& h : hops) h.bandwidth *= achievable_fraction(h.network);
    return hops;
  }
  const auto hop = [&](std::int64_t link) {
    hops.push_back({link, interconnect.bandwidth * achievable_fraction(), interconnect.latency_s});
  };
  switch (interconnect.topology) {
    case TopologyKind::kAllToAll:
      hop(std::int64_t{src} * n + dst);
      break;
    case TopologyKind::kPcieHost:
      hop(2 * std::int64_t{src});
      hop(2 * std::int64_t{dst} + 1);
      break;
    case TopologyKind::kNodes:
    case TopologyKind::kTorus:
      break;  // above
    case TopologyKind::kRing: {
      const int clockwise = (dst - src + n) % n;
      const bool go_clockwise = clockwise <= n - clockwise;
      const int steps = go_clockwise ? clockwise : n - clockwise;
      for (int i = 0, at = src; i < steps; ++i) {
        hop(go_clockwise ? 2 * std::int64_t{at} : 2 * std::int64_t{at} + 1);
        at = go_clockwise ? (at + 1) % n : (at - 1 + n) % n;
      }
      break;
    }
  }
  return hops;
}

std::string Cluster::link_name(std::int64_t link) const {
  PS_CHECK(link >= 0 && link < link_count(), "link " + std::to_string(link) + " out of range");
  const std::int64_t n = physical_devices();
  const auto arrow = [](const std::string& a, const std::string& b) { return a + "->" + b; };
  const std::int64_t d = link / 2;
  if (uses_graph()) return graph->link_name(link);
  switch (interconnect.topology) {
    case TopologyKind::kNodes:
    case TopologyKind::kTorus:
      return "?";  // above
    case TopologyKind::kAllToAll:
      return arrow(std::to_string(link / n), std::to_string(link % n));
    case TopologyKind::kPcieHost:
      return link % 2 == 0 ? arrow(std::to_string(d), "host") : arrow("host", std::to_string(d));
    case TopologyKind::kRing: {
      const std::int64_t next = link % 2 == 0 ? (d + 1) % n : (d - 1 + n) % n;
      return arrow(std::to_string(d), std::to_string(next));
    }
  }
  return "?";
}

}  // namespace pipescope
