#include "costmodels/topology.h"

#include <limits>
#include <stdexcept>

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/dijkstra_shortest_paths.hpp>

#include "costmodels/check.h"
#include "costmodels/cluster.h"

namespace pipescope {

namespace {

struct EdgeProps {
  double weight = 0.0;  // latency, plus a tiny term per hop so fewer hops win ties
  std::int64_t link = 0;
};
using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS, boost::no_property,
                                    EdgeProps>;

// Far below any latency: only breaks ties between equally fast paths.
constexpr double kPerHop_s = 1e-15;

}  // namespace

struct TopologyGraph::Adjacency {
  explicit Adjacency(std::size_t vertices) : graph(vertices) {}
  Graph graph;
};

TopologyGraph::TopologyGraph() = default;
TopologyGraph::~TopologyGraph() = default;

void TopologyGraph::connect() {
  auto adjacency = std::make_unique<Adjacency>(vertex_names_.size());
  for (std::size_t i = 0; i < links_.size(); ++i) {
    const Link& l = links_[i];
    boost::add_edge(static_cast<std::size_t>(l.from), static_cast<std::size_t>(l.to),
                    EdgeProps{l.latency_s + kPerHop_s, static_cast<std::int64_t>(i)},
                    adjacency->graph);
  }
  adjacency_ = std::move(adjacency);
}

std::shared_ptr<const TopologyGraph> TopologyGraph::nodes(int devices, const Interconnect& ic) {
  if (devices < 1) throw std::invalid_argument("a topology needs at least one device");
  if (ic.devices_per_node < 1) {
    throw std::invalid_argument("the nodes topology needs devices_per_node >= 1");
  }
  if (!(ic.bandwidth > 0.0) || !(ic.inter_node_bandwidth > 0.0)) {
    throw std::invalid_argument("the nodes topology needs positive bandwidths");
  }
  auto g = std::make_shared<TopologyGraph>();
  g->devices_ = devices;
  const int node_count = (devices + ic.devices_per_node - 1) / ic.devices_per_node;
  for (int d = 0; d < devices; ++d) g->vertex_names_.push_back(std::to_string(d));
  for (int n = 0; n < node_count; ++n) g->vertex_names_.push_back("nvswitch" + std::to_string(n));
  const int spine = static_cast<int>(g->vertex_names_.size());
  g->vertex_names_.push_back("ib");
  const auto cable = [&](int a, int b, double bandwidth, double latency_s, bool network) {
    g->links_.push_back({a, b, bandwidth, latency_s, network});
    g->links_.push_back({b, a, bandwidth, latency_s, network});
  };
  const int nics = ic.nics_per_node;
  const bool shared = nics > 0 && nics < ic.devices_per_node;
  if (shared && ic.devices_per_node % nics != 0) {
    throw std::invalid_argument("nics_per_node must divide devices_per_node");
  }
  // Shared NICs: vertex nic(d) for device d's, cabled to the spine once; the
  // hop into it carries the latency, so a route's latency is as without.
  const int per_nic = shared ? ic.devices_per_node / nics : 1;
  const int first_nic = static_cast<int>(g->vertex_names_.size());
  const auto nic = [&](int d) { return first_nic + d / per_nic; };
  g->devices_per_node_ = ic.devices_per_node;
  if (shared && node_count > 1) {
    std::vector<std::int64_t> uplink;  // per NIC; its downlink is the next link
    for (int k = 0; k * per_nic < devices; ++k) {
      const int node = k * per_nic / ic.devices_per_node;
      g->vertex_names_.push_back("nic" + std::to_string(node) + "." + std::to_string(k % nics));
      uplink.push_back(g->link_count());
      cable(nic(k * per_nic), spine, ic.inter_node_bandwidth, 0.0, true);
    }
    for (int d = 0; d < devices; ++d)
      g->nic_up_.push_back(uplink[static_cast<std::size_t>(d / per_nic)]);
  }
  for (int d = 0; d < devices; ++d) {
    cable(d, devices + d / ic.devices_per_node, ic.bandwidth, ic.latency_s, false);
    if (node_count > 1) {
      cable(d, shared ? nic(d) : spine, ic.inter_node_bandwidth, ic.inter_node_latency_s, true);
    }
  }
  g->connect();
  return g;
}

std::shared_ptr<const TopologyGraph> TopologyGraph::torus(int devices, const Interconnect& ic) {
  if (devices < 1) throw std::invalid_argument("a topology needs at least one device");
  if (!(ic.bandwidth > 0.0)) throw std::invalid_argument("the torus needs a positive bandwidth");
  int width = ic.torus_width;
  if (width == 0) {
    for (int w = 1; static_cast<std::int64_t>(w) * w <= devices; ++w) {
      if (devices % w == 0) width = w;
    }
  }
  if (width < 1 || devices % width != 0) {
    throw std::invalid_argument("torus_width " + std::to_string(width) + " does not divide the " +
                                std::to_string(devices) + " devices");
  }
  const int height = devices / width;
  auto g = std::make_shared<TopologyGraph>();
  g->devices_ = devices;
  for (int d = 0; d < devices; ++d) g->vertex_names_.push_back(std::to_string(d));
  const auto cable = [&](int a, int b) {
    g->links_.push_back({a, b, ic.bandwidth, ic.latency_s});
    g->links_.push_back({b, a, ic.bandwidth, ic.latency_s});
  };
  // Placement: device d sits on row d / W, left to right on even rows and right
  // to left on odd ones (a snake), so devices d and d + 1 - a pipeline's
  // neighbouring stages - are always one hop apart.
  const auto at = [&](int x, int y) { return y * width + (y % 2 == 0 ? x : width - 1 - x); };
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      // Right and down, wrapping; a dimension of 2 has one cable per pair, of 1 none.
      if (width > 1 && (width > 2 || x == 0)) cable(at(x, y), at((x + 1) % width, y));
      if (height > 1 && (height > 2 || y == 0)) cable(at(x, y), at(x, (y + 1) % height));
    }
  }
  g->connect();
  return g;
}

