// Context parallelism in the executor: each stage's ranks hold C shares of
// every sequence (exec/tensor_shard.h, build_context_ranks), their attention
// passing keys and values round a ring (exec/compute/ring_attention.h), their
// gradients summed before each optimizer step. Training with C = 2 (and with
// T = 2 beside it) matches single-device training of the whole model
// (relative 1e-5, as the pipeline consistency tests); the shares' copies of
// every parameter stay identical; and what cannot be shared is refused.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../tiny_models.h"
#include "consistency_helpers.h"
#include "costmodels/model_families.h"
#include "exec/data.h"
#include "exec/models.h"
#include "exec/plan_runner.h"
#include "exec/runtime.h"
#include "exec/tensor_shard.h"
#include "exec/transport.h"
#include "sim/engine/partition.h"
#include "sim/plan/plan.h"
#include "sim/scenario/model_json.h"

namespace pipescope::exec {
namespace {

using namespace consistency;

// The tiny transformer with sequences of 8 tokens (2C chunks for C = 2 and 4).
TransformerParams params(bool learned_positions = false) {
  TransformerParams p = testing::tiny_executor_transformer_params(2);
  p.seq_len = 8;
  p.learned_positions = learned_positions;
  return p;
}

// Every parameter of share 0, put back together over its T tensor ranks.
std::vector<std::vector<float>> share_params(PipelineRuntime& runtime) {
  std::vector<std::vector<float>> out;
  for (std::size_t s = 0; s < runtime.stages(0).size(); ++s) {
    std::vector<const LayerList*> ranks;
    for (int t = 0; t < runtime.tensor_parallel(); ++t) ranks.push_back(&runtime.stages(t)[s]);
    for (const Matrix& m : unshard_params(ranks)) out.emplace_back(m.data(), m.data() + m.size());
  }
  return out;
}

// Each rank of every share holds the same values as its tensor rank of share 0.
void expect_shares_identical(PipelineRuntime& runtime) {
  const int T = runtime.tensor_parallel();
  for (int r = T; r < T * runtime.context_parallel(); ++r) {
    for (std::size_t s = 0; s < runtime.stages(0).size(); ++s) {
      const LayerList& mine = runtime.stages(r)[s];
      const LayerList& first = runtime.stages(r % T)[s];
      for (std::size_t l = 0; l < mine.size(); ++l) {
        for (std::size_t k = 0; k < mine[l]->params().size(); ++k) {
          EXPECT_EQ(mine[l]->params()[k]->value, first[l]->params()[k]->value)
              << mine[l]->params()[k]->name << " on rank " << r;
        }
      }
    }
  }
}

// `by_heads`: the all-to-all form (exec/compute/heads_attention.h), not the ring.
Trace context_parallel(const TransformerParams& p, int T, int C, const Case& c,
                       bool by_heads = false) {
  std::vector<std::vector<LayerList>> ranks;
  for (LayerList& rank : build_context_ranks(p, kSeed, T, C, nullptr, by_heads)) {
    const int L = static_cast<int>(rank.size());
    ranks.push_back(cut_into_stages(std::move(rank), partition_uniform(L, c.K * c.chunks)));
  }
  RuntimeOptions options;
  options.optimizer = momentum();
  PipelineRuntime runtime(std::move(ranks),
                          schedule_of(c.K, c.M, c.remat, c.schedule, c.chunks, c.split_custom),
                          options, C);
  Trace t;
  for (int step = 0; step < kSteps; ++step) {
    const StepResult r = runtime.step(
        synthetic_batch(task_of(p), kBatch, c.M, static_cast<std::uint64_t>(step), kSeed));
    t.losses.push_back(r.loss);
  }
  t.params = share_params(runtime);
  expect_shares_identical(runtime);
  return t;
}

Trace whole(const TransformerParams& p) {
  return single_device(build_transformer(p, kSeed), task_of(p), momentum());
}

TEST(ContextParallelTraining, TwoSharesMatchSingleDeviceTraining) {
  const TransformerParams p = params();
  const Trace want = whole(p);
  expect_same(want, context_parallel(p, 1, 2, {1, 2, Remat::kNever, ScheduleKind::kGpipe}));
  expect_same(want, context_parallel(p, 1, 2, {2, 4, Remat::kAlways, ScheduleKind::k1F1B}));
  expect_same(want, context_parallel(p, 1, 2, {2, 2, Remat::kNever, ScheduleKind::kZbH1}));
}

TEST(ContextParallelTraining, FourSharesWithLearnedPositionsMatchToo) {
  const TransformerParams p = params(true);
  expect_same(whole(p), context_parallel(p, 1, 4, {2, 2, Remat::kExceptLast, ScheduleKind::k1F1B}));
}

TEST(ContextParallelTraining, TwoTensorRanksOfTwoSharesMatchToo) {
  const TransformerParams p = params();
  expect_same(whole(p), context_parallel(p, 2, 2, {2, 4, Remat::kNever, ScheduleKind::k1F1B}));
}

// The all-to-all form: the C shares trade sequence for heads around the
// attention (exec/compute/heads_attention.h), and train as the whole model
// does: C = 2 on three schedules, C = 4 with learned positions (4 heads, 4
// key-value heads), T = 2 x C = 2 (4 heads: two a tensor rank, one a
// share), and grouped queries. A C that does not divide a rank's heads is
// refused.
TEST(ContextParallelTraining, SharesTradingHeadsMatchSingleDeviceTraining) {
  const TransformerParams p = params();
  const Trace want = whole(p);
  expect_same(want, context_parallel(p, 1, 2, {1, 2, Remat::kNever, ScheduleKind::kGpipe}, true));
  expect_same(want, context_parallel(p, 1, 2, {2, 4, Remat::kAlways, ScheduleKind::k1F1B}, true));
  expect_same(want, context_parallel(p, 1, 2, {2, 2, Remat::kNever, ScheduleKind::kZbH1}, true));
  TransformerParams four = params(true);
  four.heads = 4;
  expect_same(whole(four),
              context_parallel(four, 1, 4, {2, 2, Remat::kExceptLast, ScheduleKind::k1F1B}, true));
  four.learned_positions = false;
  expect_same(whole(four),
              context_parallel(four, 2, 2, {2, 4, Remat::kNever, ScheduleKind::k1F1B}, true));
  // Grouped queries: two query heads a share beside one key-value head
  // (queries and keys of different widths), and at T = 2 x C = 2 the same.
  TransformerParams grouped = params();
  grouped.heads = 4;
  grouped.kv_heads = 2;
  expect_same(whole(grouped),
              context_parallel(grouped, 1, 2, {2, 4, Remat::kAlways, ScheduleKind::k1F1B}, true));
  grouped.heads = 8;
  grouped.kv_heads = 4;
  expect_same(whole(grouped),
              context_parallel(grouped, 2, 2, {1, 2, Remat::kNever, ScheduleKind::kGpipe}, true));
  try {
    build_context_ranks(params(), kSeed, 2, 2, nullptr, true);  // 1 head a rank
    ADD_FAILURE() << "two shares traded one head";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("2 shares trading sequence for heads do not divide the "
                                         "1 heads and 1 key-value heads of a rank"),
              std::string::npos)
        << e.what();
  }
}

// `pipescope run`'s path: a plan of T = 2 x C = 2 on one stage trains as the
// whole model does on one device.
TEST(ContextParallelPlans, RunPlanTrainsTheSharesAsTheWholeModelWould) {
  const TransformerParams p = params();
  const ModelSpec whole_spec = make_transformer(p, "tiny");
  Plan plan;
  plan.scenario_name = "tiny";
  plan.model_name = whole_spec.name;
  plan.model_spec = model_spec_json(whole_spec);
  plan.tensor_parallel = 2;
  plan.context_parallel = 2;
  plan.stages = 1;
  plan.devices = 4;
  plan.micro_batches = 2;
  plan.micro_batch_size = 2;
  plan.global_batch = 4;
  plan.optimizer = Optimizer::kMomentum;
  PlanStage st;
  st.layers = {0, static_cast<int>(whole_spec.layers.size()) - 1};
  plan.stage_plans.push_back(st);
  const ModelSpec share = plan_model(plan, "cp.json");
  EXPECT_EQ(share.context_parallel, 2);
  // The executor's ring is not the all-gather form: such a plan is refused.
  Plan gathered = plan;
  gathered.cp_comm_type = ContextExchange::kAllGather;
  try {
    plan_model(gathered, "cp.json");
    ADD_FAILURE() << "an all-gather plan was taken for the ring";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("cp.json: cp_comm_type: ", 0), 0u) << e.what();
  }
  PlanRunOptions o;
  o.steps = 3;
  o.seed = kSeed;
  const std::vector<StepResult> steps = run_plan(plan, share, o);
  ASSERT_EQ(steps.size(), 3u);
  const std::vector<double> want = whole_model_losses(p, 3, 4, o.learning_rate);
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(steps[i].loss, want[i], 1e-5 * std::abs(want[i])) << "step " << i;
  }
  // The all-to-all form at T = 1 (the model's two heads, one a share) trains
  // the same.
  Plan traded = plan;
  traded.tensor_parallel = 1;
  traded.devices = 2;
  traded.cp_comm_type = ContextExchange::kAllToAll;
  const ModelSpec traded_share = plan_model(traded, "cp.json");
  EXPECT_TRUE(traded_share.context_by_heads);
  const std::vector<StepResult> traded_steps = run_plan(traded, traded_share, o);
  ASSERT_EQ(traded_steps.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(traded_steps[i].loss, want[i], 1e-5 * std::abs(want[i])) << "step " << i;
  }
  // Elsewhere than the cpu backend's threads or linked processes (a transport
  // that does not link them), refused by name.
  Plan shares_alone = plan;
  shares_alone.tensor_parallel = 1;
  shares_alone.devices = 2;
  o.transport = std::make_shared<InProcessTransport>();
  try {
    run_plan(shares_alone, plan_model(shares_alone, "cp.json"), o);
    FAIL() << "a transport accepted for C=2";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "C=2: context parallelism runs on the cpu backend (a thread per share) or the "
                 "mpi backend (a process per device and share)");
  }
}

