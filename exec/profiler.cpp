#include "exec/profiler.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <random>
#include <stdexcept>
#include <thread>

#include "exec/affinity.h"
#include "exec/data.h"
#include "exec/device.h"
#include "exec/device_layers.h"
#include "exec/models.h"
#include "exec/op_list_profile.h"
#include "exec/optimizer.h"
#include "exec/optimizer_timing.h"
#include "exec/plan_runner.h"
#include "exec/profile_passes.h"
#include "exec/timing.h"
#include "exec/transport_profile.h"
#include "sim/base/cancel.h"
#include "sim/base/format.h"

namespace pipescope::exec {

namespace {

// The figure for one kind of layer: the median of each layer's timings over the
// kept rounds (robust to a round that the OS interrupted), then the mean over
// the layers of that kind. The layers of one shape do not all take the same
// time, and consistently so (the first block's stash is the coldest by the time
// its backward reads it): the mean keeps their sum, which a median over the
// pooled timings would put too low. time(r, l) is round r's time of layer l.
SimTime layer_figure(std::size_t rounds, const std::vector<std::size_t>& layers,
                     const std::function<SimTime(std::size_t, std::size_t)>& time) {
  if (layers.empty() || rounds == 0) throw std::logic_error("finish() before any measure_pass()");
  double sum = 0.0;
  for (const std::size_t l : layers) {
    std::vector<SimTime> t;
    for (std::size_t r = 0; r < rounds; ++r) t.push_back(time(r, l));
    sum += static_cast<double>(median(t));
  }
  return static_cast<SimTime>(std::llround(sum / static_cast<double>(layers.size())));
}

}  // namespace

double model_pass_s(LayerList& model, const MicroBatch& mb, std::uint64_t seed) {
  const Context ctx{mb.batch, mb.seq, &mb.targets,
                    1.0 / static_cast<double>(std::int64_t{mb.batch} * mb.seq)};
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

// Rows of one micro-batch's activations: beyond this the executor's int sizes
// (and this machine's memory) give out.
constexpr std::int64_t kMaxProfiledTokens = std::int64_t{1} << 24;

// One micro-batch size's measurements in one round.
struct SizeRound {
  // One thread running the whole model, as a one-stage plan does. With a plan
  // only in the first round and where the even ranges need it: the kinds of op
  // the plan does not run take their figures from it.
  std::optional<OpTimes> alone;
  // [n - 2]: every op's time summed with n threads each running its range of
  // the layers (even_ranges) at once, over alone's sum (n from 2 to
  // ModelProfiler::State::generic_most; the plan's device count excepted
  // when its op lists measured it).
  std::vector<std::optional<double>> slowdown;
  // With a plan: its devices' op lists, each alone (op_lists_alone), and their
  // time all at once over that (op_lists_together; with 2 or more devices,
  // each on a core of its own).
  std::optional<OpListTimes> op_lists;
  std::optional<double> op_list_slowdown;
};

struct ProfileRound {
  std::vector<SizeRound> sizes;
  PassClocks clocks;  // every timed op of the round, on every thread
};

namespace {

// Every slowdown a round measured, at every size.
std::vector<double> slowdowns(const ProfileRound& round) {
  std::vector<double> out;
  for (const SizeRound& size : round.sizes) {
    for (const std::optional<double>& f : size.slowdown) {
      if (f) out.push_back(*f);
    }
    if (size.op_list_slowdown) out.push_back(*size.op_list_slowdown);
  }
  return out;
}

double disturbance(const ProfileRound& round) {
  return round_disturbance(round.clocks.other_work(), slowdowns(round));
}

}  // namespace

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
};

namespace {

// Throws std::invalid_argument unless the plan's stages cut the model's
// `layers` into contiguous ranges in order and its op lists name them.
void check_plan_stages(const PlanStages& plan, std::size_t layers) {
  const std::vector<LayerRange>& r = plan.stage_layers;
  bool ok = !r.empty() && r.front().begin == 0 && r.back().end == layers &&
            static_cast<int>(r.size()) == plan.schedule.stages &&
            plan.schedule.stage_device.size() == r.size();
  for (std::size_t s = 0; ok && s < r.size(); ++s) {
    ok = r[s].begin < r[s].end && (s == 0 || r[s].begin == r[s - 1].end);
  }
  if (!ok) {
    throw std::invalid_argument("the plan's stages do not cut the model's " +
                                std::to_string(layers) + " layers in order");
  }
}

}  // namespace

ModelProfiler::ModelProfiler(const ModelSpec& spec, const ProfileOptions& o)
    : state_(std::make_unique<State>()) {
  if (o.batch_sizes.empty()) throw std::invalid_argument("no micro-batch sizes to profile");
  for (std::size_t i = 0; i < o.batch_sizes.size(); ++i) {
    if (o.batch_sizes[i] < 1 || o.batch_sizes[i] > (1 << 20) ||
        (i > 0 && o.batch_sizes[i] <= o.batch_sizes[i - 1])) {
      throw std::invalid_argument("micro-batch sizes must be ascending, distinct and in [1, 2^20]");
    }
  }
  if (o.repeats < 1) throw std::invalid_argument("repeats must be at least 1");
  if (o.stages && (o.device || o.batch_sizes.size() != 1)) {
    throw std::invalid_argument(
        "a plan's op lists are profiled on the host at its one micro-batch size");
  }
  const std::int64_t seq = spec.tokens_per_sample;
  if (o.batch_sizes.back() > kMaxProfiledTokens / std::max<std::int64_t>(1, seq)) {
    throw std::invalid_argument("micro-batch size " + std::to_string(o.batch_sizes.back()) + " x " +
                                std::to_string(seq) +
                                " tokens per sample is more than the executor takes in one "
                                "micro-batch (" +
                                std::to_string(kMaxProfiledTokens) + " tokens)");
  }
  State& st = *state_;
  st.spec = spec;
  st.options = o;
  st.layers = build_layers(spec, o.seed);
  if (o.device) st.layers = to_device(std::move(st.layers), o.device);
  if (o.stages) check_plan_stages(*o.stages, st.layers.size());
  st.task = task_shape(spec);
  st.rng.seed(o.seed);
  st.seed = o.seed;

  // One entry per signature, named after its first layer.
  std::map<std::string, std::size_t> entry_of;
  Profile& p = st.profile;
  p.backend = o.device ? o.backend : "cpu";
  p.machine = o.device ? o.device->name() : cpu_model_name();
  p.cores = o.device ? std::max(1, o.devices)
                     : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  p.model_name = spec.name;
  for (const LayerSpec& layer : spec.layers) {
    const std::string sig = layer_signature(layer);
    const auto [it, added] = entry_of.emplace(sig, p.layers.size());
    st.entry_of_layer.push_back(it->second);
    if (!added) continue;
    LayerProfile e;
    e.signature = sig;
    e.example = layer.name;
    e.batch_sizes = o.batch_sizes;
    p.layers.push_back(std::move(e));
  }
  for (const std::int64_t b : o.batch_sizes) {
    st.batches.push_back(whole_batch(st.task, static_cast<int>(b), 0, o.seed));
  }
  for (const MicroBatch& mb : st.batches) {
    st.contexts.push_back(Context{mb.batch, mb.seq, &mb.targets,
                                  1.0 / static_cast<double>(std::int64_t{mb.batch} * mb.seq)});
  }
  const std::size_t L = st.layers.size();
  if (st.on_host()) {
    st.clock = host_op_clock();
    const std::size_t cores = std::max<std::size_t>(
        1, std::min<std::size_t>(allowed_cpus().size(), static_cast<std::size_t>(p.cores)));
    if (o.measure_threads) {
      st.most = static_cast<int>(std::min<std::size_t>({cores, 8, L}));
      st.generic_most = st.most;
      // A plan's devices compute at most min(devices, cores) at once.
      if (st.plan() != nullptr) st.generic_most = std::min(st.most, st.plan_devices());
    }
  } else {
    st.clock = OpClock{false, 0};
  }
  // The inputs where a range or a stage starts (and, for a stage's output's
  // shape, ends), and a warm-up pass per size.
  std::vector<char> keep(L + 1, 0);
  keep[0] = 1;
  for (int n = 2; n <= st.generic_most; ++n) {
    for (const LayerRange& r : even_ranges(L, n)) keep[r.begin] = 1;
  }
  if (st.plan() != nullptr) {
    for (const LayerRange& r : st.plan()->stage_layers) keep[r.begin] = keep[r.end] = 1;
  }
  for (std::size_t i = 0; i < st.batches.size(); ++i) {
    std::vector<Tensor> all = layer_inputs(st.layers, st.batches[i].input, st.contexts[i]);
    for (std::size_t l = 0; l < all.size(); ++l) {
      if (keep[l] == 0) all[l] = Tensor();
    }
    st.inputs.push_back(std::move(all));
    timed_pass(st.layers, st.whole(), st.batches[i].input, st.contexts[i], st.rng, st.clock,
               nullptr, nullptr);
  }
}

ModelProfiler::~ModelProfiler() = default;

double ModelProfiler::measure_pass() {
  State& st = *state_;
  const std::size_t L = st.layers.size();
  ProfileRound round;
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
  st.rounds.push_back(std::move(round));
  return st.rounds.back().clocks.other_work();
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

double round_disturbance(double other_work, const std::vector<double>& slowdowns) {
  const bool plausible = std::all_of(slowdowns.begin(), slowdowns.end(), plausible_slowdown);
  return plausible ? other_work : 1.0;
}

std::vector<std::size_t> kept_rounds(const std::vector<double>& other_work) {
  std::vector<std::size_t> out;
  for (std::size_t r = 0; r < other_work.size(); ++r) {
    if (other_work[r] <= kDiscardOtherWorkAbove) out.push_back(r);
  }
  if (!out.empty()) return out;
  for (std::size_t r = 0; r < other_work.size(); ++r) out.push_back(r);
  // The least disturbed half, the earlier round first among equals.
  std::stable_sort(out.begin(), out.end(),
                   [&](std::size_t a, std::size_t b) { return other_work[a] < other_work[b]; });
  out.resize((out.size() + 1) / 2);
  std::sort(out.begin(), out.end());
  return out;
}

Profile ModelProfiler::finish() {
  State& st = *state_;
  if (st.rounds.empty()) throw std::logic_error("finish() before any measure_pass()");
  Profile p = st.profile;
  std::vector<double> other_work;
  for (const ProfileRound& r : st.rounds) other_work.push_back(disturbance(r));
  std::vector<const ProfileRound*> kept;
  for (const std::size_t r : kept_rounds(other_work)) kept.push_back(&st.rounds[r]);
  std::vector<std::vector<std::size_t>> layers_of(p.layers.size());
  for (std::size_t l = 0; l < st.entry_of_layer.size(); ++l) {
    layers_of[st.entry_of_layer[l]].push_back(l);
  }
  for (std::size_t i = 0; i < st.batches.size(); ++i) {
    const auto size = [&](std::size_t r) -> const SizeRound& { return kept[r]->sizes[i]; };
    // A kind from the passes over the whole model: the kept rounds that ran
    // one, or when none did (with a plan, only the first round may), every
    // round that did.
    std::vector<const OpTimes*> passes;
    for (const ProfileRound* r : kept) {
      if (r->sizes[i].alone) passes.push_back(&*r->sizes[i].alone);
    }
    for (std::size_t r = 0; passes.empty() && r < st.rounds.size(); ++r) {
      if (st.rounds[r].sizes[i].alone) passes.push_back(&*st.rounds[r].sizes[i].alone);
    }
    const auto pass = [&](std::vector<SimTime> OpTimes::*kind, const std::vector<std::size_t>& ls) {
      return layer_figure(passes.size(), ls,
                          [&](std::size_t r, std::size_t l) { return (passes[r]->*kind)[l]; });
    };
    // The mean of what the plan's op lists ran of `kinds` (a forward that
    // keeps its stash and a recompute are one figure), or nullopt where they
    // ran none at one of the layers.
    const auto lists = [&](std::initializer_list<KindTimes OpListTimes::*> kinds,
                           const std::vector<std::size_t>& ls) -> std::optional<SimTime> {
      for (std::size_t r = 0; r < kept.size(); ++r) {
        if (!size(r).op_lists) return std::nullopt;
        for (const std::size_t l : ls) {
          int n = 0;
          for (const auto k : kinds) n += ((*size(r).op_lists).*k).count[l];
          if (n == 0) return std::nullopt;
        }
      }
      return layer_figure(kept.size(), ls, [&](std::size_t r, std::size_t l) {
        SimTime sum = 0;
        int n = 0;
        for (const auto k : kinds) {
          sum += ((*size(r).op_lists).*k).sum[l];
          n += ((*size(r).op_lists).*k).count[l];
        }
        return sum / n;
      });
    };
    for (std::size_t e = 0; e < p.layers.size(); ++e) {
      LayerProfile& to = p.layers[e];
      const std::vector<std::size_t>& ls = layers_of[e];
      // As the plan's devices ran each kind of op, where they ran it; as one
      // thread's passes over the model otherwise (and for every kind without
      // a plan).
      to.forward.push_back(
          lists({&OpListTimes::forward}, ls).value_or(pass(&OpTimes::forward, ls)));
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
  if (st.on_host()) {
    double worst = 0.0;
    for (const ProfileRound* r : kept) worst = std::max(worst, r->clocks.other_work());
    p.rounds = ProfileRounds{rounds(), static_cast<int>(kept.size()), kDiscardOtherWorkAbove, worst,
                             st.most >= 2};
  }

  // The optimizer: overhead + per-parameter cost, from the whole model and its
  // smallest layer with parameters.
  std::vector<Param*> all;
  std::vector<Param*> smallest;
  std::int64_t smallest_count = 0;
  std::int64_t all_count = 0;
  for (auto& layer : st.layers) {
    const std::int64_t n = layer->param_count();
    if (n > 0 && (smallest.empty() || n < smallest_count)) {
      smallest = layer->params();
      smallest_count = n;
    }
    for (Param* q : layer->params()) all.push_back(q);
    all_count += n;
  }
  const Optimizer kind = st.options.optimizer;
  p.optimizer = std::string(to_string(kind));
  const int repeats = std::max(3, st.options.repeats);
  const SimTime t_all = time_optimizer(all, kind, repeats);
  const SimTime t_small = smallest.empty() ? 0 : time_optimizer(smallest, kind, repeats);
  if (all_count > smallest_count) {
    p.optimizer_ns_per_param = std::max(0.0, static_cast<double>(t_all - t_small) /
                                                 static_cast<double>(all_count - smallest_count));
  } else if (all_count > 0) {
    p.optimizer_ns_per_param = static_cast<double>(t_all) / static_cast<double>(all_count);
  }
  p.optimizer_overhead = std::max<SimTime>(
      0, t_small -
             static_cast<SimTime>(p.optimizer_ns_per_param * static_cast<double>(smallest_count)));

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
  // n cores: the median over the sizes of each size's median over the kept
  // rounds. The simulator takes one factor for every size (a plan's
  // micro-batch size is not known here). With a plan, its op lists' own
  // factor for its devices.
  p.concurrency_slowdown = {1.0};
  for (int n = 2; n <= st.generic_most; ++n) {
    std::vector<double> by_size;
    for (std::size_t i = 0; i < st.batches.size(); ++i) {
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
  const int ranks = st.options.tensor_ranks;
  if (ranks > 1 && ranks <= p.cores) {
    const TransportFigures ar = profile_tensor_allreduce(ranks, 50);
    p.tensor_group = {ranks, ar.latency_s, ar.bandwidth,
                      measure_optimizer_slowdown(all, kind, ranks, repeats)};
  }
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
