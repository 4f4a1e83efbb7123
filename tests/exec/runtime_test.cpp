// The pipeline runtime with small toy layers (independent of exec/compute/layers.h):
// pipelined training must match single-device training on the whole
// mini-batch, the measured timeline must be sane, and failures must stop the
// step promptly with an error that names the stage and op.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <utility>

#include "exec/models.h"
#include "exec/runtime.h"
#include "sim/base/cancel.h"
#include "sim/engine/partition.h"

namespace pipescope::exec {
namespace {

// Token ids (n,1) -> rows of a (vocab,h) table.
class ToyEmbedding final : public Layer {
 public:
  ToyEmbedding(int vocab, int h, std::mt19937& rng) {
    table_.name = "embed.table";
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    table_.value = Matrix::NullaryExpr(vocab, h, [&] { return u(rng); });
    table_.grad = Matrix::Zero(vocab, h);
  }
  const std::string& name() const override { return name_; }
  Tensor forward(const Tensor& in, const Context&, Stash& stash) const override {
    const Matrix& x = in.host();
    Matrix out(x.rows(), table_.value.cols());
    stash.ints.resize(static_cast<std::size_t>(x.rows()));
    for (Eigen::Index i = 0; i < x.rows(); ++i) {
      const auto id = static_cast<std::int32_t>(x(i, 0));
      stash.ints[static_cast<std::size_t>(i)] = id;
      out.row(i) = table_.value.row(id);
    }
    return out;
  }
  Tensor backward(const Tensor& grad, const Context&, const Stash& stash) override {
    const Matrix& dy = grad.host();
    for (Eigen::Index i = 0; i < dy.rows(); ++i) {
      table_.grad.row(stash.ints[static_cast<std::size_t>(i)]) += dy.row(i);
    }
    return {};
  }
  std::vector<Param*> params() override { return {&table_}; }

 private:
  std::string name_ = "embed";
  Param table_;
};

// (n,h) -> tanh(x W + b), (n,h).
class ToyDense final : public Layer {
 public:
  ToyDense(int index, int h, std::mt19937& rng) : name_("dense" + std::to_string(index)) {
    std::normal_distribution<float> n(0.0f, 1.0f / std::sqrt(static_cast<float>(h)));
    w_.name = name_ + ".w";
    w_.value = Matrix::NullaryExpr(h, h, [&] { return n(rng); });
    w_.grad = Matrix::Zero(h, h);
    b_.name = name_ + ".b";
    b_.value = Matrix::Zero(1, h);
    b_.grad = Matrix::Zero(1, h);
  }
  const std::string& name() const override { return name_; }
  Tensor forward(const Tensor& in, const Context&, Stash& stash) const override {
    const Matrix& x = in.host();
    Matrix y = ((x * w_.value).rowwise() + b_.value.row(0)).array().tanh().matrix();
    stash.tensors = {x, y};
    return y;
  }
  Tensor backward(const Tensor& grad, const Context&, const Stash& stash) override {
    const Matrix& dy = grad.host();
    const Matrix& x = stash.tensors[0];
    const Matrix& y = stash.tensors[1];
    const Matrix dz = (dy.array() * (1.0f - y.array().square())).matrix();
    w_.grad += x.transpose() * dz;
    b_.grad += dz.colwise().sum();
    return dz * w_.value.transpose();
  }
  std::vector<Param*> params() override { return {&w_, &b_}; }

