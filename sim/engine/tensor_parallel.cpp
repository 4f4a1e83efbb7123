#include "sim/engine/tensor_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <utility>

#include "costmodels/check.h"
#include "costmodels/model_families.h"

namespace pipescope {

DataParallel physical_ring(const Cluster& cluster, const std::vector<int>& members,
                           const std::string& what) {
  return concurrent_rings(cluster, {members}, what);
}

DataParallel concurrent_rings(const Cluster& cluster, const std::vector<std::vector<int>>& rings,
                              const std::string& what) {
  PS_CHECK(!rings.empty(), "at least one ring");
  const std::vector<int>& members = rings.front();
  DataParallel ring;
  const int t = static_cast<int>(members.size());
  ring.replicas = t;
  if (t <= 1) return ring;
  // Every step of a ring moves a slice from each device to the next at once,
  // and the rings step together: a link that several of the hops cross
  // splits its bandwidth among them (a PCIe switch's uplink, a torus link on
  // two routes, a NIC shared by a node's GPUs), and the step ends with the
  // slowest hop and the longest latency.
  std::map<std::int64_t, std::pair<double, int>> links;  // link -> bandwidth, hops on it
  for (const std::vector<int>& each : rings) {
    PS_CHECK(static_cast<int>(each.size()) == t, "concurrent rings of one size");
    for (int i = 0; i < t; ++i) {
      double latency_s = 0.0;
      const int from = each[static_cast<std::size_t>(i)];
      const int to = each[static_cast<std::size_t>((i + 1) % t)];
      for (const Hop& h : cluster.physical_route(from, to)) {
        latency_s += h.latency_s;
        auto& [bandwidth, hops] = links[h.link];
        bandwidth = h.bandwidth;
        ++hops;
      }
      ring.latency_s = std::max(ring.latency_s, latency_s);
    }
  }
  for (const auto& [link, use] : links) {
    const double share = use.first / use.second;
    ring.bandwidth = ring.bandwidth == 0.0 ? share : std::min(ring.bandwidth, share);
  }
  if (!(ring.bandwidth > 0.0)) {
    throw ConfigError("the link between " + what + " has no bandwidth: they cannot exchange",
                      "cluster.interconnect");
  }
  set_collective_links(cluster, members, ring);
  return ring;
}

DataParallel tensor_ring(const Cluster& cluster) {
  std::vector<int> members;
  for (int i = 0; i < cluster.tensor_parallel; ++i) members.push_back(i);
  return physical_ring(cluster, members, "tensor-parallel devices");
}

TensorCollectives tensor_collectives(const LayerSpec& layer, std::int64_t batch,
                                     const DataParallel& ring) {
  TensorCollectives t;
  if (ring.replicas <= 1) return t;
  if (layer.tp_fwd_allreduces > 0) {
    t.forward = allreduce_time(ring, layer.tp_fwd_bytes * batch, layer.tp_fwd_allreduces);
  }
  if (layer.tp_bwd_allreduces > 0) {
    t.backward = allreduce_time(ring, layer.tp_bwd_bytes * batch, layer.tp_bwd_allreduces);
  }
  return t;
}

namespace {

// Each device of the previous (next) group sent 1 / T of the stage's input
// (output gradient): the group all-gathers it, half an all-reduce's ring.
// `before` and `after`: whether the neighbouring stages run on other devices.
void add_cut_gathers(const ModelSpec& model, const DataParallel& ring, int split,
                     std::int64_t micro_batch_size, bool before, bool after, StageCost& c) {
  c.tp_input_gather = c.tp_grad_gather = 0;
  c.tp_input_gather_bytes = c.tp_grad_gather_bytes = 0;
  if (split <= 1) return;
  const auto share = [&](Bytes whole) { return (whole + split - 1) / split; };
  c.output_bytes = share(model.input_bytes_of(c.layers.last_layer + 1) * micro_batch_size);
  if (before) {
    c.tp_input_gather_bytes = model.input_bytes_of(c.layers.first_layer) * micro_batch_size;
    c.tp_input_gather = reduce_scatter_time(ring, c.tp_input_gather_bytes);
  }
  if (after) {
    c.tp_grad_gather_bytes = model.input_bytes_of(c.layers.last_layer + 1) * micro_batch_size;
    c.tp_grad_gather = reduce_scatter_time(ring, c.tp_grad_gather_bytes);
  }
}

}  // namespace

int cut_split(const ModelSpec& model, const Cluster& cluster) {
  return cluster.p2p_split && !model.sequence_parallel ? model.tensor_parallel : 1;
}

TensorCollectives exposed_collectives(TensorCollectives c, const OpTimes& times,
                                      const Framework& framework, bool split) {
  // Each of the four collectives of a pass (a gather and a reduce-scatter
  // for each all-reduce) beside the GEMMs userbuffers slow.
  const UserbufferCost slowed =
      userbuffers_cost(times.te_gemms, framework, c.forward / 4, c.backward / 4);
  if (framework.tp_forward_overlap && c.forward > 0) {
    // The reduce-scatters (half the forward's bytes beside the all-gathers)
    // leave their last chunk exposed.
    const auto last_chunks = static_cast<SimTime>(
        std::llround(static_cast<double>(c.forward) / 2 * framework.userbuffers_exposed_share));
    c.forward = std::max<SimTime>({0, c.forward - times.forward, last_chunks}) + slowed.forward;
  }
  const bool had_backward = c.backward > 0;
  if (framework.tp_backward_overlap && !split) {
    c.backward = std::max<SimTime>(0, c.backward - times.weight);
  }
  if (had_backward) c.backward += slowed.backward;
  return c;
}

void add_tensor_collectives(const ModelSpec& model, const Cluster& cluster,
                            const std::vector<int>& stage_device, std::int64_t micro_batch_size,
                            std::vector<StageCost>& stages, const CostModel& cost,
                            const Framework& framework, bool backward_split) {
  PS_CHECK(stage_device.size() == stages.size(), "one device per stage");
  const DataParallel ring = tensor_ring(cluster);
  if (ring.replicas <= 1) return;
  const int split = cut_split(model, cluster);
  for (std::size_t s = 0; s < stages.size(); ++s) {
    StageCost& c = stages[s];
    c.tp_forward = c.tp_backward = 0;
    c.tp_forward_bytes = c.tp_backward_bytes = 0;
    for (int l = c.layers.first_layer; l <= c.layers.last_layer; ++l) {
      const LayerSpec& layer = model.layers[static_cast<std::size_t>(l)];
      const TensorCollectives t =
          exposed_collectives(tensor_collectives(layer, micro_batch_size, ring),
                              cost.op_times(layer, micro_batch_size), framework, backward_split);
      c.tp_forward += t.forward;
      c.tp_backward += t.backward;
      c.tp_forward_bytes += layer.tp_fwd_bytes * micro_batch_size;
      c.tp_backward_bytes += layer.tp_bwd_bytes * micro_batch_size;
    }
    const bool before = s > 0 && stage_device[s - 1] != stage_device[s];
    const bool after = s + 1 < stages.size() && stage_device[s + 1] != stage_device[s];
    add_cut_gathers(model, ring, split, micro_batch_size, before, after, c);
  }
}

}  // namespace pipescope
