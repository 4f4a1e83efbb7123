#include "sim/engine/simulator.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>

#include "costmodels/check.h"
#include "costmodels/kernel_cost_model.h"
#include "costmodels/model_families.h"
#include "costmodels/profile.h"
#include "sim/engine/context_parallel.h"
#include "sim/engine/device_partition.h"
#include "sim/engine/engine.h"
#include "sim/engine/expert_parallel.h"
#include "sim/engine/host_dispatch.h"
#include "sim/engine/memory_tracker.h"
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

// Takes the custom schedule's K, M and chunks into r: the action file fixes
// them, and the options may only repeat them.
void take_custom_shape(const SimConfig& cfg, Resolved& r) {
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
}

// Sets the chunks the options leave open. A scenario's chunks apply to
// interleaving only: another schedule chosen on the command line runs one
// chunk per device, and interleaving chosen there over a scenario of another
// schedule gets v = 2.
void default_chunks(const Scenario& sc, const SimConfig& cfg, Resolved& r) {
  if (!cfg.custom && !cfg.chunks && !takes_chunks(r.schedule)) r.chunks = 1;
  if (!cfg.chunks && takes_chunks(r.schedule) && !takes_chunks(sc.training.schedule)) {
    r.chunks = kDefaultChunks;
  }
}

// Throws when K or the chunks are out of range: below 1, more model stages than
// the model has layers, or more devices than the cluster has.
void check_stages(const Scenario& sc, const SimConfig& cfg, const Resolved& r) {
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
}

// Throws when M is below 1, does not divide the global batch, or makes more
// stage micro-batches than one simulation holds.
void check_micro_batches(const Scenario& sc, const Resolved& r) {
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
}

// Throws when the remat recomputes attention's core and the model has none.
void check_remat(const Scenario& sc, const SimConfig& cfg, const Resolved& r) {
  if (r.remat == Remat::kSelective && !sc.model.has_attention_core()) {
    throw ConfigError("remat selective recomputes attention's core, and model '" + sc.model.name +
                          "' has no attention (a transformer has); use never, except-last or "
                          "always",
                      cfg.remat ? "" : "training.remat");
  }
}

