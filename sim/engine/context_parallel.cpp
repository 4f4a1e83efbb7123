#include "sim/engine/context_parallel.h"

#include <algorithm>

#include "sim/engine/expert_parallel.h"
#include "sim/engine/tensor_parallel.h"

namespace pipescope {

DataParallel context_ring(const Cluster& cluster) {
  // The T tensor ranks of a group each run their ring (of ranks c T + t) at
  // once.
  std::vector<std::vector<int>> rings(static_cast<std::size_t>(cluster.tensor_parallel));
  for (int t = 0; t < cluster.tensor_parallel; ++t) {
    for (int c = 0; c < cluster.context_parallel; ++c) {
      rings[static_cast<std::size_t>(t)].push_back(c * cluster.tensor_parallel + t);
    }
  }
  return concurrent_rings(cluster, rings, "context-parallel devices");
}

namespace {

// The ring's takes as a CPU profile measured them with C threads at T = 1
// and this micro-batch size (Profile::context_ring), or null: a layer's
// exchanges are then its takes' measured waits (measured_ring_exchanges).
const ContextRingFigures* measured_ring(const Cluster& cluster, std::int64_t micro_batch_size) {
  if (!cluster.profile || cluster.tensor_parallel != 1) return nullptr;
  const ContextRingFigures& f = cluster.profile->context_ring;
  const bool same = f.ranks == cluster.context_parallel && f.micro_batch == micro_batch_size;
  return same ? &f : nullptr;
}

}  // namespace

ContextExchanges measured_ring_exchanges(const LayerSpec& layer, const ContextRingFigures& ring) {
  ContextExchanges x;
  if (layer.cp_steps <= 0) return x;
  x.forward = seconds_to_simtime(layer.cp_steps * ring.forward_take_s);
  x.backward = seconds_to_simtime((2 * layer.cp_steps + 1) * ring.backward_take_s);
  return x;
}

DataParallel context_alltoall_group(const Cluster& cluster) {
  DataParallel dp = context_ring(cluster);
  std::vector<int> members;  // tensor rank 0 of each share
  for (int c = 0; c < cluster.context_parallel; ++c) {
    members.push_back(c * cluster.tensor_parallel);
  }
  // Each group's all-to-alls timed alone (not loaded by the other T groups').
  set_alltoall_group(
      cluster, members,
      [&](int c) { return cluster.physical_route(0, c * cluster.tensor_parallel); }, dp,
      "context-parallel devices", false);
  return dp;
}

SimTime ring_step_time(const DataParallel& ring, Bytes bytes) {
  if (ring.replicas <= 1 || bytes <= 0) return 0;
  return seconds_to_simtime(ring.latency_s + static_cast<double>(bytes) / ring.bandwidth);
}

ContextExchanges context_exchanges(const LayerSpec& layer, std::int64_t batch,
                                   const DataParallel& ring, const CostModel& cost,
                                   ContextExchange form) {
  ContextExchanges x;
  if (layer.cp_steps <= 0 || ring.replicas <= 1) return x;
  if (form == ContextExchange::kAllToAll) {
    // Queries and output, keys and values: each an all-to-all of the device's
    // share, four a forward and four a backward.
    const SimTime one = 2 * alltoall_time(ring, layer.cp_q_bytes * batch) +
                        2 * alltoall_time(ring, layer.cp_bytes * batch / 2);
    x.forward = x.backward = one;
    return x;
  }
  if (form == ContextExchange::kAllGather) {
    // The keys' collective and the values', each a ring of the block's half.
    const SimTime one = layer.cp_steps * ring_step_time(ring, layer.cp_bytes * batch / 2);
    x.forward = 2 * one;
    x.backward = 4 * one;
    return x;
  }
  // A step's share of the attention, forward and backward.
  const SimTime forward = cost.core_recompute(layer, batch) / ring.replicas;
  const SimTime backward = cost.core_backward(layer, batch) / ring.replicas;
  const Bytes bytes = layer.cp_bytes * batch;
  x.forward = layer.cp_steps * std::max<SimTime>(0, ring_step_time(ring, bytes) - forward);
  x.backward = layer.cp_steps * std::max<SimTime>(0, ring_step_time(ring, 2 * bytes) - backward);
  return x;
}

void add_context_exchanges(const ModelSpec& model, const Cluster& cluster,
                           std::int64_t micro_batch_size, std::vector<StageCost>& stages,
                           const CostModel& cost, ContextExchange form) {
  if (cluster.context_parallel <= 1) return;
  const DataParallel ring =
      form == ContextExchange::kAllToAll
          ? measured_alltoalls(context_alltoall_group(cluster), micro_batch_size)
          : context_ring(cluster);
  const ContextRingFigures* measured =
      form == ContextExchange::kP2p ? measured_ring(cluster, micro_batch_size) : nullptr;
  for (StageCost& c : stages) {
    c.cp_forward = c.cp_backward = 0;
    c.cp_bytes = c.cp_backward_bytes = 0;
    for (int l = c.layers.first_layer; l <= c.layers.last_layer; ++l) {
      const LayerSpec& layer = model.layers[static_cast<std::size_t>(l)];
      const ContextExchanges x = measured != nullptr
                                     ? measured_ring_exchanges(layer, *measured)
                                     : context_exchanges(layer, micro_batch_size, ring, cost, form);
      c.cp_forward += x.forward;
      c.cp_backward += x.backward;
      if (form == ContextExchange::kAllToAll) {
        // Of each all-to-all's buffer, the C - 1 shares for the others.
        const Bytes sent = (2 * layer.cp_q_bytes + layer.cp_bytes) * micro_batch_size *
                           layer.cp_steps / cluster.context_parallel;
        c.cp_bytes += sent;
        c.cp_backward_bytes += sent;
      } else {
        // The ring's steps of the keys' and values' block; a backward's
        // carry their gradients too (all_gather: gathers them again and
        // reduce-scatters the gradients).
        c.cp_bytes += layer.cp_steps * layer.cp_bytes * micro_batch_size;
        c.cp_backward_bytes += 2 * layer.cp_steps * layer.cp_bytes * micro_batch_size;
      }
    }
  }
}

}  // namespace pipescope