 private:
  std::string name_;
  Param w_, b_;
};

// Logits (n,h) and class targets -> (1,1) softmax cross-entropy, summed over the
// rows and scaled by ctx.loss_scale.
class ToyLoss final : public Layer {
 public:
  const std::string& name() const override { return name_; }
  Tensor forward(const Tensor& in, const Context& ctx, Stash& stash) const override {
    const Matrix& x = in.host();
    Matrix p = (x.colwise() - x.rowwise().maxCoeff()).array().exp().matrix();
    const Eigen::VectorXf sums = p.rowwise().sum();
    p.array().colwise() /= sums.array();
    double loss = 0.0;
    for (Eigen::Index i = 0; i < x.rows(); ++i) {
      loss -= std::log(static_cast<double>(p(i, (*ctx.targets)[static_cast<std::size_t>(i)])));
    }
    stash.tensors = {std::move(p)};
    return Matrix::Constant(1, 1, static_cast<float>(loss * ctx.loss_scale));
  }
  Tensor backward(const Tensor& grad, const Context& ctx, const Stash& stash) override {
    const Matrix& dy = grad.host();
    Matrix dx = stash.tensors[0];
    for (Eigen::Index i = 0; i < dx.rows(); ++i) {
      dx(i, (*ctx.targets)[static_cast<std::size_t>(i)]) -= 1.0f;
    }
    return dx * static_cast<float>(ctx.loss_scale) * dy(0, 0);
  }
  std::vector<Param*> params() override { return {}; }

 private:
  std::string name_ = "loss";
};

// Turns its input into NaN (fault injection).
class ToyNan final : public Layer {
 public:
  const std::string& name() const override { return name_; }
  Tensor forward(const Tensor& in, const Context&, Stash&) const override {
    const Matrix& x = in.host();
    return Matrix::Constant(x.rows(), x.cols(), std::numeric_limits<float>::quiet_NaN());
  }
  Tensor backward(const Tensor& dy, const Context&, const Stash&) override { return dy; }
  std::vector<Param*> params() override { return {}; }

