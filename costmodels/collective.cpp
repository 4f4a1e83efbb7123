#include "costmodels/collective.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace pipescope {

namespace {

// One of NCCL's protocols as its tuning model prices it (NCCL master,
// src/graph/tuning.cc, ncclTunerConstantsDefaults; microseconds): the base
// latency of a call, the latency of one step over NVLink, PCIe and the
// network, and the share of the bus bandwidth it reaches (LL sends 8 bytes of
// data in 16, LL128 120 in 128), for the ring and for the tree. The Simple
// protocol's network step is paid twice (NCCL adds the network latency again
// for its flush).
struct Protocol {
  double base_ring_us;
  double base_tree_us;
  double nvlink_ring_us;
  double nvlink_tree_us;
  double pcie_ring_us;
  double pcie_tree_us;
  double net_ring_us;
  double net_tree_us;
  double bw_ring;
  double bw_tree;
};

constexpr Protocol kProtocols[] = {
    // LL
    {6.6, 6.8, 0.6, 0.6, 1.0, 1.0, 2.7, 5.0, 0.5, 1.0 / 3.8},
    // LL128
    {14.0, 14.0, 1.9, 1.25, 2.5, 1.9, 4.0, 8.5, 0.92, 120.0 / 128.0},
    // Simple
    {8.4, 8.4, 3.4, 4.0, 5.7, 4.0, 28.0, 28.0, 1.0, 0.92},
};

double intra_hop_us(const Protocol& p, LinkClass link, bool tree) {
  if (link == LinkClass::kPcie) return tree ? p.pcie_tree_us : p.pcie_ring_us;
  return tree ? p.nvlink_tree_us : p.nvlink_ring_us;
}

// The ring: `steps` steps of which `inter` cross between nodes, each rank
// moving steps / n of the buffer.
double ring_seconds(const Protocol& p, Collective c, double bytes, const CollectiveGroup& g) {
  const double n = g.ranks;
  const double per_pass = c == Collective::kAllReduce ? 2.0 : 1.0;
  const double steps = per_pass * (n - 1.0);
  const double inter = per_pass * static_cast<double>(std::max(0, g.nodes - 1));
  const double latency_us =
      p.base_ring_us + (steps - inter) * intra_hop_us(p, g.intra, false) + inter * p.net_ring_us;
  return latency_us * 1e-6 + bytes * steps / n / (g.busbw * p.bw_ring);
}

// The tree all-reduce across nodes: up and down a tree of the nodes (log2 of
// them deep) and a chain of each node's ranks, the buffer twice through each
// rank at the tree's share of the bus bandwidth.
double tree_seconds(const Protocol& p, double bytes, const CollectiveGroup& g) {
  const double per_node = static_cast<double>(g.ranks) / g.nodes;
  const double latency_us =
      p.base_tree_us + 2.0 * ((per_node - 1.0) * intra_hop_us(p, g.intra, true) +
                              std::log2(static_cast<double>(g.nodes)) * p.net_tree_us);
  return latency_us * 1e-6 + 2.0 * bytes / (g.busbw * p.bw_tree);
}

}  // namespace

double alltoall_wire_seconds(double bytes, const AllToAllGroup& g, double efficiency) {
  if (g.ranks <= 1 || bytes <= 0.0) return 0.0;
  const double n = g.ranks;
  const int per_node = std::clamp(g.per_node, 1, g.ranks);
  const double inside = per_node > 1 ? bytes * (per_node - 1) / n / (g.intra_bw * efficiency) : 0.0;
  const double outside =
      per_node < g.ranks ? bytes * (n - per_node) / n / (g.inter_bw * efficiency) : 0.0;
  return std::max(inside, outside);
}

double nccl_alltoall_seconds(double bytes, const AllToAllGroup& g) {
  if (g.ranks <= 1 || bytes <= 0.0) return 0.0;
  const Protocol& simple = kProtocols[2];
  const bool crosses = g.per_node < g.ranks;
  const double hop_us = crosses ? simple.net_ring_us : intra_hop_us(simple, g.intra, false);
  return (simple.base_ring_us + hop_us) * 1e-6 + alltoall_wire_seconds(bytes, g, simple.bw_ring);
}

namespace {

// The chance that a token's top_k of `experts`, drawn without repeats, miss
// all `held` of them: C(experts - held, k) / C(experts, k).
double miss_all(int experts, int top_k, int held) {
  double p = 1.0;
  for (int i = 0; i < top_k; ++i) {
    p *= std::max(0.0, static_cast<double>(experts - held - i)) / (experts - i);
  }
  return p;
}

}  // namespace

DeepEpCopies deepep_copies(int experts, int top_k, const AllToAllGroup& g) {
  if (g.ranks <= 1 || experts <= 0 || top_k <= 0) return {};
  const int per_node = std::clamp(g.per_node, 1, g.ranks);
  const int nodes = (g.ranks + per_node - 1) / per_node;
  const int per_rank = experts / g.ranks;
  const double rank_hit = 1.0 - miss_all(experts, top_k, per_rank);
  const double node_hit = 1.0 - miss_all(experts, top_k, per_rank * per_node);
  return {(nodes - 1) * node_hit, (g.ranks - nodes) * rank_hit};
}

double deepep_alltoall_seconds(double token_bytes, int experts, int top_k, const AllToAllGroup& g) {
  if (g.ranks <= 1 || token_bytes <= 0.0) return 0.0;
  const Protocol& simple = kProtocols[2];
  const DeepEpCopies c = deepep_copies(experts, top_k, g);
  const bool crosses = g.per_node < g.ranks;
  const double hop_us = crosses ? simple.net_ring_us : intra_hop_us(simple, g.intra, false);
  const double inside =
      c.nvlink > 0.0 ? token_bytes * c.nvlink / (g.intra_bw * simple.bw_ring) : 0.0;
  const double outside =
      c.network > 0.0 ? token_bytes * c.network / (g.inter_bw * simple.bw_ring) : 0.0;
  return (simple.base_ring_us + hop_us) * 1e-6 + std::max(inside, outside);
}

double nccl_seconds(Collective c, double bytes, const CollectiveGroup& g) {
  if (g.ranks <= 1 || bytes <= 0.0) return 0.0;
  double best = std::numeric_limits<double>::infinity();
  for (const Protocol& p : kProtocols) {
    best = std::min(best, ring_seconds(p, c, bytes, g));
    if (c == Collective::kAllReduce && g.nodes > 1)
      best = std::min(best, tree_seconds(p, bytes, g));
  }
  return best;
}

}  // namespace pipescope
