#include "exec/pipeline_check.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "exec/compute/device_layers.h"
#include "exec/compute/optimizer.h"
#include "exec/data.h"
#include "exec/models.h"
#include "exec/runtime.h"
#include "sim/engine/partition.h"

namespace pipescope::exec {

namespace {

constexpr int kBatch = 8;
constexpr int kSteps = 3;
constexpr std::uint64_t kSeed = 5;
// fp32 sums in another order, over three steps of momentum SGD.
constexpr double kTolerance = 1e-5;

TransformerParams model() {
  TransformerParams p;
  p.layers = 4;
  p.d_model = 16;
  p.d_ff = 24;
  p.heads = 2;
  p.seq_len = 5;
  p.vocab = 13;
  return p;
}

OptimizerConfig momentum() {
  OptimizerConfig c;
  c.kind = Optimizer::kMomentum;
  c.learning_rate = 0.1;
  return c;
}

TaskShape task() {
  TaskShape t;
  t.seq_len = static_cast<int>(model().seq_len);
  t.vocab = static_cast<int>(model().vocab);
  return t;
}

struct Run {
  std::vector<double> losses;
  std::vector<Matrix> params;
};

std::vector<Matrix> values(std::vector<LayerList>& stages) {
  std::vector<Matrix> out;
  for (LayerList& stage : stages) {
    for (auto& layer : stage) {
      for (Param* p : layer->params()) out.push_back(host_value(*p));
    }
  }
  return out;
}

Run single_device(const std::shared_ptr<Device>& device) {
  std::vector<LayerList> one;
  one.push_back(to_device(build_transformer(model(), kSeed), device));
  Run r;
  r.losses = train_reference(one[0], momentum(), kSteps, [](int step) {
    return whole_batch(task(), kBatch, static_cast<std::uint64_t>(step), kSeed);
  });
  r.params = values(one);
  return r;
}

Run pipelined(const std::function<std::shared_ptr<Device>(int)>& make_device, ScheduleKind kind,
              int K, int M, Remat remat, int chunks) {
  LayerList all = build_transformer(model(), kSeed);
  const int layers = static_cast<int>(all.size());
  std::vector<LayerList> stages =
      cut_into_stages(std::move(all), partition_uniform(layers, K * chunks));
  for (std::size_t s = 0; s < stages.size(); ++s) {
    stages[s] = to_device(std::move(stages[s]), make_device(static_cast<int>(s)));
  }
  RuntimeOptions options;
  options.optimizer = momentum();
  PipelineRuntime runtime(std::move(stages), build_schedule(kind, K, M, remat, chunks), options);
  Run r;
  for (int step = 0; step < kSteps; ++step) {
    r.losses.push_back(
        runtime.step(synthetic_batch(task(), kBatch, M, static_cast<std::uint64_t>(step), kSeed))
            .loss);
  }
  r.params = values(runtime.stages());
  return r;
}

// The largest difference, relative to each loss and to each tensor's largest
// entry; infinite on a NaN or a shape that differs.
double max_error(const Run& want, const Run& got) {
  if (want.losses.size() != got.losses.size() || want.params.size() != got.params.size()) {
    return INFINITY;
  }
  double worst = 0.0;
  for (std::size_t i = 0; i < want.losses.size(); ++i) {
    const double e =
        std::abs(got.losses[i] - want.losses[i]) / std::max(1e-6, std::abs(want.losses[i]));
    worst = std::isnan(e) ? INFINITY : std::max(worst, e);
  }
  for (std::size_t i = 0; i < want.params.size(); ++i) {
    const Matrix& w = want.params[i];
    const Matrix& g = got.params[i];
    if (w.rows() != g.rows() || w.cols() != g.cols() || !g.allFinite()) return INFINITY;
    const double scale = std::max(1e-3, static_cast<double>(w.cwiseAbs().maxCoeff()));
    worst = std::max(worst, static_cast<double>((g - w).cwiseAbs().maxCoeff()) / scale);
  }
  return worst;
}

}  // namespace

std::vector<PipelineCheck> check_pipeline(
    const std::function<std::shared_ptr<Device>(int stage)>& make_device) {
  const Run want = single_device(make_device(0));
  struct Case {
    ScheduleKind kind;
    Remat remat;
  };
  std::vector<PipelineCheck> out;
  // Every built-in schedule, the remat modes spread over them.
  for (const Case c :
       {Case{ScheduleKind::kGpipe, Remat::kAlways}, Case{ScheduleKind::k1F1B, Remat::kNever},
        Case{ScheduleKind::kZbH1, Remat::kExceptLast},
        Case{ScheduleKind::kInterleaved1F1B, Remat::kNever},
        Case{ScheduleKind::kLoopedBfs, Remat::kAlways},
        Case{ScheduleKind::kZbV, Remat::kExceptLast},
        Case{ScheduleKind::kInterleavedZb, Remat::kNever},
        Case{ScheduleKind::kDualPipeV, Remat::kAlways}}) {
    const int K = 2;
    const int M = 4;
    const int chunks = takes_chunks(c.kind) ? kDefaultChunks : 1;
    PipelineCheck check;
    check.name = "pipeline " + std::string(to_string(c.kind)) + ", K=" + std::to_string(K) +
                 (chunks > 1 ? " x " + std::to_string(chunks) + " chunks" : "") +
                 ", M=" + std::to_string(M) + ", remat " + std::string(to_string(c.remat));
    check.tolerance = kTolerance;
    check.max_error = max_error(want, pipelined(make_device, c.kind, K, M, c.remat, chunks));
    out.push_back(std::move(check));
  }
  return out;
}

}  // namespace pipescope::exec
