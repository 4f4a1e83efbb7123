#include "exec/plan_runner.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "costmodels/check.h"
#include "costmodels/model_families.h"
#include "exec/compare.h"
#include "exec/compute/device_layers.h"
#include "exec/compute/host_memory.h"
#include "exec/data.h"
#include "exec/expert_shard.h"
#include "exec/models.h"
#include "exec/tensor_shard.h"
#include "exec/transport.h"
#include "sim/base/format.h"
#include "sim/engine/simulator.h"
#include "sim/scenario/scenario_io.h"

namespace pipescope::exec {

void check_executor_size(const ModelSpec& model, const std::string& where) {
  const double bytes = static_cast<double>(model.total_params()) * kStateBytesPerParam;
  if (bytes > kMaxExecutorBytes) {
    throw std::invalid_argument(
        where + ": " + format_count(static_cast<double>(model.total_params())) +
        " parameters need " + format_bytes(bytes) +
        " of weights, gradients and optimizer state in fp32; the CPU executor takes up to " +
        format_bytes(kMaxExecutorBytes) + " (use a smaller model, e.g. scenarios/cpu-small.json)");
  }
}

void check_profile_fits_host(const ModelSpec& model, std::int64_t batch, const std::string& where) {
  const std::optional<HostMemory> host = host_memory_available();
  if (!host) return;
  for (const LayerSpec& layer : model.layers) {
    const double state = static_cast<double>(layer.params) * kStateBytesPerParam;
    const double stash = static_cast<double>(layer.stash_bytes) * static_cast<double>(batch);
    if (state + stash <= static_cast<double>(host->bytes)) continue;
    throw std::invalid_argument(
        where + ": layer '" + layer.name + "' at micro-batch " + std::to_string(batch) +
        " needs at least " + format_bytes(state + stash) + " (" + format_bytes(state) +
        " of fp32 weights, gradients and optimizer state and " + format_bytes(stash) +
        " of activations kept for its backward), but this machine has " +
        format_bytes(static_cast<double>(host->bytes)) + " available (" + host->source +
        "); profile smaller micro-batches (--batch-sizes) or a smaller model");
  }
}

namespace {

// The plan's whole model cut to one rank's share, as the plan's layers are
// (its tensor rank's, share of each sequence and of the experts; T = C = E =
// 1: the whole model).
ModelSpec rank_share(ModelSpec whole, const Plan& plan) {
  if (plan.tensor_parallel == 1 && plan.context_parallel == 1 && plan.expert_parallel == 1) {
    return whole;
  }
  PS_CHECK(whole.transformer != nullptr,
           "tensor, context and expert parallelism split transformers");
  // (Plans of sequence parallelism are refused before: plan_model.)
  return make_transformer(*whole.transformer, whole.name, plan.split());
}

// A dimension that splits each stage of a plan over ranks: what a device
// runs whole without it, what the plan splits, and where the executor runs
// the ranks (threads of the cpu backend; C and E also processes of the mpi
// one).
struct RankSplit {
  char letter;
  int ways;
  const char* name;     // "tensor parallelism"
  const char* whole;    // what a device runs without it
  const char* splits;   // what the plan does instead
  const char* units;    // what the ways are
  const char* thread;   // what a cpu thread is
  const char* process;  // what an mpi process is, or null: threads only
  bool mpi() const { return process != nullptr; }
};

// The table, in no particular order: each caller names the order it checks
// the splits in (rank_split).
std::vector<RankSplit> rank_splits(const Plan& plan) {
  return {{'T', plan.tensor_parallel, "tensor parallelism", "runs whole layers on each device",
           "splits them over", "devices", "a thread per tensor rank", nullptr},
          {'C', plan.context_parallel, "context parallelism",
           "runs each sample's whole sequence on a device", "splits it over", "devices",
           "a thread per share", "a process per device and share"},
          {'E', plan.expert_parallel, "expert parallelism",
           "runs each replica's experts on its device", "spreads them over", "replicas",
           "a thread per expert rank", "a process per device and expert rank"}};
}

// The plan's split of `letter` (T, C or E).
RankSplit rank_split(const Plan& plan, char letter) {
  for (const RankSplit& r : rank_splits(plan)) {
    if (r.letter == letter) return r;
  }
  PS_CHECK(false, "no such split");
  return {};
}

}  // namespace

void check_tensor_parallel_backend(const Plan& plan, const std::string& plan_file,
                                   const std::string& backend) {
  for (const char which : {'E', 'C', 'T'}) {
    const RankSplit r = rank_split(plan, which);
    if (r.ways == 1 || backend == "cpu" || (backend == "mpi" && r.mpi())) continue;
    const std::string letter(1, which);
    throw std::invalid_argument(
        plan_file + ": " + letter + ": --backend " + backend + " " + r.whole + ", and this plan " +
        r.splits + " " + letter + "=" + std::to_string(r.ways) + " " + r.units + " (" + r.name +
        "); the cpu backend runs it (" + r.thread + ")" +
        (r.mpi() ? std::string(", and the mpi backend (") + r.process + ")" : std::string()) +
        ", or plan with -" + letter + " 1");
  }
}

void check_requested_tensor_parallel(const Plan& plan, const std::string& plan_file,
                                     std::optional<int> requested) {
  if (!requested || *requested == plan.tensor_parallel) return;
  throw std::invalid_argument("-T " + std::to_string(*requested) + ": " + plan_file +
                              " splits each layer over T=" + std::to_string(plan.tensor_parallel) +
                              " (its \"T\"); make a plan with `pipescope plan ... -T " +
                              std::to_string(*requested) + " -o PLAN` to run that");
}

ModelSpec plan_model(const Plan& plan, const std::string& plan_file) {
  if (plan.moe_dispatcher != MoeDispatcher::kAllToAll) {
    throw std::invalid_argument(plan_file + ": moe_dispatcher: the executor exchanges the " +
                                "experts' tokens by its own all-to-all, not by " +
                                std::string(to_string(plan.moe_dispatcher)) +
                                " (plan with training.moe_dispatcher alltoall to run it)");
  }
  if (plan.sequence_parallel) {
    throw std::invalid_argument(
        plan_file +
        ": sequence_parallel: the executor's tensor-parallel ranks keep the layer norms and "
        "residuals whole on every rank; it does not split them along the sequence; plan "
        "without sequence parallelism to run or compare it");
  }
  if (plan.remat == Remat::kSelective) {
    throw std::invalid_argument(
        plan_file +
        ": remat_mode: the executor recomputes whole stages (always, except-last) or nothing; "
        "it does not recompute attention's core alone (selective); plan with another remat "
        "mode to run or compare it");
  }
  if (plan.context_parallel > 1 && plan.cp_comm_type == ContextExchange::kAllGather) {
    throw std::invalid_argument(
        plan_file +
        ": cp_comm_type: the executor passes the keys and values round a ring (p2p) or "
        "trades sequence for heads (a2a); it does not run the " +
        std::string(to_string(plan.cp_comm_type)) +
        " form; plan with training.cp_comm_type=p2p or a2a to run or compare it");
  }
  if (plan.model_spec.is_null()) {
    throw std::invalid_argument(plan_file +
                                ": model.spec: the executor runs transformer and mlp models; this "
                                "plan's model is an explicit layer list or another family");
  }
  ModelSpec spec = parse_model(plan.model_spec, plan_file, "model.spec");
  check_executor_size(spec, plan_file + ": model.spec");
  if (plan.tensor_parallel > 1 && spec.transformer == nullptr) {
    throw std::invalid_argument(plan_file + ": T: the executor splits transformers over tensor " +
                                "ranks; model '" + spec.name + "' is of family " + spec.family +
                                " (expected T=1)");
  }
  if (plan.context_parallel > 1 && spec.transformer == nullptr) {
    throw std::invalid_argument(plan_file + ": C: the executor splits the sequences of " +
                                "transformers; model '" + spec.name + "' is of family " +
                                spec.family + " (expected C=1)");
  }
  return rank_share(std::move(spec), plan);
}

std::vector<HostMemoryNeed> plan_device_memory(const Plan& plan) {
  // The plan's model in fp32, what the executor computes in, on the nominal cpu
  // device: only sizes matter here, not times.
  PS_CHECK(!plan.model_spec.is_null(), "the executor runs models given by their family");
  nlohmann::json spec = plan.model_spec;
  spec["dtype"] = "fp32";
  const Scenario sc = cpu_scenario(
      plan, rank_share(parse_model(spec, plan.scenario_name, "model.spec"), plan), nullptr, "");
  const SimResult r = simulate(sc, cpu_sim_config(plan, sc));
  std::vector<HostMemoryNeed> need(r.metrics.devices.size());
  // Stage s lives on its schedule's device (plans are checked to say so).
  for (std::size_t s = 0; s < r.stage_costs.size(); ++s) {
    const int d = placed_device(r.schedule, r.custom.get(), static_cast<int>(s), r.stages);
    need[static_cast<std::size_t>(d)].state += r.stage_costs[s].static_bytes;
  }
  for (std::size_t d = 0; d < need.size(); ++d) {
    need[d].activations = r.metrics.devices[d].peak_memory - need[d].state;
  }
  return need;
}

HostMemoryNeed plan_host_memory(const Plan& plan) {
  HostMemoryNeed sum;
  for (const HostMemoryNeed& d : plan_device_memory(plan)) {
    sum.state += d.state;
    sum.activations += d.activations;
  }
  return sum;
}

void check_plan_fits(const Plan& plan, const std::string& plan_file,
                     const std::vector<MemoryPool>& pools) {
  const std::vector<HostMemoryNeed> per_device = plan_device_memory(plan);
  const auto bytes = [](Bytes b) { return format_bytes(static_cast<double>(b)); };
  for (const MemoryPool& pool : pools) {
    HostMemoryNeed need;
    for (const int d : pool.devices) {
      PS_CHECK(d >= 0 && d < static_cast<int>(per_device.size()), "memory pool device");
      need.state += per_device[static_cast<std::size_t>(d)].state;
      need.activations += per_device[static_cast<std::size_t>(d)].activations;
    }
    if (need.total() <= pool.available) continue;
    throw std::invalid_argument(
        plan_file + ": this plan of scenario '" + plan.scenario_name + "' needs " +
        bytes(need.total()) + " to run " + pool.name + " (" + bytes(need.state) +
        " of fp32 weights, gradients and optimizer state and " + bytes(need.activations) +
        " of activations kept by its " + std::string(to_string(plan.schedule)) +
        " schedule), but it has " + bytes(pool.available) + " available (" + pool.source +
        "); make a plan with a smaller batch or model, more micro-batches or remat");
  }
}

std::vector<MemoryPool> gpu_memory_pools(
    int devices, int gpus, const std::function<std::optional<Bytes>(int)>& free_bytes) {
  std::vector<MemoryPool> pools;
  for (int g = 0; g < gpus && g < devices; ++g) {
    const std::optional<Bytes> free = free_bytes(g);
    if (!free) continue;
    MemoryPool pool{"on GPU " + std::to_string(g), *free, "cudaMemGetInfo", {}};
    for (int d = g; d < devices; d += gpus) pool.devices.push_back(d);
    pools.push_back(std::move(pool));
  }
  return pools;
}

void check_plan_fits_host(const Plan& plan, const std::string& plan_file) {
  const std::optional<HostMemory> host = host_memory_available();
  if (!host) return;  // nothing to compare with: let the run try
  MemoryPool pool{"on this machine", host->bytes, host->source, {}};
  // One replica's K devices, each T x C x E times: its tensor ranks of each
  // share, of each expert rank.
  for (int d = 0; d < plan.stages; ++d) {
    for (int r = 0; r < plan.tensor_parallel * plan.context_parallel * plan.expert_parallel; ++r) {
      pool.devices.push_back(d);
    }
  }
  check_plan_fits(plan, plan_file, {pool});
}

namespace {

// Each rank's stages: the plan's cut of the model, or of each rank's shards
// (exec/tensor_shard.h, exec/expert_shard.h), rank (e C + c) T + t for
// expert rank e, share c and tensor rank t.
std::vector<std::vector<LayerList>> plan_ranks(const Plan& plan, const ModelSpec& model,
                                               std::uint64_t seed,
                                               const std::shared_ptr<GroupLink>& link) {
  std::vector<std::vector<LayerList>> ranks;
  const int T = plan.tensor_parallel, C = plan.context_parallel, E = plan.expert_parallel;
  if (T == 1 && C == 1 && E == 1) {
    ranks.push_back(cut_into_stages(build_layers(model, seed), plan.stage_ranges()));
    return ranks;
  }
  PS_CHECK(model.transformer != nullptr,
           "tensor, context and expert parallelism split transformers");
  check_runnable(model);
  const bool experts = model.transformer->moe.enabled();
  for (LayerList& rank :
       experts
           ? build_expert_ranks(*model.transformer, seed, E, link, C, model.context_by_heads)
           : build_context_ranks(*model.transformer, seed, T, C, link, model.context_by_heads)) {
    ranks.push_back(cut_into_stages(std::move(rank), plan.stage_ranges()));
  }
  return ranks;
}

}  // namespace

std::vector<StepResult> run_plan(const Plan& plan, const ModelSpec& model,
                                 const PlanRunOptions& o) {
  if (o.steps < 1) throw std::invalid_argument("a run needs at least one step");
  const Schedule schedule = plan.schedule_ops();
  // T, then C, then E: shares and expert ranks as processes, whose transport
  // links each device's (MPI), once the others are known to run.
  std::shared_ptr<GroupLink> link;
  // (Both C and E: one link of a device's C x E processes.)
  for (const char letter : {'T', 'C', 'E'}) {
    const RankSplit r = rank_split(plan, letter);
    if (r.ways == 1) continue;
    if (r.mpi() && o.transport && !o.stage_device && !link) {
      link =
          o.transport->link_group(schedule.devices(), plan.context_parallel * plan.expert_parallel);
    }
    if (!o.stage_device && (!o.transport || link)) continue;
    throw std::invalid_argument(
        std::string(1, r.letter) + "=" + std::to_string(r.ways) + ": " + r.name +
        (r.mpi() ? std::string(" runs on the cpu backend (") + r.thread + ") or the mpi backend (" +
                       r.process + ")"
                 : std::string(" runs on the cpu backend only (") + r.thread + ")"));
  }
  std::vector<std::vector<LayerList>> ranks = plan_ranks(plan, model, o.seed, link);
  // Devices only for the stages this process runs (one process per device
  // under MPI); the others stay as they were built, unused.
  if (o.stage_device) {
    const std::vector<int> local = o.transport
                                       ? o.transport->local_devices(schedule.devices())
                                       : InProcessTransport().local_devices(schedule.devices());
    std::vector<LayerList>& stages = ranks[0];
    for (std::size_t s = 0; s < stages.size(); ++s) {
      const int device = schedule.stage_device[s];
      if (std::find(local.begin(), local.end(), device) != local.end()) {
        stages[s] = to_device(std::move(stages[s]), o.stage_device(static_cast<int>(s), device));
      }
    }
  }
  RuntimeOptions options;
  options.optimizer.kind = plan.optimizer.value_or(Optimizer::kAdam);
  options.optimizer.learning_rate = o.learning_rate;
  options.watchdog = o.watchdog;
  options.before_op = o.before_op;
  options.transport = o.transport;
  PipelineRuntime runtime(std::move(ranks), schedule, options, plan.context_parallel,
                          plan.expert_parallel);
  const TaskShape task = task_shape(model);
  // One replica's samples, or under expert parallelism the E replicas' that
  // hold the experts between them.
  const int batch = static_cast<int>(plan.global_batch / plan.data_parallel) * plan.expert_parallel;
  std::vector<StepResult> out;
  for (int step = 0; step < o.steps; ++step) {
    out.push_back(runtime.step(synthetic_batch(task, batch, plan.micro_batches,
                                               static_cast<std::uint64_t>(step), o.seed)));
    if (o.on_step) o.on_step(step + 1, o.steps, out.back());
  }
  return out;
}

double measured_bubble(const StepResult& r, int devices) {
  SimTime busy = 0;
  for (const TimelineEvent& e : r.timeline.events) {
    // An op's all-reduces keep its device busy, as in the simulator.
    if (e.lane == Lane::kCompute || e.lane == Lane::kTensor) busy += e.end - e.start;
  }
  const double total = static_cast<double>(r.step_time) * devices;
  return total > 0 ? 1.0 - static_cast<double>(busy) / total : 0.0;
}

std::size_t median_step(const std::vector<StepResult>& steps, int warmup) {
  PS_CHECK(!steps.empty(), "no steps to take the median of");
  const std::size_t first = warmup >= 0 && static_cast<std::size_t>(warmup) < steps.size()
                                ? static_cast<std::size_t>(warmup)
                                : 0;
  std::vector<std::size_t> order;
  for (std::size_t i = first; i < steps.size(); ++i) order.push_back(i);
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return steps[a].step_time < steps[b].step_time; });
  return order[order.size() / 2];
}

std::string measured_steps_label(int steps, int warmup) {
  PS_CHECK(steps >= 1, "a run has at least one step");
  const bool skips = warmup >= 0 && warmup < steps;
  const int first = skips ? warmup + 1 : 1;  // 1-based
  const std::string range =
      first == steps ? "step " + std::to_string(steps)
                     : "median of steps " + std::to_string(first) + "-" + std::to_string(steps);
  if (skips || warmup <= 0) return range;
  return range + ", warm-up included (a median needs --steps " + std::to_string(warmup + 2) +
         " or more)";
}

}  // namespace pipescope::exec
