#include "sim/engine/expert_parallel.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "costmodels/check.h"
#include "costmodels/collective.h"
#include "costmodels/model_families.h"
#include "sim/scenario/expert_groups.h"

namespace pipescope {

SimTime alltoall_time(const DataParallel& dp, Bytes bytes) {
  const AllToAllGroup& g = dp.experts;
  if (g.ranks <= 1 || bytes <= 0) return 0;
  const double b = static_cast<double>(bytes);
  if (dp.nccl) return seconds_to_simtime(nccl_alltoall_seconds(b, g));
  return seconds_to_simtime(dp.experts_latency_s + alltoall_wire_seconds(b, g, 1.0));
}

const GroupAllToAllFigures* measured_group(const DataParallel& dp, std::int64_t micro_batch_size) {
  const AllToAllGroup& g = dp.experts;
  const GroupAllToAllFigures& m = dp.measured_alltoall;
  const int n = g.ranks;
  const bool same = !dp.nccl && n >= 2 && g.per_node == n && (m.ranks == n || m.within_ops) &&
                    m.micro_batch == micro_batch_size && m.bandwidth > 0.0;
  return same ? &m : nullptr;
}

DataParallel measured_alltoalls(DataParallel dp, std::int64_t micro_batch_size) {
  const GroupAllToAllFigures* m = measured_group(dp, micro_batch_size);
  if (m == nullptr) return dp;
  const int n = dp.experts.ranks;
  const double bandwidth = m->bandwidth, latency = m->latency_s;
  dp.experts.intra_bw = bandwidth * (n - 1) / n;
  dp.experts_latency_s = latency;
  return dp;
}

SimTime expert_alltoall_time(const ModelSpec& model, const DataParallel& dp, Bytes bytes) {
  const MoeParams* moe = model.transformer ? &model.transformer->moe : nullptr;
  if (!dp.deepep || !dp.nccl || moe == nullptr || !moe->enabled()) return alltoall_time(dp, bytes);
  // ep_bytes counts each token's k copies; DeepEP moves a token's bytes once
  // a destination.
  const double token_bytes = static_cast<double>(bytes) / moe->experts_per_token;
  return seconds_to_simtime(
      deepep_alltoall_seconds(token_bytes, moe->experts, moe->experts_per_token, dp.experts));
}

std::vector<SimTime> layer_alltoalls(const ModelSpec& model, const DataParallel& measured_or_not,
                                     std::int64_t micro_batch_size) {
  if (measured_or_not.experts.ranks <= 1) return {};
  const DataParallel dp = measured_alltoalls(measured_or_not, micro_batch_size);
  std::vector<SimTime> out;
  out.reserve(model.layers.size());
  for (const LayerSpec& layer : model.layers) {
    out.push_back(layer.ep_alltoalls == 0
                      ? 0
                      : layer.ep_alltoalls *
                            expert_alltoall_time(model, dp, layer.ep_bytes * micro_batch_size));
  }
  return out;
}

void add_expert_collectives(const ModelSpec& model, const DataParallel& dp,
                            std::int64_t micro_batch_size, std::vector<StageCost>& stages,
                            bool pair_overlap) {
  const std::vector<SimTime> alltoalls = layer_alltoalls(model, dp, micro_batch_size);
  if (alltoalls.empty()) return;
  // The bytes a device's exchange carries: its tokens' k copies, or under
  // DeepEP each token once a node and GPU it reaches.
  double carried = 1.0;
  if (const MoeParams* moe = model.transformer ? &model.transformer->moe : nullptr;
      dp.deepep && dp.nccl && moe != nullptr && moe->enabled()) {
    const DeepEpCopies copies = deepep_copies(moe->experts, moe->experts_per_token, dp.experts);
    carried = (copies.network + copies.nvlink) / moe->experts_per_token;
  }
  for (StageCost& c : stages) {
    c.ep_forward = c.ep_backward = 0;
    c.ep_bytes = 0;
    c.ep_pair_overlap = pair_overlap;
    for (int l = c.layers.first_layer; l <= c.layers.last_layer; ++l) {
      const LayerSpec& layer = model.layers[static_cast<std::size_t>(l)];
      c.ep_forward += alltoalls[static_cast<std::size_t>(l)];
      c.ep_bytes += std::llround(
          carried * static_cast<double>(layer.ep_alltoalls * layer.ep_bytes * micro_batch_size));
    }
    c.ep_backward = c.ep_forward;
  }
}

int expert_holders(int replicas, int expert_parallel) {
  return std::max(1, replicas / std::max(1, expert_parallel));
}

DataParallel expert_reduction_ring(const DataParallel& dp) {
  DataParallel ring = dp;
  ring.replicas = expert_holders(dp.reducers() * dp.expert_fold, dp.experts.ranks);
  ring.context = 1;
  ring.nodes = std::min(dp.expert_ring_nodes, ring.replicas);
  ring.experts = {};
  ring.measured_sum = {};  // measured for the ranks that hold the same dense layers
  return ring;
}

void check_expert_group(const Scenario& sc, const SimConfig& cfg) {
  const int E = sc.training.expert_parallel;
  PS_CHECK(sc.model.expert_parallel == E, "the model is one device's share of the experts");
  if (const std::string problem = whole_experts_problem(sc.cluster.expert_fold, E);
      !problem.empty()) {
    throw ConfigError(problem, "training.expert_parallel");
  }
  if (E <= 1 || cfg.data_parallel.experts.ranks == E) return;
  const int C = sc.cluster.context_parallel, D = cfg.data_parallel.replicas;
  if (sc.cluster.expert_fold > 1) {
    throw ConfigError("expert_parallel " + std::to_string(E) +
                          " spreads whole experts over E of the T x D x C devices, and this run "
                          "has " +
                          std::to_string(sc.cluster.expert_fold) + " x " + std::to_string(D) +
                          " x " + std::to_string(C) + " (give --data-parallel a multiple of " +
                          std::to_string(E / std::gcd(E, sc.cluster.expert_fold * C)) + ")",
                      "training.expert_parallel");
  }
  const std::string has =
      C > 1 ? "the D x C devices (replicas x context-parallel shares), and this run has " +
                  std::to_string(D) + " x " + std::to_string(C) + " (give --data-parallel a " +
                  "multiple of " + std::to_string(E / std::gcd(E, C)) + ")"
            : "the data-parallel replicas, and this run has " + std::to_string(D) +
                  " (give --data-parallel a multiple of E)";
  throw ConfigError(
      "expert_parallel " + std::to_string(E) + " spreads the experts over E of " + has,
      "training.expert_parallel");
}

}  // namespace pipescope