 private:
  std::string name_ = "nan";
};

constexpr int kHidden = 16;
constexpr int kBatch = 8;  // sequences in the mini-batch
constexpr int kSeq = 2;

// Embedding, (layers - 2) dense layers, loss; the same weights for a fixed seed.
LayerList toy_model(int layers, unsigned seed = 7) {
  std::mt19937 rng(seed);
  LayerList model;
  model.push_back(std::make_unique<ToyEmbedding>(kHidden, kHidden, rng));
  for (int i = 0; i + 2 < layers; ++i) model.push_back(std::make_unique<ToyDense>(i, kHidden, rng));
  model.push_back(std::make_unique<ToyLoss>());
  return model;
}

std::vector<LayerList> split(LayerList model, int stages) {
  const int layers = static_cast<int>(model.size());
  return cut_into_stages(std::move(model), partition_uniform(layers, stages));
}

// The mini-batch of one step; micro-batch m holds sequences [m*b, (m+1)*b).
MicroBatch mini_batch(int step) {
  std::mt19937 rng(100u + static_cast<unsigned>(step));
  std::uniform_int_distribution<int> id(0, kHidden - 1);
  MicroBatch mb;
  mb.batch = kBatch;
  mb.seq = kSeq;
  mb.input.resize(kBatch * kSeq, 1);
  for (int i = 0; i < kBatch * kSeq; ++i) {
    mb.input(i, 0) = static_cast<float>(id(rng));
    mb.targets.push_back(id(rng));
  }
  return mb;
}

std::vector<MicroBatch> micro_batches(const MicroBatch& all, int M) {
  const int b = all.batch / M;
  const int rows = b * all.seq;
  std::vector<MicroBatch> out(static_cast<std::size_t>(M));
  for (int m = 0; m < M; ++m) {
    MicroBatch& mb = out[static_cast<std::size_t>(m)];
    mb.batch = b;
    mb.seq = all.seq;
    mb.input = all.input.middleRows(m * rows, rows);
    mb.targets.assign(all.targets.begin() + m * rows, all.targets.begin() + (m + 1) * rows);
  }
  return out;
}

std::vector<Matrix> param_values(std::vector<LayerList>& stages) {
  std::vector<Matrix> out;
  for (LayerList& ls : stages) {
    for (auto& layer : ls) {
      for (Param* p : layer->params()) out.push_back(p->value);
    }
  }
  return out;
}

// Single-device reference: every layer on the whole mini-batch, one optimizer.
struct Reference {
  std::vector<double> losses;
  std::vector<std::vector<Matrix>> params;  // after each step
};

Reference reference_run(int layers, const OptimizerConfig& opt, int steps) {
  std::vector<LayerList> model;
  model.push_back(toy_model(layers));
  Reference ref;
  ref.losses = train_reference(model[0], opt, steps, mini_batch,
                               [&](int) { ref.params.push_back(param_values(model)); });
  return ref;
}

// fp32 sums in another order: equal within 1e-5 relative (1e-7 absolute for
// values near zero).
void expect_close(const Matrix& got, const Matrix& want, const std::string& what) {
  ASSERT_EQ(got.rows(), want.rows()) << what;
  ASSERT_EQ(got.cols(), want.cols()) << what;
  const Eigen::ArrayXXf tol = 1e-5f * got.array().abs().max(want.array().abs()) + 1e-7f;
  const Eigen::ArrayXXf diff = (got - want).array().abs();
  EXPECT_TRUE((diff <= tol).all()) << what << ": largest difference " << diff.maxCoeff();
}

void expect_matches_reference(const Schedule& sched, const OptimizerConfig& opt, int layers = 8) {
  constexpr int kSteps = 3;
  const Reference ref = reference_run(layers, opt, kSteps);
  RuntimeOptions options;
  options.optimizer = opt;
  PipelineRuntime rt(split(toy_model(layers), sched.stages), sched, options);
  for (int step = 0; step < kSteps; ++step) {
    const StepResult r = rt.step(micro_batches(mini_batch(step), sched.micro_batches));
    const auto s = static_cast<std::size_t>(step);
    EXPECT_NEAR(r.loss, ref.losses[s], 1e-5 * std::abs(ref.losses[s])) << "step " << step;
    const std::vector<Matrix> got = param_values(rt.stages());
    ASSERT_EQ(got.size(), ref.params[s].size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      expect_close(got[i], ref.params[s][i],
                   "step " + std::to_string(step) + " param " + std::to_string(i));
    }
  }
}

class RuntimeConsistency : public ::testing::TestWithParam<std::tuple<int, int, Remat>> {};

TEST_P(RuntimeConsistency, AdamMatchesSingleDevice) {
  const auto [K, M, remat] = GetParam();
  OptimizerConfig adam;
  adam.kind = Optimizer::kAdam;
  adam.learning_rate = 1e-2;
  expect_matches_reference(build_gpipe(K, M, remat), adam);
}

std::string case_name(const ::testing::TestParamInfo<std::tuple<int, int, Remat>>& p) {
  return "K" + std::to_string(std::get<0>(p.param)) + "_M" + std::to_string(std::get<1>(p.param)) +
         "_remat_" +
         (std::get<2>(p.param) == Remat::kExceptLast
              ? std::string("except_last")
              : std::string(to_string(std::get<2>(p.param))));
}

INSTANTIATE_TEST_SUITE_P(Runtime, RuntimeConsistency,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(1, 2, 4, 8),
                                            ::testing::ValuesIn(kScheduleRemats)),
                         case_name);

TEST(RuntimeSchedules, MomentumSgdMatchesSingleDevice) {
  OptimizerConfig sgd;
  sgd.kind = Optimizer::kMomentum;
  sgd.learning_rate = 0.1;
  expect_matches_reference(build_gpipe(3, 4, Remat::kAlways), sgd);
}

TEST(RuntimeSchedules, MoreStagesThanCores) {
  OptimizerConfig adam;
  adam.learning_rate = 1e-2;
  expect_matches_reference(build_gpipe(6, 4, Remat::kNever), adam);
  expect_matches_reference(build_gpipe(6, 8, Remat::kAlways), adam);
}

// Two stages on one device, interleaved by hand.
TEST(RuntimeSchedules, SeveralStagesOnOneDevice) {
  Schedule s = build_gpipe(2, 4, Remat::kNever);
  s.stage_device = {0, 0};
  s.device_ops.assign(1, {});
  std::vector<Op>& ops = s.device_ops[0];
  for (int m = 0; m < 4; ++m)
    ops.insert(ops.end(), {{OpKind::kForward, 0, m}, {OpKind::kForward, 1, m}});
  for (int m = 3; m >= 0; --m)
    ops.insert(ops.end(), {{OpKind::kBackward, 1, m}, {OpKind::kBackward, 0, m}});
  ops.insert(ops.end(), {{OpKind::kOptimizer, 0, 0}, {OpKind::kOptimizer, 1, 0}});
  expect_matches_reference(s, OptimizerConfig{});
}

TEST(RuntimeTimeline, OneComputeEventPerOpWithSaneTimes) {
  const int K = 3, M = 4;
  const Schedule sched = build_gpipe(K, M, Remat::kAlways);
  PipelineRuntime rt(split(toy_model(8), K), sched, RuntimeOptions{});
  const StepResult r = rt.step(micro_batches(mini_batch(0), M));
  const Timeline& t = r.timeline;
  ASSERT_EQ(t.device_names.size(), 3u);
  EXPECT_EQ(t.device_names[1], "device 1 (cpu thread)");

  std::map<std::tuple<int, int, int>, TimelineEvent> compute;  // (kind, stage, m)
  std::map<std::uint64_t, std::vector<TimelineEvent>> flows;
  std::vector<SimTime> device_free(3, 0);
  SimTime first = std::numeric_limits<SimTime>::max(), last = 0;
  for (const TimelineEvent& e : t.events) {
    EXPECT_GE(e.start, 0);
    EXPECT_GE(e.end, e.start);
    if (e.lane == Lane::kCompute) {
      // Events come in start order, so each device's compute events follow one another.
      EXPECT_GE(e.start, device_free[static_cast<std::size_t>(e.device)]);
      device_free[static_cast<std::size_t>(e.device)] = e.end;
      EXPECT_TRUE(
          compute.emplace(std::tuple{static_cast<int>(e.kind), e.stage, e.micro_batch}, e).second);
      first = std::min(first, e.start);
      last = std::max(last, e.end);
    } else {
      ASSERT_TRUE(e.flow.has_value());
      flows[*e.flow].push_back(e);
    }
  }
  std::size_t ops = 0;
  for (const auto& list : sched.device_ops) ops += list.size();
  EXPECT_EQ(compute.size(), ops);
  EXPECT_EQ(r.step_time, last - first);
  EXPECT_GT(r.step_time, 0);
  for (int s = 0; s < K; ++s) {
    for (int m = 0; m < M; ++m) {
      const auto f = compute.find({static_cast<int>(EventKind::kForward), s, m});
      const auto rc = compute.find({static_cast<int>(EventKind::kRecompute), s, m});
      const auto b = compute.find({static_cast<int>(EventKind::kBackward), s, m});
      ASSERT_TRUE(f != compute.end() && rc != compute.end() && b != compute.end());
      EXPECT_LE(f->second.end, rc->second.start);
      EXPECT_LE(rc->second.end, b->second.start);
      // The next stage's forward starts after this one ends (it needs the activation).
      if (s + 1 < K) {
        EXPECT_LE(f->second.end,
                  compute.at({static_cast<int>(EventKind::kForward), s + 1, m}).start);
      }
    }
  }
  // Each activation and gradient crossing a boundary: one send and one recv.
  EXPECT_EQ(flows.size(), static_cast<std::size_t>(2 * (K - 1) * M));
  for (const auto& [id, evs] : flows) {
    ASSERT_EQ(evs.size(), 2u) << "flow " << id;
    const TimelineEvent& send = evs[0].lane == Lane::kSend ? evs[0] : evs[1];
    const TimelineEvent& recv = evs[0].lane == Lane::kSend ? evs[1] : evs[0];
    EXPECT_EQ(send.lane, Lane::kSend);
    EXPECT_EQ(recv.lane, Lane::kRecv);
    EXPECT_EQ(send.bytes, Bytes{kBatch / M * kSeq * kHidden * 4});
    EXPECT_EQ(recv.bytes, send.bytes);
    EXPECT_EQ(send.device, send.stage);
    EXPECT_EQ(recv.device, *send.peer_stage);
    EXPECT_LE(send.start, recv.end);
  }
}

using Ms = std::chrono::milliseconds;

Ms elapsed_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<Ms>(std::chrono::steady_clock::now() - t);
}

