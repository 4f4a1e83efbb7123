#include "exec/profiler.h"

#include <algorithm>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <random>
#include <stdexcept>
#include <thread>

#include "exec/affinity.h"
#include "exec/compute/device.h"
#include "exec/compute/device_layers.h"
#include "exec/compute/host_memory.h"
#include "exec/compute/optimizer.h"
#include "exec/data.h"
#include "exec/expert_load_profile.h"
#include "exec/gradient_sum.h"
#include "exec/group_op_lists.h"
#include "exec/machine_speed.h"
#include "exec/models.h"
#include "exec/op_list_profile.h"
#include "exec/optimizer_timing.h"
#include "exec/plan_runner.h"
#include "exec/profile_passes.h"
#include "exec/profile_rounds.h"
#include "exec/share_exchange_profile.h"
#include "exec/timing.h"
#include "exec/transport_profile.h"
#include "sim/base/cancel.h"
#include "sim/base/format.h"

namespace pipescope::exec {

double model_pass_s(LayerList& model, const MicroBatch& mb, int shares, std::uint64_t seed) {
  const Context ctx = last_share_context(mb, shares);
  std::mt19937_64 rng(seed);
  const auto t0 = Clock::now();
  timed_pass(model, LayerRange{0, model.size()}, mb.input, ctx, rng, OpClock{false, 0}, nullptr,
             nullptr);
  return static_cast<double>(elapsed(t0)) * 1e-9;
}

std::vector<std::int64_t> plan_batch_sizes(std::int64_t global_batch, std::size_t limit) {
  std::vector<std::int64_t> out;
  for (std::int64_t d = 1; d * d <= global_batch; ++d) {
    if (global_batch % d != 0) continue;
    out.push_back(d);
    if (d * d != global_batch) out.push_back(global_batch / d);
  }
  std::sort(out.begin(), out.end());
  if (limit > 0 && out.size() > limit) out.erase(out.begin(), out.end() - static_cast<long>(limit));
  return out;
}

struct ModelProfiler::State {
  ModelSpec spec;
  ProfileOptions options;
  LayerList layers;
  TaskShape task;
  std::vector<std::size_t> entry_of_layer;  // layer -> index into profile.layers
  Profile profile;
  std::vector<MicroBatch> batches;  // one per size
  std::vector<Context> contexts;    // one per size, pointing into batches
  // [size][layer]: what enters the layer, kept where a thread's range or a
  // plan's stage starts or ends.
  std::vector<std::vector<Tensor>> inputs;
  std::vector<ProfileRound> rounds;
  // With options.check_speed on the host: before the first round and after
  // each (ModelProfiler::speed_checks).
  std::vector<std::vector<double>> speed_checks;
  OpClock clock;
  // The concurrency measured: n threads at once for n = 2 .. most, on the
  // first n of the cores this process may run on; the even ranges' passes for
  // n up to generic_most, a plan's op lists for its device count.
  int most = 1;
  int generic_most = 1;
  std::mt19937_64 rng;  // a device's passes, on the calling thread
  std::uint64_t seed = 1;

  bool on_host() const { return options.device == nullptr; }
  LayerRange whole() const { return {0, layers.size()}; }
  const PlanStages* plan() const { return options.stages.get(); }
  int plan_devices() const { return plan() != nullptr ? plan()->schedule.devices() : 0; }
  // Whether the plan's op lists measure n devices at once.
  bool plan_measures(int n) const { return n >= 2 && n == plan_devices(); }
  bool checks_speed() const { return on_host() && options.check_speed; }
  // The cores a check of their speed times: the options', or as many as the
  // rounds run threads on.
  int speed_cores() const {
    if (options.speed_check_cores > 0) return options.speed_check_cores;
    const int cpus = static_cast<int>(allowed_cpus().size());
    return std::max({1, most, std::min(plan_devices(), cpus)});
  }

