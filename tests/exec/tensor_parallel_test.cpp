// Tensor parallelism in the executor (exec/compute/tensor_layers.h): the all-reduce by
// hand, the shards put back together, training with T = 2 ranks a stage
// against single-device training of the whole model (relative 1e-5, as the
// pipeline consistency tests), and the refusals.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../tiny_models.h"
#include "consistency_helpers.h"
#include "costmodels/model_families.h"
#include "exec/compute/host_device.h"
#include "exec/compute/tensor_group.h"
#include "exec/data.h"
#include "exec/models.h"
#include "exec/plan_runner.h"
#include "exec/runtime.h"
#include "exec/tensor_shard.h"
#include "exec/transport.h"
#include "sim/engine/partition.h"
#include "sim/scenario/model_json.h"

namespace pipescope::exec {
namespace {

using namespace consistency;
using testing::tiny_executor_transformer_params;

constexpr int kT = 2;

// ---------------------------------------------------------------- all-reduce

// Runs f(rank) on `ranks` threads at once.
template <class F>
void on_ranks(int ranks, F f) {
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) threads.emplace_back([&f, r] { f(r); });
  for (std::thread& t : threads) t.join();
}

TEST(AllReduce, SumsAndMaximaOverTheRanksOnEveryRank) {
  TensorGroup group(2);
  Matrix a(2, 3), b(2, 3);
  a << 1, -2, 3, 0.5f, 7, -1;
  b << 10, 20, -30, 0.25f, -7, 2;
  std::vector<Matrix> sums{a, b};
  std::vector<Matrix> maxima{a, b};
  on_ranks(2, [&](int r) {
    group.all_reduce(r, sums[static_cast<std::size_t>(r)]);
    group.all_reduce(r, maxima[static_cast<std::size_t>(r)], TensorGroup::Reduce::kMax);
  });
  Matrix sum(2, 3), max(2, 3);
  sum << 11, 18, -27, 0.75f, 0, 1;
  max << 10, 20, 3, 0.5f, 7, 2;
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(sums[static_cast<std::size_t>(r)], sum) << "rank " << r;
    EXPECT_EQ(maxima[static_cast<std::size_t>(r)], max) << "rank " << r;
  }
}

TEST(AllReduce, EveryRankGetsTheSameBitsAcrossManyCalls) {
  // Rounding makes a + b + c depend on the order; every rank reduces in rank
  // order, so the replicated computations after it stay identical.
  constexpr int kRanks = 3;
  TensorGroup group(kRanks);
  std::vector<std::vector<Matrix>> got(kRanks);
  on_ranks(kRanks, [&](int r) {
    std::mt19937 rng(static_cast<unsigned>(r + 1));
    std::normal_distribution<float> normal;
    for (int call = 0; call < 50; ++call) {
      Matrix m(4, 5);
      for (Index i = 0; i < m.size(); ++i) m.data()[i] = normal(rng) * 1e3f;
      group.all_reduce(r, m);
      got[static_cast<std::size_t>(r)].push_back(m);
    }
  });
  for (int call = 0; call < 50; ++call) {
    EXPECT_EQ(got[1][static_cast<std::size_t>(call)], got[0][static_cast<std::size_t>(call)]);
    EXPECT_EQ(got[2][static_cast<std::size_t>(call)], got[0][static_cast<std::size_t>(call)]);
  }
}

// A group of one exchanges nothing: its calls leave their matrices as they
// are and count no collective (a rank's tally holds what it waited for).
TEST(AllReduce, AGroupOfOneLeavesTheMatrixAndCountsNothing) {
  TensorGroup group(1);
  CollectiveTally tally;
  const CollectiveScope scope(tally);
  Matrix m = Matrix::Constant(3, 2, 1.5f);
  group.all_reduce(0, m);
  EXPECT_EQ(m, Matrix::Constant(3, 2, 1.5f));
  std::vector<Matrix> parts{Matrix::Constant(1, 2, 2.5f)};
  group.all_to_all(0, parts);
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0], Matrix::Constant(1, 2, 2.5f));
  EXPECT_EQ(tally.count, 0);
  EXPECT_EQ(tally.bytes, 0);
  EXPECT_EQ(tally.wall, 0);
}

