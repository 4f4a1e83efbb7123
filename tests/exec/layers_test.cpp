// The executor's layers: finite-difference gradient checks of every layer and of
// whole models, run in double on the same templated math the float layers use;
// causal masking; known cross-entropy values; single-device reference
// training. The models built from specs: models_test.cpp.
//
// Tolerance: central differences with eps = 1e-5 in double have a truncation
// error of about eps^2 / 6 * f''' ~ 1e-11 and a rounding error of about
// 1e-16 * |loss| / eps ~ 1e-11, so every gradient entry must agree with the
// numerical one to 1e-7 of the largest entry of its tensor (kRelTol); the largest
// error measured over all the checked tensors is 6e-10 of the largest entry.

#include <cmath>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "../tiny_models.h"
#include "costmodels/model_families.h"
#include "exec/compute/layers.h"
#include "exec/compute/moe_layers.h"
#include "exec/models.h"

namespace pipescope::exec {
namespace {

using MatD = Mat<double>;

constexpr double kEps = 1e-5;
constexpr double kRelTol = 1e-7;

// A layer's math run in double on weights of its own.
class RefLayer {
 public:
  virtual ~RefLayer() = default;
  virtual MatD forward(const MatD& x, const Context& ctx, std::vector<MatD>& stash) const = 0;
  // With `deferred`, the input-gradient half only: the parameters' gradients are
  // queued there (a split backward's B and W).
  virtual MatD backward(const MatD& dy, const Context& ctx, const std::vector<MatD>& stash,
                        WeightGradQueue* deferred = nullptr) = 0;
  std::vector<MatD> w, dw;
};

template <class Math>
class RefLayerOf final : public RefLayer {
 public:
  explicit RefLayerOf(Math math) : math_(std::move(math)) {
    for (const ParamShape& s : math_.param_shapes()) {
      w.push_back(MatD::Zero(s.rows, s.cols));
      dw.push_back(MatD::Zero(s.rows, s.cols));
    }
  }
  MatD forward(const MatD& x, const Context& ctx, std::vector<MatD>& stash) const override {
    return math_.template forward<double>(values(), x, ctx, stash);
  }
  MatD backward(const MatD& dy, const Context& ctx, const std::vector<MatD>& stash,
                WeightGradQueue* deferred) override {
    Grads<double> g;
    g.deferred = deferred;
    for (MatD& m : dw) g.dw.push_back(&m);
    return math_.template backward<double>(values(), g, dy, ctx, stash);
  }

