#include "exec/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "costmodels/check.h"
#include "costmodels/device.h"
#include "exec/plan_runner.h"
#include "sim/engine/context_parallel.h"
#include "sim/engine/engine.h"
#include "sim/engine/expert_parallel.h"
#include "sim/formats/profile_io.h"

namespace pipescope::exec {

namespace {

// A profile's slowdown with n cores computing (the last one measured beyond).
double slowdown_of(const Profile& p, int n) {
  const auto& s = p.concurrency_slowdown;
  if (s.empty() || n < 1) return 1.0;
  return s[static_cast<std::size_t>(std::min<int>(n, static_cast<int>(s.size())) - 1)];
}

// How many times as long n threads (or processes) computing at once take
// where they outnumber a CPU profile's cores: n / cores (the OS shares each
// core among them); 1 where they do not. A GPU profile's streams are not
// cores.
double time_slicing(const Profile& p, int n) {
  if (p.backend == "cuda" || p.cores < 1 || n <= p.cores) return 1.0;
  return static_cast<double>(n) / static_cast<double>(p.cores);
}

// How much longer each of n threads computing at once takes: the slowdown
// of the cores they run on, time-sliced.
double threads_slowdown(const Profile& p, int n) {
  const double sliced = time_slicing(p, n);
  return sliced > 1.0 ? slowdown_of(p, p.cores) * sliced : slowdown_of(p, n);
}

// The profile's slowdown of a stage's T x C x E ranks computing together
// where it was measured for this group (T = 1, the C shares of each of the
// E expert ranks, at the plan's `micro_batch`); null otherwise.
const GroupSlowdownFigures* measured_group_slowdown(const Profile& p, int T, int C, int E,
                                                    std::int64_t micro_batch) {
  const GroupSlowdownFigures& g = p.group_slowdown;
  const bool measured = T == 1 && g.ranks == C * E && g.experts == (E > 1) &&
                        g.shares == (E > 1 ? C : 1) && g.micro_batch == micro_batch;
  return measured ? &g : nullptr;
}

// A time-sliced group's measured slowdown holds its exchanges
// (GroupSlowdownFigures::time_sliced): its ring's takes and its all-to-alls
// (the experts', and the shares' trading heads) are priced at nothing beside
// it, as a measured ring of free takes and measured all-to-alls of no
// latency and unbounded bandwidth.
void exchanges_in_slowdown(Profile& p, int C, int E, std::int64_t micro_batch) {
  if (C > 1) p.context_ring = {C, 0.0, 0.0, micro_batch};
  p.alltoall_group = {
      E > 1, std::max(C, E), 0.0, std::numeric_limits<double>::infinity(), micro_batch, true};
}

// The profile as groups of T x C x E cores see it (a stage's ranks): every
// op of a group runs while its ranks compute at once, so its layer times
// take the slowdown of that many cores, or, for C shares of E expert ranks
// at T = 1 and the plan's `micro_batch`, the one the profile measured as
// they run (group_slowdown: each rank's thread runs all of its stage's
// layers); n groups computing are n times as many cores. A group of more
// ranks than the machine has cores runs time-sliced (threads_slowdown),
// which a measured slowdown has in it.
// The split backward's B and W keep their times when the profile timed them
// as a stage runs them, as the simulator keeps them (their operands are out
// of the caches already). The optimizer step takes the slowdown the profile
// measured with the T tensor ranks stepping at once.
Profile group_profile(Profile p, int T, int C, int E, std::int64_t micro_batch) {
  const int ranks = T * C * E;
  const double cores = threads_slowdown(p, ranks);
  const GroupSlowdownFigures* g = measured_group_slowdown(p, T, C, E, micro_batch);
  const double forward = g != nullptr ? g->forward : cores;
  const double backward = g != nullptr ? g->backward : cores;
  const auto stretch = [](std::vector<SimTime>& times, double f) {
    for (SimTime& t : times) t = static_cast<SimTime>(std::llround(static_cast<double>(t) * f));
  };
  const bool split_cold = p.split_unstretched();
  for (LayerProfile& l : p.layers) {
    stretch(l.forward, forward);
    stretch(l.recompute, forward);
    stretch(l.backward, backward);
    if (!split_cold) {
      stretch(l.weight, backward);
      stretch(l.input, backward);
    }
  }
  // The group's optimizer steps run at once too: time-sliced where its ranks
  // outnumber the cores (the tensor ranks' measured slowdown otherwise).
  const double sliced = time_slicing(p, ranks);
  const double steps = sliced > 1.0                ? sliced
                       : p.tensor_group.ranks == T ? p.tensor_group.optimizer_slowdown
                                                   : 1.0;
  p.optimizer_overhead =
      static_cast<SimTime>(std::llround(static_cast<double>(p.optimizer_overhead) * steps));
  p.optimizer_ns_per_param *= steps;
  std::vector<double> groups{1.0};
  for (int n = 2; n * ranks <= static_cast<int>(p.concurrency_slowdown.size()); ++n) {
    groups.push_back(slowdown_of(p, n * ranks) / cores);
  }
  p.concurrency_slowdown = groups;
  if (g != nullptr && g->time_sliced && p.backend != "cuda") {
    exchanges_in_slowdown(p, C, E, micro_batch);
  }
  return p;
}

}  // namespace

Interconnect tensor_group_link(const TensorGroupFigures& group, int T) {
  PS_CHECK(T > 1 && group.bandwidth > 0.0, "a tensor group's link needs T > 1 and a bandwidth");
  const double hops = 2.0 * (T - 1);
  Interconnect link;  // all-to-all
  link.latency_s = group.latency_s / hops;
  link.bandwidth = group.bandwidth * hops / T;
  return link;
}

Scenario cpu_scenario(const Plan& plan, const ModelSpec& model,
                      std::shared_ptr<const Profile> profile, const std::string& profile_file) {
  const DevicePreset preset = find_device_preset("cpu").value();
  Scenario sc;
  sc.name =
      plan.scenario_name + (profile && profile->backend == "cuda" ? " (on this machine's GPUs)"
                                                                  : " (on this machine's CPU)");
  sc.model = model;
  sc.cluster.name = "cpu";
  sc.cluster.devices = plan.stages;
  sc.cluster.device = preset.device;
  sc.cluster.interconnect = preset.interconnect;
  sc.training.global_batch = plan.global_batch / plan.data_parallel;
  sc.training.micro_batches = plan.micro_batches;
  sc.training.optimizer = plan.optimizer.value_or(Optimizer::kAdam);
  sc.training.bytes_per_param = bytes_per_param(*sc.training.optimizer, model.dtype);
  sc.training.schedule = plan.schedule;
  sc.training.chunks = plan.chunks;
  sc.training.remat = plan.remat;
  const int T = plan.tensor_parallel;
  sc.training.tensor_parallel = T;
  sc.training.tensor_parallel_given = T > 1;
  sc.cluster.tensor_parallel = T;
  // Context parallelism: the model is a share already (plan_model); the
  // shares' ring and their gradients' sum are the simulator's to add.
  const int C = plan.context_parallel;
  sc.training.context_parallel = C;
  sc.training.context_parallel_given = C > 1;
  sc.cluster.context_parallel = C;
  sc.training.cp_comm_type = plan.cp_comm_type;  // the ring, or all-to-alls of heads
  // Expert parallelism: one of the E replicas (cpu_sim_config adds the
  // others); its mixtures wait for the busiest rank as the profile measured
  // (make_cost_model takes Profile::routed_load).
  const int E = plan.expert_parallel;
  sc.training.expert_parallel = E;
  sc.training.expert_parallel_given = E > 1;
  // The T x C x E ranks of a group compute at once (the simulation runs one
  // of the E replicas).
  if (profile && T * C * E > 1) {
    profile =
        std::make_shared<const Profile>(group_profile(*profile, T, C, E, plan.micro_batch_size));
  }
  // apply_profile takes the profile's transport; a measured group's link replaces it.
  std::optional<Interconnect> link;
  if (profile && T > 1 && profile->tensor_group.ranks == T) {
    link = tensor_group_link(profile->tensor_group, T);
  }
  if (profile) apply_profile(sc, std::move(profile), profile_file);
  if (link) sc.cluster.interconnect = *link;
  // A group's op holds T x C cores, and the E replicas' ops run at once: the
  // cores hold cores / (T x C x E) of one replica's groups' ops at once.
  if (T * C * E > 1 && sc.cluster.shared_cores > 0) {
    sc.cluster.shared_cores = std::max(1, sc.cluster.shared_cores / (T * C * E));
  }
  return sc;
}

SimConfig cpu_sim_config(const Plan& plan, const Scenario& sc) {
  SimConfig config = plan_sim_config(plan);
  const int E = plan.expert_parallel;
  if (E > 1) {
    Cluster replicas = sc.cluster;
    replicas.devices = plan.stages * E;
    config.data_parallel = data_parallel_ring(replicas, plan.stages, E, E);
  } else if (plan.context_parallel > 1) {
    // The C shares sum their gradients before each step (context_parallel
    // of the scenario's cluster: the shares' ring).
    config.data_parallel = data_parallel_ring(sc.cluster, plan.stages, 1);
  }
  return config;
}

double relative_error(double predicted, double measured) {
  if (measured == 0.0) return predicted == 0.0 ? 0.0 : INFINITY;
  return (predicted - measured) / measured;
}

namespace {

// The kinds of compute op compared, indexed by EventKind for F, R, B, W and the
// optimizer, and apart (kKept) for the forwards that keep their stash (not
// rematerialized), which cost more.
constexpr std::size_t kKept = 5;
constexpr std::size_t kKinds = 6;

constexpr std::size_t at(EventKind k) {
  return static_cast<std::size_t>(k);
}

// One model stage's compute ops in the median step, by kind, and the
// all-reduces of each kind of op (tensor parallelism).
struct OpSums {
  SimTime total[kKinds] = {0, 0, 0, 0, 0, 0};
  SimTime cpu[kKinds] = {0, 0, 0, 0, 0, 0};
  SimTime count[kKinds] = {0, 0, 0, 0, 0, 0};
  SimTime tp_total[kKinds] = {0, 0, 0, 0, 0, 0};
  SimTime tp_count[kKinds] = {0, 0, 0, 0, 0, 0};