TEST(AllReduce, ShapesThatDifferFailOnEveryRank) {
  TensorGroup group(2);
  std::atomic<int> failed{0};
  on_ranks(2, [&](int r) {
    Matrix m = Matrix::Zero(2, r + 1);
    try {
      group.all_reduce(r, m);
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("all-reduce of a (2, " + std::to_string(r + 1)),
                std::string::npos)
          << e.what();
      ++failed;
    }
  });
  EXPECT_EQ(failed.load(), 2);
}

TEST(AllReduce, ARankAloneStopsWhenTheStepStopsOrItsLimitPasses) {
  TensorGroup group(2);
  std::atomic<bool> abort{true};
  CollectiveTally tally;
  tally.abort = &abort;
  {
    const CollectiveScope scope(tally);
    Matrix m = Matrix::Zero(1, 1);
    EXPECT_THROW(group.all_reduce(0, m), CollectiveAborted);
  }
  abort = false;
  tally.limit = std::chrono::milliseconds(20);
  const CollectiveScope scope(tally);
  Matrix m = Matrix::Zero(1, 1);
  try {
    group.all_reduce(1, m);
    FAIL() << "a rank alone returned";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "an all-reduce waited 20 ms for the other ranks of its group");
  }
  // Both withdrew: the group still pairs two ranks' next calls.
  tally.limit = CollectiveTally::kDefaultLimit;
  std::vector<Matrix> ms{Matrix::Constant(1, 1, 2.0f), Matrix::Constant(1, 1, 3.0f)};
  on_ranks(2, [&](int r) { group.all_reduce(r, ms[static_cast<std::size_t>(r)]); });
  EXPECT_EQ(ms[0](0, 0), 5.0f);
  EXPECT_EQ(ms[1](0, 0), 5.0f);
}

// ---------------------------------------------------------------- shards

Matrix numbered(Index rows, Index cols) {
  Matrix m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = static_cast<float>(i + 1);
  return m;
}

TEST(Shards, ColumnsOfEachSegmentAndPaddedRowsRoundTrip) {
  // QKV of 2 heads with 1 key/value head of width 2: [Q 4 | K 2 | V 2].
  const ShardRule qkv{ShardRule::Axis::kColumns, {4, 2, 2}};
  const Matrix w = numbered(3, 8);
  const Matrix r1 = shard_value(w, qkv, 2, 1);
  ASSERT_EQ(r1.cols(), 4);
  // Rank 1: Q columns 2-3, K column 5, V column 7.
  EXPECT_EQ(r1.col(0), w.col(2));
  EXPECT_EQ(r1.col(1), w.col(3));
  EXPECT_EQ(r1.col(2), w.col(5));
  EXPECT_EQ(r1.col(3), w.col(7));
  const Matrix r0 = shard_value(w, qkv, 2, 0);
  EXPECT_EQ(unshard_value({&r0, &r1}, qkv, 3, 8), w);

  // A vocabulary of 13 rows over 2 ranks: 7 each, the last one padded.
  const ShardRule vocab{ShardRule::Axis::kRows, {13}};
  const Matrix table = numbered(13, 2);
  const Matrix t0 = shard_value(table, vocab, 2, 0), t1 = shard_value(table, vocab, 2, 1);
  ASSERT_EQ(t1.rows(), 7);
  EXPECT_EQ(t1.topRows(6), table.bottomRows(6));
  EXPECT_EQ(t1.row(6), Matrix::Zero(1, 2));
  EXPECT_EQ(unshard_value({&t0, &t1}, vocab, 13, 2), table);
  EXPECT_THROW(unshard_value({&t0, &t1}, vocab, 12, 2), std::invalid_argument);
}

std::vector<Matrix> whole_values(LayerList& model) {
  std::vector<Matrix> out;
  for (Param* p : params_of(model)) out.push_back(p->value);
  return out;
}