 private:
  Values<double> values() const {
    Values<double> v;
    for (const MatD& m : w) v.push_back(&m);
    return v;
  }
  Math math_;
};

using RefModel = std::vector<std::unique_ptr<RefLayer>>;

template <class Math>
std::unique_ptr<RefLayer> ref_of_math(const Layer& layer) {
  const auto* typed = dynamic_cast<const MathLayer<Math>*>(&layer);
  if (typed == nullptr) return nullptr;
  return std::make_unique<RefLayerOf<Math>>(typed->math());
}

// The double twin of a float layer, with its weights.
std::unique_ptr<RefLayer> ref_of(Layer& layer) {
  std::unique_ptr<RefLayer> ref = ref_of_math<EmbeddingMath>(layer);
  if (!ref) ref = ref_of_math<TransformerBlockMath>(layer);
  if (!ref) ref = ref_of_math<MoeBlockMath>(layer);
  if (!ref) ref = ref_of_math<LmHeadMath>(layer);
  if (!ref) ref = ref_of_math<MlpBlockMath>(layer);
  if (!ref) ref = ref_of_math<ClassifierHeadMath>(layer);
  if (!ref) throw std::logic_error("no math for layer " + layer.name());
  const std::vector<Param*> params = layer.params();
  for (std::size_t k = 0; k < params.size(); ++k) ref->w[k] = params[k]->value.cast<double>();
  return ref;
}

MatD random_matrix(Index rows, Index cols, double stddev, std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.0, stddev);
  MatD m(rows, cols);
  for (Index k = 0; k < m.size(); ++k) m.data()[k] = normal(rng);
  return m;
}

// Weights far from the 0.02 initialisation, so every path carries gradient:
// N(0, 0.4) weights, gains 1 + N(0, 0.2), biases N(0, 0.2).
template <class Math>
void randomize(RefLayerOf<Math>& layer, const Math& math, std::mt19937_64& rng) {
  const std::vector<ParamShape> shapes = math.param_shapes();
  for (std::size_t k = 0; k < shapes.size(); ++k) {
    const ParamShape& s = shapes[k];
    const double stddev = s.init == Init::kNormal ? 0.4 : 0.2;
    layer.w[k] = random_matrix(s.rows, s.cols, stddev, rng);
    if (s.init == Init::kOne) layer.w[k].array() += 1.0;
  }
}

MatD token_ids(Index n, Index vocab, std::mt19937_64& rng) {
  std::uniform_int_distribution<Index> pick(0, vocab - 1);
  MatD ids(n, 1);
  for (Index r = 0; r < n; ++r) ids(r, 0) = static_cast<double>(pick(rng));
  return ids;
}

std::vector<std::int32_t> random_targets(Index n, Index classes, std::mt19937_64& rng) {
  std::uniform_int_distribution<std::int32_t> pick(0, static_cast<std::int32_t>(classes - 1));
  std::vector<std::int32_t> t(static_cast<std::size_t>(n));
  for (auto& v : t) v = pick(rng);
  return t;
}

// Central differences of f with respect to every entry of m.
template <class F>
MatD numerical_gradient(MatD& m, F f) {
  MatD g(m.rows(), m.cols());
  for (Index k = 0; k < m.size(); ++k) {
    const double saved = m.data()[k];
    m.data()[k] = saved + kEps;
    const double plus = f();
    m.data()[k] = saved - kEps;
    const double minus = f();
    m.data()[k] = saved;
    g.data()[k] = (plus - minus) / (2 * kEps);
  }
  return g;
}

void expect_gradient(const MatD& analytic, const MatD& numeric, const std::string& what) {
  ASSERT_EQ(analytic.rows(), numeric.rows()) << what;
  ASSERT_EQ(analytic.cols(), numeric.cols()) << what;
  const double scale = numeric.cwiseAbs().maxCoeff();
  EXPECT_GT(scale, 1e-8) << what << ": no gradient reaches it";
  const double err = (analytic - numeric).cwiseAbs().maxCoeff();
  EXPECT_LE(err, kRelTol * scale) << what << ": max error " << err << " of " << scale;
}

MatD run(const RefModel& model, const MatD& x, const Context& ctx,
         std::vector<std::vector<MatD>>& stashes) {
  stashes.resize(model.size());
  MatD y = x;
  for (std::size_t i = 0; i < model.size(); ++i) y = model[i]->forward(y, ctx, stashes[i]);
  return y;
}

// loss = sum(out * R) for a random R, so dy = R; checks backward's input gradient
// (unless the input is token ids) and every parameter gradient, then that the
// split backward (B, then the queued W) gives the very same numbers.
void check_gradients(RefModel& model, MatD x, const Context& ctx, bool input_is_ids,
                     std::mt19937_64& rng) {
  std::vector<std::vector<MatD>> stashes;
  const MatD out = run(model, x, ctx, stashes);
  const MatD r = random_matrix(out.rows(), out.cols(), 1.0, rng);
  const auto loss = [&] {
    std::vector<std::vector<MatD>> st;
    return run(model, x, ctx, st).cwiseProduct(r).sum();
  };
  MatD dy = r;
  for (std::size_t i = model.size(); i-- > 0;) {
    for (MatD& g : model[i]->dw) g.setZero();
    dy = model[i]->backward(dy, ctx, stashes[i]);
  }
  if (input_is_ids) {
    EXPECT_EQ(dy.size(), 0);
  } else {
    expect_gradient(dy, numerical_gradient(x, loss), "input");
  }
  std::vector<std::vector<MatD>> whole;
  for (std::size_t i = 0; i < model.size(); ++i) {
    whole.push_back(model[i]->dw);
    for (std::size_t k = 0; k < model[i]->w.size(); ++k) {
      expect_gradient(model[i]->dw[k], numerical_gradient(model[i]->w[k], loss),
                      "layer " + std::to_string(i) + " param " + std::to_string(k));
    }
  }
  // Split: the same input gradient with every parameter gradient untouched, then
  // the queued weight-gradient work adds exactly the whole backward's.
  WeightGradQueue deferred;
  MatD dx = r;
  for (std::size_t i = model.size(); i-- > 0;) {
    for (MatD& g : model[i]->dw) g.setZero();
    dx = model[i]->backward(dx, ctx, stashes[i], &deferred);
  }
  EXPECT_EQ(dx, dy);
  for (const auto& layer : model) {
    for (const MatD& g : layer->dw) EXPECT_EQ(g.cwiseAbs().maxCoeff(), 0.0) << "B added to W's";
  }
  EXPECT_FALSE(deferred.empty());
  for (const auto& work : deferred) work();
  for (std::size_t i = 0; i < model.size(); ++i) {
    for (std::size_t k = 0; k < model[i]->w.size(); ++k) {
      EXPECT_EQ(model[i]->dw[k], whole[i][k]) << "layer " << i << " param " << k;
    }
  }
}

template <class Math>
void check_layer(const Math& math, const MatD& x, const Context& ctx, bool input_is_ids) {
  std::mt19937_64 rng(7);
  auto layer = std::make_unique<RefLayerOf<Math>>(math);
  randomize(*layer, math, rng);
  RefModel model;
  model.push_back(std::move(layer));
  check_gradients(model, x, ctx, input_is_ids, rng);
}

Context context(int batch, int seq, const std::vector<std::int32_t>* targets = nullptr) {
  Context ctx;
  ctx.batch = batch;
  ctx.seq = seq;
  ctx.targets = targets;
  ctx.loss_scale = 0.37;
  return ctx;
}

TEST(LayerGradients, EmbeddingLearnedAndSinusoidal) {
  std::mt19937_64 rng(1);
  for (const bool learned : {true, false}) {
    SCOPED_TRACE(learned ? "learned" : "sinusoidal");
    // seq 3 of seq_len 4: positions beyond the micro-batch's sequences stay unused.
    check_layer(EmbeddingMath(11, 4, 8, learned), token_ids(6, 11, rng), context(2, 3), true);
  }
}

TEST(LayerGradients, TransformerBlockMultiHeadAndGroupedQuery) {
  std::mt19937_64 rng(2);
  for (const auto& [heads, kv] : {std::pair{2, 2}, std::pair{4, 2}, std::pair{2, 1}}) {
    SCOPED_TRACE("heads " + std::to_string(heads) + " kv " + std::to_string(kv));
    check_layer(TransformerBlockMath(8, heads, kv, 12), random_matrix(6, 8, 1.0, rng),
                context(2, 3), false);
  }
}

// The router's choice is constant between ties, so central differences see
// its weights' effect through the chosen experts' softmax alone (top-2 and
// top-3 of four experts: with one, the weight is 1 and the router learns
// nothing). Twelve tokens reach every expert. With a group of one standing
// for two expert ranks (the profiler's), each rank's half of the experts
// computes every copy routed to either half: a different function, with its
// own gradients.
TEST(LayerGradients, MixtureOfExpertsBlock) {
  std::mt19937_64 rng(9);
  const auto alone = [](int ranks) {
    return TensorRank(std::make_shared<TensorGroup>(1), 0, ranks);
  };
  for (const Index shared : {Index{0}, Index{10}}) {
    SCOPED_TRACE("shared expert " + std::to_string(shared));
    check_layer(MoeBlockMath(8, 2, 1, {4, 2, 6, shared}, alone(1)), random_matrix(12, 8, 1.0, rng),
                context(4, 3), false);
  }
  check_layer(MoeBlockMath(8, 2, 2, {4, 3, 6, 0}, alone(2)), random_matrix(12, 8, 1.0, rng),
              context(4, 3), false);
}

TEST(LayerGradients, LmHead) {
  std::mt19937_64 rng(3);
  const auto targets = random_targets(6, 11, rng);
  check_layer(LmHeadMath(8, 11), random_matrix(6, 8, 1.0, rng), context(2, 3, &targets), false);
}

TEST(LayerGradients, MlpBlock) {
  std::mt19937_64 rng(4);
  check_layer(MlpBlockMath(8, 12), random_matrix(4, 8, 1.0, rng), context(4, 1), false);
}

TEST(LayerGradients, ClassifierHead) {
  std::mt19937_64 rng(5);
  const auto targets = random_targets(4, 5, rng);
  check_layer(ClassifierHeadMath(8, 5), random_matrix(4, 8, 1.0, rng), context(4, 1, &targets),
              false);
}

// Embedding through head, a dense block and a mixture of experts: the loss's
// gradient for every parameter of the model.
TEST(ModelGradients, TinyTransformer) {
  TransformerParams p;
  p.layers = 2;
  p.d_model = 8;
  p.d_ff = 12;
  p.heads = 2;
  p.kv_heads = 1;
  p.seq_len = 3;
  p.vocab = 11;
  p.learned_positions = true;
  p.moe = {4, 2, 6, 5, 1, 1.0};  // block0 dense, block1 a mixture with a shared expert
  LayerList layers = build_transformer(p, 42);
  ASSERT_NE(dynamic_cast<const MoeBlock*>(layers[2].get()), nullptr);
  std::mt19937_64 rng(6);
  RefModel model;
  for (auto& layer : layers) {
    model.push_back(ref_of(*layer));
    for (MatD& w : model.back()->w) w += random_matrix(w.rows(), w.cols(), 0.3, rng);
  }
  const auto targets = random_targets(12, 11, rng);  // 12 tokens reach every expert
  check_gradients(model, token_ids(12, 11, rng), context(4, 3, &targets), true, rng);
}

TEST(ModelGradients, TinyMlp) {
  MlpParams p;
  p.layers = 2;
  p.d_model = 6;
  p.d_hidden = 10;
  p.classes = 4;
  LayerList layers = build_mlp(p, 42);
  std::mt19937_64 rng(8);
  RefModel model;
  for (auto& layer : layers) {
    model.push_back(ref_of(*layer));
    for (MatD& w : model.back()->w) w += random_matrix(w.rows(), w.cols(), 0.3, rng);
  }
  const auto targets = random_targets(3, 4, rng);
  check_gradients(model, random_matrix(3, 6, 1.0, rng), context(3, 1, &targets), false, rng);
}

// The float layers and forward_backward against the double math on the same
// weights: fp32 rounding only (relative 1e-4 of each tensor's largest entry).
TEST(FloatLayers, MatchTheDoubleMath) {
  TransformerParams p;
  p.layers = 2;
  p.d_model = 16;
  p.heads = 4;
  p.seq_len = 5;
  p.vocab = 13;
  LayerList layers = build_transformer(p, 3);
  RefModel model;
  for (auto& layer : layers) model.push_back(ref_of(*layer));
  std::mt19937_64 rng(9);
  const MatD ids = token_ids(10, 13, rng);
  const auto targets = random_targets(10, 13, rng);
  const double loss = forward_backward(layers, ids.cast<float>(), targets, 2, 5);
  EXPECT_NEAR(loss, model_loss(layers, ids.cast<float>(), targets, 2, 5), 1e-6);

  Context ctx = context(2, 5, &targets);
  ctx.loss_scale = 0.1;
  std::vector<std::vector<MatD>> stashes;
  const MatD ref_loss = run(model, ids, ctx, stashes);
  EXPECT_NEAR(loss, ref_loss(0, 0), 1e-5 * ref_loss(0, 0));
  MatD dy = MatD::Ones(1, 1);
  for (std::size_t i = model.size(); i-- > 0;) dy = model[i]->backward(dy, ctx, stashes[i]);
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const std::vector<Param*> params = layers[i]->params();
    for (std::size_t k = 0; k < params.size(); ++k) {
      const MatD got = params[k]->grad.cast<double>();
      const double scale = model[i]->dw[k].cwiseAbs().maxCoeff();
      EXPECT_LE((got - model[i]->dw[k]).cwiseAbs().maxCoeff(), 1e-4 * scale) << params[k]->name;
    }
  }
}

