#include "sim/tensor_parallel.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <utility>

#include "costmodels/check.h"
#include "costmodels/model_families.h"

namespace pipescope {

std::string tensor_parallel_problem(const Scenario& sc, int T, bool sequence) {
  PS_CHECK(sc.cluster.tensor_parallel == 1, "the scenario's layers are whole");
  if (T == 1 && !sequence) return "";
  if (!sc.model.transformer) {
    return "tensor parallelism splits a transformer's layers; model '" + sc.model.name +
           "' is of family " + sc.model.family + " (expected 1)";
  }
  if (std::string problem = tensor_split_problem(*sc.model.transformer, {T, sequence});
      !problem.empty()) {
    return problem;
  }
  if (sc.cluster.devices % T != 0) {
    return std::to_string(T) + " does not divide the cluster's " +
           std::to_string(sc.cluster.devices) +
           " devices: they form groups of tensor_parallel devices";
  }
  return "";
}

Scenario with_tensor_parallel(const Scenario& sc, int T, bool sequence) {
  const std::string problem = tensor_parallel_problem(sc, T, sequence);
  PS_CHECK(problem.empty(), problem);
  Scenario out = sc;
  out.training.tensor_parallel = T;
  out.training.sequence_parallel = sequence;
  if (T == 1) return out;
  out.model = make_transformer(*sc.model.transformer, sc.model.name, {T, sequence});
  out.cluster.devices /= T;
  out.cluster.tensor_parallel = T;
  return out;
}

std::vector<int> tensor_parallel_choices(const Scenario& sc) {
  std::vector<int> out{1};
  const Interconnect& ic = sc.cluster.interconnect;
  if (sc.cluster.profile || ic.topology != TopologyKind::kNodes) return out;
  for (int T = 2; T <= ic.devices_per_node; ++T) {
    if (ic.devices_per_node % T == 0 && tensor_parallel_problem(sc, T, false).empty()) {
      out.push_back(T);
    }
  }
  return out;
}

DataParallel tensor_ring(const Cluster& cluster) {
  DataParallel ring;
  const int t = cluster.tensor_parallel;
  ring.replicas = t;
  if (t <= 1) return ring;
  // Every step of the ring moves a slice from each device to the next at
  // once: a link that several of the hops cross splits its bandwidth among
  // them (a PCIe switch's uplink, a torus link on two routes), and the step
  // ends with the slowest hop and the longest latency.
  std::map<std::int64_t, std::pair<double, int>> links;  // link -> bandwidth, hops on it
  for (int i = 0; i < t; ++i) {
    double latency_s = 0.0;
    for (const Hop& h : cluster.physical_route(i, (i + 1) % t)) {
      latency_s += h.latency_s;
      auto& [bandwidth, hops] = links[h.link];
      bandwidth = h.bandwidth;
      ++hops;
    }
    ring.latency_s = std::max(ring.latency_s, latency_s);
  }
  for (const auto& [link, use] : links) {
    const double share = use.first / use.second;
    ring.bandwidth = ring.bandwidth == 0.0 ? share : std::min(ring.bandwidth, share);
  }
  if (!(ring.bandwidth > 0.0)) {
    throw ConfigError(
        "the link between tensor-parallel devices has no bandwidth: their all-reduces cannot "
        "run",
        "cluster.interconnect");
  }
  return ring;
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
void add_cut_gathers(const ModelSpec& model, const DataParallel& ring, int split,
                     std::int64_t micro_batch_size, StageCost& c) {
  c.tp_input_gather = c.tp_grad_gather = 0;
  c.tp_input_gather_bytes = c.tp_grad_gather_bytes = 0;
  if (split <= 1) return;
  c.output_bytes =
      (model.input_bytes_of(c.layers.last_layer + 1) + split - 1) / split * micro_batch_size;
  if (c.layers.first_layer > 0) {
    c.tp_input_gather_bytes = model.input_bytes_of(c.layers.first_layer) * micro_batch_size;
    c.tp_input_gather = reduce_scatter_time(ring, c.tp_input_gather_bytes);
  }
  if (c.layers.last_layer + 1 < static_cast<int>(model.layers.size())) {
    c.tp_grad_gather_bytes = model.input_bytes_of(c.layers.last_layer + 1) * micro_batch_size;
    c.tp_grad_gather = reduce_scatter_time(ring, c.tp_grad_gather_bytes);
  }
}

}  // namespace

int cut_split(const ModelSpec& model, const Cluster& cluster) {
  return cluster.p2p_split && !model.sequence_parallel ? model.tensor_parallel : 1;
}

void add_tensor_collectives(const ModelSpec& model, const Cluster& cluster,
                            std::int64_t micro_batch_size, std::vector<StageCost>& stages) {
  const DataParallel ring = tensor_ring(cluster);
  if (ring.replicas <= 1) return;
  const int split = cut_split(model, cluster);
  for (StageCost& c : stages) {
    c.tp_forward = c.tp_backward = 0;
    c.tp_forward_bytes = c.tp_backward_bytes = 0;
    for (int l = c.layers.first_layer; l <= c.layers.last_layer; ++l) {
      const LayerSpec& layer = model.layers[static_cast<std::size_t>(l)];
      const TensorCollectives t = tensor_collectives(layer, micro_batch_size, ring);
      c.tp_forward += t.forward;
      c.tp_backward += t.backward;
      c.tp_forward_bytes += layer.tp_fwd_bytes * micro_batch_size;
      c.tp_backward_bytes += layer.tp_bwd_bytes * micro_batch_size;
    }
    add_cut_gathers(model, ring, split, micro_batch_size, c);
  }
}

}  // namespace pipescope