TEST(RuntimeFaults, ThrowingHookStopsEveryWorker) {
  std::atomic<bool> armed{true};
  RuntimeOptions options;
  options.watchdog = Ms(20000);  // a hang would show as a slow test, not a watchdog error
  options.before_op = [&armed](int device, const Op& op) {
    if (armed.load() && device == 1 && op == Op{OpKind::kBackward, 1, 2}) {
      throw std::runtime_error("injected fault");
    }
  };
  PipelineRuntime rt(split(toy_model(8), 3), build_gpipe(3, 4, Remat::kNever), options);
  const auto start = std::chrono::steady_clock::now();
  try {
    rt.step(micro_batches(mini_batch(0), 4));
    FAIL() << "step() did not throw";
  } catch (const StageError& e) {
    EXPECT_EQ(e.stage(), 1);
    EXPECT_EQ(e.op(), (Op{OpKind::kBackward, 1, 2}));
    EXPECT_STREQ(e.what(), "stage 1 failed in B(1,2): injected fault");
  }
  EXPECT_LT(elapsed_since(start), Ms(5000));
  // The runtime is usable again, from clean gradients.
  armed = false;
  const StepResult r = rt.step(micro_batches(mini_batch(0), 4));
  EXPECT_TRUE(std::isfinite(r.loss));
  EXPECT_GT(r.loss, 0.0);
}

