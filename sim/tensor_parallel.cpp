#include "sim/tensor_parallel.h"

#include <algorithm>

namespace pipescope {

DataParallel tensor_ring(const Cluster& cluster) {
  DataParallel ring;
  ring.replicas = cluster.tensor_parallel;
  if (ring.replicas <= 1) return ring;
  for (const Hop& h : cluster.physical_route(0, 1)) {
    ring.latency_s += h.latency_s;
    ring.bandwidth = ring.bandwidth == 0.0 ? h.bandwidth : std::min(ring.bandwidth, h.bandwidth);
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

void add_tensor_collectives(const ModelSpec& model, const DataParallel& ring,
                            std::int64_t micro_batch_size, std::vector<StageCost>& stages) {
  if (ring.replicas <= 1) return;
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
  }
}

}  // namespace pipescope
