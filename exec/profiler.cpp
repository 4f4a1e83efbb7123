#include "exec/profiler.h"

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <exception>
#include <fstream>
#include <map>
#include <random>
#include <stdexcept>
#include <thread>

#include "exec/data.h"
#include "exec/device.h"
#include "exec/device_layers.h"
#include "exec/models.h"
#include "exec/optimizer.h"
#include "exec/optimizer_timing.h"
#include "exec/plan_runner.h"
#include "exec/timing.h"
#include "exec/transport_profile.h"
#include "sim/cancel.h"

namespace pipescope::exec {

namespace {

// Checks every output as the runtime does; on a device this also waits for the
// layer's work, so its time is in the measurement.
void require_finite(const Tensor& t, const Layer& layer) {
  if (!all_finite(t)) {
    throw std::runtime_error("layer '" + layer.name() + "' produced NaN or inf while profiling");
  }
}

// A gradient for the layer's output: 1 for the loss, small normal values
// otherwise, where the output lives.
Tensor output_gradient(const Tensor& y, std::mt19937_64& rng) {
  if (y.rows() == 1 && y.cols() == 1) return Matrix(Matrix::Constant(1, 1, 1.0f));
  std::normal_distribution<float> normal(0.0f, 0.01f);
  Matrix dy(y.rows(), y.cols());
  for (Eigen::Index i = 0; i < dy.size(); ++i) dy.data()[i] = normal(rng);
  if (y.on_device()) return upload(*y.device().device(), dy);
  return dy;
}

// Per-layer samples of one batch size: for each pass over the model, every
// layer's forward (its stash dropped, as under remat), recompute (a second
// forward whose stash backward uses) and backward, in the order a stage runs
// them, each timed on its own; then the backward split as zero-bubble
// schedules run it: every layer's input gradients (B), then their weight
// gradients (W), each layer's timed on its own.
struct Samples {
  std::vector<std::vector<SimTime>> forward, backward, recompute, weight, input;  // [layer][pass]
};

// Waits for a device layer's work (a host layer's is done when it returns).
void synchronize(const Layer& layer) {
  if (Device* d = layer.device()) d->synchronize();
}

// The figure for one kind of layer: the median of each layer's timings over the
// passes (robust to a pass that the OS interrupted), then the mean over the
// layers of that kind. The layers of one shape do not all take the same time,
// and consistently so (the first block's stash is the coldest by the time its
// backward reads it): the mean keeps their sum, which a median over the pooled
// timings would put too low.
SimTime layer_figure(const std::vector<std::vector<SimTime>>& per_layer,
                     const std::vector<std::size_t>& layers) {
  if (layers.empty() || per_layer.at(layers.front()).empty()) {
    throw std::logic_error("finish() before any measure_pass()");
  }
  double sum = 0.0;
  for (const std::size_t l : layers) sum += static_cast<double>(median(per_layer.at(l)));
  return static_cast<SimTime>(std::llround(sum / static_cast<double>(layers.size())));
}

void time_passes(LayerList& layers, const Matrix& input, const Context& ctx, int passes,
                 std::mt19937_64& rng, Samples& out) {
  const std::size_t L = layers.size();
  out.forward.resize(L);
  out.backward.resize(L);
  out.recompute.resize(L);
  out.weight.resize(L);
  out.input.resize(L);
  for (int pass = 0; pass < passes; ++pass) {
    throw_if_cancelled();
    Tensor x = input;
    for (std::size_t l = 0; l < L; ++l) {
      Stash stash;
      const auto t0 = Clock::now();
      Tensor y = layers[l]->forward(x, ctx, stash);
      require_finite(y, *layers[l]);
      out.forward[l].push_back(elapsed(t0));
      x = std::move(y);
    }
    std::vector<Stash> stashes(L);
    x = input;
    for (std::size_t l = 0; l < L; ++l) {
      const auto t0 = Clock::now();
      Tensor y = layers[l]->forward(x, ctx, stashes[l]);
      require_finite(y, *layers[l]);
      out.recompute[l].push_back(elapsed(t0));
      x = std::move(y);
    }
    Tensor dy = output_gradient(x, rng);
    for (std::size_t l = L; l-- > 0;) {
      const auto t0 = Clock::now();
      Tensor dx = layers[l]->backward(dy, ctx, stashes[l]);
      require_finite(dx, *layers[l]);
      out.backward[l].push_back(elapsed(t0));
      dy = std::move(dx);
    }
    // The backward again, split as zero-bubble schedules run it: each layer's
    // B, queueing its weight-gradient work; then that work (W), in the order
    // it was queued. W runs after the other layers' B, as in a stage's W op,
    // and so finds its operands as far out in the caches as there.
    dy = output_gradient(x, rng);
    std::vector<WeightGradQueue> deferred(L);
    for (std::size_t l = L; l-- > 0;) {
      const auto t0 = Clock::now();
      Tensor dx = layers[l]->backward_input(dy, ctx, stashes[l], deferred[l]);
      synchronize(*layers[l]);
      out.input[l].push_back(elapsed(t0));
      require_finite(dx, *layers[l]);
      dy = std::move(dx);
    }
    for (std::size_t l = L; l-- > 0;) {
      const auto t0 = Clock::now();
      for (const auto& work : deferred[l]) work();
      synchronize(*layers[l]);
      out.weight[l].push_back(elapsed(t0));
    }
  }
  zero_grads(layers);
}

// Mean wall time of one pass when `n` threads each run their own copy of the
// model at once: each thread first runs an untimed pass (its model into its
// core's caches, as a stage's layers stay there from one micro-batch to the
// next), then all time `passes` passes, started together.
double concurrent_pass_s(std::vector<LayerList>& models, const MicroBatch& mb, int n,
                         std::uint64_t seed, int passes = 1) {
  const Context ctx{mb.batch, mb.seq, &mb.targets,
                    1.0 / static_cast<double>(std::int64_t{mb.batch} * mb.seq)};
  std::vector<double> seconds(static_cast<std::size_t>(n), 0.0);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::barrier<> start(n);
  const auto work = [&](int i) {
    LayerList& model = models[static_cast<std::size_t>(i)];
    std::mt19937_64 rng(seed + static_cast<std::uint64_t>(i));
    Samples ignored;
    try {
      time_passes(model, mb.input, ctx, 1, rng, ignored);
    } catch (...) {
      errors[static_cast<std::size_t>(i)] = std::current_exception();
    }
    // Every thread arrives, failed or not, so that none waits forever.
    start.arrive_and_wait();
    if (errors[static_cast<std::size_t>(i)]) return;
    try {
      const auto t0 = Clock::now();
      time_passes(model, mb.input, ctx, passes, rng, ignored);
      seconds[static_cast<std::size_t>(i)] = static_cast<double>(elapsed(t0)) * 1e-9 / passes;
    } catch (...) {
      errors[static_cast<std::size_t>(i)] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  try {
    for (int i = 1; i < n; ++i) threads.emplace_back(work, i);
  } catch (...) {
    // Release the threads that did start from the barrier.
    for (std::size_t i = threads.size() + 1; i < static_cast<std::size_t>(n); ++i) {
      start.arrive_and_drop();
    }
    start.arrive_and_drop();
    for (std::thread& t : threads) t.join();
    throw;
  }
  work(0);
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  double sum = 0.0;
  for (const double v : seconds) sum += v;
  return sum / n;
}

}  // namespace

double model_pass_s(LayerList& model, const MicroBatch& mb, std::uint64_t seed) {
  const Context ctx{mb.batch, mb.seq, &mb.targets,
                    1.0 / static_cast<double>(std::int64_t{mb.batch} * mb.seq)};
  std::mt19937_64 rng(seed);
  Samples ignored;
  const auto t0 = Clock::now();
  time_passes(model, mb.input, ctx, 1, rng, ignored);
  return static_cast<double>(elapsed(t0)) * 1e-9;
}

std::vector<double> measure_concurrency_slowdown(const ModelSpec& spec, std::int64_t batch,
                                                 int cores, std::uint64_t seed) {
  std::vector<double> out{1.0};
  // One copy of the model per thread: as many as fit the executor's memory limit.
  const double copy_bytes = 16.0 * static_cast<double>(spec.total_params());
  const int fit =
      copy_bytes > 0 ? static_cast<int>(std::min(8.0, kMaxExecutorBytes / copy_bytes)) : 8;
  const int most = std::min({cores, 8, fit});
  if (most < 2) return out;
  std::vector<LayerList> models;
  for (int i = 0; i < most; ++i) models.push_back(build_layers(spec, seed));
  const MicroBatch mb = whole_batch(task_shape(spec), static_cast<int>(batch), 0, seed);
  concurrent_pass_s(models, mb, most, seed);  // warm-up
  for (int n = 2; n <= most; ++n) {
    // Alone and together in turn, so that a drifting machine affects both.
    std::vector<double> alone;
    std::vector<double> together;
    for (int trial = 0; trial < 3; ++trial) {
      alone.push_back(concurrent_pass_s(models, mb, 1, seed));
      together.push_back(concurrent_pass_s(models, mb, n, seed));
    }
    out.push_back(std::max(1.0, median(together) / median(alone)));
  }
  return out;
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

struct ModelProfiler::State {
  ModelSpec spec;
  ProfileOptions options;
  LayerList layers;
  TaskShape task;
  std::vector<std::size_t> entry_of_layer;  // layer -> index into profile.layers
  Profile profile;
  // samples[size]: every layer's timings at that size, over the passes so far.
  std::vector<Samples> samples;
  std::vector<MicroBatch> batches;  // one per size
  std::mt19937_64 rng;
};

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
  st.task = task_shape(spec);
  st.rng.seed(o.seed);

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
  st.samples.assign(o.batch_sizes.size(), Samples{});
  // Warm-up: one pass per size, not kept.
  for (std::size_t i = 0; i < st.batches.size(); ++i) run_passes(i, 1, false);
}

ModelProfiler::~ModelProfiler() = default;

void ModelProfiler::run_passes(std::size_t size_index, int passes, bool keep) {
  State& st = *state_;
  const MicroBatch& mb = st.batches[size_index];
  const Context ctx{mb.batch, mb.seq, &mb.targets,
                    1.0 / static_cast<double>(std::int64_t{mb.batch} * mb.seq)};
  Samples scratch;
  time_passes(st.layers, mb.input, ctx, passes, st.rng, keep ? st.samples[size_index] : scratch);
}

void ModelProfiler::measure_pass() {
  for (std::size_t i = 0; i < state_->batches.size(); ++i) run_passes(i, 1, true);
}

Profile ModelProfiler::finish() {
  State& st = *state_;
  Profile p = st.profile;
  std::vector<std::vector<std::size_t>> layers_of(p.layers.size());
  for (std::size_t l = 0; l < st.entry_of_layer.size(); ++l) {
    layers_of[st.entry_of_layer[l]].push_back(l);
  }
  for (const Samples& s : st.samples) {
    for (std::size_t e = 0; e < p.layers.size(); ++e) {
      LayerProfile& to = p.layers[e];
      to.forward.push_back(layer_figure(s.forward, layers_of[e]));
      to.backward.push_back(layer_figure(s.backward, layers_of[e]));
      to.recompute.push_back(layer_figure(s.recompute, layers_of[e]));
      // Timed after every layer's B, W may come to more than its share of
      // the fused backward, which input (B) lets the profile say.
      to.weight.push_back(layer_figure(s.weight, layers_of[e]));
      to.input.push_back(layer_figure(s.input, layers_of[e]));
    }
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
  p.concurrency_slowdown = measure_concurrency_slowdown(st.spec, st.options.batch_sizes.back(),
                                                        p.cores, st.options.seed);
  const int ranks = st.options.tensor_ranks;
  if (ranks > 1 && ranks <= p.cores) {
    const TransportFigures ar = profile_tensor_allreduce(ranks, 50);
    p.tensor_group = {ranks, ar.latency_s, ar.bandwidth,
                      measure_optimizer_slowdown(all, kind, ranks, repeats)};
  }
  return p;
}

Profile profile_model(const ModelSpec& spec, const ProfileOptions& o) {
  ModelProfiler profiler(spec, o);
  const std::size_t total = static_cast<std::size_t>(o.repeats) + 1;
  for (int r = 0; r < o.repeats; ++r) {
    throw_if_cancelled();
    profiler.measure_pass();
    if (o.progress) o.progress(static_cast<std::size_t>(r) + 1, total);
  }
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