std::shared_ptr<const TopologyGraph> TopologyGraph::pcie_tree(int devices, const Interconnect& ic) {
  if (devices < 1) throw std::invalid_argument("a topology needs at least one device");
  if (ic.devices_per_switch < 1) {
    throw std::invalid_argument("the PCIe tree needs devices_per_switch >= 1");
  }
  if (!(ic.bandwidth > 0.0))
    throw std::invalid_argument("the PCIe tree needs a positive bandwidth");
  auto g = std::make_shared<TopologyGraph>();
  g->devices_ = devices;
  const int switches = (devices + ic.devices_per_switch - 1) / ic.devices_per_switch;
  for (int d = 0; d < devices; ++d) g->vertex_names_.push_back(std::to_string(d));
  // Switch s is vertex up(s) for traffic towards the host, down(s) away from it.
  const auto up = [&](int s) { return devices + 2 * s; };
  const auto down = [&](int s) { return devices + 2 * s + 1; };
  for (int s = 0; s < switches; ++s) {
    g->vertex_names_.push_back("pcie" + std::to_string(s));
    g->vertex_names_.push_back("pcie" + std::to_string(s));
  }
  const int host = static_cast<int>(g->vertex_names_.size());
  g->vertex_names_.push_back("host");
  for (int d = 0; d < devices; ++d) {
    const int s = d / ic.devices_per_switch;
    g->links_.push_back({d, up(s), ic.bandwidth, ic.latency_s});
    g->links_.push_back({down(s), d, ic.bandwidth, ic.latency_s});
  }
  for (int s = 0; s < switches; ++s) {
    g->links_.push_back({up(s), host, ic.bandwidth, 0.0});
    g->links_.push_back({host, down(s), ic.bandwidth, 0.0});
  }
  g->connect();
  return g;
}

std::vector<Hop> TopologyGraph::route(int src, int dst) const {
  PS_CHECK(src >= 0 && src < devices_ && dst >= 0 && dst < devices_, "route outside the graph");
  std::vector<Hop> hops;
  if (src == dst) return hops;
  const std::int64_t key = std::int64_t{src} * devices_ + dst;
  std::vector<std::int64_t> links;
  {
    const std::lock_guard<std::mutex> lock(routes_mutex_);
    if (const auto it = routes_.find(key); it != routes_.end()) links = it->second;
  }
  if (links.empty()) {
    links = shortest_links(src, dst);
    const std::lock_guard<std::mutex> lock(routes_mutex_);
    routes_.emplace(key, links);
  }
  for (const std::int64_t id : links) {
    const Link& l = links_[static_cast<std::size_t>(id)];
    hops.push_back({id, l.bandwidth, l.latency_s, l.network});
  }
  return hops;
}

std::vector<std::int64_t> TopologyGraph::shortest_links(int src, int dst) const {
  const Graph& graph = adjacency_->graph;
  std::vector<Graph::vertex_descriptor> pred(boost::num_vertices(graph));
  std::vector<double> dist(boost::num_vertices(graph), std::numeric_limits<double>::infinity());
  boost::dijkstra_shortest_paths(graph, static_cast<std::size_t>(src),
                                 boost::predecessor_map(pred.data())
                                     .distance_map(dist.data())
                                     .weight_map(boost::get(&EdgeProps::weight, graph)));
  PS_CHECK(dist[static_cast<std::size_t>(dst)] < std::numeric_limits<double>::infinity(),
           "no route from device " + std::to_string(src) + " to " + std::to_string(dst));
  // Walk back from dst; of parallel edges into a vertex take the lightest.
  std::vector<std::int64_t> reversed;
  for (std::size_t v = static_cast<std::size_t>(dst); v != static_cast<std::size_t>(src);
       v = pred[v]) {
    const std::size_t u = pred[v];
    std::int64_t best = -1;
    double best_weight = 0.0;
    for (auto [e, end] = boost::out_edges(u, graph); e != end; ++e) {
      if (boost::target(*e, graph) != v) continue;
      if (best < 0 || graph[*e].weight < best_weight) {
        best = graph[*e].link;
        best_weight = graph[*e].weight;
      }
    }
    reversed.push_back(best);
  }
  return {reversed.rbegin(), reversed.rend()};
}

std::optional<std::pair<std::int64_t, std::int64_t>> TopologyGraph::nic_links(int src,
                                                                              int dst) const {
  PS_CHECK(src >= 0 && src < devices_ && dst >= 0 && dst < devices_, "route outside the graph");
  if (nic_up_.empty() || src / devices_per_node_ == dst / devices_per_node_) return std::nullopt;
  // cable(nic, spine) made the uplink and, next, the downlink.
  return std::make_pair(nic_up_[static_cast<std::size_t>(src)],
                        nic_up_[static_cast<std::size_t>(dst)] + 1);
}

std::string TopologyGraph::link_name(std::int64_t link) const {
  PS_CHECK(link >= 0 && link < link_count(), "link " + std::to_string(link) + " out of range");
  const Link& l = links_[static_cast<std::size_t>(link)];
  return vertex_names_[static_cast<std::size_t>(l.from)] + "->" +
         vertex_names_[static_cast<std::size_t>(l.to)];
}

}  // namespace pipescope