TEST(Shards, TheRanksTogetherAreTheWholeModelExactly) {
  TransformerParams p = tiny_executor_transformer_params(2);
  p.learned_positions = true;
  LayerList whole = build_transformer(p, kSeed);
  const std::vector<LayerList> ranks = build_tensor_ranks(p, kSeed, kT);
  ASSERT_EQ(ranks.size(), 2u);
  const std::vector<Matrix> got = unshard_params({&ranks[0], &ranks[1]});
  const std::vector<Matrix> want = whole_values(whole);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << "param " << i;
  // Each rank holds half the heads, half of d_ff and 7 of the 13 tokens.
  LayerList& r0 = const_cast<LayerList&>(ranks[0]);
  EXPECT_EQ(r0[0]->params()[0]->value.rows(), 7);
  EXPECT_EQ(r0[1]->params()[kQkvWeight]->value.cols(), 3 * 16 / 2);
  EXPECT_EQ(r0[1]->params()[kFc1Weight]->value.cols(), 24 / 2);
  EXPECT_EQ(r0[1]->params()[kProjWeight]->value.rows(), 16 / 2);
  EXPECT_EQ(r0.back()->params()[2]->value.cols(), 7);
}

TEST(Shards, OneRanksShareHasTheSimulatorsParameterCounts) {
  const TransformerParams p = tiny_executor_transformer_params(2);
  const ModelSpec share = make_transformer(p, "tiny", {kT, false});
  LayerList rank = build_layers(share, kSeed);  // build_layers checks the counts too
  ASSERT_EQ(rank.size(), share.layers.size());
  for (std::size_t i = 0; i < rank.size(); ++i) {
    EXPECT_EQ(rank[i]->param_count(), share.layers[i].params) << share.layers[i].name;
  }
}

// ---------------------------------------------------------------- training

// Each rank's stages' parameters put back together, layer by layer.
std::vector<std::vector<float>> whole_params(PipelineRuntime& runtime) {
  std::vector<std::vector<float>> out;
  for (std::size_t s = 0; s < runtime.stages(0).size(); ++s) {
    std::vector<const LayerList*> ranks;
    for (int r = 0; r < runtime.tensor_parallel(); ++r) {
      ranks.push_back(&runtime.stages(r)[s]);
    }
    for (const Matrix& m : unshard_params(ranks)) out.emplace_back(m.data(), m.data() + m.size());
  }
  return out;
}

// Every whole parameter (layer norms, row-split biases, positions) has the
// same bits on every rank.
void expect_whole_params_identical(PipelineRuntime& runtime) {
  for (std::size_t s = 0; s < runtime.stages(0).size(); ++s) {
    LayerList& r0 = runtime.stages(0)[s];
    for (std::size_t l = 0; l < r0.size(); ++l) {
      const std::vector<ShardRule> rules = shard_rules_of(*r0[l]);
      for (std::size_t k = 0; k < rules.size(); ++k) {
        if (rules[k].axis != ShardRule::Axis::kWhole) continue;
        for (int r = 1; r < runtime.tensor_parallel(); ++r) {
          EXPECT_EQ(runtime.stages(r)[s][l]->params()[k]->value, r0[l]->params()[k]->value)
              << r0[l]->params()[k]->name << " on rank " << r;
        }
      }
    }
  }
}

Trace tensor_parallel(const TransformerParams& p, const TaskShape& task, const Case& c) {
  std::vector<std::vector<LayerList>> ranks;
  for (LayerList& rank : build_tensor_ranks(p, kSeed, kT)) {
    const int L = static_cast<int>(rank.size());
    ranks.push_back(cut_into_stages(std::move(rank), partition_uniform(L, c.K * c.chunks)));
  }
  RuntimeOptions options;
  options.optimizer = momentum();
  PipelineRuntime runtime(std::move(ranks),
                          schedule_of(c.K, c.M, c.remat, c.schedule, c.chunks, c.split_custom),
                          options);
  Trace t;
  for (int step = 0; step < kSteps; ++step) {
    const StepResult r =
        runtime.step(synthetic_batch(task, kBatch, c.M, static_cast<std::uint64_t>(step), kSeed));
    t.losses.push_back(r.loss);
  }
  t.params = whole_params(runtime);
  expect_whole_params_identical(runtime);
  return t;
}

