#include "exec/op_list_profile.h"

#include <algorithm>
#include <functional>
#include <initializer_list>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>

#include "exec/compute/device.h"
#include "exec/timing.h"
#include "sim/base/cancel.h"

namespace pipescope::exec {

void KindTimes::add(std::size_t layer, SimTime t) {
  sum.at(layer) += t;
  ++count.at(layer);
}

SimTime KindTimes::mean(std::size_t layer) const {
  return count.at(layer) == 0 ? SimTime{0} : sum[layer] / count[layer];
}

OpListTimes::OpListTimes(std::size_t layers)
    : forward(layers),
      kept(layers),
      recompute(layers),
      backward(layers),
      input(layers),
      weight(layers) {}

namespace {

SimTime sum_of(std::initializer_list<const KindTimes*> kinds) {
  SimTime t = 0;
  for (const KindTimes* k : kinds) {
    for (const SimTime s : k->sum) t += s;
  }
  return t;
}

}  // namespace

SimTime OpListTimes::total() const {
  return forward_total() + backward_total();
}

SimTime OpListTimes::forward_total() const {
  return sum_of({&forward, &kept, &recompute});
}

SimTime OpListTimes::backward_total() const {
  return sum_of({&backward, &input, &weight});
}

namespace {

void require_finite(const Tensor& t, const Layer& layer, const char* what) {
  if (!all_finite(t)) {
    throw std::runtime_error("layer '" + layer.name() + "' produced NaN or inf in its " + what +
                             " while profiling");
  }
}

// A stage's state between its ops on one device, as StageWork keeps it.
struct StageState {
  std::vector<std::optional<std::vector<Stash>>> stashes;  // [micro-batch][layer of the stage]
  std::vector<std::vector<WeightGradQueue>> deferred;      // [micro-batch][layer of the stage]
};

class OpListRun {
 public:
  OpListRun(LayerList& layers, const PlanStages& plan, const std::vector<Tensor>& inputs,
            const Context& ctx, std::uint64_t seed, const OpClock& clock, OpListTimes* times,
            PassClocks* clocks, const CollectiveTally* exchanges)
      : layers_(layers),
        plan_(plan),
        inputs_(inputs),
        ctx_(ctx),
        clock_(clock),
        times_(times),
        clocks_(clocks),
        exchanges_(exchanges),
        states_(plan.stage_layers.size()) {
    const auto M = static_cast<std::size_t>(plan.schedule.micro_batches);
    for (std::size_t s = 0; s < states_.size(); ++s) {
      states_[s].stashes.resize(M);
      const LayerRange r = plan.stage_layers[s];
      states_[s].deferred.assign(M, std::vector<WeightGradQueue>(r.end - r.begin));
    }
    gradients_.resize(plan.stage_layers.size());
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 0.01f);
    for (std::size_t s = 0; s < plan.stage_layers.size(); ++s) {
      const std::size_t end = plan.stage_layers[s].end;
      if (end >= layers.size()) {
        gradients_[s] = Matrix(Matrix::Constant(1, 1, 1.0f));  // the loss's own
        continue;
      }
      const Tensor& next = inputs.at(end);  // the stage's output's shape
      Matrix dy(next.rows(), next.cols());
      for (Eigen::Index i = 0; i < dy.size(); ++i) dy.data()[i] = normal(rng);
      gradients_[s] = std::move(dy);
    }
  }

  void run(int device) {
    for (const Op& op : plan_.schedule.device_ops.at(static_cast<std::size_t>(device))) {
      throw_if_cancelled();
      switch (op.kind) {
        case OpKind::kForward:
          forward(op.stage, op.micro_batch, !plan_.schedule.recomputes(op.micro_batch));
          break;
        case OpKind::kRecompute:
          forward(op.stage, op.micro_batch, true, true);
          break;
        case OpKind::kBackward:
          backward(op.stage, op.micro_batch);
          break;
        case OpKind::kWeight:
          weight(op.stage, op.micro_batch);
          break;
        case OpKind::kOptimizer:
          break;  // timed apart
      }
    }
    for (std::size_t s = 0; s < plan_.stage_layers.size(); ++s) {
      if (plan_.schedule.stage_device[s] != device) continue;
      for (std::size_t l = plan_.stage_layers[s].begin; l < plan_.stage_layers[s].end; ++l) {
        for (Param* p : layers_[l]->params()) zero_grad(*p);
      }
    }
  }

 private:
  // Times `op` as a layer's op of `kind`: without the exchanges' time in it
  // where they are counted, on the clock the op's is (the thread's CPU
  // time where it has one, the wall's otherwise).
  void timed(KindTimes OpListTimes::*kind, std::size_t layer, const std::function<void()>& op) {
    const SimTime before = exchanges_ != nullptr ? exchanged() : 0;
    SimTime t = time_op(clock_, clocks_, op);
    if (exchanges_ != nullptr) t = std::max<SimTime>(0, t - (exchanged() - before));
    if (times_ != nullptr) (times_->*kind).add(layer, t);
  }
  SimTime exchanged() const {
    return clock_.cpu ? std::max<SimTime>(exchanges_->cpu, 0) : exchanges_->wall;
  }