// A fault in a split backward's W names the W.
TEST(RuntimeFaults, FaultInWeightGradientNamesTheW) {
  RuntimeOptions options;
  options.before_op = [](int device, const Op& op) {
    if (device == 1 && op == Op{OpKind::kWeight, 1, 2}) throw std::runtime_error("injected fault");
  };
  PipelineRuntime rt(split(toy_model(8), 3), build_zb_h1(3, 4, Remat::kNever), options);
  try {
    rt.step(micro_batches(mini_batch(0), 4));
    FAIL() << "step() did not throw";
  } catch (const StageError& e) {
    EXPECT_EQ(e.op(), (Op{OpKind::kWeight, 1, 2}));
    EXPECT_STREQ(e.what(), "stage 1 failed in W(1,2): injected fault");
  }
}

// A hand-edited list that runs W before its B is an error, not wrong gradients.
TEST(RuntimeFaults, WeightBeforeItsBackwardIsAnError) {
  Schedule sched = build_zb_h1(2, 2, Remat::kNever);
  std::vector<Op>& dev1 = sched.device_ops[1];
  std::iter_swap(std::find(dev1.begin(), dev1.end(), Op{OpKind::kWeight, 1, 0}), dev1.begin());
  RuntimeOptions options;
  options.watchdog = Ms(2000);
  PipelineRuntime rt(split(toy_model(8), 2), sched, options);
  try {
    rt.step(micro_batches(mini_batch(0), 2));
    FAIL() << "step() did not throw";
  } catch (const StageError& e) {
    EXPECT_EQ(e.op(), (Op{OpKind::kWeight, 1, 0}));
    EXPECT_STREQ(e.what(), "stage 1 failed in W(1,0): no input gradient: B must run before W");
  }
}

