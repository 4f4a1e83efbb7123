#include "sim/engine/simulator.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "costmodels/check.h"
#include "costmodels/kernel_cost_model.h"
#include "costmodels/model_families.h"
#include "costmodels/profile.h"
#include "sim/engine/device_partition.h"
#include "sim/engine/engine.h"
#include "sim/engine/host_dispatch.h"
#include "sim/engine/memory_tracker.h"
#include "sim/engine/schedule_holds.h"
#include "sim/engine/tensor_parallel.h"
#include "sim/engine/zero.h"
#include "sim/scenario/stated_cut.h"

namespace pipescope {

namespace {

struct Resolved {
  int K;
  int M;
  ScheduleKind schedule;
  Remat remat;
  int chunks;
};

Resolved resolve(const Scenario& sc, const SimConfig& cfg) {
  Resolved r{cfg.stages.value_or(sc.cluster.devices),
             cfg.micro_batches.value_or(sc.training.micro_batches),
             cfg.schedule.value_or(sc.training.schedule), cfg.remat.value_or(sc.training.remat),
             cfg.chunks.value_or(sc.training.chunks)};
  if (cfg.custom) {
    // The action file fixes K, M and the chunks; options may only repeat them.
    const CustomSchedule& c = *cfg.custom;
    const auto clash = [](const char* what, int given, int file) {
      if (given != file) {
        throw ConfigError(std::string(what) + "=" + std::to_string(given) +
                          " contradicts the custom schedule's " + std::to_string(file));
      }
    };
    if (cfg.schedule && *cfg.schedule != ScheduleKind::kCustom) {
      throw ConfigError("a schedule file makes the schedule custom, not " +
                        std::string(to_string(*cfg.schedule)));
    }
    r.schedule = ScheduleKind::kCustom;
    clash("K", cfg.stages.value_or(c.devices()), c.devices());
    clash("M", cfg.micro_batches.value_or(c.micro_batches), c.micro_batches);
    clash("chunks", cfg.chunks.value_or(c.chunks()), c.chunks());
    r.K = c.devices();
    r.M = c.micro_batches;
    r.chunks = c.chunks();
  } else if (r.schedule == ScheduleKind::kCustom) {
    throw ConfigError("schedule custom needs its action file (--schedule-file)");
  }
  // A scenario's chunks apply to interleaving only: another schedule chosen
  // on the command line runs one chunk per device, and interleaving chosen
  // there over a scenario of another schedule gets v = 2.
  if (!cfg.custom && !cfg.chunks && !takes_chunks(r.schedule)) r.chunks = 1;
  if (!cfg.chunks && takes_chunks(r.schedule) && !takes_chunks(sc.training.schedule)) {
    r.chunks = kDefaultChunks;
  }
  const int layers = static_cast<int>(sc.model.layers.size());
  // K defaults to the device count: say so, and name the scenario field.
  const std::string k_name =
      cfg.custom   ? "K=" + std::to_string(r.K) + " (the rows of " + cfg.custom->file + ")"
      : cfg.stages ? "K=" + std::to_string(r.K)
                   : "K=" + std::to_string(r.K) + " (the cluster's devices)";
  const std::string k_field = cfg.stages ? "" : "cluster.devices";
  if (r.K < 1) throw ConfigError("K must be at least 1, got " + std::to_string(r.K));
  if (r.chunks < 1) throw ConfigError("chunks must be at least 1, got " + std::to_string(r.chunks));
  if (r.chunks > 1 && !takes_chunks(r.schedule) && !cfg.custom) {
    throw ConfigError(std::string(to_string(r.schedule)) +
                      " runs one model chunk per device; --chunks " + std::to_string(r.chunks) +
                      " needs a schedule that runs several (" + chunked_schedule_names() + ")");
  }
  if (r.K > layers) {
    throw ConfigError(k_name + " is more stages than the model's " + std::to_string(layers) +
                          " layers; choose a smaller K with -K",
                      k_field);
  }
  if (std::int64_t{r.K} * r.chunks > layers) {
    throw ConfigError(k_name + " x " + std::to_string(r.chunks) + " chunks is " +
                      std::to_string(std::int64_t{r.K} * r.chunks) +
                      " model stages, more than the model's " + std::to_string(layers) +
                      " layers; choose fewer chunks or a smaller K");
  }
  if (r.K > sc.cluster.devices) {
    throw ConfigError(k_name + " is more stages than the cluster's " +
                          sc.cluster.devices_text(sc.cluster.devices),
                      "cluster.devices");
  }
  if (r.M < 1) throw ConfigError("M must be at least 1, got " + std::to_string(r.M));
  if (sc.training.global_batch % r.M != 0) {
    throw ConfigError("M=" + std::to_string(r.M) + " does not divide the global batch of " +
                      std::to_string(sc.training.global_batch));
  }
  if (std::int64_t{r.K} * r.chunks * r.M > kMaxStageMicroBatches) {
    throw ConfigError("K=" + std::to_string(r.K) + " x M=" + std::to_string(r.M) +
                      (r.chunks > 1 ? " x " + std::to_string(r.chunks) + " chunks" : "") +
                      " is more stage micro-batches than one simulation holds (" +
                      std::to_string(kMaxStageMicroBatches) + ")");
  }
  if (!cfg.custom) {
    const std::string shape = schedule_shape_problem(r.schedule, r.K, r.M, r.chunks);
    if (!shape.empty()) throw ConfigError(shape);
  }
  if (r.remat == Remat::kSelective && !sc.model.has_attention_core()) {
    throw ConfigError("remat selective recomputes attention's core, and model '" + sc.model.name +
                          "' has no attention (a transformer has); use never, except-last or "
                          "always",
                      cfg.remat ? "" : "training.remat");
  }
  return r;
}

// A model whose layers all take no time simulates to a step of no time (or only
// the optimizer's), and every throughput, bubble and MFU from it means nothing.
void check_layers_take_time(const Scenario& sc, const std::vector<StageCost>& stages,
                            const CostModel& cost) {
  SimTime total = 0;
  for (const StageCost& c : stages) total += c.forward + c.backward;
  if (total > 0) return;
  const bool no_flops =
      sc.model.fwd_flops_per_sample() == 0.0 && sc.model.bwd_flops_per_sample() == 0.0;
  throw ConfigError(
      "scenario '" + sc.name + "': every layer of model '" + sc.model.name +
          "' takes 0 s forward and backward" +
          (no_flops ? " (their fwd_flops and bwd_flops are all 0, and the device adds no "
                      "per-op overhead)"
                    : " under the " + std::string(cost.name()) + " cost model") +
          "; a step would take no time, so its throughput would mean nothing: give the layers "
          "their FLOPs",
      no_flops ? "model.layers" : "");
}

// Names of the routes between neighbouring stages, indexed by route_id().
std::vector<std::string> route_names(const Schedule& schedule, const Cluster& cluster) {
  std::vector<std::string> names(static_cast<std::size_t>(2 * schedule.stages));
  for (int b = 0; b + 1 < schedule.stages; ++b) {
    const int lo = schedule.stage_device[static_cast<std::size_t>(b)];
    const int hi = schedule.stage_device[static_cast<std::size_t>(b + 1)];
    for (const TransferKind kind : {TransferKind::kActivation, TransferKind::kGradient}) {
      const bool act = kind == TransferKind::kActivation;
      std::string name;
      for (const Hop& h : cluster.route(act ? lo : hi, act ? hi : lo)) {
        name += (name.empty() ? "" : ", ") + cluster.link_name(h.link);
      }
      names[static_cast<std::size_t>(route_id(kind, b))] = name.empty() ? "local" : name;
    }
  }
  return names;
}

}  // namespace

PartitionProblem partition_problem(const Scenario& sc, const CostModel& cost, int stages,
                                   int micro_batches, Remat remat, ScheduleKind schedule,
                                   int chunks, const CustomSchedule* custom) {
  const std::int64_t b = sc.training.global_batch / micro_batches;
  const std::vector<int>* placement = custom ? &custom->stage_rank : nullptr;
  const bool split = splits_backward(schedule, custom);
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
  p.backward_split = split;
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
  const double recomputed =
      static_cast<double>(recomputed_count(remat, micro_batches)) / micro_batches;
  const DataParallel ring = tensor_ring(sc.cluster);
  for (std::size_t l = 0; l < sc.model.layers.size(); ++l) {
    const LayerSpec& layer = sc.model.layers[l];
    const OpTimes t = under_remat(remat, cost.op_times(layer, b));
    const TensorCollectives tp =
        exposed_collectives(tensor_collectives(layer, b, ring), t, sc.training.framework, split);
    const double forward = recomputed * static_cast<double>(t.forward) +
                           (1.0 - recomputed) * static_cast<double>(t.forward_kept);
    // A split backward costs its B and W, which a measured profile may put
    // above the whole.
    const SimTime backward = (split ? t.input + t.weight : t.backward) + tp.backward;
    p.layers.push_back(LayerCost{static_cast<SimTime>(std::llround(forward)) + tp.forward, backward,
                                 t.recompute + tp.forward, layer.params,
                                 stash_under_remat(remat, layer) * b});
  }
  for (std::size_t i = 0; i <= sc.model.layers.size(); ++i) {
    p.cut_bytes.push_back(sc.model.input_bytes_of(static_cast<int>(i)) * b);
  }
  p.cut_split = cut_split(sc.model, sc.cluster);
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

namespace {
// Hops of a replica ring looked at (beside the wrap-around): more than any
// preset's node or PCIe switch holds.
constexpr int kRingHopsChecked = 64;
}  // namespace

DataParallel data_parallel_ring(const Cluster& whole, int stages, int replicas) {
  DataParallel dp;
  dp.replicas = replicas;
  if (replicas <= 1) return dp;
  if (std::int64_t{stages} * replicas > whole.devices) {
    throw ConfigError(std::to_string(replicas) + " replicas of K=" + std::to_string(stages) +
                      " need " + whole.devices_text(std::int64_t{stages} * replicas) +
                      "; the cluster has " + std::to_string(whole.devices));
  }
  // The ring runs device 0 of each replica to device 0 of the next and the last
  // back to the first, its steps in lockstep: it moves at its slowest hop. The
  // hops repeat with a node's or a switch's devices, so the first
  // kRingHopsChecked and the wrap-around meet every kind.
  const int step = whole.rank_order == RankOrder::kTpDpPp ? 1 : stages;
  // With shared NICs every hop of the ring, each of a group's T devices
  // running its own ring, sends at once: a link carries its share of them.
  Cluster::LinkLoad load;
  if (whole.shares_nics()) {
    for (int r = 0; r < replicas; ++r) {
      for (int t = 0; t < whole.tensor_parallel; ++t) {
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
    double latency = 0.0, bandwidth = 0.0;
    for (const Hop& h : hops(from, to)) {
      latency += h.latency_s;
      bandwidth = bandwidth == 0.0 ? h.bandwidth : std::min(bandwidth, h.bandwidth);
    }
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
  return dp;
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
  return {dp.replicas, std::max(1, dp.nodes), dp.intra, dp.bandwidth};
}

}  // namespace

SimTime step_gather(const Scenario& sc, const DataParallel& dp, const StageCost& c) {
  // The updated weights, in the model's dtype.
  const Bytes bytes = c.params * dtype_bytes(sc.model.dtype);
  const SimTime gather = reduce_scatter_time(dp, bytes);
  if (!sc.training.framework.overlap_param_gather) return gather;
  return std::max<SimTime>(0, gather - c.forward);
}

SimTime allreduce_time(const DataParallel& dp, Bytes bytes, int count) {
  if (dp.replicas <= 1) return 0;
  const double D = dp.replicas;
  if (dp.nccl) {
    return seconds_to_simtime(count * nccl_seconds(Collective::kAllReduce,
                                                   static_cast<double>(bytes) / count,
                                                   collective_group(dp)));
  }
  return seconds_to_simtime(
      2.0 * (D - 1.0) * (count * dp.latency_s + static_cast<double>(bytes) / (D * dp.bandwidth)));
}

SimTime reduce_scatter_time(const DataParallel& dp, Bytes bytes) {
  if (dp.replicas <= 1) return 0;
  const double D = dp.replicas;
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

double concurrency_slowdown_at(const std::vector<double>& slowdown, double computing) {
  if (slowdown.empty() || computing <= 1.0) return 1.0;
  const double last = static_cast<double>(slowdown.size());
  if (computing >= last) return slowdown.back();
  const auto i = static_cast<std::size_t>(computing);  // between i and i + 1 devices
  const double frac = computing - static_cast<double>(i);
  return slowdown[i - 1] + (slowdown[i] - slowdown[i - 1]) * frac;
}

void apply_concurrency_slowdown(const Schedule& schedule, const Cluster& cluster,
                                std::vector<StageCost>& stages) {
  const std::vector<double>& slowdown = cluster.concurrency_slowdown;
  if (slowdown.size() < 2) return;
  const std::vector<StageCost> base = stages;
  const bool split_cold = cluster.profile && cluster.profile->split_unstretched();
  // Two rounds: the slowdown changes the step, and with it the mean concurrency,
  // only a little.
  double factor = 1.0;
  for (int round = 0; round < 2; ++round) {
    const EngineResult run = run_engine(schedule, stages, cluster, nullptr);
    if (run.step_time <= 0) return;
    SimTime busy = 0;
    for (const SimTime b : run.device_busy) busy += b;
    const double computing = static_cast<double>(busy) / static_cast<double>(run.step_time);
    const double next = concurrency_slowdown_at(slowdown, computing);
    if (round > 0 && next == factor) break;
    factor = next;
    for (std::size_t s = 0; s < stages.size(); ++s) {
      const auto scale = [&](SimTime t) {
        return static_cast<SimTime>(std::llround(static_cast<double>(t) * factor));
      };
      stages[s].forward = scale(base[s].forward);
      if (base[s].forward_kept) stages[s].forward_kept = scale(*base[s].forward_kept);
      stages[s].backward = scale(base[s].backward);
      // A split backward's B and W only when the profile did not time them as
      // a stage runs them: timed so, their operands are already out of the
      // caches, which the other cores' work cannot push out again (stretched,
      // the V schedules came out 6-13 % too slow on a 2-core machine;
      // unstretched, within 3 %).
      if (!split_cold) {
        stages[s].input = scale(base[s].input);
        stages[s].weight = scale(base[s].weight);
      }
      stages[s].recompute = scale(base[s].recompute);
      stages[s].optimizer = scale(base[s].optimizer);
    }
  }
}

std::unique_ptr<CostModel> make_cost_model(const Scenario& scenario) {
  if (scenario.cluster.profile) {
    return std::make_unique<ProfiledCostModel>(scenario.cluster.profile);
  }
  if (scenario.cluster.cost_model == CostModelKind::kKernels) {
    const bool fp8 = scenario.model.transformer && scenario.model.transformer->fp8;
    return std::make_unique<KernelCostModel>(scenario.cluster.device, scenario.model.dtype, fp8,
                                             scenario.training.bytes_per_param,
                                             scenario.training.framework);
  }
  return std::make_unique<AnalyticCostModel>(scenario.cluster.device, scenario.model.dtype,
                                             scenario.training.bytes_per_param);
}

std::vector<MemorySplit> memory_splits(const SimResult& r) {
  std::vector<MemorySplit> out(r.metrics.devices.size());
  for (std::size_t s = 0; s < r.stage_costs.size(); ++s) {
    const auto d = static_cast<std::size_t>(
        placed_device(r.schedule, r.custom.get(), static_cast<int>(s), r.stages));
    if (d >= out.size()) continue;
    const StageCost& c = r.stage_costs[s];
    out[d].weights += c.weight_bytes;
    out[d].gradients += c.gradient_bytes;
    out[d].optimizer += c.optimizer_bytes;
  }
  for (std::size_t d = 0; d < out.size(); ++d) {
    MemorySplit& m = out[d];
    m.activations = std::max<Bytes>(
        0, r.metrics.devices[d].peak_memory - m.weights - m.gradients - m.optimizer);
  }
  return out;
}

MemorySplit memory_split(const SimResult& r, int device) {
  return memory_splits(r).at(static_cast<std::size_t>(device));
}

SimResult simulate(const Scenario& scenario, const SimConfig& config) {
  return simulate(scenario, config, *make_cost_model(scenario));
}

SimResult simulate(const Scenario& scenario, const SimConfig& config, const CostModel& cost) {
  const Resolved r = resolve(scenario, config);
  SimResult out;
  out.stages = r.K;
  out.chunks = r.chunks;
  out.micro_batches = r.M;
  out.schedule = r.schedule;
  out.remat = r.remat;
  out.custom = config.custom;
  out.tensor_parallel = scenario.cluster.tensor_parallel;
  out.sequence_parallel = scenario.model.sequence_parallel;
  out.checkpoint = scenario.training.checkpoint;
  out.zero = scenario.training.zero;
  out.micro_batch_size = scenario.training.global_batch / r.M;
  out.cost_model = std::string(cost.name());
  std::vector<StageRange> ranges;
  if (config.stage_ranges) {
    ranges = *config.stage_ranges;
    PS_CHECK(static_cast<int>(ranges.size()) == r.K * r.chunks, "one stage range per stage");
  } else if (scenario.training.cut) {
    ranges = stated_ranges(*scenario.training.cut, scenario.model, r.K, r.chunks);
  } else if (config.partition == PartitionMethod::kOptimal && r.chunks > 1) {
    const PartitionProblem p = partition_problem(scenario, cost, r.K * r.chunks, r.M, r.remat,
                                                 r.schedule, r.chunks, config.custom.get());
    if (std::optional<SimResult> best = fastest_chunked_cut(
            scenario, config, cost, p,
            partition_devices(p, r.K, scenario.cluster.device.memory_bytes).stages)) {
      if (!config.record_timeline && config.timeline_sink == nullptr) return *best;
      for (const StageCost& c : best->stage_costs) ranges.push_back(c.layers);
    }
  }
  if (ranges.empty()) {
    ranges = choose_partition(scenario, cost, config.partition, r.K * r.chunks, r.M, r.remat,
                              r.schedule, r.chunks, config.custom.get());
  }
  out.stage_costs = compute_stage_costs(
      scenario.model, ranges, cost, out.micro_batch_size, device_bytes_per_param(scenario), r.remat,
      scenario.training.checkpoint, splits_backward(r.schedule, config.custom.get()));
  add_gathered_weights(scenario, out.stage_costs);
  split_static_bytes(scenario, out.stage_costs);
  // ZeRO 1 to 3: each replica steps the optimizer on its 1/D of the stage.
  if (scenario.training.zero >= 1 && scenario.training.zero_replicas > 1) {
    const std::int64_t d = scenario.training.zero_replicas;
    for (StageCost& c : out.stage_costs) c.optimizer = cost.optimizer_step((c.params + d - 1) / d);
  }
  check_layers_take_time(scenario, out.stage_costs, cost);
  const Schedule schedule = config.custom ? build_custom(*config.custom, r.remat)
                                          : build_schedule(r.schedule, r.K, r.M, r.remat, r.chunks);
  const std::string problem = check_schedule(schedule);
  PS_CHECK(problem.empty(), problem);
  add_tensor_collectives(scenario.model, scenario.cluster, schedule.stage_device,
                         out.micro_batch_size, out.stage_costs, cost, scenario.training.framework,
                         schedule.split);
  add_host_waits(scenario.model, cost, scenario.training.framework, out.micro_batch_size, r.remat,
                 ops_start_drained(scenario.training.framework, r.chunks > 1, r.K),
                 out.stage_costs);

  out.data_parallel = config.data_parallel.replicas;
  if (config.data_parallel.replicas > 1) {
    // Gradients and the weights gathered are in the model's dtype. ZeRO 0
    // all-reduces a stage's gradients once a step; 1 reduce-scatters them once
    // a step, where the all-reduce would be, and all-gathers the updated
    // weights after the optimizer step; 2 and 3 reduce-scatter them after
    // every backward, 2 all-gathers the updated weights after the step, 3
    // each layer's weights before it computes in every forward, recompute
    // and backward (docs/models.md, "ZeRO").
    const Bytes per_param = reduced_gradient_bytes(scenario);
    const int zero = scenario.training.zero;
    for (StageCost& c : out.stage_costs) {
      c.grad_bytes = c.params * per_param;
      c.allreduce_with_backward = scenario.training.framework.overlap_grad_reduce;
      if (zero == 0) {
        c.allreduce = allreduce_time(config.data_parallel, c.grad_bytes);
        continue;
      }
      const SimTime gather = step_gather(scenario, config.data_parallel, c);
      if (zero == 1) {  // one reduce-scatter where the all-reduce would be
        c.allreduce = reduce_scatter_time(config.data_parallel, c.grad_bytes);
        c.zero_step_gather = gather;
        continue;
      }
      c.zero_reduce_scatter = reduce_scatter_time(config.data_parallel, c.grad_bytes);
      if (zero == 2) c.zero_step_gather = gather;
    }
  }
  apply_concurrency_slowdown(schedule, scenario.cluster, out.stage_costs);
  // ZeRO-3's flows against the ops' times as they run, slowdown included.
  if (config.data_parallel.replicas > 1 && scenario.training.zero == 3) {
    add_gather_flows(
        scenario, cost, out.micro_batch_size, r.remat, schedule.split,
        [&](Bytes bytes) { return reduce_scatter_time(config.data_parallel, bytes); },
        out.stage_costs);
  }

  MemoryTracker memory(schedule, out.stage_costs);
  TimelineCollector collector(out.timeline);
  TimelineSink* sink = config.timeline_sink;
  if (!sink && config.record_timeline) sink = &collector;
  std::optional<TimelineRecorder> recorder;
  ListenerList listeners;
  listeners.add(&memory);
  if (sink) {
    std::vector<std::string> device_names;
    const Cluster& c = scenario.cluster;
    const int t = c.tensor_parallel;
    for (int d = 0; d < schedule.devices(); ++d) {
      const int first = c.first_physical_device(d);
      device_names.push_back(
          t == 1 ? "device " + std::to_string(first) + " (" + c.device.name + ")"
                 : "group " + std::to_string(d) + " (devices " + std::to_string(first) + "-" +
                       std::to_string(first + t - 1) + ", " + c.device.name + ")");
    }
    sink->begin(device_names, route_names(schedule, scenario.cluster));
    listeners.add(&recorder.emplace(*sink));
  }
  const EngineResult run = run_engine(schedule, out.stage_costs, scenario.cluster, &listeners);
  out.compute_ops = run.compute_ops;
  out.transfers = run.transfers;
  if (sink) {
    memory.for_each_point([&](int device, const MemoryPoint& p) { sink->memory_point(device, p); });
    sink->end();
  }
  MetricsInput in;
  in.samples = scenario.training.global_batch;
  in.tokens_per_sample = scenario.model.tokens_per_sample;
  in.model_flops = scenario.model.model_flops_per_device_sample() *
                   static_cast<double>(scenario.training.global_batch);
  in.peak_flops = scenario.cluster.device.peak_flops(scenario.model.dtype);
  in.memory_capacity = scenario.cluster.device.memory_bytes;
  out.metrics = compute_metrics(run, memory.peaks(), in);
  return out;
}

}  // namespace pipescope