class TensorParallel : public ::testing::TestWithParam<Case> {};

TEST_P(TensorParallel, TwoRanksAStageMatchSingleDeviceTraining) {
  const TransformerParams p = tiny_executor_transformer_params();
  const TaskShape task = task_of(p);
  const Trace want = single_device(build_transformer(p, kSeed), task, momentum());
  expect_same(want, tensor_parallel(p, task, GetParam()));
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (int K : {1, 2}) {
    for (int M : {1, 2, 4}) {
      for (const Remat remat : kScheduleRemats) {
        for (const ScheduleKind s : kAllSchedules) {
          if (!takes_chunks(s) && s != ScheduleKind::kCustom) out.push_back({K, M, remat, s});
        }
      }
    }
  }
  // Several stages a device, and the custom (action-list) schedules.
  out.push_back({1, 2, Remat::kNever, ScheduleKind::kInterleaved1F1B, 2});
  out.push_back({2, 4, Remat::kAlways, ScheduleKind::kInterleaved1F1B, 3});
  out.push_back({2, 1, Remat::kExceptLast, ScheduleKind::kLoopedBfs, 2});
  out.push_back({2, 4, Remat::kNever, ScheduleKind::kZbV, 2});
  out.push_back({1, 4, Remat::kAlways, ScheduleKind::kZbV, 2});
  out.push_back({2, 2, Remat::kExceptLast, ScheduleKind::kInterleavedZb, 2});
  out.push_back({1, 2, Remat::kAlways, ScheduleKind::kDualPipeV, 2});
  out.push_back({2, 4, Remat::kNever, ScheduleKind::kDualPipeV, 2});
  out.push_back({2, 4, Remat::kExceptLast, ScheduleKind::kCustom, 1, true});
  out.push_back({2, 2, Remat::kNever, ScheduleKind::kCustom, 2, false});
  return out;
}

INSTANTIATE_TEST_SUITE_P(KxMxRemat, TensorParallel, ::testing::ValuesIn(cases()),
                         [](const auto& param_info) {
                           const Case& c = param_info.param;
                           return "K" + std::to_string(c.K) + "M" + std::to_string(c.M) +
                                  remat_test_name(c.remat) + schedule_test_name(c.schedule) +
                                  (c.chunks > 1 ? "V" + std::to_string(c.chunks) : "") +
                                  (c.split_custom ? "Split" : "");
                         });

TEST(TensorParallelModels, GroupedQueryAttentionAndLearnedPositionsMatchToo) {
  TransformerParams p = tiny_executor_transformer_params(2);
  p.heads = 4;
  p.kv_heads = 2;
  p.learned_positions = true;
  const TaskShape task = task_of(p);
  const Trace want = single_device(build_transformer(p, kSeed), task, momentum());
  expect_same(want, tensor_parallel(p, task, {2, 2, Remat::kNever, ScheduleKind::k1F1B}));
}

// ---------------------------------------------------------------- the timeline

TEST(TensorParallelTimeline, EveryForwardRecomputeAndBackwardRecordsItsAllReduces) {
  const TransformerParams p = tiny_executor_transformer_params(2);  // embed, 2 blocks, head
  std::vector<std::vector<LayerList>> ranks;
  for (LayerList& rank : build_tensor_ranks(p, kSeed, kT)) {
    ranks.push_back(cut_into_stages(std::move(rank), partition_uniform(4, 2)));
  }
  RuntimeOptions options;
  options.optimizer = momentum();
  constexpr int M = 2;
  PipelineRuntime runtime(std::move(ranks),
                          build_schedule(ScheduleKind::kGpipe, 2, M, Remat::kAlways), options);
  const StepResult r = runtime.step(synthetic_batch(task_of(p), kBatch, M, 0, kSeed));
  // Per micro-batch of 4 sequences of 5 tokens, h = 16, fp32: stage 0 (embed,
  // block) forward h + 2h per token, backward 2h; stage 1 (block, head)
  // forward 2h + 3, backward 2h + h.
  const Bytes tokens = 4 * 5, h = 16;
  const auto bytes = [&](Bytes per_token) { return tokens * per_token * 4; };
  int events = 0;
  for (const TimelineEvent& e : r.timeline.events) {
    if (e.lane != Lane::kTensor) continue;
    ++events;
    EXPECT_EQ(e.kind, EventKind::kTensorAllReduce);
    EXPECT_LE(e.start, e.end);
    const bool backward = std::any_of(
        r.timeline.events.begin(), r.timeline.events.end(), [&](const TimelineEvent& c) {
          return c.lane == Lane::kCompute && c.kind == EventKind::kBackward && c.stage == e.stage &&
                 c.micro_batch == e.micro_batch && c.end == e.start;
        });
    const Bytes want = e.stage == 0 ? (backward ? bytes(2 * h) : bytes(3 * h))
                                    : (backward ? bytes(3 * h) : bytes(2 * h + 3));
    EXPECT_EQ(e.bytes, want) << "stage " << e.stage << (backward ? " B" : " F/R");
  }
  // F, R and B of each micro-batch on each stage; W and the optimizer none.
  EXPECT_EQ(events, 2 * M * 3);
}