// Gradients of the mean over a batch equal the sum over its parts, each scaled
// by 1 / (tokens of the whole batch): what the pipeline's micro-batches do.
TEST(FloatLayers, GradientsAccumulateOverParts) {
  MlpParams p;
  p.layers = 2;
  p.d_model = 8;
  p.classes = 3;
  LayerList whole = build_mlp(p, 5), parts = build_mlp(p, 5);
  std::mt19937_64 rng(10);
  const Matrix x = random_matrix(4, 8, 1.0, rng).cast<float>();
  const auto targets = random_targets(4, 3, rng);
  const double loss = forward_backward(whole, x, targets, 4, 1);
  double sum = 0.0;
  for (int half = 0; half < 2; ++half) {
    const std::vector<std::int32_t> t(targets.begin() + 2 * half, targets.begin() + 2 * half + 2);
    sum += forward_backward(parts, x.middleRows(2 * half, 2), t, 2, 1, 0.25);
  }
  EXPECT_NEAR(loss, sum, 1e-6);
  for (std::size_t i = 0; i < whole.size(); ++i) {
    for (std::size_t k = 0; k < whole[i]->params().size(); ++k) {
      const Matrix& a = whole[i]->params()[k]->grad;
      const Matrix& b = parts[i]->params()[k]->grad;
      EXPECT_LE((a - b).cwiseAbs().maxCoeff(), 1e-5 * a.cwiseAbs().maxCoeff() + 1e-9);
    }
  }
  zero_grads(whole);
  EXPECT_EQ(whole[0]->params()[2]->grad.cwiseAbs().maxCoeff(), 0.0f);
}

