// How a scenario's layers are cut into stages (sim/engine/simulator.h): the
// partitioners' problem built from the scenario, the cut each partition method
// makes, and the fastest of a few cuts when a device runs several chunks.
#include "sim/engine/simulator.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "costmodels/check.h"
#include "sim/engine/device_partition.h"
#include "sim/engine/schedule_holds.h"
#include "sim/engine/tensor_parallel.h"
#include "sim/engine/zero.h"

namespace pipescope {

PartitionProblem memory_problem(const Scenario& sc, int stages, int micro_batches, Remat remat,
                                ScheduleKind schedule, int chunks, const CustomSchedule* custom) {
  const std::int64_t b = sc.training.global_batch / micro_batches;
  const std::vector<int>* placement = custom ? &custom->stage_rank : nullptr;
  PartitionProblem p;
  p.stages = stages;
  for (int s = 0; s < stages; ++s) {
    p.stage_device.push_back(stage_device_of(schedule, s, stages / chunks));
  }
  if (placement != nullptr) {
    PS_CHECK(static_cast<int>(placement->size()) == stages, "one device per stage");
    p.stage_device = *placement;
  }
  p.micro_batches = micro_batches;
  p.remat = remat;
  p.checkpoint = sc.training.checkpoint;
  p.forwards_first = schedule == ScheduleKind::kGpipe || schedule == ScheduleKind::kLoopedBfs;
  p.bytes_per_param = device_bytes_per_param(sc);
  p.gathered_bytes_per_param = gathered_bytes_per_param(sc);
  p.backward_split = splits_backward(schedule, custom);
  // Each of a device's stages gets its share of the memory. A custom schedule
  // may run any order: its micro-batches in flight are bounded by M, as under
  // GPipe, and the simulated memory curve, from the actual order, decides
  // whether the plan fits. A built-in one holds at most most_stashes_held chunk
  // micro-batches a device (1F1B's min(K, M), zb-v's 2K, interleaved-1f1b's
  // warm-up and one): spread over the chunks for the stage-optimal cut. With
  // several chunks, the device partitioner prices each stage with what it holds
  // when its device holds the most, remat included (held_at_peak).
  p.memory_capacity = sc.cluster.device.memory_bytes / chunks;
  if (schedule != ScheduleKind::kCustom) {
    ScheduleHolds holds = schedule_holds(schedule, stages / chunks, micro_batches, remat, chunks,
                                         sc.training.checkpoint);
    p.in_flight = std::min(micro_batches, (holds.most + chunks - 1) / chunks);
    if (chunks > 1 && placement == nullptr) {
      p.stage_held = std::move(holds.at_peak);
    } else if (chunks == 1 && !holds.at_peak.empty()) {
      StashCount most;
      for (const StashCount& h : holds.at_peak) most = most_of(most, h);
      p.order_held = most;
    }
  }
  const double per_param = p.bytes_per_param;
  const double per_expert_param = expert_bytes_per_param(sc);
  for (const LayerSpec& layer : sc.model.layers) {
    p.layers.push_back(LayerCost{
        0, 0, 0,
        dense_equivalent_params(per_param, per_expert_param, layer.params, layer.expert_params),
        stash_under_remat(remat, layer) * b});
  }
  // A tied head on another device than the embedding keeps a copy of the
  // token table (tied_copy_params, sim/engine/simulator.h): the last stage's
  // memory holds it.
  const std::int64_t tied = tied_copy_params(sc.model, p.stage_device);
  if (tied > 0 && !p.layers.empty()) p.layers.back().params += dense_equivalent_params(sc, tied, 0);
  for (std::size_t i = 0; i <= sc.model.layers.size(); ++i) {
    p.cut_bytes.push_back(sc.model.input_bytes_of(static_cast<int>(i)) * b);
  }
  p.cut_split = cut_split(sc.model, sc.cluster);
  return p;
}

PartitionProblem partition_problem(const Scenario& sc, const CostModel& cost, int stages,
                                   int micro_batches, Remat remat, ScheduleKind schedule,
                                   int chunks, const CustomSchedule* custom) {
  PartitionProblem p = memory_problem(sc, stages, micro_batches, remat, schedule, chunks, custom);
  const std::int64_t b = sc.training.global_batch / micro_batches;
  const bool split = p.backward_split;
  const double recomputed =
      static_cast<double>(recomputed_count(remat, micro_batches)) / micro_batches;
  const DataParallel ring = tensor_ring(sc.cluster);
  p.compute_scale = least_concurrency_factor(sc.cluster);
  for (std::size_t l = 0; l < sc.model.layers.size(); ++l) {
    const LayerSpec& layer = sc.model.layers[l];
    const OpTimes raw = cost.op_times(layer, b);
    const OpTimes t = under_remat(remat, raw);
    const TensorCollectives whole = tensor_collectives(layer, b, ring);
    const TensorCollectives tp = exposed_collectives(whole, t, sc.training.framework, split);
    const double forward = recomputed * static_cast<double>(t.forward) +
                           (1.0 - recomputed) * static_cast<double>(t.forward_kept);
    // A split backward costs its B and W, which a measured profile may put
    // above the whole.
    LayerCost& c = p.layers[l];
    c.forward = static_cast<SimTime>(std::llround(forward)) + tp.forward;
    c.backward = (split ? t.input + t.weight : t.backward) + tp.backward;
    c.recompute = t.recompute + tp.forward;
    // The engine exposes the collectives beside the layer's own forwards,
    // which under selective recomputation are not t's.
    const SimTime tp_raw =
        remat == Remat::kSelective
            ? exposed_collectives(whole, raw, sc.training.framework, split).forward
            : tp.forward;
    c.least_forward = std::min(raw.forward, raw.forward_kept) + std::min(tp.forward, tp_raw);
  }
  // Neighbouring stages run on neighbouring devices; their route sets the cost.
  if (sc.cluster.devices > 1) {
    double bottleneck = 0.0;
    for (const Hop& h : sc.cluster.route(0, 1)) {
      p.link_latency_s += h.latency_s;
      bottleneck = bottleneck == 0.0 ? h.bandwidth : std::min(bottleneck, h.bandwidth);
    }
    p.link_bandwidth = bottleneck;
  }
  return p;
}

Bytes least_weight_share(const Scenario& sc, int devices) {
  PS_CHECK(devices >= 1, "at least one device");
  const double per_param = device_bytes_per_param(sc);
  const double per_expert_param = expert_bytes_per_param(sc);
  std::int64_t params = 0;
  for (const LayerSpec& layer : sc.model.layers) {
    params +=
        dense_equivalent_params(per_param, per_expert_param, layer.params, layer.expert_params);
  }
  const auto layers = static_cast<Bytes>(sc.model.layers.size());
  const auto total = static_cast<Bytes>(static_cast<double>(params) * per_param);
  const Bytes least = std::max<Bytes>(0, total - layers);
  return (least + devices - 1) / devices;
}

std::vector<StageRange> choose_partition(const Scenario& sc, const CostModel& cost,
                                         PartitionMethod method, int stages, int micro_batches,
                                         Remat remat, ScheduleKind schedule, int chunks,
                                         const CustomSchedule* custom) {
  const int layers = static_cast<int>(sc.model.layers.size());
  if (method == PartitionMethod::kUniform) return partition_uniform(layers, stages);
  PartitionProblem p =
      partition_problem(sc, cost, stages, micro_batches, remat, schedule, chunks, custom);
  switch (method) {
    case PartitionMethod::kOptimal: {
      const int devices = stages / chunks;
      PartitionResult r = partition_devices(p, devices, sc.cluster.device.memory_bytes);
      if (r.stages.empty()) {  // nothing fits: the fastest cut, which the memory curve flags
        p.memory_capacity.reset();
        r = partition_devices(p, devices, std::nullopt);
      }
      return r.stages;
    }
    case PartitionMethod::kParams:
      return partition_params(p);
    case PartitionMethod::kGpipe:
      return partition_min_variance(p);
    case PartitionMethod::kUniform:
      break;
  }
  return partition_uniform(layers, stages);
}

std::optional<SimResult> fastest_chunked_cut(const Scenario& sc, SimConfig config,
                                             const CostModel& cost, const PartitionProblem& p,
                                             std::vector<StageRange> device_cut) {
  std::vector<std::vector<StageRange>> cuts;
  const auto add = [&](std::vector<StageRange> cut) {
    if (!cut.empty() && std::find(cuts.begin(), cuts.end(), cut) == cuts.end()) {
      cuts.push_back(std::move(cut));
    }
  };
  add(optimal_cut(p));
  add(std::move(device_cut));
  if (cuts.empty()) return std::nullopt;  // nothing fits: the caller cuts without the limit
  add(partition_min_variance(p));
  config.record_timeline = false;
  config.timeline_sink = nullptr;
  std::optional<SimResult> best;
  for (std::vector<StageRange>& cut : cuts) {
    config.stage_ranges = std::move(cut);
    SimResult r = simulate(sc, config, cost);
    // (does not fit, step time): the least wins.
    if (!best || std::pair{!r.metrics.fits(), r.metrics.step_time} <
                     std::pair{!best->metrics.fits(), best->metrics.step_time}) {
      best = std::move(r);
    }
  }
  return best;
}

}  // namespace pipescope
