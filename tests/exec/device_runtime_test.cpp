// The runtime with device stages (exec/compute/device.h), every device a HostDevice so
// that it runs here: GPipe's promise holds for every schedule and remat mode,
// with each stage on its own device (payloads copied between them) and with all
// stages on one; device ops are timed by their fences; memory goes back; a
// stage that produces NaN on its device is named.

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "../tiny_models.h"
#include "costmodels/model_families.h"
#include "exec/compute/device_layers.h"
#include "exec/compute/host_device.h"
#include "exec/data.h"
#include "exec/models.h"
#include "exec/pipeline_check.h"
#include "exec/plan_runner.h"
#include "exec/runtime.h"
#include "sim/engine/partition.h"
#include "sim/plan/plan.h"

namespace pipescope::exec {
namespace {

constexpr int kBatch = 8;
constexpr int kSteps = 3;
constexpr std::uint64_t kSeed = 42;

OptimizerConfig momentum() {
  OptimizerConfig c;
  c.kind = Optimizer::kMomentum;
  c.learning_rate = 0.1;
  return c;
}

TaskShape task_of(const TransformerParams& p) {
  TaskShape task;
  task.seq_len = static_cast<int>(p.seq_len);
  task.vocab = static_cast<int>(p.vocab);
  return task;
}

struct Trace {
  std::vector<double> losses;
  std::vector<Matrix> params;
};

std::vector<Matrix> values(const std::vector<LayerList>& stages) {
  std::vector<Matrix> out;
  for (const LayerList& stage : stages) {
    for (const auto& layer : stage) {
      for (Param* p : layer->params()) out.push_back(host_value(*p));
    }
  }
  return out;
}

Trace single_device(const TransformerParams& p, const OptimizerConfig& config) {
  auto device = std::make_shared<HostDevice>();
  std::vector<LayerList> model;
  model.push_back(to_device(build_transformer(p, kSeed), device));
  Trace t;
  t.losses = train_reference(model[0], config, kSteps, [&](int step) {
    return whole_batch(task_of(p), kBatch, static_cast<std::uint64_t>(step), kSeed);
  });
  t.params = values(model);
  return t;
}

// The model cut into K x chunks stages; with `shared` every stage on one
// device, else each on its own.
std::vector<LayerList> device_stages(const TransformerParams& p, int stages, bool shared,
                                     std::vector<std::shared_ptr<HostDevice>>& devices) {
  LayerList all = build_transformer(p, kSeed);
  const int L = static_cast<int>(all.size());
  std::vector<LayerList> out = cut_into_stages(std::move(all), partition_uniform(L, stages));
  for (LayerList& stage : out) {
    if (!shared || devices.empty()) {
      devices.push_back(std::make_shared<HostDevice>("device " + std::to_string(devices.size())));
    }
    stage = to_device(std::move(stage), devices.back());
  }
  return out;
}

struct Case {
  int K;
  int M;
  Remat remat;
  ScheduleKind schedule;
  int chunks = 1;
  bool shared = false;  // every stage on one device
};

class DeviceConsistency : public ::testing::TestWithParam<Case> {};

TEST_P(DeviceConsistency, MatchesSingleDeviceTraining) {
  const Case c = GetParam();
  const TransformerParams p = testing::tiny_executor_transformer_params();
  std::vector<std::shared_ptr<HostDevice>> devices;
  RuntimeOptions options;
  options.optimizer = momentum();
  PipelineRuntime runtime(device_stages(p, c.K * c.chunks, c.shared, devices),
                          build_schedule(c.schedule, c.K, c.M, c.remat, c.chunks), options);
  Trace got;
  for (int step = 0; step < kSteps; ++step) {
    got.losses.push_back(
        runtime
            .step(synthetic_batch(task_of(p), kBatch, c.M, static_cast<std::uint64_t>(step), kSeed))
            .loss);
  }
  got.params = values(runtime.stages());
  const Trace want = single_device(p, momentum());
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (std::size_t i = 0; i < want.losses.size(); ++i) {
    EXPECT_NEAR(got.losses[i], want.losses[i], 1e-5 * std::abs(want.losses[i])) << "step " << i;
  }
  ASSERT_EQ(got.params.size(), want.params.size());
  for (std::size_t i = 0; i < want.params.size(); ++i) {
    const float scale = std::max(1e-3f, want.params[i].cwiseAbs().maxCoeff());
    EXPECT_LE((got.params[i] - want.params[i]).cwiseAbs().maxCoeff(), 1e-5f * scale)
        << "param " << i;
  }
  EXPECT_NEAR(want.losses.front(), std::log(13.0), 0.5);  // a real loss
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (int K : {1, 2, 3}) {
    for (int M : {1, 2, 4}) {
      for (const Remat remat : kScheduleRemats) {
        for (const ScheduleKind s :
             {ScheduleKind::kGpipe, ScheduleKind::k1F1B, ScheduleKind::kZbH1}) {
          out.push_back({K, M, remat, s});
        }
      }
    }
  }
  for (const Remat remat : kScheduleRemats) {
    out.push_back({2, 4, remat, ScheduleKind::kInterleaved1F1B, 2});
    out.push_back({2, 2, remat, ScheduleKind::kLoopedBfs, 2});
    out.push_back({2, 4, remat, ScheduleKind::kZbV, 2});
    out.push_back({2, 4, remat, ScheduleKind::kInterleavedZb, 2});
    out.push_back({2, 4, remat, ScheduleKind::kDualPipeV, 2});
    out.push_back({2, 4, remat, ScheduleKind::kGpipe, 1, true});
    out.push_back({3, 2, remat, ScheduleKind::kZbH1, 1, true});
  }
  return out;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string s = "K" + std::to_string(c.K) + "M" + std::to_string(c.M) + "_" +
                  std::string(to_string(c.schedule)) + "_" + std::string(to_string(c.remat));
  if (c.chunks > 1) s += "_v" + std::to_string(c.chunks);
  if (c.shared) s += "_shared";
  for (char& ch : s) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return s;
}

INSTANTIATE_TEST_SUITE_P(Schedules, DeviceConsistency, ::testing::ValuesIn(cases()), case_name);

// Device ops are timed by the fences around their work: one event per op, in
// the step, one at a time on a device; the memory of stashes and payloads goes
// back once the step is over, and all of it with the runtime.
TEST(DeviceRuntime, TimesOpsByFencesAndGivesMemoryBack) {
  const TransformerParams p = testing::tiny_executor_transformer_params();
  std::vector<std::shared_ptr<HostDevice>> devices;
  {
    PipelineRuntime runtime(device_stages(p, 2, false, devices),
                            build_schedule(ScheduleKind::k1F1B, 2, 4, Remat::kAlways), {});
    std::vector<std::int64_t> before;
    for (const auto& d : devices) before.push_back(d->bytes_in_use());
    const StepResult r = runtime.step(synthetic_batch(task_of(p), kBatch, 4, 0, kSeed));
    std::vector<std::vector<TimelineEvent>> ops(2);
    for (const TimelineEvent& e : r.timeline.events) {
      if (e.lane != Lane::kCompute) continue;
      EXPECT_LT(e.start, e.end);
      EXPECT_GE(e.start, 0);
      EXPECT_FALSE(e.cpu_time.has_value()) << "a device op's host CPU time was recorded";
      ops.at(static_cast<std::size_t>(e.device)).push_back(e);
    }
    for (auto& dev_ops : ops) {
      EXPECT_EQ(dev_ops.size(), 4u * 3u + 1u);  // F, R, B per micro-batch and the optimizer
      std::sort(dev_ops.begin(), dev_ops.end(),
                [](const TimelineEvent& a, const TimelineEvent& b) { return a.start < b.start; });
      for (std::size_t i = 1; i < dev_ops.size(); ++i) {
        EXPECT_LE(dev_ops[i - 1].end, dev_ops[i].start);
      }
    }
    // What stays: the parameters and their momentum... and nothing of the step.
    for (std::size_t d = 0; d < devices.size(); ++d) {
      const std::int64_t grown = devices[d]->bytes_in_use() - before[d];
      std::int64_t params = 0;
      for (const auto& layer : runtime.stages()[d]) params += layer->param_count();
      // Adam's two moments, allocated by the first step.
      EXPECT_EQ(grown, 2 * 4 * params) << "device " << d;
    }
  }
  for (const auto& d : devices) EXPECT_EQ(d->bytes_in_use(), 0) << d->name();
}

TEST(DeviceRuntime, NanOnADeviceNamesTheStageAndOp) {
  const TransformerParams p = testing::tiny_executor_transformer_params();
  std::vector<std::shared_ptr<HostDevice>> devices;
  std::vector<LayerList> stages = device_stages(p, 2, false, devices);
  // A NaN weight in stage 1's first block.
  Param& w = *stages[1][0]->params()[2];
  w.d_value.device()->fill(w.d_value.data(), 1, std::numeric_limits<float>::quiet_NaN());
  PipelineRuntime runtime(std::move(stages),
                          build_schedule(ScheduleKind::kGpipe, 2, 2, Remat::kNever), {});
  try {
    runtime.step(synthetic_batch(task_of(p), kBatch, 2, 0, kSeed));
    FAIL() << "a NaN went unnoticed";
  } catch (const StageError& e) {
    EXPECT_STREQ(e.what(), "stage 1 failed in F(1,0): NaN or inf in loss");
  }
}

TEST(DeviceRuntime, AStageOnTwoDevicesIsRefused) {
  const TransformerParams p = testing::tiny_executor_transformer_params(2);
  auto a = std::make_shared<HostDevice>("a");
  LayerList host = build_transformer(p, kSeed);
  LayerList on_a = to_device(build_transformer(p, kSeed), a);
  host[1] = std::move(on_a[1]);
  std::vector<LayerList> stages;
  stages.push_back(std::move(host));
  try {
    PipelineRuntime runtime(std::move(stages),
                            build_schedule(ScheduleKind::kGpipe, 1, 1, Remat::kNever), {});
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "stage 0: layer 'block0' is on a, the stage's first layer on the host");
  }
}

// The check `selftest --backend cuda` runs on GPUs, here on host devices: it
// passes, and a device whose copies between stages lose their data fails it.
TEST(PipelineCheck, PassesOnHostDevicesAndCatchesABrokenCopy) {
  const std::vector<PipelineCheck> good =
      check_pipeline([](int) { return std::make_shared<HostDevice>(); });
  ASSERT_EQ(good.size(), std::size(kAllSchedules));
  EXPECT_EQ(good[0].name, "pipeline gpipe, K=2, M=4, remat always");
  EXPECT_EQ(good.back().name, "pipeline dualpipe-v, K=2 x 2 chunks, M=4, remat always");
  for (const PipelineCheck& c : good) {
    EXPECT_TRUE(c.ok()) << c.name << ": " << c.max_error;
    EXPECT_LE(c.max_error, 1e-5);
  }

  class ZeroingCopies final : public HostDevice {
   public:
    void copy_from(const DeviceMatrix& src, DeviceMatrix& dst) override {
      HostDevice::copy_from(src, dst);
      fill(dst.data(), dst.size(), 0.0f);
    }
  };
  for (const PipelineCheck& c :
       check_pipeline([](int) { return std::make_shared<ZeroingCopies>(); })) {
    EXPECT_FALSE(c.ok()) << c.name;
  }
}

// run_plan puts each stage on the device the plan runner is given, and the
// timeline names it; the losses are the host run's.
TEST(DeviceRuntime, RunPlanPutsStagesOnTheirDevices) {
  Plan plan;
  const TransformerParams p = testing::tiny_executor_transformer_params();
  const ModelSpec spec = make_transformer(p);
  plan.stages = 2;
  plan.devices = 2;
  plan.micro_batches = 2;
  plan.global_batch = kBatch;
  plan.micro_batch_size = kBatch / 2;
  plan.schedule = ScheduleKind::k1F1B;
  plan.remat = Remat::kNever;
  plan.stage_plans.resize(2);
  plan.stage_plans[0].layers = {0, 2};
  plan.stage_plans[0].device = 0;
  plan.stage_plans[1].layers = {3, 5};
  plan.stage_plans[1].device = 1;
  PlanRunOptions host;
  host.steps = 2;
  PlanRunOptions device = host;
  std::vector<int> placed;
  device.stage_device = [&](int stage, int pipeline_device) -> std::shared_ptr<Device> {
    placed.push_back(pipeline_device);
    return std::make_shared<HostDevice>("gpu " + std::to_string(stage));
  };
  const std::vector<StepResult> a = run_plan(plan, spec, host);
  const std::vector<StepResult> b = run_plan(plan, spec, device);
  EXPECT_EQ(placed, (std::vector<int>{0, 1}));
  ASSERT_EQ(b.size(), 2u);
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(b[i].loss, a[i].loss, 1e-5 * std::abs(a[i].loss));
  }
  EXPECT_EQ(b[0].timeline.device_names,
            (std::vector<std::string>{"device 0 (gpu 0)", "device 1 (gpu 1)"}));
}

}  // namespace
}  // namespace pipescope::exec
