#include "sim/simulator.h"

#include "costmodels/check.h"
#include "sim/engine.h"
#include "sim/memory_tracker.h"

namespace pipescope {

std::string_view to_string(PartitionMethod p) {
  switch (p) {
    case PartitionMethod::kUniform:
      return "uniform";
  }
  return "?";
}

std::optional<PartitionMethod> parse_partition_method(std::string_view name) {
  if (name == "uniform") return PartitionMethod::kUniform;
  return std::nullopt;
}

namespace {

struct Resolved {
  int K;
  int M;
  ScheduleKind schedule;
  bool remat;
};

Resolved resolve(const Scenario& sc, const SimConfig& cfg) {
  Resolved r{cfg.stages.value_or(sc.cluster.devices),
             cfg.micro_batches.value_or(sc.training.micro_batches),
             cfg.schedule.value_or(sc.training.schedule), cfg.remat.value_or(sc.training.remat)};
  const int layers = static_cast<int>(sc.model.layers.size());
  // K defaults to the device count: say so, and name the scenario field.
  const std::string k_name = cfg.stages ? "K=" + std::to_string(r.K)
                                        : "K=" + std::to_string(r.K) + " (the cluster's devices)";
  const std::string k_field = cfg.stages ? "" : "cluster.devices";
  if (r.K < 1) throw ConfigError("K must be at least 1, got " + std::to_string(r.K));
  if (r.K > layers) {
    throw ConfigError(k_name + " is more stages than the model's " + std::to_string(layers) +
                          " layers; choose a smaller K with -K",
                      k_field);
  }
  if (r.K > sc.cluster.devices) {
    throw ConfigError("K=" + std::to_string(r.K) + " is more stages than the cluster's " +
                      std::to_string(sc.cluster.devices) + " devices");
  }
  if (r.M < 1) throw ConfigError("M must be at least 1, got " + std::to_string(r.M));
  if (sc.training.global_batch % r.M != 0) {
    throw ConfigError("M=" + std::to_string(r.M) + " does not divide the global batch of " +
                      std::to_string(sc.training.global_batch));
  }
  if (std::int64_t{r.K} * r.M > kMaxStageMicroBatches) {
    throw ConfigError("K=" + std::to_string(r.K) + " x M=" + std::to_string(r.M) +
                      " is more stage micro-batches than one simulation holds (" +
                      std::to_string(kMaxStageMicroBatches) + ")");
  }
  return r;
}

std::vector<StageRange> make_partition(const Scenario& sc, PartitionMethod method, int K) {
  switch (method) {
    case PartitionMethod::kUniform:
      return partition_uniform(static_cast<int>(sc.model.layers.size()), K);
  }
  PS_CHECK(false, "unknown partition method");
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

SimResult simulate(const Scenario& scenario, const SimConfig& config) {
  const AnalyticCostModel cost(scenario.cluster.device, scenario.model.dtype,
                               scenario.training.bytes_per_param);
  return simulate(scenario, config, cost);
}

SimResult simulate(const Scenario& scenario, const SimConfig& config, const CostModel& cost) {
  const Resolved r = resolve(scenario, config);
  SimResult out;
  out.stages = r.K;
  out.micro_batches = r.M;
  out.schedule = r.schedule;
  out.remat = r.remat;
  out.micro_batch_size = scenario.training.global_batch / r.M;
  out.cost_model = std::string(cost.name());
  out.stage_costs =
      compute_stage_costs(scenario.model, make_partition(scenario, config.partition, r.K), cost,
                          out.micro_batch_size, scenario.training.bytes_per_param);
  const Schedule schedule = build_schedule(r.schedule, r.K, r.M, r.remat);
  const std::string problem = check_schedule(schedule);
  PS_CHECK(problem.empty(), problem);

  MemoryTracker memory(schedule, out.stage_costs);
  TimelineRecorder recorder(out.timeline);
  ListenerList listeners;
  listeners.add(&memory);
  if (config.record_timeline) listeners.add(&recorder);
  const EngineResult run = run_engine(schedule, out.stage_costs, scenario.cluster, &listeners);
  out.compute_ops = run.compute_ops;
  out.transfers = run.transfers;

  if (config.record_timeline) {
    for (int d = 0; d < schedule.devices(); ++d) {
      out.timeline.device_names.push_back("device " + std::to_string(d) + " (" +
                                          scenario.cluster.device.name + ")");
    }
    out.timeline.route_names = route_names(schedule, scenario.cluster);
    out.timeline.memory = memory.curves();
  }
  MetricsInput in;
  in.samples = scenario.training.global_batch;
  in.tokens_per_sample = scenario.model.tokens_per_sample;
  in.model_flops = (scenario.model.fwd_flops_per_sample() + scenario.model.bwd_flops_per_sample()) *
                   static_cast<double>(scenario.training.global_batch);
  in.peak_flops = scenario.cluster.device.peak_flops(scenario.model.dtype);
  in.memory_capacity = scenario.cluster.device.memory_bytes;
  out.metrics = compute_metrics(run, memory.peaks(), in);
  return out;
}

}  // namespace pipescope