// ---------------------------------------------------------------- refusals

TEST(TensorParallelRefusals, TheRuntimeRunsRanksAsHostThreadsOnly) {
  const TransformerParams p = tiny_executor_transformer_params(2);
  const auto ranks_on = [&]() {
    std::vector<std::vector<LayerList>> ranks;
    for (LayerList& rank : build_tensor_ranks(p, kSeed, kT)) {
      ranks.push_back(cut_into_stages(std::move(rank), partition_uniform(4, 1)));
    }
    return ranks;
  };
  RuntimeOptions with_transport;
  with_transport.transport = std::make_shared<InProcessTransport>();
  try {
    PipelineRuntime(ranks_on(), build_schedule(ScheduleKind::kGpipe, 1, 1, Remat::kNever),
                    with_transport);
    FAIL() << "accepted another transport";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "tensor parallelism (T=2) runs its ranks as threads of one process on the host, "
                 "with in-process channels, not another transport");
  }
  std::vector<std::vector<LayerList>> uneven = ranks_on();
  uneven[1].push_back(LayerList{});
  EXPECT_THROW(PipelineRuntime(std::move(uneven),
                               build_schedule(ScheduleKind::kGpipe, 1, 1, Remat::kNever), {}),
               std::invalid_argument);
}

TEST(TensorParallelRefusals, ASplitTheHeadsOrTheMlpDoNotAllowIsNamed) {
  TransformerParams p = tiny_executor_transformer_params(2);
  try {
    build_tensor_ranks(p, kSeed, 3);
    FAIL() << "T=3 accepted for 2 heads";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "3 tensor-parallel ranks do not divide heads 2");
  }
  p.heads = 4;
  p.d_ff = 26;
  try {
    build_tensor_ranks(p, kSeed, 4);
    FAIL() << "T=4 accepted for d_ff 26";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "4 tensor-parallel ranks do not divide d_ff 26");
  }
}

// A plan of `model` (whole) with T = 2, one stage.
Plan plan_with_t2(const ModelSpec& whole) {
  Plan p;
  p.scenario_name = "tiny";
  p.model_name = whole.name;
  p.model_spec = model_spec_json(whole);
  p.tensor_parallel = 2;
  p.stages = 1;
  p.devices = 2;
  p.micro_batches = 1;
  p.micro_batch_size = 2;
  p.global_batch = 2;
  PlanStage st;
  st.layers = {0, static_cast<int>(whole.layers.size()) - 1};
  p.stage_plans.push_back(st);
  return p;
}

