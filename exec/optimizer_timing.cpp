#include "exec/optimizer_timing.h"

#include <algorithm>
#include <barrier>
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "costmodels/profile.h"
#include "exec/compute/device.h"
#include "exec/compute/thread_clock.h"
#include "exec/timing.h"

namespace pipescope::exec {

namespace {

// Bytes written before each optimizer step that is timed: more than the
// caches hold, so the step reads its parameters, gradients and state from
// memory, as a stage's step after its backward pass does.
constexpr std::size_t kEvictBytes = std::size_t{64} << 20;

// Writes every byte of `evict` (a different value each round r), so the caches
// hold it and not what was there.
void evict_caches(std::vector<char>& evict, int r) {
  std::fill(evict.begin(), evict.end(), static_cast<char>(r));
  asm volatile("" : : "r"(evict.data()) : "memory");  // the writes are made
}

// `params` in `n` runs of about equal parameter count, in order.
std::vector<std::vector<Param*>> split_params(const std::vector<Param*>& params, int n) {
  std::int64_t total = 0;
  for (const Param* p : params) total += p->value.size();
  total = std::max<std::int64_t>(total, 1);
  std::vector<std::vector<Param*>> out(static_cast<std::size_t>(n));
  std::int64_t seen = 0;
  for (Param* p : params) {
    const auto share = static_cast<std::size_t>(std::min<std::int64_t>(n - 1, seen * n / total));
    out[share].push_back(p);
    seen += p->value.size();
  }
  return out;
}

// Each share's median step time while every share is stepped by a thread of
// its own at once, each step from cold caches; `repeats` steps after one that
// allocates the state.
std::vector<SimTime> concurrent_optimizer_ns(const std::vector<std::vector<Param*>>& shares,
                                             Optimizer kind, int repeats) {
  const int n = static_cast<int>(shares.size());
  std::vector<SimTime> out(shares.size(), 0);
  std::barrier<> sync(n);
  run_threads(n, [&](int i) {
    try {
      OptimizerConfig config;
      config.kind = kind;
      config.learning_rate = 1e-9;
      ParamOptimizer opt(config);
      opt.step(shares[static_cast<std::size_t>(i)]);
      std::vector<char> evict(kEvictBytes);
      std::vector<SimTime> t;
      for (int r = 0; r < repeats; ++r) {
        evict_caches(evict, r);
        sync.arrive_and_wait();
        const SimTime cpu0 = thread_cpu_ns();
        const auto t0 = Clock::now();
        opt.step(shares[static_cast<std::size_t>(i)]);
        const SimTime wall = elapsed(t0);
        t.push_back(cpu0 >= 0 ? std::min(wall, thread_cpu_ns() - cpu0) : wall);
      }
      out[static_cast<std::size_t>(i)] = median(t);
    } catch (...) {
      sync.arrive_and_drop();  // the others go on without this thread
      throw;
    }
  });
  return out;
}

}  // namespace

SimTime time_optimizer(const std::vector<Param*>& params, Optimizer kind, int repeats) {
  OptimizerConfig config;
  config.kind = kind;
  config.learning_rate = 1e-9;  // the weights barely move
  ParamOptimizer opt(config);
  // Device parameters: each timing waits for the update to have run.
  std::vector<Device*> devices;
  for (const Param* p : params) {
    Device* d = p->on_device() ? p->d_value.device() : nullptr;
    if (d != nullptr && std::find(devices.begin(), devices.end(), d) == devices.end()) {
      devices.push_back(d);
    }
  }
  const auto wait = [&] {
    for (Device* d : devices) d->synchronize();
  };
  opt.step(params);  // allocates the state
  wait();
  std::vector<char> evict(kEvictBytes);
  std::vector<SimTime> t;
  for (int r = 0; r < repeats; ++r) {
    evict_caches(evict, r);
    // On the host, the thread's CPU time, which leaves out what other work
    // took from the step (the layers are timed so too, profile_passes.h); a
    // device's step on the wall clock, its host thread waiting for it.
    const SimTime cpu0 = devices.empty() ? thread_cpu_ns() : -1;
    const auto t0 = Clock::now();
    opt.step(params);
    wait();
    const SimTime wall = elapsed(t0);
    t.push_back(cpu0 >= 0 ? std::min(wall, thread_cpu_ns() - cpu0) : wall);
  }
  return median(t);
}

double measure_optimizer_slowdown(const std::vector<Param*>& params, Optimizer kind, int ranks,
                                  int repeats) {
  if (ranks < 1 || repeats < 1) {
    throw std::invalid_argument("the optimizer's slowdown needs ranks >= 1 and repeats >= 1");
  }
  if (params.empty() || ranks == 1) return 1.0;
  const std::vector<std::vector<Param*>> shares = split_params(params, ranks);
  double alone = 0.0;
  for (const std::vector<Param*>& share : shares) {
    alone += static_cast<double>(concurrent_optimizer_ns({share}, kind, repeats).front());
  }
  double together = 0.0;
  for (const SimTime t : concurrent_optimizer_ns(shares, kind, repeats)) {
    together += static_cast<double>(t);
  }
  return alone > 0.0 ? std::max(1.0, together / alone) : 1.0;
}

namespace {

// The parameters the optimizer is timed on: the whole model's, and those of
// its smallest layer with parameters.
struct TimedParams {
  std::vector<Param*> all;
  std::vector<Param*> smallest;
  std::int64_t smallest_count = 0;
  std::int64_t all_count = 0;
};

// The parameters of `layers` that the optimizer is timed on.
TimedParams timed_params(LayerList& layers) {
  TimedParams out;
  for (auto& layer : layers) {
    const std::int64_t n = layer->param_count();
    if (n > 0 && (out.smallest.empty() || n < out.smallest_count)) {
      out.smallest = layer->params();
      out.smallest_count = n;
    }
    for (Param* q : layer->params()) out.all.push_back(q);
    out.all_count += n;
  }
  return out;
}

}  // namespace

void add_optimizer_figures(Profile& p, LayerList& layers, Optimizer kind, int repeats) {
  const TimedParams params = timed_params(layers);
  const SimTime t_all = time_optimizer(params.all, kind, repeats);
  const SimTime t_small =
      params.smallest.empty() ? 0 : time_optimizer(params.smallest, kind, repeats);
  if (params.all_count > params.smallest_count) {
    p.optimizer_ns_per_param =
        std::max(0.0, static_cast<double>(t_all - t_small) /
                          static_cast<double>(params.all_count - params.smallest_count));
  } else if (params.all_count > 0) {
    p.optimizer_ns_per_param = static_cast<double>(t_all) / static_cast<double>(params.all_count);
  }
  p.optimizer_overhead = std::max<SimTime>(
      0, t_small - static_cast<SimTime>(p.optimizer_ns_per_param *
                                        static_cast<double>(params.smallest_count)));
}

}  // namespace pipescope::exec