TEST(RuntimeFaults, NanActivationNamesStageAndLayer) {
  LayerList model = toy_model(6);
  model.insert(model.begin() + 3, std::make_unique<ToyNan>());  // layer 3 of 7: stage 1
  PipelineRuntime rt(split(std::move(model), 3), build_gpipe(3, 4, Remat::kAlways),
                     RuntimeOptions{});
  try {
    rt.step(micro_batches(mini_batch(0), 4));
    FAIL() << "step() did not throw";
  } catch (const StageError& e) {
    EXPECT_EQ(e.stage(), 1);
    EXPECT_EQ(e.op(), (Op{OpKind::kForward, 1, 0}));
    EXPECT_STREQ(e.what(), "stage 1 failed in F(1,0): layer 'nan' produced NaN or inf");
  }
}

TEST(RuntimeFaults, NanLossIsAnError) {
  LayerList model = toy_model(6);
  model.push_back(std::make_unique<ToyNan>());  // the last layer's (1,1) output is NaN
  PipelineRuntime rt(split(std::move(model), 2), build_gpipe(2, 2, Remat::kNever),
                     RuntimeOptions{});
  try {
    rt.step(micro_batches(mini_batch(0), 2));
    FAIL() << "step() did not throw";
  } catch (const StageError& e) {
    EXPECT_EQ(e.stage(), 1);
    EXPECT_STREQ(e.what(), "stage 1 failed in F(1,0): NaN or inf in loss");
  }
}

TEST(RuntimeFaults, WatchdogNamesEveryWaitingOp) {
  Schedule sched = build_gpipe(2, 4, Remat::kNever);
  std::vector<Op>& dev0 = sched.device_ops[0];
  dev0.erase(std::find(dev0.begin(), dev0.end(), Op{OpKind::kForward, 0, 2}));  // never sent
  RuntimeOptions options;
  options.watchdog = Ms(200);
  PipelineRuntime rt(split(toy_model(8), 2), sched, options);
  const auto start = std::chrono::steady_clock::now();
  try {
    rt.step(micro_batches(mini_batch(0), 4));
    FAIL() << "step() did not throw";
  } catch (const StageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("pipeline stalled"), std::string::npos) << what;
    EXPECT_NE(what.find("device 0 waits in B(0,3) for the gradient of micro-batch 3 from stage 1"),
              std::string::npos)
        << what;
    EXPECT_NE(
        what.find("device 1 waits in F(1,2) for the activation of micro-batch 2 from stage 0"),
        std::string::npos)
        << what;
  }
  const Ms took = elapsed_since(start);
  EXPECT_GE(took, Ms(200));
  EXPECT_LT(took, Ms(5000));
}

// A stage stuck in an op (one that never ends): the neighbour's watchdog names
// it, the step gives up on it after the watchdog's time again instead of hanging
// in a join, and the runtime refuses to step with it still running.
TEST(RuntimeFaults, StuckStageIsNamedAndAbandoned) {
  // Shared with the stuck worker, which outlives this test's frame until released.
  const auto release = std::make_shared<std::atomic<bool>>(false);
  RuntimeOptions options;
  options.watchdog = Ms(200);
  options.before_op = [release](int, const Op& op) {
    if (op == Op{OpKind::kForward, 1, 1}) {
      while (!release->load()) std::this_thread::sleep_for(Ms(1));
    }
  };
  PipelineRuntime rt(split(toy_model(8), 2), build_gpipe(2, 2, Remat::kNever), options);
  try {
    rt.step(micro_batches(mini_batch(0), 2));
    FAIL() << "step() did not throw";
  } catch (const StageError& e) {
    EXPECT_STREQ(e.what(),
                 "pipeline stalled (watchdog 200 ms): device 0 waits in B(0,1) for the gradient "
                 "of micro-batch 1 from stage 1; device 1 runs F(1,1); device 1 (in F(1,1)) did "
                 "not stop within 200 ms of the error and was abandoned");
    EXPECT_EQ(e.op(), (Op{OpKind::kBackward, 0, 1}));
  }
  try {
    rt.step(micro_batches(mini_batch(0), 2));
    FAIL() << "a runtime with a stuck worker stepped again";
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(),
                 "the pipeline cannot step again: an earlier step left device 1 (in F(1,1)) "
                 "running");
  }
  release->store(true);  // the worker then sees the aborted step and returns
}