TEST(TensorParallelRefusals, PlansTheExecutorCannotSplitAreNamedByField) {
  MlpParams mp;
  mp.layers = 2;
  mp.d_model = 8;
  const Plan mlp = plan_with_t2(make_mlp(mp, "tiny-mlp"));
  try {
    plan_model(mlp, "mlp.json");
    FAIL() << "an mlp at T=2 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "mlp.json: T: the executor splits transformers over tensor ranks; model "
                 "'tiny-mlp' is of family mlp (expected T=1)");
  }
  Plan sp = plan_with_t2(make_transformer(tiny_executor_transformer_params(2), "tiny"));
  sp.sequence_parallel = true;
  EXPECT_THROW(plan_model(sp, "sp.json"), std::invalid_argument);
  // Context parallelism: the plan's model is one share of each sequence, run
  // on the cpu backend alone (tests/exec/context_parallel_test.cpp trains it).
  TransformerParams long_sequences = tiny_executor_transformer_params(2);
  long_sequences.seq_len = 8;
  Plan cp = plan_with_t2(make_transformer(long_sequences, "tiny"));
  cp.context_parallel = 2;
  cp.devices = 4;
  EXPECT_EQ(plan_model(cp, "cp.json").context_parallel, 2);
  try {
    check_tensor_parallel_backend(cp, "cp.json", "cuda");
    FAIL() << "cuda accepted C=2";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("cp.json: C: --backend cuda runs each sample's whole "
                                         "sequence on a device"),
              std::string::npos)
        << e.what();
  }
  const Plan t2 = plan_with_t2(make_transformer(tiny_executor_transformer_params(2), "tiny"));
  // The plan's model is one rank's share.
  EXPECT_EQ(plan_model(t2, "t2.json").tensor_parallel, 2);
  try {
    check_tensor_parallel_backend(t2, "t2.json", "cuda");
    FAIL() << "cuda accepted T=2";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "t2.json: T: --backend cuda runs whole layers on each device, and this plan "
                 "splits them over T=2 devices (tensor parallelism); the cpu backend runs it (a "
                 "thread per tensor rank), or plan with -T 1");
  }
  EXPECT_NO_THROW(check_tensor_parallel_backend(t2, "t2.json", "cpu"));
  try {
    check_requested_tensor_parallel(t2, "t2.json", 4);
    FAIL() << "-T 4 accepted for a T=2 plan";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "-T 4: t2.json splits each layer over T=2 (its \"T\"); make a plan with "
                 "`pipescope plan ... -T 4 -o PLAN` to run that");
  }
  EXPECT_NO_THROW(check_requested_tensor_parallel(t2, "t2.json", 2));
  PlanRunOptions o;
  o.steps = 1;
  o.transport = std::make_shared<InProcessTransport>();
  try {
    run_plan(t2, plan_model(t2, "t2.json"), o);
    FAIL() << "a transport accepted for T=2";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "T=2: tensor parallelism runs on the cpu backend only (a thread per tensor rank)");
  }
}

// What the executor cannot run it refuses at T=2 too, where the ranks are
// built without build_layers.
TEST(TensorParallelRefusals, ModelsTheExecutorCannotRunAreRefusedAtT2) {
  TransformerParams p = tiny_executor_transformer_params(2);
  p.head_dim = 2 * p.d_model / p.heads;
  const Plan wide = plan_with_t2(make_transformer(p, "wide"));
  PlanRunOptions o;
  o.steps = 1;
  try {
    run_plan(wide, plan_model(wide, "w.json"), o);
    FAIL() << "heads twice d_model / heads wide ran at T=2";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("the executor cannot run model 'wide': its attention "
                                         "heads are"),
              std::string::npos)
        << e.what();
  }
}

TEST(TensorParallelPlans, RunPlanTrainsTheRanksAsTheWholeModelWould) {
  const TransformerParams p = tiny_executor_transformer_params(2);
  Plan t2 = plan_with_t2(make_transformer(p, "tiny"));
  t2.global_batch = 4;
  t2.micro_batches = 2;
  t2.optimizer = Optimizer::kMomentum;
  PlanRunOptions o;
  o.steps = 3;
  o.seed = kSeed;
  const std::vector<StepResult> steps = run_plan(t2, plan_model(t2, "t2.json"), o);
  ASSERT_EQ(steps.size(), 3u);
  // The same steps on one device: the whole model, the same data and optimizer.
  const std::vector<double> want = whole_model_losses(p, 3, 4, o.learning_rate);
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(steps[i].loss, want[i], 1e-5 * std::abs(want[i])) << "step " << i;
  }
}

}  // namespace
}  // namespace pipescope::exec