// Reference training calls after_step once a step, after the update, and
// returns each step's loss.
TEST(ReferenceTraining, StepsUpdateAndReportEachLoss) {
  const TransformerParams p = testing::transformer_params(1, 8, 0, 2, 0, 3, 11, false);
  LayerList layers = build_transformer(p, 7);
  const Matrix before = layers[1]->params()[2]->value;
  OptimizerConfig sgd;
  sgd.kind = Optimizer::kSgd;
  sgd.learning_rate = 0.1;
  std::vector<int> seen;
  const std::vector<double> losses = train_reference(
      layers, sgd, 3,
      [](int step) {
        MicroBatch mb;
        mb.batch = 2;
        mb.seq = 3;
        mb.input = Matrix::Constant(6, 1, static_cast<float>(step));
        mb.targets.assign(6, 1);
        return mb;
      },
      [&](int step) {
        seen.push_back(step);
        EXPECT_NE(layers[1]->params()[2]->value, before) << "not updated by step " << step;
      });
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 2}));
  ASSERT_EQ(losses.size(), 3u);
  // A real loss, near log V before training, falling as every step learns the
  // one target.
  EXPECT_NEAR(losses[0], std::log(11.0), 0.5);
  EXPECT_LT(losses[1], losses[0]);
  EXPECT_LT(losses[2], losses[1]);
}

