// Optimizer update rules against the formulas, computed in double by hand for
// one parameter over two steps.

#include <gtest/gtest.h>

#include <cmath>

#include "exec/compute/optimizer.h"

namespace pipescope::exec {
namespace {

// Gradients of the two steps for a 1x2 parameter starting at (1, -2).
constexpr float kG[2][2] = {{0.5f, -0.25f}, {0.1f, 0.4f}};

Param make_param() {
  Param p;
  p.name = "w";
  p.value = Matrix(1, 2);
  p.value << 1.0f, -2.0f;
  p.grad = Matrix::Zero(1, 2);
  return p;
}

// Runs two steps and checks the value after each against want(step, i, w) which
// returns the expected new value of element i.
template <typename Want>
void check(OptimizerConfig config, Want want) {
  Param p = make_param();
  ParamOptimizer opt(config);
  double w[2] = {1.0, -2.0};
  for (int t = 0; t < 2; ++t) {
    p.grad << kG[t][0], kG[t][1];
    opt.step({&p});
    for (int i = 0; i < 2; ++i) {
      w[i] = want(t, i, w[i]);
      EXPECT_NEAR(p.value(0, i), w[i], 1e-6) << "step " << t << " element " << i;
    }
    EXPECT_EQ(p.grad.cwiseAbs().maxCoeff(), 0.0f) << "the gradient is zeroed";
  }
}

TEST(ParamOptimizer, Sgd) {
  OptimizerConfig c;
  c.kind = Optimizer::kSgd;
  c.learning_rate = 0.1;
  check(c, [](int t, int i, double w) { return w - 0.1 * kG[t][i]; });
}

TEST(ParamOptimizer, Momentum) {
  OptimizerConfig c;
  c.kind = Optimizer::kMomentum;
  c.learning_rate = 0.1;
  c.momentum = 0.9;
  double v[2] = {0.0, 0.0};
  check(c, [&v](int t, int i, double w) {
    v[i] = 0.9 * v[i] + kG[t][i];
    return w - 0.1 * v[i];
  });
}

TEST(ParamOptimizer, Rmsprop) {
  OptimizerConfig c;
  c.kind = Optimizer::kRmsprop;
  c.learning_rate = 0.01;
  c.beta2 = 0.9;
  c.epsilon = 1e-6;
  double v[2] = {0.0, 0.0};
  check(c, [&v](int t, int i, double w) {
    const double g = kG[t][i];
    v[i] = 0.9 * v[i] + 0.1 * g * g;
    return w - 0.01 * g / (std::sqrt(v[i]) + 1e-6);
  });
}

TEST(ParamOptimizer, AdamWithBiasCorrection) {
  OptimizerConfig c;
  c.kind = Optimizer::kAdam;
  c.learning_rate = 0.01;
  double m[2] = {0.0, 0.0}, v[2] = {0.0, 0.0};
  check(c, [&m, &v](int t, int i, double w) {
    const double g = kG[t][i];
    m[i] = 0.9 * m[i] + 0.1 * g;
    v[i] = 0.999 * v[i] + 0.001 * g * g;
    const double mhat = m[i] / (1.0 - std::pow(0.9, t + 1));
    const double vhat = v[i] / (1.0 - std::pow(0.999, t + 1));
    return w - 0.01 * mhat / (std::sqrt(vhat) + 1e-8);
  });
}

TEST(ParamOptimizer, ParamWithoutGradientIsLeftAlone) {
  Param p = make_param();
  p.grad.resize(0, 0);
  ParamOptimizer opt(OptimizerConfig{});
  opt.step({&p});
  EXPECT_EQ(p.value(0, 0), 1.0f);
  EXPECT_EQ(p.value(0, 1), -2.0f);
}

}  // namespace
}  // namespace pipescope::exec