// A step that fails while the other share is in the ring leaves its block
// there; the next step must not take it: it trains as a fresh runtime does.
TEST(ContextParallelFaults, AFailedStepLeavesNothingInTheRings) {
  const TransformerParams p = params();
  const auto runtime = [&](std::function<void(int, const Op&)> before_op) {
    std::vector<std::vector<LayerList>> ranks;
    for (LayerList& rank : build_context_ranks(p, kSeed, 1, 2)) {
      ranks.push_back(cut_into_stages(std::move(rank), partition_uniform(4, 1)));
    }
    RuntimeOptions options;
    options.optimizer = momentum();
    options.watchdog = std::chrono::milliseconds(20000);
    options.before_op = std::move(before_op);
    return std::make_unique<PipelineRuntime>(
        std::move(ranks), build_schedule(ScheduleKind::kGpipe, 1, 2, Remat::kNever), options, 2);
  };
  // The first of the two shares to reach F(0,1) fails there, once the other
  // has gone on into the ring and posted its block (it then stops when the
  // step does).
  std::atomic<int> arrivals{0};
  std::atomic<bool> armed{true};
  auto faulty = runtime([&](int, const Op& op) {
    if (armed && op == Op{OpKind::kForward, 0, 1} && arrivals.fetch_add(1) == 0) {
      while (arrivals.load() < 2) std::this_thread::yield();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      throw std::runtime_error("injected fault");
    }
  });
  const auto train = [&](PipelineRuntime& rt) {
    Trace t;
    for (int step = 0; step < kSteps; ++step) {
      t.losses.push_back(
          rt.step(synthetic_batch(task_of(p), kBatch, 2, static_cast<std::uint64_t>(step), kSeed))
              .loss);
    }
    t.params = share_params(rt);
    return t;
  };
  EXPECT_THROW(faulty->step(synthetic_batch(task_of(p), kBatch, 2, 0, kSeed)), StageError);
  armed = false;
  // The weights are what a fresh runtime's are (no optimizer step ran): the
  // same steps give the same losses and weights, the keys' and values'
  // gradients, which a stale block would send to the wrong place, included.
  expect_same(train(*runtime(nullptr)), train(*faulty));
}