  // Keeps the spec and options and builds the model's layers (on the device,
  // if any) and the seeds.
  void build_model(const ModelSpec& model, const ProfileOptions& o);
  // The profile's backend, machine, cores and model name.
  void describe_machine();
  // One profile entry per layer signature, named after its first layer.
  void add_entries();
  // One micro-batch and its context per size.
  void make_batches();
  // The op clock (on the host, measuring its cost) and the most threads
  // measured at once.
  void choose_concurrency();
  // Which layers' inputs to keep: where a range or a stage starts (and, for
  // a stage's output's shape, ends).
  std::vector<char> kept_inputs() const;
  // Keeps each size's inputs (kept_inputs) and runs a warm-up pass at it.
  void store_inputs_and_warm_up();

  // Appends each size's figures to every entry of `p`.
  void add_layer_figures(Profile& p, const std::vector<const ProfileRound*>& kept) const;
  // Appends size i's figures to every entry of `p`; layers_of[e] are entry
  // e's layers.
  void add_size_figures(Profile& p, const std::vector<const ProfileRound*>& kept,
                        const std::vector<std::vector<std::size_t>>& layers_of,
                        std::size_t i) const;
  // The concurrency slowdowns of 2 up to generic_most cores; throws
  // std::runtime_error for an implausible one.
  void add_concurrency_slowdowns(Profile& p, const std::vector<const ProfileRound*>& kept) const;
  // The plan, where the shares' or expert ranks' copies of its layers hold
  // its M stashes of micro-batch `batch` in this machine's memory; or null.
  const PlanStages* plan_in_memory(std::int64_t batch) const;
  // How the group runs the plan's op lists at micro-batch `batch`, and its
  // runs of them, each beside a rank alone's.
  GroupPlanRuns plan_runs(const PlanStages& stages, std::int64_t batch) const;
  PairedGroupRuns paired_op_lists(const GroupPlanRuns& runs);
  // The context shares' exchanges and slowdown together
  // (ProfileOptions::context_ranks); with a plan, the slowdown from its op lists.
  void add_context_figures(Profile& p);
  // The expert ranks' routed load, all-to-all and slowdown together
  // (ProfileOptions::expert_ranks): with a plan, from its op lists.
  void add_expert_figures(Profile& p);
  // The E x C ranks' slowdown together, from the plan's op lists.
  void add_expert_share_figures(Profile& p);
  // The gradient sum of the context shares or expert ranks at T = 1, up to
  // the model's parameters.
  void add_gradient_sum(Profile& p) const;
};

void ModelProfiler::State::build_model(const ModelSpec& model, const ProfileOptions& o) {
  spec = model;
  options = o;
  layers = build_layers(model, o.seed);
  if (o.device) layers = to_device(std::move(layers), o.device);
  if (o.stages) check_plan_stages(*o.stages, layers.size());
  task = task_shape(model);
  rng.seed(o.seed);
  seed = o.seed;
}

void ModelProfiler::State::describe_machine() {
  const ProfileOptions& o = options;
  Profile& p = profile;
  p.backend = o.device ? o.backend : "cpu";
  p.machine = o.device ? o.device->name() : cpu_model_name();
  p.cores = o.device ? std::max(1, o.devices)
                     : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  p.model_name = spec.name;
}

void ModelProfiler::State::add_entries() {
  std::map<std::string, std::size_t> entry_of;
  Profile& p = profile;
  for (const LayerSpec& layer : spec.layers) {
    const std::string sig = layer_signature(layer);
    const auto [it, added] = entry_of.emplace(sig, p.layers.size());
    entry_of_layer.push_back(it->second);
    if (!added) continue;
    LayerProfile e;
    e.signature = sig;
    e.example = layer.name;
    e.batch_sizes = options.batch_sizes;
    p.layers.push_back(std::move(e));
  }
}

void ModelProfiler::State::make_batches() {
  // Under context parallelism the last share of each sequence, as its rank
  // runs it (build_tensor_rank_alone).
  const int C = spec.context_parallel;
  for (const std::int64_t b : options.batch_sizes) {
    batches.push_back(last_share(whole_batch(task, static_cast<int>(b), 0, options.seed), C));
  }
  for (const MicroBatch& mb : batches) contexts.push_back(last_share_context(mb, C));
}

void ModelProfiler::State::choose_concurrency() {
  const std::size_t L = layers.size();
  if (on_host()) {
    clock = host_op_clock();
    const std::size_t cores = std::max<std::size_t>(
        1, std::min<std::size_t>(allowed_cpus().size(), static_cast<std::size_t>(profile.cores)));
    if (options.measure_threads) {
      most = static_cast<int>(std::min<std::size_t>({cores, 8, L}));
      generic_most = most;
      // A plan's devices compute at most min(devices, cores) at once.
      if (plan() != nullptr) generic_most = std::min(most, plan_devices());
    }
  } else {
    clock = OpClock{false, 0};
  }
}

std::vector<char> ModelProfiler::State::kept_inputs() const {
  const std::size_t L = layers.size();
  std::vector<char> keep(L + 1, 0);
  keep[0] = 1;
  for (int n = 2; n <= generic_most; ++n) {
    for (const LayerRange& r : even_ranges(L, n)) keep[r.begin] = 1;
  }
  if (plan() != nullptr) {
    for (const LayerRange& r : plan()->stage_layers) keep[r.begin] = keep[r.end] = 1;
  }
  return keep;
}

void ModelProfiler::State::store_inputs_and_warm_up() {
  const std::vector<char> keep = kept_inputs();
  for (std::size_t i = 0; i < batches.size(); ++i) {
    std::vector<Tensor> all = layer_inputs(layers, batches[i].input, contexts[i]);
    for (std::size_t l = 0; l < all.size(); ++l) {
      if (keep[l] == 0) all[l] = Tensor();
    }
    inputs.push_back(std::move(all));
    timed_pass(layers, whole(), batches[i].input, contexts[i], rng, clock, nullptr, nullptr);
  }
}

ModelProfiler::ModelProfiler(const ModelSpec& spec, const ProfileOptions& o)
    : state_(std::make_unique<State>()) {
  check_profile_options(spec, o);
  State& st = *state_;
  st.build_model(spec, o);
  st.describe_machine();
  st.add_entries();
  st.make_batches();
  st.choose_concurrency();
  // The inputs where a range or a stage starts (and, for a stage's output's
  // shape, ends), and a warm-up pass per size.
  st.store_inputs_and_warm_up();
}

ModelProfiler::~ModelProfiler() = default;

double ModelProfiler::measure_pass() {
  State& st = *state_;
  const std::size_t L = st.layers.size();
  ProfileRound round;
  if (st.checks_speed() && st.speed_checks.empty()) {
    st.speed_checks.push_back(reference_times(st.speed_cores()));
  }
  for (std::size_t i = 0; i < st.batches.size(); ++i) {
    SizeRound size;
    if (!st.on_host()) {
      // A device's layers, on the calling thread: passes follow each other,
      // so each finds the model where the last one left it.
      size.alone.emplace(L);
      timed_pass(st.layers, st.whole(), st.batches[i].input, st.contexts[i], st.rng, st.clock,
                 &*size.alone, &round.clocks);
      round.sizes.push_back(std::move(size));
      continue;
    }
    const std::vector<Tensor>& inputs = st.inputs[i];
    const Context& ctx = st.contexts[i];
    bool ranges_need_alone = false;
    for (int n = 2; n <= st.generic_most; ++n) ranges_need_alone |= !st.plan_measures(n);
    if (st.plan() == nullptr || st.rounds.empty() || ranges_need_alone) {
      size.alone.emplace(L);
      concurrent_passes(st.layers, {st.whole()}, inputs, ctx, cpus_for_threads(1), st.seed++,
                        st.clock, *size.alone, round.clocks);
    }
    if (const PlanStages* plan = st.plan()) {
      const int K = plan->schedule.devices();
      const std::vector<int> cpus = cpus_for_threads(K);
      OpListTimes lists(L);
      op_lists_alone(st.layers, *plan, inputs, ctx, cpus, st.seed++, st.clock, lists, round.clocks);
      if (st.plan_measures(K) && K <= st.most) {
        OpListTimes together(L);
        op_lists_together(st.layers, *plan, inputs, ctx, cpus, st.seed++, st.clock, together,
                          round.clocks);
        size.op_list_slowdown =
            static_cast<double>(together.total()) / static_cast<double>(lists.total());
      }
      size.op_lists = std::move(lists);
    }
    for (int n = 2; n <= st.generic_most; ++n) {
      if (st.plan_measures(n) && size.op_list_slowdown) {
        size.slowdown.push_back(std::nullopt);
        continue;
      }
      OpTimes together(L);
      concurrent_passes(st.layers, even_ranges(L, n), inputs, ctx, cpus_for_threads(n), st.seed++,
                        st.clock, together, round.clocks);
      const auto alone = static_cast<double>(size.alone.value().total(st.whole()));
      size.slowdown.push_back(alone > 0.0 ? static_cast<double>(together.total(st.whole())) / alone
                                          : 1.0);
    }
    round.sizes.push_back(std::move(size));
  }
  if (st.checks_speed()) {
    st.speed_checks.push_back(reference_times(st.speed_cores()));
    round.speed_spread = speed_spread({st.speed_checks.end()[-2], st.speed_checks.back()});
  }
  st.rounds.push_back(std::move(round));
  return st.rounds.back().clocks.other_work();
}

const std::vector<std::vector<double>>& ModelProfiler::speed_checks() const {
  return state_->speed_checks;
}

int ModelProfiler::rounds() const {
  return static_cast<int>(state_->rounds.size());
}

int ModelProfiler::clean_rounds() const {
  return static_cast<int>(std::count_if(
      state_->rounds.begin(), state_->rounds.end(),
      [](const ProfileRound& r) { return disturbance(r) <= kDiscardOtherWorkAbove; }));
}

bool ModelProfiler::wants_round(int wanted) const {
  return clean_rounds() < wanted && rounds() < kMaxRoundsPerWanted * wanted;
}

void ModelProfiler::State::add_layer_figures(Profile& p,
                                             const std::vector<const ProfileRound*>& kept) const {
  std::vector<std::vector<std::size_t>> layers_of(p.layers.size());
  for (std::size_t l = 0; l < entry_of_layer.size(); ++l) {
    layers_of[entry_of_layer[l]].push_back(l);
  }
  for (std::size_t i = 0; i < batches.size(); ++i) add_size_figures(p, kept, layers_of, i);
}

void ModelProfiler::State::add_size_figures(Profile& p,
                                            const std::vector<const ProfileRound*>& kept,
                                            const std::vector<std::vector<std::size_t>>& layers_of,
                                            std::size_t i) const {
  // A kind from the passes over the whole model.
  const std::vector<const OpTimes*> passes = whole_model_passes(rounds, kept, i);
  const auto pass = [&](std::vector<SimTime> OpTimes::*kind, const std::vector<std::size_t>& ls) {
    return layer_figure(passes.size(), ls,
                        [&](std::size_t r, std::size_t l) { return (passes[r]->*kind)[l]; });
  };
  const auto lists = [&](std::initializer_list<KindTimes OpListTimes::*> kinds,
                         const std::vector<std::size_t>& ls) {
    return op_list_figure(kept, i, kinds, ls);
  };
  for (std::size_t e = 0; e < p.layers.size(); ++e) {
    LayerProfile& to = p.layers[e];
    const std::vector<std::size_t>& ls = layers_of[e];
    // As the plan's devices ran each kind of op, where they ran it; as one
    // thread's passes over the model otherwise (and for every kind without
    // a plan).
    to.forward.push_back(lists({&OpListTimes::forward}, ls).value_or(pass(&OpTimes::forward, ls)));
    to.backward.push_back(
        lists({&OpListTimes::backward}, ls).value_or(pass(&OpTimes::backward, ls)));
    to.recompute.push_back(lists({&OpListTimes::kept, &OpListTimes::recompute}, ls)
                               .value_or(pass(&OpTimes::recompute, ls)));
    // Timed after every layer's B, W may come to more than its share of
    // the fused backward, which input (B) lets the profile say.
    to.weight.push_back(lists({&OpListTimes::weight}, ls).value_or(pass(&OpTimes::weight, ls)));
    to.input.push_back(lists({&OpListTimes::input}, ls).value_or(pass(&OpTimes::input, ls)));
  }
}

void ModelProfiler::State::add_concurrency_slowdowns(
    Profile& p, const std::vector<const ProfileRound*>& kept) const {
  // n cores: the median over the sizes of each size's median over the kept
  // rounds. The simulator takes one factor for every size (a plan's
  // micro-batch size is not known here). With a plan, its op lists' own
  // factor for its devices.
  p.concurrency_slowdown = {1.0};
  for (int n = 2; n <= generic_most; ++n) {
    std::vector<double> by_size;
    for (std::size_t i = 0; i < batches.size(); ++i) {
      std::vector<double> f;
      for (const ProfileRound* r : kept) {
        const SizeRound& size = r->sizes[i];
        const std::optional<double> g = size.slowdown.at(static_cast<std::size_t>(n - 2));
        f.push_back(g ? *g : size.op_list_slowdown.value());
      }
      by_size.push_back(median(f));
    }
    p.concurrency_slowdown.push_back(median(by_size));
    if (!plausible_slowdown(p.concurrency_slowdown.back())) {
      throw std::runtime_error("the " + std::to_string(n) + "-core slowdown came to " +
                               format_fixed(p.concurrency_slowdown.back(), 2) + ", outside " +
                               format_fixed(kMinConcurrencySlowdown, 1) + " to " +
                               format_fixed(kMaxConcurrencySlowdown, 0) +
                               ": other programs shared the cores while it was measured; "
                               "profile on a quieter machine");
    }
  }
}

const PlanStages* ModelProfiler::State::plan_in_memory(std::int64_t batch) const {
  const PlanStages* stages = plan();
  if (stages == nullptr) return nullptr;
  const std::int64_t in_flight = batch * stages->schedule.micro_batches;
  return share_exchanges_unfit(spec, in_flight, host_memory_available()).empty() ? stages : nullptr;
}

PairedGroupRuns ModelProfiler::State::paired_op_lists(const GroupPlanRuns& runs) {
  const PlanStages& stages = runs.plan;
  const auto alone = [&] {
    OpListTimes lists(layers.size());
    PassClocks clocks;
    op_lists_alone(layers, stages, inputs.front(), contexts.front(),
                   cpus_for_threads(stages.schedule.devices()), options.seed, clock, lists, clocks);
    return lists;
  };
  return paired_group_runs(spec, runs, alone);
}

GroupPlanRuns ModelProfiler::State::plan_runs(const PlanStages& stages, std::int64_t batch) const {
  return {stages, batch, options.seed, inputs.front(), clock, kGroupOpListRuns};
}

void ModelProfiler::State::add_context_figures(Profile& p) {
  const int C = options.context_ranks;
  if (C < 2 || C > p.cores || spec.context_parallel != C || spec.tensor_parallel != 1 ||
      spec.expert_parallel != 1 || spec.transformer == nullptr) {
    return;
  }
  const std::int64_t batch = options.batch_sizes.back();
  if (!share_exchanges_unfit(spec, batch, host_memory_available()).empty()) return;
  const ShareExchanges in_step = time_share_exchanges(spec, batch, options.seed, kExchangePasses);
  write_context_figures(p, spec, in_step, batch,
                        [C] { return profile_group_alltoall(C, kGroupRepeats); });
  // A plan's steps keep its micro-batches' stashes in flight: the shares'
  // slowdown from its op lists where those fit (their exchanges stay the
  // passes').
  if (const PlanStages* stages = plan_in_memory(batch)) {
    keep_group_slowdown(
        p, paired_slowdown(paired_op_lists(plan_runs(*stages, batch)), C, batch, false));
  }
}

void ModelProfiler::State::add_expert_figures(Profile& p) {
  const int E = options.expert_ranks;
  const std::int64_t batch = options.batch_sizes.back();
  if (E < 2 || E > p.cores || spec.expert_parallel != E || spec.tensor_parallel != 1 ||
      spec.context_parallel != 1 || spec.transformer == nullptr ||
      !share_exchanges_unfit(spec, batch, host_memory_available()).empty()) {
    return;
  }
  // As the shares': a plan's op lists where its stashes fit, passes of one
  // micro-batch otherwise.
  if (const PlanStages* stages = plan_in_memory(batch)) {
    const GroupPlanRuns r = plan_runs(*stages, batch);
    const PairedGroupRuns pairs = paired_op_lists(r);
    const bool crowded = stages->schedule.devices() * E > static_cast<int>(allowed_cpus().size());
    write_expert_plan_figures(
        p, spec, pairs,
        crowded ? group_op_list_runs(spec, r, false) : std::vector<std::vector<GroupRun>>{}, batch,
        profile_group_alltoall(E, kGroupRepeats));
    return;
  }
  const ExpertLoadTiming t = time_expert_load(spec, batch, options.seed, kExchangePasses);
  write_expert_figures(p, spec, t, batch, profile_group_alltoall(E, kGroupRepeats));
}

void ModelProfiler::State::add_expert_share_figures(Profile& p) {
  const int C = options.context_ranks, E = options.expert_ranks;
  const std::int64_t batch = options.batch_sizes.back();
  // From the plan's op lists alone; where a device's E x C ranks outnumber
  // the cores, which time-slice them, it holds their exchanges too.
  if (C < 2 || E < 2 || spec.context_parallel != C || spec.expert_parallel != E ||
      spec.tensor_parallel != 1 || spec.transformer == nullptr) {
    return;
  }
  const PlanStages* stages = plan_in_memory(batch);
  if (stages == nullptr) return;
  GroupPlanRuns r = plan_runs(*stages, batch);
  const std::size_t allowed = allowed_cpus().size();  // 0: the system cannot say
  r.crowded = C * E > (allowed == 0 ? p.cores : std::min(p.cores, static_cast<int>(allowed)));
  keep_group_slowdown(p, paired_slowdown(paired_op_lists(r), C * E, batch, true, C, r.crowded));
}

void ModelProfiler::State::add_gradient_sum(Profile& p) const {
  const std::int64_t params = spec.total_params();
  const int C = options.context_ranks, E = options.expert_ranks;
  const bool shares = C >= 2 && spec.context_parallel == C && spec.expert_parallel == 1;
  const bool experts = E >= 2 && spec.expert_parallel == E && spec.context_parallel == 1;
  // Expert ranks of shares sum over all E x C, however many cores: time-sliced
  // where they outnumber them, as their run's threads sum.
  const bool both = C >= 2 && E >= 2 && spec.context_parallel == C && spec.expert_parallel == E;
  const int ranks = both ? C * E : std::max(C, E);
  if (!(shares || experts || both) || (ranks > p.cores && !both) || spec.tensor_parallel != 1 ||
      !gradient_sum_fits(ranks, params, host_memory_available())) {
    return;
  }
  const TransportFigures g = profile_gradient_sum(ranks, kGroupRepeats, params);
  p.gradient_sum = {ranks, g.latency_s, g.bandwidth};
}

Profile ModelProfiler::finish() {
  State& st = *state_;
  if (st.rounds.empty()) throw std::logic_error("finish() before any measure_pass()");
  Profile p = st.profile;
  std::vector<double> other_work;
  for (const ProfileRound& r : st.rounds) other_work.push_back(disturbance(r));
  std::vector<const ProfileRound*> kept;
  for (const std::size_t r : kept_rounds(other_work)) kept.push_back(&st.rounds[r]);
  st.add_layer_figures(p, kept);
  if (st.on_host()) {
    double worst = 0.0, spread = st.checks_speed() ? 0.0 : -1.0;
    for (const ProfileRound* r : kept) {
      worst = std::max(worst, r->clocks.other_work());
      if (st.checks_speed()) spread = std::max(spread, r->speed_spread);
    }
    p.rounds = ProfileRounds{
        rounds(), static_cast<int>(kept.size()), kDiscardOtherWorkAbove, worst, st.most >= 2,
        spread};
  }

  // The optimizer: overhead + per-parameter cost, from the whole model and its
  // smallest layer with parameters.
  const Optimizer kind = st.options.optimizer;
  p.optimizer = std::string(to_string(kind));
  const int repeats = std::max(3, st.options.repeats);
  add_optimizer_figures(p, st.layers, kind, repeats);

  if (st.options.device) {
    // Stages on devices of their own do not slow each other; those sharing one
    // are the cores' pool of the simulator.
    p.concurrency_slowdown = {1.0};
    if (st.options.peer) {
      const TransportFigures tr = profile_device_transport(*st.options.device, *st.options.peer,
                                                           std::max(5, st.options.repeats));
      p.transport_latency_s = tr.latency_s;
      p.transport_bandwidth = tr.bandwidth;
    }
    return p;
  }
  if (!st.options.measure_threads) return p;
  const TransportFigures tr = profile_transport(200);
  p.transport_latency_s = tr.latency_s;
  p.transport_bandwidth = tr.bandwidth;
  st.add_concurrency_slowdowns(p, kept);
  const int ranks = st.options.tensor_ranks;
  if (ranks > 1 && ranks <= p.cores) {
    const TransportFigures ar = profile_tensor_allreduce(ranks, kGroupRepeats);
    p.tensor_group = {ranks, ar.latency_s, ar.bandwidth,
                      measure_optimizer_slowdown(params_of(st.layers), kind, ranks, repeats)};
  }
  st.add_context_figures(p);
  st.add_expert_figures(p);
  st.add_expert_share_figures(p);
  st.add_gradient_sum(p);
  return p;
}

void measure_rounds(ModelProfiler& profiler, int wanted, const std::function<void()>& after_each) {
  while (profiler.wants_round(wanted)) {
    throw_if_cancelled();
    profiler.measure_pass();
    if (after_each) after_each();
  }
}

Profile profile_model(const ModelSpec& spec, const ProfileOptions& o) {
  ModelProfiler profiler(spec, o);
  // The rounds, and one step for the rest (optimizer, transport); more rounds
  // when some were discarded.
  std::size_t total = static_cast<std::size_t>(o.repeats) + 1;
  measure_rounds(profiler, o.repeats, [&] {
    const auto done = static_cast<std::size_t>(profiler.rounds());
    total = std::max(total, done + 1);
    if (o.progress) o.progress(done, total);
  });
  Profile p = profiler.finish();
  if (o.progress) o.progress(total, total);
  return p;
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) {
        std::string name = line.substr(colon + 1);
        name.erase(0, name.find_first_not_of(" \t"));
        if (!name.empty()) return name;
      }
    }
  }
  return "unknown CPU";
}

}  // namespace pipescope::exec
