#pragma once
// What the executor's consistency tests share (consistency_test.cpp for
// pipelines, tensor_parallel_test.cpp and context_parallel_test.cpp for
// tensor- and context-parallel ones): the single-device reference training,
// the schedules of a case, and the check that a run's losses and parameters
// equal the reference's (relative 1e-5).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "costmodels/model_families.h"
#include "exec/data.h"
#include "exec/models.h"
#include "exec/runtime.h"
#include "sim/engine/custom_schedule.h"
#include "sim/engine/schedule.h"

namespace pipescope::exec::consistency {

inline constexpr int kBatch = 8;
inline constexpr int kSteps = 3;
inline constexpr std::uint64_t kSeed = 42;

inline OptimizerConfig adam() {
  OptimizerConfig c;
  c.kind = Optimizer::kAdam;
  c.learning_rate = 1e-2;
  return c;
}

// The Transformer has directions the loss cannot see (attention's key bias shifts
// every score of a query alike, and softmax ignores that): their gradients are
// rounding noise, which Adam, dividing by the gradient's own size, turns into
// full-size steps of random sign. Momentum SGD keeps noise at noise level.
inline OptimizerConfig momentum() {
  OptimizerConfig c;
  c.kind = Optimizer::kMomentum;
  c.learning_rate = 0.1;
  return c;
}

// A run: K devices, M micro-batches, the remat mode and schedule, chunks per
// device.
struct Case {
  int K;
  int M;
  Remat remat;
  ScheduleKind schedule;
  int chunks = 1;
  bool split_custom = false;  // custom: I and W rather than B
};

// The task a transformer's synthetic batches are drawn for.
inline TaskShape task_of(const TransformerParams& p) {
  TaskShape task;
  task.seq_len = static_cast<int>(p.seq_len);
  task.vocab = static_cast<int>(p.vocab);
  return task;
}

// The losses of `steps` steps of the whole model on one device, batches of
// `batch` samples, momentum SGD at `learning_rate`: what a plan of it run by
// run_plan with the same seed must give.
inline std::vector<double> whole_model_losses(const TransformerParams& p, int steps, int batch,
                                              double learning_rate) {
  LayerList whole = build_transformer(p, kSeed);
  OptimizerConfig config;
  config.kind = Optimizer::kMomentum;
  config.learning_rate = learning_rate;
  return train_reference(whole, config, steps, [&](int step) {
    return whole_batch(task_of(p), batch, static_cast<std::uint64_t>(step), kSeed);
  });
}

struct Trace {
  std::vector<double> losses;
  std::vector<std::vector<float>> params;  // every parameter value, layer by layer
};

inline std::vector<std::vector<float>> values(std::vector<LayerList*> parts) {
  std::vector<std::vector<float>> out;
  for (LayerList* part : parts) {
    for (auto& layer : *part) {
      for (Param* p : layer->params())
        out.emplace_back(p->value.data(), p->value.data() + p->value.size());
    }
  }
  return out;
}

inline Trace single_device(LayerList model, const TaskShape& task, const OptimizerConfig& config) {
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
inline std::string breadth_first_csv(int K, int M, int chunks, bool split) {
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
inline Schedule schedule_of(int K, int M, Remat remat, ScheduleKind schedule, int chunks,
                            bool split_custom) {
  if (schedule != ScheduleKind::kCustom) return build_schedule(schedule, K, M, remat, chunks);
  return build_custom(
      parse_schedule_csv(breadth_first_csv(K, M, chunks, split_custom), "breadth-first.csv"),
      remat);
}

inline void expect_same(const Trace& want, const Trace& got) {
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

inline std::string schedule_test_name(ScheduleKind s) {
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

inline std::string remat_test_name(Remat r) {
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

}  // namespace pipescope::exec::consistency
