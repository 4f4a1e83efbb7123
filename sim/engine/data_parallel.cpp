// The data-parallel ring between pipeline replicas (sim/engine/simulator.h) and
// the times of its collectives: the gradient all-reduce, and ZeRO's
// reduce-scatter and all-gathers.
#include "sim/engine/simulator.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "sim/engine/context_parallel.h"
#include "sim/engine/expert_parallel.h"
#include "sim/engine/zero.h"
#include "sim/scenario/expert_groups.h"

namespace pipescope {

namespace {
// Hops of a replica ring looked at (beside the wrap-around): more than any
// preset's node or PCIe switch holds.
constexpr int kRingHopsChecked = 64;
}  // namespace

namespace {

// The least bandwidth and the total latency of a route's hops.
std::pair<double, double> route_links(const std::vector<Hop>& route) {
  double latency = 0.0, bandwidth = 0.0;
  for (const Hop& h : route) {
    latency += h.latency_s;
    bandwidth = bandwidth == 0.0 ? h.bandwidth : std::min(bandwidth, h.bandwidth);
  }
  return {bandwidth, latency};
}

// The device of slot j of the D x C that hold a stage's weights, shares
// first as megatron-core orders them (tp-cp-ep-dp): share j % C of replica
// j / C, whose group is (j / C) step of `whole` (tensor rank 0 of it).
int slot_device(const Cluster& whole, int step, int j) {
  const int C = whole.context_parallel;
  return whole.first_physical_device(j / C * step) + j % C * whole.tensor_parallel;
}

// The device of expert rank i of a stage's D x C x fold (Cluster::
// expert_fold): slot i / fold's tensor rank i % fold, as megatron-core
// orders expert ranks (the tensor ranks of whole experts first).
int expert_rank_device(const Cluster& whole, int step, int i) {
  const int fold = whole.expert_fold;
  return slot_device(whole, step, i / fold) + i % fold;
}

// The all-to-all group of expert ranks 0 to E - 1 (without context
// parallelism and with experts split over T, replicas 0 to E - 1: groups 0,
// step, ..., (E - 1) step of `whole`), and the nodes of the ring of the
// ranks that hold the same experts.
void set_expert_group(const Cluster& whole, int step, int E, DataParallel& dp) {
  const int C = whole.context_parallel, fold = whole.expert_fold;
  std::vector<int> members;
  for (int i = 0; i < E; ++i) members.push_back(expert_rank_device(whole, step, i));
  // A rank's route from rank 0's device; a replica's first device's as the
  // replicas' ring routes it.
  const auto route = [&](int i) {
    const int j = i / fold;
    return i % fold == 0 && j % C == 0
               ? whole.route(0, j / C * step)
               : whole.physical_route(members.front(), members[std::size_t(i)]);
  };
  set_alltoall_group(whole, members, route, dp, "expert-parallel devices", true);
  dp.expert_fold = fold;
  dp.deepep = whole.deepep;
  std::vector<int> holders;  // of the experts rank 0 holds
  for (int i = 0; i < dp.replicas * C * fold; i += E) {
    holders.push_back(expert_rank_device(whole, step, i));
  }
  DataParallel ring;
  set_collective_links(whole, holders, ring);
  dp.expert_ring_nodes = ring.nodes;
}

}  // namespace

void set_alltoall_group(const Cluster& cluster, const std::vector<int>& members,
                        const std::function<std::vector<Hop>(int)>& route, DataParallel& dp,
                        const std::string& what, bool experts) {
  AllToAllGroup& g = dp.experts;
  const int n = static_cast<int>(members.size());
  g.ranks = n;
  g.per_node = n;
  g.intra = dp.intra;
  const int per_node = cluster.interconnect.devices_per_node;
  const bool nodes = cluster.interconnect.topology == TopologyKind::kNodes && per_node > 0;
  const auto node_of = [&](int i) { return members[static_cast<std::size_t>(i)] / per_node; };
  if (nodes) {
    g.per_node = 0;
    for (int i = 0; i < n; ++i) g.per_node += node_of(i) == node_of(0) ? 1 : 0;
  }
  for (int i = 1; i < n; ++i) {
    const auto [bandwidth, latency] = route_links(route(i));
    const bool inside = !nodes || node_of(i) == node_of(0);
    double& bw = inside ? g.intra_bw : g.inter_bw;
    bw = bw == 0.0 ? bandwidth : std::min(bw, bandwidth);
    dp.experts_latency_s = std::max(dp.experts_latency_s, latency);
  }
  if ((g.per_node > 1 && !(g.intra_bw > 0.0)) || (g.per_node < n && !(g.inter_bw > 0.0))) {
    throw ConfigError("the link between " + what +
                      " has no bandwidth: their all-to-alls cannot run");
  }
  const GroupAllToAllFigures& measured =
      cluster.profile ? cluster.profile->alltoall_group : GroupAllToAllFigures{};
  if (cluster.profile && cluster.tensor_parallel == 1 &&
      (measured.experts == experts || measured.within_ops)) {
    dp.measured_alltoall = cluster.profile->alltoall_group;
  }
}

namespace {

// Under context parallelism each replica's C shares of the sequence reduce
// their gradients with the replicas': the ring of the D x C takes the slower
// of the replicas' hops and the hops between the shares of a group
// (context_ring), and spans the nodes of all of them.
DataParallel with_context_shares(const Cluster& whole, int step, DataParallel dp) {
  const int C = whole.context_parallel;
  if (C <= 1) return dp;
  dp.context = C;
  const DataParallel shares = context_ring(whole);
  dp.latency_s = std::max(dp.latency_s, shares.latency_s);
  dp.bandwidth = dp.bandwidth == 0.0 ? shares.bandwidth : std::min(dp.bandwidth, shares.bandwidth);
  std::vector<int> members;  // every slot of the D x C
  for (int j = 0; j < dp.replicas * C; ++j) members.push_back(slot_device(whole, step, j));
  set_collective_links(whole, members, dp);
  return dp;
}

// The gradient sum the cluster's CPU profile measured for this ring's
// ranks: those of one machine's group at T = 1 that the executor sums over,
// the C shares of a replica or its E expert ranks (as many reducers, all on
// one node); the ring keeps its links for the rest (the expert ring, ZeRO's
// collectives).
DataParallel with_measured_sum(const Cluster& whole, DataParallel dp) {
  const std::shared_ptr<const Profile>& profile = whole.profile;
  const bool group = dp.replicas == std::max(1, dp.experts.ranks) && dp.nodes <= 1;
  if (profile && profile->backend != "cuda" && whole.tensor_parallel == 1 && group &&
      dp.reducers() > 1 && profile->gradient_sum.ranks == dp.reducers()) {
    dp.measured_sum = profile->gradient_sum;
  }
  return dp;
}

}  // namespace

DataParallel data_parallel_ring(const Cluster& whole, int stages, int replicas,
                                int expert_parallel) {
  DataParallel dp;
  dp.replicas = replicas;
  const int fold = whole.expert_fold;
  if (expert_parallel > 1 &&
      !experts_divide(expert_parallel, replicas, whole.context_parallel, fold)) {
    const std::string folded =
        fold > 1 ? " x " + std::to_string(fold) + " tensor ranks with whole experts" : "";
    throw ConfigError(
        "expert_parallel " + std::to_string(expert_parallel) + " does not divide the " +
            (whole.context_parallel > 1
                 ? std::to_string(replicas) + " data-parallel replicas x " +
                       std::to_string(whole.context_parallel) + " context-parallel shares" +
                       folded + ": the experts spread over E of the D x C" +
                       (fold > 1 ? " x T" : "")
                 : std::to_string(replicas) + " data-parallel replicas" + folded +
                       ": the experts spread over E of the D" + (fold > 1 ? " x T" : "")),
        "training.expert_parallel");
  }
  // Replica r's device 0 is the whole cluster's group r x step.
  const int step = whole.rank_order == RankOrder::kTpDpPp ? 1 : stages;
  if (replicas <= 1) {
    // One replica's C shares: their links first, which the experts' group
    // takes its kind of link from.
    dp = with_context_shares(whole, step, dp);
    if (expert_parallel > 1) set_expert_group(whole, step, expert_parallel, dp);
    return with_measured_sum(whole, dp);
  }
  if (std::int64_t{stages} * replicas > whole.devices) {
    throw ConfigError(std::to_string(replicas) + " replicas of K=" + std::to_string(stages) +
                      " need " + whole.devices_text(std::int64_t{stages} * replicas) +
                      "; the cluster has " + std::to_string(whole.devices));
  }
  // The ring runs device 0 of each replica to device 0 of the next and the last
  // back to the first, its steps in lockstep: it moves at its slowest hop. The
  // hops repeat with a node's or a switch's devices, so the first
  // kRingHopsChecked and the wrap-around meet every kind.
  // With shared NICs every hop of the ring, each of a group's T devices
  // running its own ring, sends at once: a link carries its share of them.
  Cluster::LinkLoad load;
  if (whole.shares_nics()) {
    for (int r = 0; r < replicas; ++r) {
      for (int t = 0; t < whole.group_size(); ++t) {
        whole.add_load(load, whole.physical_device(r * step, t, 0),
                       whole.physical_device((r + 1) % replicas * step, t, 0));
      }
    }
  }
  const auto hops = [&](int from, int to) {
    return whole.shares_nics() ? whole.loaded_route(whole.first_physical_device(from * step),
                                                    whole.first_physical_device(to * step), load)
                               : whole.route(from * step, to * step);
  };
  const auto take = [&](int from, int to) {
    const auto [bandwidth, latency] = route_links(hops(from, to));
    dp.latency_s = std::max(dp.latency_s, latency);
    dp.bandwidth = dp.bandwidth == 0.0 ? bandwidth : std::min(dp.bandwidth, bandwidth);
  };
  for (int r = 0; r < std::min(replicas - 1, kRingHopsChecked); ++r) take(r, r + 1);
  take(replicas - 1, 0);
  std::vector<int> members;
  for (int r = 0; r < replicas; ++r) members.push_back(whole.first_physical_device(r * step));
  set_collective_links(whole, members, dp);
  if (!(dp.bandwidth > 0.0)) {
    throw ConfigError(
        "the link between replicas has no bandwidth: the gradient all-reduce "
        "cannot run");
  }
  if (expert_parallel > 1) set_expert_group(whole, step, expert_parallel, dp);
  return with_measured_sum(whole, with_context_shares(whole, step, dp));
}

void set_collective_links(const Cluster& cluster, const std::vector<int>& members,
                          DataParallel& ring) {
  ring.nccl = cluster.nccl();
  ring.intra = cluster.interconnect.topology == TopologyKind::kPcieHost ? LinkClass::kPcie
                                                                        : LinkClass::kNvlink;
  ring.nodes = 1;
  const int per_node = cluster.interconnect.devices_per_node;
  if (cluster.interconnect.topology != TopologyKind::kNodes || per_node <= 0) return;
  std::vector<int> nodes;
  for (const int d : members) nodes.push_back(d / per_node);
  std::sort(nodes.begin(), nodes.end());
  ring.nodes = static_cast<int>(std::unique(nodes.begin(), nodes.end()) - nodes.begin());
}

namespace {

CollectiveGroup collective_group(const DataParallel& dp) {
  return {dp.reducers(), std::max(1, dp.nodes), dp.intra, dp.bandwidth};
}

}  // namespace

SimTime dense_and_experts(RingCollective collective, const DataParallel& dp,
                          const DataParallel& expert_ring, Bytes dense, Bytes experts) {
  return collective(dp, dense) + (experts > 0 ? collective(expert_ring, experts) : 0);
}

SimTime step_gather(const Scenario& sc, const DataParallel& dp, const StageCost& c) {
  // The updated weights, in the model's dtype.
  const Bytes e = dtype_bytes(sc.model.dtype);
  const SimTime gather = dense_and_experts(reduce_scatter_time, dp, expert_reduction_ring(dp),
                                           (c.params - c.expert_params) * e, c.expert_params * e);
  if (!sc.training.framework.overlap_param_gather) return gather;
  return std::max<SimTime>(0, gather - c.forward);
}

SimTime allreduce_time(const DataParallel& dp, Bytes bytes, int count) {
  if (dp.reducers() <= 1) return 0;
  const GradientSumFigures& sum = dp.measured_sum;
  if (dp.sums_on_threads()) {
    return seconds_to_simtime(count * sum.latency_s + static_cast<double>(bytes) / sum.bandwidth);
  }
  const double D = dp.reducers();
  if (dp.nccl) {
    return seconds_to_simtime(count * nccl_seconds(Collective::kAllReduce,
                                                   static_cast<double>(bytes) / count,
                                                   collective_group(dp)));
  }
  return seconds_to_simtime(
      2.0 * (D - 1.0) * (count * dp.latency_s + static_cast<double>(bytes) / (D * dp.bandwidth)));
}

SimTime pair_allreduce_time(const Cluster& cluster, int a, int b, Bytes bytes) {
  DataParallel pair;
  pair.replicas = 2;
  const auto [bandwidth, latency] = route_links(cluster.route(a, b));
  if (!(bandwidth > 0.0)) {
    throw ConfigError("the link between devices " + std::to_string(a) + " and " +
                      std::to_string(b) +
                      " has no bandwidth: the tied token table's gradient all-reduce cannot run");
  }
  pair.bandwidth = bandwidth;
  pair.latency_s = latency;
  set_collective_links(cluster,
                       {cluster.first_physical_device(a), cluster.first_physical_device(b)}, pair);
  return allreduce_time(pair, bytes);
}

SimTime reduce_scatter_time(const DataParallel& dp, Bytes bytes) {
  if (dp.reducers() <= 1) return 0;
  const double D = dp.reducers();
  if (dp.nccl) {
    return seconds_to_simtime(
        nccl_seconds(Collective::kReduceScatter, static_cast<double>(bytes), collective_group(dp)));
  }
  return seconds_to_simtime((D - 1.0) *
                            (dp.latency_s + static_cast<double>(bytes) / (D * dp.bandwidth)));
}

std::vector<SimTime> zero_gathers(const Scenario& replica, const DataParallel& dp) {
  if (replica.training.zero != 3 || dp.replicas <= 1) return {};
  return layer_gathers(replica.model, [&](Bytes bytes) { return reduce_scatter_time(dp, bytes); });
}

void add_zero_reduce_scatters(PartitionProblem& p, const Scenario& replica,
                              const DataParallel& dp) {
  if (replica.training.zero < 2 || dp.reducers() <= 1) return;
  const Bytes per_param = reduced_gradient_bytes(replica);
  for (const LayerSpec& layer : replica.model.layers) {
    p.dense_grad_bytes.push_back((layer.params - layer.expert_params) * per_param);
    p.expert_grad_bytes.push_back(layer.expert_params * per_param);
  }
  p.reduce_scatter = [dp, experts = expert_reduction_ring(dp)](Bytes dense, Bytes expert) {
    return dense_and_experts(reduce_scatter_time, dp, experts, dense, expert);
  };
}

}  // namespace pipescope
