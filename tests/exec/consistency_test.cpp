// GPipe's core promise with the real layers: training a Transformer (and an MLP)
// cut into K stages with M micro-batches, under every remat mode, gives the same loss and
// the same parameters after every step as training it on one device on the whole
// mini-batch (docs/executor.md; relative tolerance 1e-5).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "../tiny_models.h"
#include "costmodels/model_families.h"
#include "exec/data.h"
#include "exec/models.h"
#include "exec/runtime.h"
#include "sim/custom_schedule.h"
#include "sim/partition.h"

namespace pipescope::exec {
namespace {

constexpr int kBatch = 8;
constexpr int kSteps = 3;
constexpr std::uint64_t kSeed = 42;

using testing::tiny_executor_transformer_params;  // 4 blocks + embedding and head: 6 layers

OptimizerConfig adam() {
  OptimizerConfig c;
  c.kind = Optimizer::kAdam;
  c.learning_rate = 1e-2;
  return c;
}

// The Transformer has directions the loss cannot see (attention's key bias shifts
// every score of a query alike, and softmax ignores that): their gradients are
// rounding noise, which Adam, dividing by the gradient's own size, turns into
// full-size steps of random sign. Momentum SGD keeps noise at noise level.
OptimizerConfig momentum() {
  OptimizerConfig c;
  c.kind = Optimizer::kMomentum;
  c.learning_rate = 0.1;
  return c;
}

struct Trace {
  std::vector<double> losses;
  std::vector<std::vector<float>> params;  // every parameter value, layer by layer
};

std::vector<std::vector<float>> values(std::vector<LayerList*> parts) {
  std::vector<std::vector<float>> out;
  for (LayerList* part : parts) {
    for (auto& layer : *part) {
      for (Param* p : layer->params())
        out.emplace_back(p->value.data(), p->value.data() + p->value.size());
    }
  }
  return out;
}

Trace single_device(LayerList model, const TaskShape& task, const OptimizerConfig& config) {
  Trace t;
  t.losses = train_reference(model, config, kSteps, [&](int step) {
    return whole_batch(task, kBatch, static_cast<std::uint64_t>(step), kSeed);
  });
  t.params = values({&model});
  return t;
}

// A custom schedule as PyTorch pipelining's CSV: breadth-first over the
// looped placement (stage c K + d on rank d), every forward chunk by chunk,
// then every backward, last chunk first, micro-batches in forward order (GPipe
// reverses them); with `split` each I's W comes after all of them.
std::string breadth_first_csv(int K, int M, int chunks, bool split) {
  std::string csv;
  for (int d = 0; d < K; ++d) {
    std::vector<std::string> cells;
    for (int c = 0; c < chunks; ++c) {
      for (int m = 0; m < M; ++m)
        cells.push_back(std::to_string(c * K + d) + "F" + std::to_string(m));
    }
    for (int c = chunks - 1; c >= 0; --c) {
      for (int m = 0; m < M; ++m) {
        cells.push_back(std::to_string(c * K + d) + (split ? "I" : "B") + std::to_string(m));
      }
    }
    for (int c = chunks - 1; split && c >= 0; --c) {
      for (int m = 0; m < M; ++m)
        cells.push_back(std::to_string(c * K + d) + "W" + std::to_string(m));
    }
    for (std::size_t i = 0; i < cells.size(); ++i) csv += (i ? "," : "") + cells[i];
    csv += "\n";
  }
  return csv;
}

// The schedule of a case; custom ones come from breadth_first_csv, split when
// `split_custom`.
Schedule schedule_of(int K, int M, Remat remat, ScheduleKind schedule, int chunks,
                     bool split_custom) {
  if (schedule != ScheduleKind::kCustom) return build_schedule(schedule, K, M, remat, chunks);
  return build_custom(
      parse_schedule_csv(breadth_first_csv(K, M, chunks, split_custom), "breadth-first.csv"),
      remat);
}

Trace pipelined(LayerList model, const TaskShape& task, const OptimizerConfig& config, int K, int M,
                Remat remat, ScheduleKind schedule, int chunks, bool split_custom = false) {
  const int L = static_cast<int>(model.size());
  RuntimeOptions options;
  options.optimizer = config;
  PipelineRuntime runtime(cut_into_stages(std::move(model), partition_uniform(L, K * chunks)),
                          schedule_of(K, M, remat, schedule, chunks, split_custom), options);
  Trace t;
  for (int step = 0; step < kSteps; ++step) {
    t.losses.push_back(
        runtime.step(synthetic_batch(task, kBatch, M, static_cast<std::uint64_t>(step), kSeed))
            .loss);
  }
  std::vector<LayerList*> parts;
  for (LayerList& s : runtime.stages()) parts.push_back(&s);
  t.params = values(parts);
  return t;
}

void expect_same(const Trace& want, const Trace& got) {
  ASSERT_EQ(want.losses.size(), got.losses.size());
  for (std::size_t i = 0; i < want.losses.size(); ++i) {
    EXPECT_NEAR(got.losses[i], want.losses[i], 1e-5 * std::abs(want.losses[i])) << "step " << i;
  }
  // Parameters: relative to each tensor's largest entry. Adam divides every
  // gradient by its own running magnitude, so an entry whose gradient is at fp32
  // rounding level (a bias that barely matters) moves by about the learning rate
  // whatever the rounding was; judged alone it would be noise, judged against its
  // tensor it is within 1e-5.
  ASSERT_EQ(want.params.size(), got.params.size());
  for (std::size_t p = 0; p < want.params.size(); ++p) {
    ASSERT_EQ(want.params[p].size(), got.params[p].size());
    float scale = 0.0f;
    for (float w : want.params[p]) scale = std::max(scale, std::abs(w));
    for (std::size_t i = 0; i < want.params[p].size(); ++i) {
      ASSERT_NEAR(got.params[p][i], want.params[p][i], 1e-5f * scale)
          << "param " << p << " entry " << i;
    }
  }
}

struct Case {
  int K;
  int M;
  Remat remat;
  ScheduleKind schedule;
  int chunks = 1;
  bool split_custom = false;  // custom: I and W rather than B
};

class Consistency : public ::testing::TestWithParam<Case> {};

TEST_P(Consistency, TransformerMatchesSingleDevice) {
  const auto [K, M, remat, schedule, chunks, split_custom] = GetParam();
  const TransformerParams p = tiny_executor_transformer_params();
  TaskShape task;
  task.seq_len = static_cast<int>(p.seq_len);
  task.vocab = static_cast<int>(p.vocab);
  const Trace want = single_device(build_transformer(p, kSeed), task, momentum());
  expect_same(want, pipelined(build_transformer(p, kSeed), task, momentum(), K, M, remat, schedule,
                              chunks, split_custom));
  // The loss is a real one: the synthetic task starts near log V.
  EXPECT_NEAR(want.losses.front(), std::log(13.0), 0.5);
}

TEST_P(Consistency, MlpMatchesSingleDevice) {
  const auto [K, M, remat, schedule, chunks, split_custom] = GetParam();
  MlpParams p;
  p.layers = 5;
  p.d_model = 8;
  p.classes = 4;
  TaskShape task;
  task.language_model = false;
  task.features = 8;
  task.classes = 4;
  const Trace want = single_device(build_mlp(p, kSeed), task, momentum());
  expect_same(want, pipelined(build_mlp(p, kSeed), task, momentum(), K, M, remat, schedule, chunks,
                              split_custom));
}

std::string schedule_test_name(ScheduleKind s) {
  switch (s) {
    case ScheduleKind::kGpipe:
      return "Gpipe";
    case ScheduleKind::k1F1B:
      return "OneFOneB";
    case ScheduleKind::kZbH1:
      return "ZbH1";
    case ScheduleKind::kInterleaved1F1B:
      return "Interleaved";
    case ScheduleKind::kLoopedBfs:
      return "LoopedBfs";
    case ScheduleKind::kZbV:
      return "ZbV";
    case ScheduleKind::kInterleavedZb:
      return "InterleavedZb";
    case ScheduleKind::kDualPipeV:
      return "DualPipeV";
    case ScheduleKind::kCustom:
      return "Custom";
  }
  return "Unknown";
}

std::string remat_test_name(Remat r) {
  switch (r) {
    case Remat::kNever:
      return "NoRemat";
    case Remat::kAlways:
      return "Remat";
    case Remat::kExceptLast:
      return "RematExceptLast";
    case Remat::kSelective:
      return "RematSelective";
  }
  return "Unknown";
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (int K : {1, 2, 3, 4}) {
    for (int M : {1, 2, 4, 8}) {
      for (const Remat remat : kScheduleRemats) {
        for (ScheduleKind s : kAllSchedules) {
          if (!takes_chunks(s)) out.push_back({K, M, remat, s});
        }
      }
    }
  }
  // Interleaved: v chunks per device, K x v <= 6 stages, M a multiple of K
  // dividing the batch of 8.
  for (int K : {1, 2}) {
    for (int chunks : {2, 3}) {
      for (int M : {K, 2 * K, 4 * K}) {
        for (const Remat remat : kScheduleRemats) {
          out.push_back({K, M, remat, ScheduleKind::kInterleaved1F1B, chunks});
        }
      }
    }
  }
  // Looped BFS: v chunks per device, any M (here one not a multiple of K too).
  for (int K : {1, 2}) {
    for (int chunks : {2, 3}) {
      for (int M : {1, 4}) {
        for (const Remat remat : kScheduleRemats) {
          out.push_back({K, M, remat, ScheduleKind::kLoopedBfs, chunks});
        }
      }
    }
  }
  // ZB-V: two chunks per device in a V, the first and the last stage on device
  // 0, stages K - 1 and K on one device.
  for (int K : {1, 2, 3}) {
    for (int M : {1, 4, 8}) {
      for (const Remat remat : kScheduleRemats) out.push_back({K, M, remat, ScheduleKind::kZbV, 2});
    }
  }
  // Interleaved zero bubble: v chunks per device, in one round and in several;
  // DualPipeV: the V with overlapped pairs, whose outputs leave when the pair
  // ends, M >= 2K. A remat mode each (the sanitizer runs take their time).
  out.push_back({1, 4, Remat::kNever, ScheduleKind::kInterleavedZb, 2});
  out.push_back({2, 2, Remat::kExceptLast, ScheduleKind::kInterleavedZb, 2});
  out.push_back({2, 4, Remat::kAlways, ScheduleKind::kInterleavedZb, 3});
  out.push_back({1, 2, Remat::kAlways, ScheduleKind::kDualPipeV, 2});
  out.push_back({2, 4, Remat::kNever, ScheduleKind::kDualPipeV, 2});
  out.push_back({3, 8, Remat::kExceptLast, ScheduleKind::kDualPipeV, 2});
  // Custom: breadth-first action files, whole or split backward, one or two
  // chunks per device.
  for (int K : {2, 3}) {
    for (int chunks : {1, 2}) {
      for (int M : {2, 4}) {
        for (const Remat remat : kScheduleRemats) {
          for (bool split : {false, true}) {
            out.push_back({K, M, remat, ScheduleKind::kCustom, chunks, split});
          }
        }
      }
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(
    KxMxRemat, Consistency, ::testing::ValuesIn(cases()), [](const auto& param_info) {
      return "K" + std::to_string(param_info.param.K) + "M" + std::to_string(param_info.param.M) +
             remat_test_name(param_info.param.remat) +
             schedule_test_name(param_info.param.schedule) +
             (param_info.param.chunks > 1 ? "V" + std::to_string(param_info.param.chunks) : "") +
             (param_info.param.split_custom ? "Split" : "");
    });

TEST(SyntheticTask, LossFallsWhenTraining) {
  // A few hundred Adam steps on the Fibonacci-mod-V task take the loss well below
  // the uniform guess log V.
  TransformerParams p = tiny_executor_transformer_params();
  p.layers = 2;
  TaskShape task;
  task.seq_len = static_cast<int>(p.seq_len);
  task.vocab = static_cast<int>(p.vocab);
  LayerList model = build_transformer(p, kSeed);
  OptimizerConfig cfg = adam();
  cfg.learning_rate = 3e-2;
  const std::vector<double> losses = train_reference(model, cfg, 200, [&](int step) {
    return whole_batch(task, 16, static_cast<std::uint64_t>(step), kSeed);
  });
  EXPECT_GT(losses.front(), 2.0);
  EXPECT_LT(losses.back(), 0.5 * losses.front());
}

}  // namespace
}  // namespace pipescope::exec