// Clears the process-wide stop request around a test.
struct CancelGuard {
  CancelGuard() { reset_cancel(); }
  ~CancelGuard() { reset_cancel(); }
};

// Ctrl-C in the middle of a step: the step ends with Cancelled (not a stage's
// error), and after the request is cleared the runtime steps again from clean
// gradients: the same loss and parameters as a runtime that never stopped.
TEST(RuntimeCancel, StopRequestEndsTheStepAndLeavesNoPartialGradients) {
  const CancelGuard guard;
  std::atomic<bool> armed{true};
  RuntimeOptions options;
  options.watchdog = Ms(20000);
  options.before_op = [&armed](int device, const Op& op) {
    if (armed.load() && device == 1 && op == Op{OpKind::kBackward, 1, 1}) request_cancel();
  };
  PipelineRuntime rt(split(toy_model(8), 2), build_gpipe(2, 4, Remat::kNever), options);
  EXPECT_THROW(rt.step(micro_batches(mini_batch(0), 4)), Cancelled);
  // Still requested: the next step does not start.
  EXPECT_THROW(rt.step(micro_batches(mini_batch(0), 4)), Cancelled);

  armed = false;
  reset_cancel();
  PipelineRuntime fresh(split(toy_model(8), 2), build_gpipe(2, 4, Remat::kNever), RuntimeOptions{});
  const StepResult a = rt.step(micro_batches(mini_batch(0), 4));
  const StepResult b = fresh.step(micro_batches(mini_batch(0), 4));
  EXPECT_EQ(a.loss, b.loss);
  for (std::size_t s = 0; s < 2; ++s) {
    for (std::size_t l = 0; l < rt.stages()[s].size(); ++l) {
      const std::vector<Param*> pa = rt.stages()[s][l]->params();
      const std::vector<Param*> pb = fresh.stages()[s][l]->params();
      ASSERT_EQ(pa.size(), pb.size());
      for (std::size_t i = 0; i < pa.size(); ++i) {
        EXPECT_EQ(pa[i]->value, pb[i]->value) << "stage " << s << " layer " << l;
      }
    }
  }
}

// A device waiting for a payload that never comes (a missing F) is woken by a
// stop request from another thread long before its watchdog.
TEST(RuntimeCancel, WakesDevicesThatWaitForAPayload) {
  const CancelGuard guard;
  Schedule sched = build_gpipe(2, 4, Remat::kNever);
  std::vector<Op>& dev0 = sched.device_ops[0];
  dev0.erase(std::find(dev0.begin(), dev0.end(), Op{OpKind::kForward, 0, 2}));  // never sent
  RuntimeOptions options;
  options.watchdog = Ms(60000);
  PipelineRuntime rt(split(toy_model(8), 2), sched, options);
  std::thread ctrl_c([] {
    std::this_thread::sleep_for(Ms(100));
    request_cancel();
  });
  try {
    rt.step(micro_batches(mini_batch(0), 4));
    ADD_FAILURE() << "step() did not throw";
  } catch (const Cancelled& e) {
    EXPECT_STREQ(e.what(), "interrupted");
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected Cancelled, got: " << e.what();
  }
  ctrl_c.join();
}

TEST(RuntimeErrors, BadInputsAreRejected) {
  EXPECT_THROW(
      {
        PipelineRuntime bad(split(toy_model(8), 2), build_gpipe(3, 2, Remat::kNever),
                            RuntimeOptions{});
      },
      std::invalid_argument);
  PipelineRuntime rt(split(toy_model(8), 2), build_gpipe(2, 2, Remat::kNever), RuntimeOptions{});
  EXPECT_THROW(rt.step(micro_batches(mini_batch(0), 4)), std::invalid_argument);
}

}  // namespace
}  // namespace pipescope::exec