  SimTime mean(std::size_t i) const { return count[i] == 0 ? SimTime{0} : total[i] / count[i]; }
  SimTime mean_cpu(std::size_t i) const { return count[i] == 0 ? SimTime{0} : cpu[i] / count[i]; }
  SimTime mean_tp(std::size_t i) const {
    return tp_count[i] == 0 ? SimTime{0} : tp_total[i] / tp_count[i];
  }
  // The mean all-reduce time of a forward, kept or not, and of a recompute:
  // the simulator's one figure for the three.
  std::optional<SimTime> mean_tp_forward() const {
    const SimTime n =
        tp_count[at(EventKind::kForward)] + tp_count[kKept] + tp_count[at(EventKind::kRecompute)];
    if (n == 0) return std::nullopt;
    return (tp_total[at(EventKind::kForward)] + tp_total[kKept] +
            tp_total[at(EventKind::kRecompute)]) /
           n;
  }
};

// A compute event's kind of op (kKept for a forward that keeps its stash).
std::size_t op_kind(const TimelineEvent& e, const Schedule& schedule) {
  auto kind = static_cast<std::size_t>(e.kind);
  PS_CHECK(kind < kKept, "compute events are F, R, B, W or the optimizer");
  if (e.kind == EventKind::kForward && !schedule.recomputes(e.micro_batch)) kind = kKept;
  return kind;
}

// A tensor-lane event with the op whose all-reduces it holds: the compute
// event of its device, stage and micro-batch that ends where it starts (the
// simulator and the runtime alike draw them so). Under context parallelism
// the ring's exchanges are a forward's or a backward's, and the shares'
// gradient all-reduce the optimizer's.
struct TensorOp {
  const TimelineEvent* event = nullptr;
  std::size_t kind = 0;  // of the op, as op_kind
};

std::vector<TensorOp> tensor_ops(const Timeline& timeline, const Schedule& schedule) {
  std::map<std::tuple<int, int, int, SimTime>, std::size_t> ends;
  for (const TimelineEvent& e : timeline.events) {
    if (e.lane == Lane::kCompute)
      ends[{e.device, e.stage, e.micro_batch, e.end}] = op_kind(e, schedule);
  }
  std::vector<TensorOp> out;
  for (const TimelineEvent& e : timeline.events) {
    if (e.lane != Lane::kTensor) continue;
    const auto it = ends.find({e.device, e.stage, e.micro_batch, e.start});
    PS_CHECK(it != ends.end(), "an all-reduce without its op");
    out.push_back({&e, it->second});
  }
  return out;
}

// The median step's compute ops: per model stage and kind, busy time per
// pipeline device (their all-reduces included), and wall and CPU time summed
// over the ops.
struct MeasuredOps {
  std::vector<OpSums> stages;
  std::vector<SimTime> device_busy;
  SimTime wall = 0;
  SimTime cpu = 0;
};

MeasuredOps measure_ops(const Timeline& timeline, const Schedule& schedule, int model_stages,
                        int devices) {
  MeasuredOps ops;
  ops.stages.resize(static_cast<std::size_t>(model_stages));
  ops.device_busy.assign(static_cast<std::size_t>(devices), 0);
  for (const TimelineEvent& e : timeline.events) {
    if (e.lane != Lane::kCompute) continue;
    OpSums& s = ops.stages.at(static_cast<std::size_t>(e.stage));
    const std::size_t kind = op_kind(e, schedule);
    const SimTime wall = e.end - e.start;
    ops.device_busy.at(static_cast<std::size_t>(e.device)) += wall;
    s.total[kind] += wall;
    // Without a CPU clock the wall time stands in.
    const SimTime cpu = e.cpu_time ? std::min(*e.cpu_time, wall) : wall;
    s.cpu[kind] += cpu;
    s.count[kind] += 1;
    ops.wall += wall;
    ops.cpu += cpu;
  }
  for (const TensorOp& t : tensor_ops(timeline, schedule)) {
    const TimelineEvent& e = *t.event;
    OpSums& s = ops.stages.at(static_cast<std::size_t>(e.stage));
    s.tp_total[t.kind] += e.end - e.start;
    s.tp_count[t.kind] += 1;
    ops.device_busy.at(static_cast<std::size_t>(e.device)) += e.end - e.start;
  }
  return ops;
}

// The predicted timeline's all-reduces against the measured ones, op for op.
CollectiveMatch match_collectives(const Timeline& predicted, const Timeline& measured,
                                  const Schedule& schedule) {
  using Key = std::tuple<int, std::size_t, int, Bytes>;  // stage, op, micro-batch, bytes
  std::multiset<Key> want;
  CollectiveMatch m;
  for (const TensorOp& t : tensor_ops(predicted, schedule)) {
    want.insert({t.event->stage, t.kind, t.event->micro_batch, t.event->bytes});
    ++m.predicted;
    m.predicted_bytes += t.event->bytes;
  }
  for (const TensorOp& t : tensor_ops(measured, schedule)) {
    ++m.measured;
    m.measured_bytes += t.event->bytes;
    const auto it = want.find({t.event->stage, t.kind, t.event->micro_batch, t.event->bytes});
    if (it == want.end()) continue;
    want.erase(it);
    ++m.matched;
  }
  return m;
}

// The group figures the simulation priced the plan's all-to-alls by (the
// expert ranks', or the context shares' trading heads); ranks 0: none.
GroupAllToAllFigures priced_group(const Scenario& scenario, const Plan& plan,
                                  const SimConfig& config) {
  const bool heads = plan.context_parallel > 1 && plan.cp_comm_type == ContextExchange::kAllToAll;
  if (plan.expert_parallel <= 1 && !heads) return {};
  const DataParallel group =
      plan.expert_parallel > 1 ? config.data_parallel : context_alltoall_group(scenario.cluster);
  const GroupAllToAllFigures* g = measured_group(group, plan.micro_batch_size);
  return g != nullptr ? *g : GroupAllToAllFigures{};
}

// Step time, throughput and bubble of the prediction against the median step.
void compare_step(Comparison& c, const Scenario& scenario, const SimResult& predicted,
                  const StepResult& median) {
  const double samples = static_cast<double>(scenario.training.global_batch);
  c.predicted_step_s = predicted.metrics.step_time_s();
  c.measured_step_s = simtime_to_seconds(median.step_time);
  c.relative_error = relative_error(c.predicted_step_s, c.measured_step_s);
  c.predicted_throughput = predicted.metrics.samples_per_s;
  c.measured_throughput = c.measured_step_s > 0 ? samples / c.measured_step_s : 0.0;
  c.predicted_bubble = predicted.metrics.bubble_fraction;
  c.measured_bubble = measured_bubble(median, c.stages);
  c.tensor_parallel = scenario.cluster.tensor_parallel;
  c.context_parallel = scenario.cluster.context_parallel;
  c.expert_parallel = scenario.training.expert_parallel;
  // A stage's threads.
  const int ranks = c.tensor_parallel * c.context_parallel * c.expert_parallel;
  c.cores = scenario.cluster.shared_cores * ranks;
  // A group of more threads than the machine has cores shares them all.
  if (const auto& p = scenario.cluster.profile; p && p->backend != "cuda" && p->cores < c.cores) {
    c.cores = p->cores;
  }
  c.shared_cores = c.cores > 0 && c.cores < c.stages * ranks;
  // The load the prediction's mixtures took (make_cost_model's), if any.
  const std::shared_ptr<const Profile>& profile = scenario.cluster.profile;
  const ExpertLoadFigures* load =
      profile ? profile->routed_load(c.expert_parallel, c.tensor_parallel, c.context_parallel)
              : nullptr;
  const auto mixtures = [&] {
    return std::any_of(scenario.model.layers.begin(), scenario.model.layers.end(),
                       [](const LayerSpec& l) { return l.ep_alltoalls > 0; });
  };
  // As the cost model took it, at this micro-batch size.
  if (load && mixtures()) c.expert_load = load->at(scenario.training.micro_batch_size());
  if (const GroupSlowdownFigures* g =
          profile ? measured_group_slowdown(*profile, c.tensor_parallel, c.context_parallel,
                                            c.expert_parallel, scenario.training.micro_batch_size())
                  : nullptr) {
    c.group_slowdown = *g;
  }
}

std::vector<StageComparison> compare_busy(const SimResult& predicted,
                                          const std::vector<SimTime>& device_busy) {
  std::vector<StageComparison> per_stage;
  for (std::size_t d = 0; d < device_busy.size(); ++d) {
    StageComparison sc;
    sc.predicted_busy_s = simtime_to_seconds(predicted.metrics.devices[d].busy);
    sc.measured_busy_s = simtime_to_seconds(device_busy[d]);
    sc.relative_error = relative_error(sc.predicted_busy_s, sc.measured_busy_s);
    per_stage.push_back(sc);
  }
  return per_stage;
}

// The predicted stage costs with each stage's op times replaced by its
// measured means (wall time, or with `cpu` the CPU time).
std::vector<StageCost> measured_costs(const std::vector<StageCost>& predicted,
                                      const std::vector<OpSums>& stages, bool cpu) {
  std::vector<StageCost> costs = predicted;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const OpSums& m = stages[s];
    const auto of = [&](std::size_t i) { return cpu ? m.mean_cpu(i) : m.mean(i); };
    StageCost& cost = costs[s];
    // A split backward's B and W together are the stage's backward.
    cost.forward = of(at(EventKind::kForward));
    cost.forward_kept = of(kKept);
    cost.weight = of(at(EventKind::kWeight));
    cost.input = of(at(EventKind::kBackward));
    cost.backward = cost.input + cost.weight;
    cost.recompute = of(at(EventKind::kRecompute));
    cost.optimizer = of(at(EventKind::kOptimizer));
    // The collectives' wall time in both replays (a wait for the other ranks
    // is no CPU time, yet the op lasts it): a row measures all of an op's,
    // the tensor group's all-reduces, the expert ranks' all-to-alls and the
    // context exchanges alike, so it replaces every predicted kind.
    if (const std::optional<SimTime> f = m.mean_tp_forward()) {
      cost.tp_forward = *f;
      cost.tp_input_gather = cost.ep_forward = cost.cp_forward = 0;
    }
    if (m.tp_count[at(EventKind::kBackward)] > 0) {
      cost.tp_backward = m.mean_tp(at(EventKind::kBackward));
      cost.tp_grad_gather = cost.ep_backward = cost.cp_backward = 0;
    }
    // The ranks' gradient sum before the step, the simulator's all-reduce.
    if (m.tp_count[at(EventKind::kOptimizer)] > 0) {
      cost.allreduce = m.mean_tp(at(EventKind::kOptimizer));
    }
  }
  return costs;
}

std::string kind_name(std::size_t i, bool split) {
  return i == kKept                       ? "F kept"
         : i == at(EventKind::kForward)   ? "F"
         : i == at(EventKind::kRecompute) ? "R"
         : i == at(EventKind::kBackward)  ? (split ? "B input" : "B")
         : i == at(EventKind::kWeight)    ? "W"
                                          : "optimizer";
}

OpComparison op_row(int s, std::string kind, SimTime count, SimTime predicted_ns,
                    SimTime measured_ns, SimTime measured_cpu_ns) {
  OpComparison op;
  op.stage = s;
  op.kind = std::move(kind);
  op.count = static_cast<int>(count);
  op.predicted_s = simtime_to_seconds(predicted_ns);
  op.measured_s = simtime_to_seconds(measured_ns);
  op.measured_cpu_s = simtime_to_seconds(measured_cpu_ns);
  op.relative_error = relative_error(op.predicted_s, op.measured_s);
  return op;
}

// Model stage s's predicted op times against its measured means, each kind it
// ran, then each kind's collectives (one row for F, kept or not), named
// `collectives`: the tensor group's all-reduces, the expert ranks'
// all-to-alls and the context ring's exchanges, whichever the plan has.
void compare_ops(std::vector<OpComparison>& out, int s, const StageCost& p, const OpSums& m,
                 bool split, const std::string& collectives) {
  const SimTime forward = p.tp_forward + p.ep_forward + p.cp_forward;
  const SimTime backward = p.tp_backward + p.ep_backward + p.cp_backward;
  const std::pair<std::size_t, SimTime> kinds[] = {
      {at(EventKind::kForward), p.forward},
      {kKept, p.forward_kept.value_or(p.forward)},
      {at(EventKind::kRecompute), p.recompute},
      {at(EventKind::kBackward), split ? p.input : p.backward},
      {at(EventKind::kWeight), p.weight},
      {at(EventKind::kOptimizer), p.optimizer}};
  for (const auto& [i, predicted_ns] : kinds) {
    if (m.count[i] == 0) continue;
    out.push_back(
        op_row(s, kind_name(i, split), m.count[i], predicted_ns, m.mean(i), m.mean_cpu(i)));
  }
  const SimTime forwards = m.tp_count[at(EventKind::kForward)] + m.tp_count[kKept];
  if (forwards > 0) {
    const SimTime mean = (m.tp_total[at(EventKind::kForward)] + m.tp_total[kKept]) / forwards;
    out.push_back(op_row(s, "F " + collectives, forwards, forward, mean, mean));
  }
  for (const std::size_t i : {at(EventKind::kRecompute), at(EventKind::kBackward)}) {
    if (m.tp_count[i] == 0) continue;
    const bool b = i == at(EventKind::kBackward);
    out.push_back(op_row(s, std::string(1, b ? 'B' : 'R') + " " + collectives, m.tp_count[i],
                         b ? backward : forward, m.mean_tp(i), m.mean_tp(i)));
  }
  // The shares' (or expert ranks') gradient sum before the step: the
  // simulator's all-reduce over them.
  const std::size_t step = at(EventKind::kOptimizer);
  if (m.tp_count[step] > 0) {
    out.push_back(op_row(s, "optimizer " + collectives, m.tp_count[step], p.allreduce,
                         m.mean_tp(step), m.mean_tp(step)));
  }
}

// The engine replayed with the run's own op times (wall, then CPU), and what
// the ops' wall time lost to other work.
void compare_replays(Comparison& c, const Scenario& scenario, const Schedule& schedule,
                     const SimResult& predicted, const MeasuredOps& ops) {
  c.steal_fraction =
      ops.wall > 0 ? 1.0 - static_cast<double>(ops.cpu) / static_cast<double>(ops.wall) : 0.0;
  const std::vector<StageCost> replay = measured_costs(predicted.stage_costs, ops.stages, false);
  const std::vector<StageCost> cpu_replay = measured_costs(predicted.stage_costs, ops.stages, true);
  const EngineResult replayed = run_engine(schedule, replay, scenario.cluster, nullptr);
  c.replayed_step_s = simtime_to_seconds(replayed.step_time);
  c.runtime_overhead = c.replayed_step_s > 0 ? c.measured_step_s / c.replayed_step_s - 1.0 : 0.0;
  c.cpu_replayed_step_s =
      simtime_to_seconds(run_engine(schedule, cpu_replay, scenario.cluster, nullptr).step_time);
  c.cpu_relative_error = relative_error(c.predicted_step_s, c.cpu_replayed_step_s);
}

}  // namespace

