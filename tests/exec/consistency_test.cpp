// GPipe's core promise with the real layers: training a Transformer (and an MLP)
// cut into K stages with M micro-batches, under every remat mode, gives the same loss and
// the same parameters after every step as training it on one device on the whole
// mini-batch (docs/executor.md; relative tolerance 1e-5).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "../tiny_models.h"
#include "consistency_helpers.h"
#include "costmodels/model_families.h"
#include "exec/data.h"
#include "exec/models.h"
#include "exec/runtime.h"
#include "sim/engine/custom_schedule.h"
#include "sim/engine/partition.h"

namespace pipescope::exec {
namespace {

using namespace consistency;
using testing::tiny_executor_transformer_params;  // 4 blocks + embedding and head: 6 layers

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
  // Interleaved: v chunks per device, K x v <= 6 stages, M dividing the batch
  // of 8: a multiple of K, and on K = 3 one that is not (one round of 4).
  for (int K : {1, 2}) {
    for (int chunks : {2, 3}) {
      for (int M : {K, 2 * K, 4 * K}) {
        for (const Remat remat : kScheduleRemats) {
          out.push_back({K, M, remat, ScheduleKind::kInterleaved1F1B, chunks});
        }
      }
    }
  }
  for (const Remat remat : kScheduleRemats) {
    out.push_back({3, 4, remat, ScheduleKind::kInterleaved1F1B, 2});
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
