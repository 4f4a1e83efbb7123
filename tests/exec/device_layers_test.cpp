// The device layers (exec/compute/device_layers.h) on a HostDevice against the Eigen
// layers they mirror: the same loss, every layer's output and every parameter's
// gradient, for the Transformer (multi-head and grouped-query attention, learned
// and sinusoidal positions) and the MLP; a split backward (B, then W) adds what
// the whole one does; and memory goes back to the device when the last handle
// goes.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "costmodels/model_families.h"
#include "exec/compute/device.h"
#include "exec/compute/device_layers.h"
#include "exec/compute/host_device.h"
#include "exec/data.h"
#include "exec/models.h"

namespace pipescope::exec {
namespace {

constexpr std::uint64_t kSeed = 7;

// max |got - want| / max(1e-3, max |want|): fp32 sums in another order.
double relative_error(const Matrix& got, const Matrix& want) {
  EXPECT_EQ(got.rows(), want.rows());
  EXPECT_EQ(got.cols(), want.cols());
  if (got.rows() != want.rows() || got.cols() != want.cols()) return INFINITY;
  const double scale = std::max(1e-3, static_cast<double>(want.cwiseAbs().maxCoeff()));
  return static_cast<double>((got - want).cwiseAbs().maxCoeff()) / scale;
}

TransformerParams transformer(int heads, int kv_heads, bool learned_positions) {
  TransformerParams p;
  p.layers = 2;
  p.d_model = 16;
  p.d_ff = 24;
  p.heads = heads;
  p.kv_heads = kv_heads;
  p.seq_len = 6;
  p.vocab = 11;
  p.learned_positions = learned_positions;
  return p;
}

// Runs forward through every layer keeping each output, then backward from the
// loss; returns the outputs on the host.
std::vector<Matrix> forward_backward_outputs(LayerList& layers, const MicroBatch& mb,
                                             const Context& ctx) {
  std::vector<Stash> stashes(layers.size());
  std::vector<Matrix> outputs;
  Tensor x = mb.input;
  for (std::size_t l = 0; l < layers.size(); ++l) {
    x = layers[l]->forward(x, ctx, stashes[l]);
    outputs.push_back(to_host(x));
  }
  Tensor dy = Matrix::Ones(1, 1);
  for (std::size_t l = layers.size(); l-- > 0;) dy = layers[l]->backward(dy, ctx, stashes[l]);
  return outputs;
}

Matrix host_grad(const Param& p) {
  return p.on_device() ? download(p.d_grad) : p.grad;
}

void expect_layers_match(LayerList host, LayerList device, const MicroBatch& mb) {
  const Context ctx{mb.batch, mb.seq, &mb.targets,
                    1.0 / static_cast<double>(std::int64_t{mb.batch} * mb.seq)};
  const std::vector<Matrix> want = forward_backward_outputs(host, mb, ctx);
  const std::vector<Matrix> got = forward_backward_outputs(device, mb, ctx);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t l = 0; l < want.size(); ++l) {
    EXPECT_LT(relative_error(got[l], want[l]), 1e-5) << "output of " << host[l]->name();
  }
  for (std::size_t l = 0; l < host.size(); ++l) {
    const std::vector<Param*> hp = host[l]->params();
    const std::vector<Param*> dp = device[l]->params();
    ASSERT_EQ(hp.size(), dp.size()) << host[l]->name();
    for (std::size_t i = 0; i < hp.size(); ++i) {
      EXPECT_EQ(dp[i]->name, hp[i]->name);
      EXPECT_TRUE(dp[i]->on_device());
      EXPECT_EQ(relative_error(host_value(*dp[i]), hp[i]->value), 0.0) << hp[i]->name;
      EXPECT_LT(relative_error(host_grad(*dp[i]), hp[i]->grad), 1e-5)
          << "gradient of " << hp[i]->name;
    }
  }
}

MicroBatch lm_batch(const TransformerParams& p, int batch) {
  TaskShape task;
  task.seq_len = static_cast<int>(p.seq_len);
  task.vocab = static_cast<int>(p.vocab);
  return whole_batch(task, batch, 3, kSeed);
}

TEST(DeviceLayers, TransformerMatchesTheHostLayers) {
  for (const auto& [heads, kv_heads, learned] :
       {std::tuple{2, 2, true}, std::tuple{4, 2, false}, std::tuple{4, 1, true}}) {
    SCOPED_TRACE("heads " + std::to_string(heads) + ", kv " + std::to_string(kv_heads));
    const TransformerParams p = transformer(heads, kv_heads, learned);
    auto device = std::make_shared<HostDevice>();
    expect_layers_match(build_transformer(p, kSeed), to_device(build_transformer(p, kSeed), device),
                        lm_batch(p, 3));
  }
}

TEST(DeviceLayers, MlpMatchesTheHostLayers) {
  MlpParams p;
  p.layers = 3;
  p.d_model = 8;
  p.d_hidden = 12;
  p.classes = 5;
  TaskShape task;
  task.language_model = false;
  task.features = 8;
  task.classes = 5;
  auto device = std::make_shared<HostDevice>();
  expect_layers_match(build_mlp(p, kSeed), to_device(build_mlp(p, kSeed), device),
                      whole_batch(task, 6, 1, kSeed));
}

// B then the queued W of a split backward add exactly what one backward adds.
TEST(DeviceLayers, SplitBackwardAddsWhatTheWholeOneDoes) {
  const TransformerParams p = transformer(4, 2, true);
  auto device = std::make_shared<HostDevice>();
  LayerList whole = to_device(build_transformer(p, kSeed), device);
  LayerList split = to_device(build_transformer(p, kSeed), device);
  const MicroBatch mb = lm_batch(p, 2);
  const Context ctx{mb.batch, mb.seq, &mb.targets, 0.1};
  forward_backward_outputs(whole, mb, ctx);

  std::vector<Stash> stashes(split.size());
  Tensor x = mb.input;
  for (std::size_t l = 0; l < split.size(); ++l) x = split[l]->forward(x, ctx, stashes[l]);
  Tensor dy = Matrix::Ones(1, 1);
  std::vector<WeightGradQueue> queues(split.size());
  for (std::size_t l = split.size(); l-- > 0;) {
    dy = split[l]->backward_input(dy, ctx, stashes[l], queues[l]);
  }
  // Before W no weight gradient has arrived; every layer with parameters queued some.
  for (std::size_t l = 0; l < split.size(); ++l) {
    for (Param* q : split[l]->params()) EXPECT_EQ(host_grad(*q).cwiseAbs().maxCoeff(), 0.0f);
    EXPECT_FALSE(queues[l].empty()) << split[l]->name();
  }
  for (auto& q : queues) {
    for (auto& work : q) work();
  }
  for (std::size_t l = 0; l < split.size(); ++l) {
    const std::vector<Param*> a = whole[l]->params();
    const std::vector<Param*> b = split[l]->params();
    for (std::size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(relative_error(host_grad(*b[i]), host_grad(*a[i])), 0.0) << a[i]->name;
    }
  }
}

TEST(DeviceLayers, MemoryGoesBackWhenTheLastHandleGoes) {
  auto device = std::make_shared<HostDevice>();
  const TransformerParams p = transformer(2, 2, true);
  {
    LayerList layers = to_device(build_transformer(p, kSeed), device);
    const std::int64_t params_only = device->bytes_in_use();
    // The weights and gradients of every parameter, fp32 (positions are learned:
    // no sinusoid table).
    std::int64_t params = 0;
    for (const auto& layer : layers) params += layer->param_count();
    EXPECT_EQ(params_only, 2 * 4 * params);
    const MicroBatch mb = lm_batch(p, 2);
    const Context ctx{mb.batch, mb.seq, &mb.targets, 0.5};
    forward_backward_outputs(layers, mb, ctx);
    EXPECT_EQ(device->bytes_in_use(), params_only);  // stashes and activations gone
  }
  EXPECT_EQ(device->bytes_in_use(), 0);
}

TEST(DeviceLayers, ConversionNamesWhatItCannotMove) {
  auto device = std::make_shared<HostDevice>("gpu 0");
  LayerList layers = to_device(build_transformer(transformer(2, 2, true), kSeed), device);
  EXPECT_EQ(stage_device(layers), device.get());
  EXPECT_EQ(stage_device(build_transformer(transformer(2, 2, true), kSeed)), nullptr);
  // A stage with layers on two devices is refused, naming both.
  LayerList mixed = build_transformer(transformer(2, 2, true), kSeed);
  LayerList moved = to_device(build_transformer(transformer(2, 2, true), kSeed), device);
  mixed[1] = std::move(moved[1]);
  try {
    stage_device(mixed);
    FAIL() << "a stage on two devices was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "layer 'block0' is on gpu 0, the stage's first layer on the host");
  }
  EXPECT_THROW(to_device(LayerList{}, nullptr), std::invalid_argument);
}

// A device layer given a host tensor of the wrong shape says what it expected.
TEST(DeviceLayers, BadInputIsRefused) {
  auto device = std::make_shared<HostDevice>();
  LayerList layers = to_device(build_transformer(transformer(2, 2, true), kSeed), device);
  const std::vector<std::int32_t> targets(6, 0);
  const Context ctx{1, 6, &targets, 1.0};
  Stash stash;
  try {
    layers[1]->forward(Matrix::Zero(6, 5), ctx, stash);
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "transformer block: expected a (6, 16) input for batch 1 x seq 6, got (6, 5)");
  }
  Matrix ids = Matrix::Zero(6, 1);
  ids(2, 0) = 11;  // vocab 11
  EXPECT_THROW(layers[0]->forward(ids, ctx, stash), std::invalid_argument);
}

}  // namespace
}  // namespace pipescope::exec