Comparison compare_run(const Scenario& scenario, const Plan& plan,
                       const std::vector<StepResult>& steps, int warmup) {
  PS_CHECK(!steps.empty(), "compare needs at least one measured step");
  SimConfig config = cpu_sim_config(plan, scenario);
  config.record_timeline = plan.tensor_parallel > 1;  // for its all-reduces
  const SimResult predicted = simulate(scenario, config);
  Comparison c;
  c.stages = plan.stages;
  c.chunks = plan.chunks;
  c.micro_batches = plan.micro_batches;
  c.warmup_steps =
      static_cast<std::size_t>(std::max(0, warmup)) < steps.size() ? std::max(0, warmup) : 0;
  c.measured_steps = static_cast<int>(steps.size()) - c.warmup_steps;
  const StepResult& median = steps[median_step(steps, c.warmup_steps)];
  compare_step(c, scenario, predicted, median);
  c.measured_ranks = median.ranks;

  // Mean op durations per model stage (K x v of them), busy time per device.
  const Schedule schedule = plan.schedule_ops();
  const MeasuredOps ops = measure_ops(median.timeline, schedule, plan.model_stages(), plan.stages);
  c.per_stage = compare_busy(predicted, ops.device_busy);
  for (int s = 0; s < plan.model_stages(); ++s) {
    compare_ops(
        c.per_op, s, predicted.stage_costs.at(static_cast<std::size_t>(s)),
        ops.stages[static_cast<std::size_t>(s)], schedule.split,
        plan.context_parallel > 1 || plan.expert_parallel > 1 ? "collectives" : "all-reduce");
  }
  compare_replays(c, scenario, schedule, predicted, ops);
  if (plan.tensor_parallel > 1) {
    c.collectives = match_collectives(predicted.timeline, median.timeline, schedule);
  }
  // A time-sliced group's all-to-alls are in its measured slowdown: no
  // figures of their own (exchanges_in_slowdown's stand-ins are none).
  if (!c.group_slowdown.time_sliced) c.alltoall_group = priced_group(scenario, plan, config);
  c.gradient_sum = config.data_parallel.measured_sum;
  return c;
}

}  // namespace pipescope::exec