  // F (keeping its stash or not) or R (keeping it).
  void forward(int stage, int m, bool keep, bool recompute = false) {
    const LayerRange r = plan_.stage_layers.at(static_cast<std::size_t>(stage));
    StageState& st = states_[static_cast<std::size_t>(stage)];
    std::vector<Stash> stashes(r.end - r.begin);
    Stash scratch;
    Tensor x = inputs_.at(r.begin);
    const auto kind =
        recompute ? &OpListTimes::recompute : (keep ? &OpListTimes::kept : &OpListTimes::forward);
    for (std::size_t l = r.begin; l < r.end; ++l) {
      Stash& stash = keep ? stashes[l - r.begin] : scratch;
      Tensor y;
      timed(kind, l, [&] {
        y = layers_[l]->forward(x, ctx_, stash);
        require_finite(y, *layers_[l], "forward");
      });
      x = std::move(y);
    }
    if (keep) st.stashes.at(static_cast<std::size_t>(m)) = std::move(stashes);
  }

  void backward(int stage, int m) {
    const LayerRange r = plan_.stage_layers.at(static_cast<std::size_t>(stage));
    StageState& st = states_[static_cast<std::size_t>(stage)];
    auto& stashes = st.stashes.at(static_cast<std::size_t>(m));
    if (!stashes) throw std::logic_error("a backward without its stash in the op list");
    const bool split = plan_.schedule.split;
    Tensor dy = gradients_[static_cast<std::size_t>(stage)];
    for (std::size_t l = r.end; l-- > r.begin;) {
      const Stash& stash = (*stashes)[l - r.begin];
      Tensor dx;
      timed(split ? &OpListTimes::input : &OpListTimes::backward, l, [&] {
        dx = split ? layers_[l]->backward_input(
                         dy, ctx_, stash, st.deferred[static_cast<std::size_t>(m)][l - r.begin])
                   : layers_[l]->backward(dy, ctx_, stash);
        require_finite(dx, *layers_[l], "backward");
      });
      dy = std::move(dx);
    }
    if (!split) stashes.reset();
  }

  // The weight-gradient work the micro-batch's B left, each layer's in the
  // order B queued it (the stage's last layer first), as a stage's W runs it.
  void weight(int stage, int m) {
    const LayerRange r = plan_.stage_layers.at(static_cast<std::size_t>(stage));
    StageState& st = states_[static_cast<std::size_t>(stage)];
    std::vector<WeightGradQueue>& queues = st.deferred.at(static_cast<std::size_t>(m));
    for (std::size_t l = r.end; l-- > r.begin;) {
      WeightGradQueue& queue = queues[l - r.begin];
      timed(&OpListTimes::weight, l, [&] {
        for (const auto& work : queue) work();
      });
      queue.clear();
    }
    st.stashes.at(static_cast<std::size_t>(m)).reset();
  }

  LayerList& layers_;
  const PlanStages& plan_;
  const std::vector<Tensor>& inputs_;
  const Context& ctx_;
  const OpClock& clock_;
  OpListTimes* times_;
  PassClocks* clocks_;
  const CollectiveTally* exchanges_;
  std::vector<StageState> states_;
  std::vector<Tensor> gradients_;  // [stage]: the stand-in for its output's gradient
};

}  // namespace

void run_op_list(LayerList& layers, const PlanStages& plan, int device,
                 const std::vector<Tensor>& inputs, const Context& ctx, std::uint64_t seed,
                 const OpClock& clock, OpListTimes* times, PassClocks* clocks,
                 const CollectiveTally* exchanges) {
  OpListRun(layers, plan, inputs, ctx, seed, clock, times, clocks, exchanges).run(device);
}

void op_lists_alone(LayerList& layers, const PlanStages& plan, const std::vector<Tensor>& inputs,
                    const Context& ctx, const std::vector<int>& cpus, std::uint64_t seed,
                    const OpClock& clock, OpListTimes& times, PassClocks& clocks) {
  for (int d = 0; d < plan.schedule.devices(); ++d) {
    const std::vector<int> cpu =
        cpus.empty() ? std::vector<int>{} : std::vector<int>{cpus.at(static_cast<std::size_t>(d))};
    on_cores(1, cpu, [&](int) {
      run_op_list(layers, plan, d, inputs, ctx, seed, clock, nullptr, nullptr);
      run_op_list(layers, plan, d, inputs, ctx, seed, clock, &times, &clocks);
    });
  }
}

void op_lists_together(LayerList& layers, const PlanStages& plan, const std::vector<Tensor>& inputs,
                       const Context& ctx, const std::vector<int>& cpus, std::uint64_t seed,
                       const OpClock& clock, OpListTimes& times, PassClocks& clocks) {
  const int n = plan.schedule.devices();
  // Each device's own times and clocks: its ops touch only its stages' layers.
  std::vector<OpListTimes> each(static_cast<std::size_t>(n), OpListTimes(layers.size()));
  std::vector<PassClocks> each_clocks(static_cast<std::size_t>(n));
  concurrent_timed(n, cpus, [&](int d, bool timed) {
    const auto i = static_cast<std::size_t>(d);
    run_op_list(layers, plan, d, inputs, ctx, seed + i, clock, timed ? &each[i] : nullptr,
                timed ? &each_clocks[i] : nullptr);
  });
  for (std::size_t i = 0; i < each.size(); ++i) {
    for (std::size_t l = 0; l < layers.size(); ++l) {
      KindTimes OpListTimes::*kinds[] = {&OpListTimes::forward,   &OpListTimes::kept,
                                         &OpListTimes::recompute, &OpListTimes::backward,
                                         &OpListTimes::input,     &OpListTimes::weight};
      for (KindTimes OpListTimes::*k : kinds) {
        (times.*k).sum[l] += (each[i].*k).sum[l];
        (times.*k).count[l] += (each[i].*k).count[l];
      }
    }
    clocks += each_clocks[i];
  }
}

}  // namespace pipescope::exec