TEST(ContextParallelRefusals, SequencesThatDoNotCutInto2CChunks) {
  TransformerParams p = params();
  p.seq_len = 6;
  EXPECT_THROW(build_context_ranks(p, kSeed, 1, 2), std::invalid_argument);  // 4 does not divide 6
  // The runtime refuses micro-batches whose sequences do not cut either.
  std::vector<std::vector<LayerList>> ranks;
  for (LayerList& rank : build_context_ranks(params(), kSeed, 1, 2)) {
    ranks.push_back(cut_into_stages(std::move(rank), partition_uniform(4, 1)));
  }
  PipelineRuntime runtime(std::move(ranks),
                          build_schedule(ScheduleKind::kGpipe, 1, 1, Remat::kNever),
                          RuntimeOptions{}, 2);
  TaskShape task = task_of(p);
  try {
    runtime.step(synthetic_batch(task, 2, 1, 0, kSeed));
    ADD_FAILURE() << "sequences of 6 tokens were cut into 4 chunks";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("do not cut into 2C = 4 chunks"), std::string::npos)
        << e.what();
  }
  // A whole block given a share of each sequence refuses it.
  LayerList plain = build_transformer(params(), kSeed);
  Stash stash;
  const Context share{1, 4, nullptr, 1.0, 0, 2};
  EXPECT_THROW(plain[1]->forward(Tensor(Matrix::Zero(4, 16)), share, stash), std::invalid_argument);
}

}  // namespace
}  // namespace pipescope::exec