// Changing token t changes no output before t, in any block; other sequences of
// the micro-batch are untouched too.
TEST(Attention, IsCausal) {
  LayerList layers =
      build_transformer(testing::transformer_params(2, 8, 0, 2, 0, 4, 11, false), 11);
  const Context ctx = context(2, 4);
  const auto run_blocks = [&](const Matrix& ids) {
    Matrix x = ids;
    Stash stash;
    for (std::size_t i = 0; i + 1 < layers.size(); ++i) {
      x = layers[i]->forward(x, ctx, stash).host();
    }
    return x;
  };
  Matrix ids(8, 1);
  ids << 1, 2, 3, 4, 5, 6, 7, 8;
  const Matrix before = run_blocks(ids);
  ids(2, 0) = 10;  // sequence 0, position 2
  const Matrix after = run_blocks(ids);
  EXPECT_EQ(before.topRows(2), after.topRows(2));
  EXPECT_NE(before.row(2), after.row(2));
  EXPECT_NE(before.row(3), after.row(3));
  EXPECT_EQ(before.bottomRows(4), after.bottomRows(4));
}

TEST(CrossEntropy, KnownValues) {
  // Uniform logits: every token loses log V; the mean over tokens is log V.
  LayerList layers = build_transformer(testing::transformer_params(0, 8, 0, 2, 0, 3, 11, false), 1);
  layers.back()->params()[2]->value.setZero();
  const std::vector<std::int32_t> targets{0, 3, 10, 5, 5, 1};
  Matrix ids(6, 1);
  ids << 0, 1, 2, 3, 4, 5;
  EXPECT_NEAR(model_loss(layers, ids, targets, 2, 3), std::log(11.0), 1e-6);

  // Logits (0, 0, ln 2): softmax (1/4, 1/4, 1/2).
  std::mt19937_64 rng(1);
  ClassifierHead head("head", ClassifierHeadMath(2, 3), rng);
  head.params()[0]->value.setZero();
  head.params()[1]->value << 0.0f, 0.0f, static_cast<float>(std::log(2.0));
  const std::vector<std::int32_t> labels{2, 0};
  Context ctx = context(2, 1, &labels);
  ctx.loss_scale = 1.0;
  Stash stash;
  const Matrix loss = head.forward(Matrix::Zero(2, 2), ctx, stash).host();
  EXPECT_NEAR(loss(0, 0), std::log(2.0) + std::log(4.0), 1e-6);
}

TEST(Layers, RejectBadInput) {
  LayerList layers = build_transformer(testing::transformer_params(1, 8, 0, 2, 0, 3, 11, false), 1);
  Stash stash;
  Matrix ids(6, 1);
  ids << 0, 1, 2, 3, 4, 11;  // 11 is outside the vocabulary
  EXPECT_THROW(layers[0]->forward(ids, context(2, 3), stash), std::invalid_argument);
  EXPECT_THROW(layers[0]->forward(Matrix::Zero(8, 1), context(2, 4), stash),
               std::invalid_argument);  // longer than seq_len
  EXPECT_THROW(layers[1]->forward(Matrix::Zero(6, 7), context(2, 3), stash),
               std::invalid_argument);  // wrong width
  EXPECT_THROW(layers[2]->forward(Matrix::Zero(6, 8), context(2, 3), stash),
               std::invalid_argument);  // no targets
  EXPECT_THROW(TransformerBlockMath(8, 3, 0, 12), std::invalid_argument);
  EXPECT_THROW(TransformerBlockMath(8, 4, 3, 12), std::invalid_argument);
}

}  // namespace
}  // namespace pipescope::exec
