#include "exec/profile_passes.h"

#include <algorithm>
#include <atomic>
#include <barrier>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>

#include "exec/affinity.h"
#include "exec/compute/device.h"
#include "exec/compute/thread_clock.h"
#include "exec/models.h"
#include "exec/timing.h"
#include "sim/base/cancel.h"

namespace pipescope::exec {

namespace {

// Checks every output as the runtime does; on a device this also waits for the
// layer's work, so its time is in the measurement.
void require_finite(const Tensor& t, const Layer& layer) {
  if (!all_finite(t)) {
    throw std::runtime_error("layer '" + layer.name() + "' produced NaN or inf while profiling");
  }
}

// Waits for a device layer's work (a host layer's is done when it returns).
void synchronize(const Layer& layer) {
  if (Device* d = layer.device()) d->synchronize();
}

// A gradient for the output `y` of the last layer of a pass: 1 for the loss,
// small normal values otherwise, where the output lives.
Tensor output_gradient(const Tensor& y, std::mt19937_64& rng) {
  if (y.rows() == 1 && y.cols() == 1) return Matrix(Matrix::Constant(1, 1, 1.0f));
  std::normal_distribution<float> normal(0.0f, 0.01f);
  Matrix dy(y.rows(), y.cols());
  for (Eigen::Index i = 0; i < dy.size(); ++i) dy.data()[i] = normal(rng);
  if (y.on_device()) return upload(*y.device().device(), dy);
  return dy;
}

void record(std::vector<SimTime>* to, std::size_t l, SimTime t) {
  if (to != nullptr) (*to)[l] = t;
}

}  // namespace

std::vector<LayerRange> even_ranges(std::size_t layers, int n) {
  if (n < 1 || static_cast<std::size_t>(n) > layers) {
    throw std::invalid_argument("cannot cut " + std::to_string(layers) + " layers into " +
                                std::to_string(n) + " ranges");
  }
  const auto parts = static_cast<std::size_t>(n);
  std::vector<LayerRange> out;
  std::size_t begin = 0;
  for (std::size_t i = 0; i < parts; ++i) {
    const std::size_t size = layers / parts + (i < layers % parts ? 1 : 0);
    out.push_back({begin, begin + size});
    begin += size;
  }
  return out;
}

OpTimes::OpTimes(std::size_t layers)
    : forward(layers, 0),
      recompute(layers, 0),
      backward(layers, 0),
      input(layers, 0),
      weight(layers, 0) {}

SimTime OpTimes::total(LayerRange range) const {
  SimTime sum = 0;
  for (std::size_t l = range.begin; l < range.end; ++l) {
    sum += forward[l] + recompute[l] + backward[l] + input[l] + weight[l];
  }
  return sum;
}

PassClocks& PassClocks::operator+=(const PassClocks& o) {
  wall += o.wall;
  cpu += o.cpu;
  return *this;
}

double PassClocks::other_work() const {
  if (wall <= 0) return 0.0;
  return std::clamp(1.0 - static_cast<double>(cpu) / static_cast<double>(wall), 0.0, 1.0);
}

SimTime time_op(const OpClock& clock, PassClocks* clocks, const std::function<void()>& op) {
  const SimTime cpu0 = clock.cpu ? thread_cpu_ns() : 0;
  const auto wall0 = Clock::now();
  op();
  const SimTime wall = elapsed(wall0);
  SimTime t = wall;
  if (clock.cpu) {
    // At most the wall time: the clock's cost taken off may leave a little
    // more than the op on a quiet core.
    t = std::clamp<SimTime>(thread_cpu_ns() - cpu0 - clock.cpu_clock_cost, 1,
                            std::max<SimTime>(wall, 1));
  }
  if (clocks != nullptr) *clocks += PassClocks{wall, t};
  return t;
}

OpClock host_op_clock() {
  if (thread_cpu_ns() < 0) return OpClock{false, 0};
  // Many empty intervals: their median is what the clock adds to one (a
  // system call's way in and out on Linux, which a hypervisor may lengthen).
  std::vector<SimTime> empty;
  for (int i = 0; i < 201; ++i) {
    const SimTime t0 = thread_cpu_ns();
    empty.push_back(thread_cpu_ns() - t0);
  }
  return OpClock{true, std::max<SimTime>(0, median(empty))};
}

void timed_pass(LayerList& layers, LayerRange range, const Tensor& input, const Context& ctx,
                std::mt19937_64& rng, const OpClock& clock, OpTimes* times, PassClocks* clocks) {
  throw_if_cancelled();
  const auto at = [&](std::vector<SimTime> OpTimes::*kind) {
    return times != nullptr ? &(times->*kind) : nullptr;
  };
  Tensor x = input;
  for (std::size_t l = range.begin; l < range.end; ++l) {
    Stash stash;
    Tensor y;
    record(at(&OpTimes::forward), l, time_op(clock, clocks, [&] {
             y = layers[l]->forward(x, ctx, stash);
             require_finite(y, *layers[l]);
           }));
    x = std::move(y);
  }
  std::vector<Stash> stashes(layers.size());
  x = input;
  for (std::size_t l = range.begin; l < range.end; ++l) {
    Tensor y;
    record(at(&OpTimes::recompute), l, time_op(clock, clocks, [&] {
             y = layers[l]->forward(x, ctx, stashes[l]);
             require_finite(y, *layers[l]);
           }));
    x = std::move(y);
  }
  Tensor dy = output_gradient(x, rng);
  for (std::size_t l = range.end; l-- > range.begin;) {
    Tensor dx;
    record(at(&OpTimes::backward), l, time_op(clock, clocks, [&] {
             dx = layers[l]->backward(dy, ctx, stashes[l]);
             require_finite(dx, *layers[l]);
           }));
    dy = std::move(dx);
  }
  dy = output_gradient(x, rng);
  std::vector<WeightGradQueue> deferred(layers.size());
  for (std::size_t l = range.end; l-- > range.begin;) {
    Tensor dx;
    record(at(&OpTimes::input), l, time_op(clock, clocks, [&] {
             dx = layers[l]->backward_input(dy, ctx, stashes[l], deferred[l]);
             synchronize(*layers[l]);
           }));
    require_finite(dx, *layers[l]);
    dy = std::move(dx);
  }
  for (std::size_t l = range.end; l-- > range.begin;) {
    record(at(&OpTimes::weight), l, time_op(clock, clocks, [&] {
             for (const auto& work : deferred[l]) work();
             synchronize(*layers[l]);
           }));
  }
  for (std::size_t l = range.begin; l < range.end; ++l) {
    for (Param* p : layers[l]->params()) zero_grad(*p);
  }
}

void step_pass(LayerList& layers, const Tensor& input, const Context& ctx,
               const std::function<void()>& after_forward,
               const std::function<void()>& after_backward) {
  std::vector<Stash> stashes(layers.size());
  Tensor x = input;
  for (std::size_t l = 0; l < layers.size(); ++l) x = layers[l]->forward(x, ctx, stashes[l]);
  after_forward();
  Tensor dy = Matrix(Matrix::Ones(x.rows(), x.cols()));
  for (std::size_t l = layers.size(); l-- > 0;) dy = layers[l]->backward(dy, ctx, stashes[l]);
  if (after_backward) after_backward();
  for (const auto& layer : layers) {
    for (Param* p : layer->params()) zero_grad(*p);
  }
}

void on_cores(int n, const std::vector<int>& cpus, const std::function<void(int)>& body) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  const auto run = [&](int i) {
    try {
      if (!cpus.empty()) pin_current_thread(cpus[static_cast<std::size_t>(i)]);
      body(i);
    } catch (...) {
      errors[static_cast<std::size_t>(i)] = std::current_exception();
    }
  };
  for (int i = 0; i < n; ++i) threads.emplace_back(run, i);
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

void on_group_threads(int n, const std::function<void(int, CollectiveTally&)>& body, int group) {
  std::atomic<bool> failed{false};
  on_cores(n, cpus_for_groups(n, group > 0 ? group : n), [&](int i) {
    CollectiveTally tally;
    tally.abort = &failed;
    const CollectiveScope scope(tally);
    try {
      body(i, tally);
    } catch (const CollectiveAborted&) {
      return;  // another thread failed: its error is the one to report
    } catch (...) {
      failed = true;
      throw;
    }
  });
}

std::vector<Tensor> layer_inputs(LayerList& layers, const Tensor& input, const Context& ctx) {
  std::vector<Tensor> out;
  out.reserve(layers.size());
  Tensor x = input;
  for (auto& layer : layers) {
    out.push_back(x);
    Stash stash;
    Tensor y = layer->forward(x, ctx, stash);
    require_finite(y, *layer);
    x = std::move(y);
  }
  return out;
}

void concurrent_timed(int n, const std::vector<int>& cpus,
                      const std::function<void(int, bool)>& pass) {
  std::barrier<> start(n);
  std::atomic<int> timing{n};  // threads whose timed pass has not ended
  std::atomic<bool> failed{false};
  on_cores(n, cpus, [&](int i) {
    bool started = false;
    bool timed = false;
    try {
      pass(i, false);
      start.arrive_and_wait();
      started = true;
      pass(i, true);
      timed = true;
      timing.fetch_sub(1);
      while (timing.load() > 0 && !failed.load()) pass(i, false);
    } catch (...) {
      // The others neither wait at the start nor keep computing for this one.
      failed = true;
      if (!started) start.arrive_and_drop();
      if (!timed) timing.fetch_sub(1);
      throw;
    }
  });
}

void concurrent_passes(LayerList& layers, const std::vector<LayerRange>& ranges,
                       const std::vector<Tensor>& inputs, const Context& ctx,
                       const std::vector<int>& cpus, std::uint64_t seed, const OpClock& clock,
                       OpTimes& times, PassClocks& clocks) {
  std::vector<PassClocks> each(ranges.size());
  std::vector<std::mt19937_64> rngs;
  for (std::size_t i = 0; i < ranges.size(); ++i) rngs.emplace_back(seed + i);
  concurrent_timed(static_cast<int>(ranges.size()), cpus, [&](int i, bool timed) {
    const auto r = static_cast<std::size_t>(i);
    // Each thread writes only its range's entries of `times`.
    timed_pass(layers, ranges[r], inputs.at(ranges[r].begin), ctx, rngs[r], clock,
               timed ? &times : nullptr, timed ? &each[r] : nullptr);
  });
  for (const PassClocks& c : each) clocks += c;
}

}  // namespace pipescope::exec