// The run's K, M, schedule, remat and chunks: the config's where it sets them,
// else the scenario's. Throws ConfigError when they do not suit the scenario.
Resolved resolve(const Scenario& sc, const SimConfig& cfg) {
  check_expert_group(sc, cfg);
  Resolved r{cfg.stages.value_or(sc.cluster.devices),
             cfg.micro_batches.value_or(sc.training.micro_batches),
             cfg.schedule.value_or(sc.training.schedule), cfg.remat.value_or(sc.training.remat),
             cfg.chunks.value_or(sc.training.chunks)};
  if (cfg.custom) {
    take_custom_shape(cfg, r);
  } else if (r.schedule == ScheduleKind::kCustom) {
    throw ConfigError("schedule custom needs its action file (--schedule-file)");
  }
  default_chunks(sc, cfg, r);
  check_stages(sc, cfg, r);
  check_micro_batches(sc, r);
  if (!cfg.custom) {
    const std::string shape = schedule_shape_problem(r.schedule, r.K, r.M, r.chunks);
    if (!shape.empty()) throw ConfigError(shape);
  }
  check_remat(sc, cfg, r);
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

double least_concurrency_factor(const Cluster& cluster) {
  const std::vector<double>& slowdown = cluster.concurrency_slowdown;
  if (slowdown.size() < 2) return 1.0;
  return std::min(1.0, *std::min_element(slowdown.begin(), slowdown.end()));
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
  if (const std::shared_ptr<const Profile>& profile = scenario.cluster.profile) {
    return std::make_unique<ProfiledCostModel>(
        profile,
        profile->routed_load(scenario.training.expert_parallel, scenario.cluster.tensor_parallel,
                             scenario.cluster.context_parallel));
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

std::int64_t tied_copy_params(const ModelSpec& model, const std::vector<int>& stage_device) {
  const bool apart = !stage_device.empty() && stage_device.front() != stage_device.back();
  return apart ? model.tied_table_params : 0;
}

namespace {

// A result that names the run (its shape, schedule, parallelism and cost
// model), with no costs or metrics yet.
SimResult describe_run(const Scenario& scenario, const SimConfig& config, const CostModel& cost,
                       const Resolved& r) {
  SimResult out;
  out.stages = r.K;
  out.chunks = r.chunks;
  out.micro_batches = r.M;
  out.schedule = r.schedule;
  out.remat = r.remat;
  out.custom = config.custom;
  out.tensor_parallel = scenario.cluster.tensor_parallel;
  out.expert_parallel = scenario.training.expert_parallel;
  out.context_parallel = scenario.training.context_parallel;
  out.sequence_parallel = scenario.model.sequence_parallel;
  out.checkpoint = scenario.training.checkpoint;
  out.zero = scenario.training.zero;
  out.micro_batch_size = scenario.training.global_batch / r.M;
  out.cost_model = std::string(cost.name());
  return out;
}

// The cut the config or the scenario states; else, under the optimal method
// with several chunks a device, the cut of the fastest of a few
// (fastest_chunked_cut), whose simulation goes to `fastest`. Empty when none
// is given or found: the partitioner then cuts.
std::vector<StageRange> stated_or_fastest_cut(const Scenario& scenario, const SimConfig& config,
                                              const CostModel& cost, const Resolved& r,
                                              std::optional<SimResult>& fastest) {
  std::vector<StageRange> ranges;
  if (config.stage_ranges) {
    ranges = *config.stage_ranges;
    PS_CHECK(static_cast<int>(ranges.size()) == r.K * r.chunks, "one stage range per stage");
  } else if (scenario.training.cut) {
    ranges = stated_ranges(*scenario.training.cut, scenario.model, r.K, r.chunks);
  } else if (config.partition == PartitionMethod::kOptimal && r.chunks > 1) {
    const PartitionProblem p = partition_problem(scenario, cost, r.K * r.chunks, r.M, r.remat,
                                                 r.schedule, r.chunks, config.custom.get());
    fastest =
        fastest_chunked_cut(scenario, config, cost, p,
                            partition_devices(p, r.K, scenario.cluster.device.memory_bytes).stages);
    if (fastest) {
      for (const StageCost& c : fastest->stage_costs) ranges.push_back(c.layers);
    }
  }
  return ranges;
}

// A tied head (ModelSpec::tied_table_params) on another device than the
// embedding: that stage keeps a copy of the token table, its weights,
// gradients and optimizer state (Megatron-LM's word embeddings on the last
// stage, DeepSpeed's TiedLayerSpec on each stage that holds it).
void add_tied_table_copy(const Scenario& scenario, const CostModel& cost,
                         const std::vector<int>& stage_device, std::vector<StageCost>& stages) {
  const std::int64_t tied = tied_copy_params(scenario.model, stage_device);
  if (tied == 0) return;
  StageCost& head = stages.back();
  head.tied_copy_params = tied;
  head.params += tied;
  head.static_bytes += std::llround(static_cast<double>(tied) * device_bytes_per_param(scenario));
  head.optimizer = cost.optimizer_step(head.params);
}

// The copy's gradient and the table's are summed every step, after the
// replicas' reduction, by an all-reduce between the two devices (Megatron-LM's
// _allreduce_word_embedding_grads, DeepSpeed's _exec_reduce_tied_grads), in
// the model's gradient type: the optimizer op's collective on both
// (op_collectives), whatever the ZeRO stage.
void add_tied_table_reduction(const Scenario& scenario, const std::vector<int>& stage_device,
                              std::vector<StageCost>& stages) {
  StageCost& head = stages.back();
  if (head.tied_copy_params == 0) return;
  const Bytes bytes = head.tied_copy_params * reduced_gradient_bytes(scenario);
  const SimTime t =
      pair_allreduce_time(scenario.cluster, stage_device.front(), stage_device.back(), bytes);
  for (StageCost* c : {&stages.front(), &head}) {
    c->tied_allreduce = t;
    c->tied_allreduce_bytes = bytes;
  }
}

// The costs of the stages of `ranges` that do not depend on the schedule's
// timing: their ops, weights and memory (a tied head's copy of the token
// table where `stage_device` places it away from the embedding), and under
// ZeRO 1 to 3 the optimizer step on each replica's share. Throws when no
// layer takes time.
std::vector<StageCost> stage_costs_of(const Scenario& scenario, const CostModel& cost,
                                      const Resolved& r, const std::vector<StageRange>& ranges,
                                      const CustomSchedule* custom, std::int64_t micro_batch_size,
                                      const std::vector<int>& stage_device) {
  std::vector<StageCost> stages = compute_stage_costs(
      scenario.model, ranges, cost, micro_batch_size, device_bytes_per_param(scenario), r.remat,
      scenario.training.checkpoint, splits_backward(r.schedule, custom));
  add_tied_table_copy(scenario, cost, stage_device, stages);
  // The routed experts shard over the D x C / E devices that hold them, not
  // all D x C (expert_replicas).
  const double expert_extra = expert_bytes_per_param(scenario) - device_bytes_per_param(scenario);
  for (StageCost& c : stages) {
    c.static_bytes += std::llround(static_cast<double>(c.expert_params) * expert_extra);
  }
  add_gathered_weights(scenario, stages);
  split_static_bytes(scenario, stages);
  // ZeRO 1 to 3: each replica steps the optimizer on its 1/D of the stage
  // (of the routed experts, its share among the expert_replicas).
  if (scenario.training.zero >= 1 && scenario.training.zero_replicas > 1) {
    const std::int64_t d = scenario.training.zero_replicas, de = expert_replicas(scenario);
    for (StageCost& c : stages) {
      const std::int64_t dense = c.params - c.expert_params;
      c.optimizer = cost.optimizer_step((dense + d - 1) / d + (c.expert_params + de - 1) / de);
    }
  }
  check_layers_take_time(scenario, stages, cost);
  return stages;
}

// Adds each stage's gradient reduction over the data-parallel replicas, and
// ZeRO's gathers of the updated weights; nothing for one replica. The routed
// experts' reduce over the D x C / E devices that hold the same ones
// (expert_reduction_ring), the rest over all D x C.
void add_gradient_reductions(const Scenario& scenario, const DataParallel& dp,
                             std::vector<StageCost>& stages) {
  if (dp.reducers() <= 1) return;
  // Gradients and the weights gathered are in the model's dtype. ZeRO 0
  // all-reduces a stage's gradients once a step; 1 reduce-scatters them once
  // a step, where the all-reduce would be (or all-reduces them, under a
  // framework that does: Framework::zero1_allreduce), and all-gathers the
  // updated weights after the optimizer step; 2 and 3 reduce-scatter them after
  // every backward, 2 all-gathers the updated weights after the step, 3
  // each layer's weights before it computes in every forward, recompute
  // and backward (docs/models.md, "ZeRO").
  const Bytes per_param = reduced_gradient_bytes(scenario);
  const int zero = scenario.training.zero;
  const bool zero1_allreduce = zero1_all_reduces(scenario);
  const DataParallel experts = expert_reduction_ring(dp);
  for (StageCost& c : stages) {
    c.grad_bytes = c.params * per_param;
    const Bytes expert_bytes = c.expert_params * per_param;
    const Bytes dense_bytes = c.grad_bytes - expert_bytes;
    // The time of `collective` over the dense and the experts' gradients.
    const auto both = [&](RingCollective collective) {
      return dense_and_experts(collective, dp, experts, dense_bytes, expert_bytes);
    };
    c.allreduce_with_backward = scenario.training.framework.overlap_grad_reduce;
    if (zero == 0) {
      c.allreduce = both([](const DataParallel& d, Bytes b) { return allreduce_time(d, b); });
      // The CPU executor's ranks sum the gradients they share on their
      // threads (their experts' are their own).
      c.allreduce_in_step = dp.sums_on_threads() && (expert_bytes == 0 || experts.reducers() <= 1);
      continue;
    }
    const SimTime gather = step_gather(scenario, dp, c);
    if (zero == 1) {  // one reduce-scatter (or all-reduce) where the all-reduce would be
      c.zero1_allreduce = zero1_allreduce;
      c.allreduce = c.zero1_allreduce
                        ? both([](const DataParallel& d, Bytes b) { return allreduce_time(d, b); })
                        : both(reduce_scatter_time);
      c.zero_step_gather = gather;
      continue;
    }
    c.zero_reduce_scatter = both(reduce_scatter_time);
    if (zero == 2) c.zero_step_gather = gather;
  }
}

// The timeline's name of each of the schedule's devices: a device, or under
// tensor parallelism its group of devices.
std::vector<std::string> device_names(const Schedule& schedule, const Cluster& c) {
  std::vector<std::string> names;
  const int t = c.group_size();
  for (int d = 0; d < schedule.devices(); ++d) {
    const int first = c.first_physical_device(d);
    names.push_back(t == 1 ? "device " + std::to_string(first) + " (" + c.device.name + ")"
                           : "group " + std::to_string(d) + " (devices " + std::to_string(first) +
                                 "-" + std::to_string(first + t - 1) + ", " + c.device.name + ")");
  }
  return names;
}

// Runs the engine with `memory` listening and, when the config wants a
// timeline, a recorder writing it to the config's sink, or else to `timeline`.
EngineResult run_recorded(const Scenario& scenario, const SimConfig& config,
                          const Schedule& schedule, const std::vector<StageCost>& stages,
                          MemoryTracker& memory, Timeline& timeline) {
  TimelineCollector collector(timeline);
  TimelineSink* sink = config.timeline_sink;
  if (!sink && config.record_timeline) sink = &collector;
  std::optional<TimelineRecorder> recorder;
  ListenerList listeners;
  listeners.add(&memory);
  if (sink) {
    sink->begin(device_names(schedule, scenario.cluster), route_names(schedule, scenario.cluster));
    listeners.add(&recorder.emplace(*sink));
  }
  const EngineResult run = run_engine(schedule, stages, scenario.cluster, &listeners);
  if (sink) {
    memory.for_each_point([&](int device, const MemoryPoint& p) { sink->memory_point(device, p); });
    sink->end();
  }
  return run;
}

// The peak MFU is measured against: the device's dense rate in the model's
// dtype, or in FP8 where the model's GEMMs run in it (model.fp8) and the
// device has an FP8 peak: the fastest any of the step's work runs, so MFU
// stays at or below 100 %. A profile times what it measured, FP8 or not.
double mfu_peak(const Scenario& scenario) {
  const Device& device = scenario.cluster.device;
  const bool fp8 =
      scenario.model.transformer && scenario.model.transformer->fp8 && !scenario.cluster.profile;
  if (fp8 && device.kernels.peak_flops_fp8 > 0.0) return device.kernels.peak_flops_fp8;
  return device.peak_flops(scenario.model.dtype);
}

// What the metrics read from the scenario: the step's samples and tokens, the
// model's FLOPs and the device's peak and memory.
MetricsInput metrics_input(const Scenario& scenario) {
  MetricsInput in;
  in.samples = scenario.training.global_batch;
  in.tokens_per_sample = scenario.model.tokens_per_sample;
  in.model_flops = scenario.model.model_flops_per_device_sample() *
                   static_cast<double>(scenario.training.global_batch);
  in.peak_flops = mfu_peak(scenario);
  in.memory_capacity = scenario.cluster.device.memory_bytes;
  return in;
}

}  // namespace

SimResult simulate(const Scenario& scenario, const SimConfig& config, const CostModel& cost) {
  const Resolved r = resolve(scenario, config);
  SimResult out = describe_run(scenario, config, cost, r);
  std::optional<SimResult> fastest;
  std::vector<StageRange> ranges = stated_or_fastest_cut(scenario, config, cost, r, fastest);
  if (fastest && !config.record_timeline && config.timeline_sink == nullptr) return *fastest;
  if (ranges.empty()) {
    ranges = choose_partition(scenario, cost, config.partition, r.K * r.chunks, r.M, r.remat,
                              r.schedule, r.chunks, config.custom.get());
  }
  const Schedule schedule = config.custom ? build_custom(*config.custom, r.remat)
                                          : build_schedule(r.schedule, r.K, r.M, r.remat, r.chunks);
  const std::string problem = check_schedule(schedule);
  PS_CHECK(problem.empty(), problem);
  out.stage_costs = stage_costs_of(scenario, cost, r, ranges, config.custom.get(),
                                   out.micro_batch_size, schedule.stage_device);
  add_tensor_collectives(scenario.model, scenario.cluster, schedule.stage_device,
                         out.micro_batch_size, out.stage_costs, cost, scenario.training.framework,
                         schedule.split);
  add_expert_collectives(scenario.model, config.data_parallel, out.micro_batch_size,
                         out.stage_costs, scenario.training.framework.pair_alltoall_overlap);
  add_context_exchanges(scenario.model, scenario.cluster, out.micro_batch_size, out.stage_costs,
                        cost, scenario.training.cp_comm_type);
  add_host_waits(scenario.model, cost, scenario.training.framework, out.micro_batch_size, r.remat,
                 ops_start_drained(scenario.training.framework, r.chunks > 1, r.K),
                 out.stage_costs);

  out.data_parallel = config.data_parallel.replicas;
  add_gradient_reductions(scenario, config.data_parallel, out.stage_costs);
  add_tied_table_reduction(scenario, schedule.stage_device, out.stage_costs);
  apply_concurrency_slowdown(schedule, scenario.cluster, out.stage_costs);
  // ZeRO-3's flows against the ops' times as they run, slowdown included.
  if (config.data_parallel.replicas > 1 && scenario.training.zero == 3) {
    add_gather_flows(
        scenario, cost, out.micro_batch_size, r.remat, schedule.split,
        [&](Bytes bytes) { return reduce_scatter_time(config.data_parallel, bytes); },
        out.stage_costs);
  }

  MemoryTracker memory(schedule, out.stage_costs);
  const EngineResult run =
      run_recorded(scenario, config, schedule, out.stage_costs, memory, out.timeline);
  out.compute_ops = run.compute_ops;
  out.transfers = run.transfers;
  out.metrics = compute_metrics(run, memory.peaks(), metrics_input(scenario));
  return out;
}

}  // namespace pipescope
