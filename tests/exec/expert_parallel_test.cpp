// Expert parallelism in the executor: each stage's E ranks are data-parallel
// replicas holding experts / E of each mixture's experts (exec/expert_shard.h,
// exec/compute/moe_layers.h), the tokens dispatched to their experts' ranks
// and combined back by all-to-alls, every other gradient summed before each
// optimizer step. Training with E = 2 and E = 4, and with E = 2 expert ranks
// of C = 2 shares of each sequence, matches single-device training of the
// whole model (relative 1e-5, as the pipeline consistency tests); the ranks'
// copies of every shared parameter stay identical; what cannot be split is
// refused.

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
#include "exec/compute/moe_layers.h"
#include "exec/data.h"
#include "exec/expert_shard.h"
#include "exec/models.h"
#include "exec/plan_runner.h"
#include "exec/runtime.h"
#include "sim/engine/partition.h"

namespace pipescope::exec {
namespace {

using namespace consistency;

// The tiny transformer with four experts of width 12, two a token, block 0
// dense, and a shared expert of width 8 when asked.
TransformerParams params(std::int64_t shared = 0) {
  TransformerParams p = testing::tiny_executor_transformer_params(3);
  p.moe = {4, 2, 12, shared, 1, 1.0};
  return p;
}

// Share 0's parameters with every expert rank's experts, in the whole
// model's order (ranks e C + c: share c of expert rank e).
std::vector<std::vector<float>> whole_params(PipelineRuntime& runtime, int E, int C = 1) {
  std::vector<std::vector<float>> out;
  for (std::size_t s = 0; s < runtime.stages(0).size(); ++s) {
    std::vector<const LayerList*> ranks;
    for (int e = 0; e < E; ++e) ranks.push_back(&runtime.stages(e * C)[s]);
    for (const Matrix& m : whole_expert_params(ranks))
      out.emplace_back(m.data(), m.data() + m.size());
  }
  return out;
}

// Every rank holds rank 0's values of every parameter but its experts, and
// its expert rank's first share's of those.
void expect_shared_params_identical(PipelineRuntime& runtime, int E, int C = 1) {
  for (int r = 1; r < E * C; ++r) {
    for (std::size_t s = 0; s < runtime.stages(0).size(); ++s) {
      const LayerList& mine = runtime.stages(r)[s];
      const LayerList& first = runtime.stages(0)[s];
      const LayerList& share0 = runtime.stages(r - r % C)[s];
      for (std::size_t l = 0; l < mine.size(); ++l) {
        for (std::size_t k = 0; k < mine[l]->params().size(); ++k) {
          const Param& q = *mine[l]->params()[k];
          const Param& want = q.expert ? *share0[l]->params()[k] : *first[l]->params()[k];
          EXPECT_EQ(q.value, want.value) << q.name << " on rank " << r;
        }
      }
    }
  }
}

// E expert ranks, each of C shares of every sequence (C > 1: every block
// attending round the ring of its expert rank's shares, or trading heads
// among them with `by_heads`; each mixture's tokens going to the E ranks of
// their share).
Trace expert_parallel(const TransformerParams& p, int E, const Case& c, int C = 1,
                      bool by_heads = false) {
  std::vector<std::vector<LayerList>> ranks;
  for (LayerList& rank : build_expert_ranks(p, kSeed, E, nullptr, C, by_heads)) {
    const int L = static_cast<int>(rank.size());
    ranks.push_back(cut_into_stages(std::move(rank), partition_uniform(L, c.K * c.chunks)));
  }
  RuntimeOptions options;
  options.optimizer = momentum();
  PipelineRuntime runtime(std::move(ranks),
                          schedule_of(c.K, c.M, c.remat, c.schedule, c.chunks, c.split_custom),
                          options, C, E);
  Trace t;
  for (int step = 0; step < kSteps; ++step) {
    // kBatch samples a micro-batch of each of the M: the E ranks take kBatch / E each.
    const StepResult r = runtime.step(
        synthetic_batch(task_of(p), kBatch * c.M, c.M, static_cast<std::uint64_t>(step), kSeed));
    t.losses.push_back(r.loss);
  }
  t.params = whole_params(runtime, E, C);
  expect_shared_params_identical(runtime, E, C);
  return t;
}

Trace whole(const TransformerParams& p, int M) {
  LayerList model = build_transformer(p, kSeed);
  Trace t;
  t.losses = train_reference(model, momentum(), kSteps, [&](int step) {
    return whole_batch(task_of(p), kBatch * M, static_cast<std::uint64_t>(step), kSeed);
  });
  t.params = values({&model});
  return t;
}

TEST(ExpertParallelTraining, TwoRanksMatchSingleDeviceTraining) {
  const TransformerParams p = params();
  expect_same(whole(p, 1), expert_parallel(p, 2, {1, 1, Remat::kNever, ScheduleKind::kGpipe}));
  expect_same(whole(p, 2), expert_parallel(p, 2, {2, 2, Remat::kAlways, ScheduleKind::k1F1B}));
  expect_same(whole(p, 2), expert_parallel(p, 2, {2, 2, Remat::kNever, ScheduleKind::kZbH1}));
}

TEST(ExpertParallelTraining, FourRanksOfOneExpertWithASharedExpertMatchToo) {
  const TransformerParams p = params(8);
  expect_same(whole(p, 2), expert_parallel(p, 4, {2, 2, Remat::kExceptLast, ScheduleKind::k1F1B}));
}

// The tiny mixture with sequences of 8 tokens (2C chunks for C = 2).
TransformerParams long_params(std::int64_t shared = 0) {
  TransformerParams p = params(shared);
  p.seq_len = 8;
  return p;
}

TEST(ExpertContextParallelTraining, TwoExpertRanksOfTwoSharesMatchSingleDeviceTraining) {
  const TransformerParams p = long_params();
  expect_same(whole(p, 1), expert_parallel(p, 2, {1, 1, Remat::kNever, ScheduleKind::kGpipe}, 2));
  expect_same(whole(p, 2), expert_parallel(p, 2, {2, 2, Remat::kAlways, ScheduleKind::k1F1B}, 2));
  expect_same(whole(p, 2), expert_parallel(p, 2, {2, 2, Remat::kNever, ScheduleKind::kZbH1}, 2));
}

TEST(ExpertContextParallelTraining, SharesTradingHeadsAndOneExpertRankMatchToo) {
  const TransformerParams p = long_params(8);
  // The all-to-all form of the shares' attention, with a shared expert.
  expect_same(whole(p, 2),
              expert_parallel(p, 2, {2, 2, Remat::kExceptLast, ScheduleKind::k1F1B}, 2, true));
  // A mixture over the shares of each sequence alone (E = 1), whole experts
  // on every share.
  expect_same(whole(p, 2), expert_parallel(p, 1, {2, 2, Remat::kNever, ScheduleKind::k1F1B}, 2));
}

TEST(ExpertParallelTraining, EachRanksComputeAndCollectivesAreMeasured) {
  // E = 2 ranks on each of K = 2 devices: the step reports all four workers,
  // the timeline rank 0's alone.
  const TransformerParams p = params();
  constexpr int E = 2, K = 2, M = 2;
  std::vector<std::vector<LayerList>> ranks;
  for (LayerList& rank : build_expert_ranks(p, kSeed, E)) {
    const int L = static_cast<int>(rank.size());
    ranks.push_back(cut_into_stages(std::move(rank), partition_uniform(L, K)));
  }
  RuntimeOptions options;
  options.optimizer = momentum();
  PipelineRuntime runtime(std::move(ranks),
                          schedule_of(K, M, Remat::kNever, ScheduleKind::k1F1B, 1, false), options,
                          1, E);
  const StepResult r = runtime.step(synthetic_batch(task_of(p), kBatch * M, M, 0, kSeed));
  ASSERT_EQ(r.ranks.size(), static_cast<std::size_t>(K * E));
  for (std::size_t i = 0; i < r.ranks.size(); ++i) {
    const RankBusy& b = r.ranks[i];
    EXPECT_EQ(b.device, static_cast<int>(i) / E);
    EXPECT_EQ(b.rank, static_cast<int>(i) % E);
    EXPECT_GT(b.compute, 0);
    // Each rank's gradients are summed with the other's before its step.
    EXPECT_GT(b.collectives, 0);
  }
  // Rank 0's figures are its timeline's.
  for (int d = 0; d < K; ++d) {
    SimTime compute = 0, collectives = 0;
    for (const TimelineEvent& e : r.timeline.events) {
      if (e.device != d) continue;
      if (e.lane == Lane::kCompute) compute += e.end - e.start;
      if (e.lane == Lane::kTensor) collectives += e.end - e.start;
    }
    EXPECT_EQ(r.ranks[static_cast<std::size_t>(d * E)].compute, compute) << "device " << d;
    EXPECT_EQ(r.ranks[static_cast<std::size_t>(d * E)].collectives, collectives) << "device " << d;
  }
}

// Three ranks, each sending every other a part of its own size: rank r's
// part for d is r rows of d + 10 r (none from rank 0).
TEST(AllToAll, EachRankGetsWhatEveryRankSentIt) {
  constexpr int kRanks = 3;
  TensorGroup group(kRanks);
  std::vector<std::vector<Matrix>> got(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      std::vector<Matrix> parts;
      for (int d = 0; d < kRanks; ++d) {
        parts.push_back(Matrix::Constant(r, 2, static_cast<float>(d + 10 * r)));
      }
      group.all_to_all(r, parts);
      got[static_cast<std::size_t>(r)] = std::move(parts);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int d = 0; d < kRanks; ++d) {
    for (int r = 0; r < kRanks; ++r) {
      const Matrix& part = got[static_cast<std::size_t>(d)][static_cast<std::size_t>(r)];
      EXPECT_EQ(part, Matrix::Constant(r, 2, static_cast<float>(d + 10 * r)))
          << "rank " << d << " from " << r;
    }
  }
  // A group of one hands the parts back as they are, however many.
  TensorGroup one(1);
  std::vector<Matrix> parts{Matrix::Constant(1, 2, 1.0f), Matrix::Constant(2, 2, 2.0f)};
  one.all_to_all(0, parts);
  EXPECT_EQ(parts[1], Matrix::Constant(2, 2, 2.0f));
  std::vector<Matrix> two(2);
  EXPECT_THROW(group.all_to_all(0, two), std::invalid_argument);
}

// The ranks' layers put back together are the whole model, and each rank
// holds what the simulator counts for a device under E-way expert parallelism.
TEST(ExpertShards, RanksAreTheWholeModelCut) {
  const TransformerParams p = params(8);
  LayerList model = build_transformer(p, kSeed);
  std::vector<LayerList> ranks = build_expert_ranks(p, kSeed, 2);
  const std::vector<Matrix> parts = whole_expert_params({&ranks[0], &ranks[1]});
  std::vector<Matrix> want;
  for (auto& layer : model) {
    for (const Param* q : layer->params()) want.push_back(q->value);
  }
  ASSERT_EQ(parts.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_EQ(parts[i], want[i]) << "parameter " << i;
  TensorSplit split;
  split.experts = 2;
  const ModelSpec spec = make_transformer(p, "tiny", split);
  ASSERT_EQ(spec.layers.size(), ranks[1].size());
  for (std::size_t l = 0; l < ranks[1].size(); ++l) {
    EXPECT_EQ(ranks[1][l]->param_count(), spec.layers[l].params) << spec.layers[l].name;
  }
  const auto& block = dynamic_cast<const MoeBlock&>(*ranks[1][2]);
  EXPECT_EQ(block.math().param_shapes().back().name, "expert3.fc2.bias");
}

// One rank failing in a forward while the other waits in a mixture's
// all-to-all stops the step (no hang); the next steps train as a fresh
// runtime's do.
TEST(ExpertParallelFaults, AFailedRankStopsTheOthersExchanges) {
  const TransformerParams p = params();
  const auto runtime = [&](std::function<void(int, const Op&)> before_op) {
    std::vector<std::vector<LayerList>> ranks;
    for (LayerList& rank : build_expert_ranks(p, kSeed, 2)) {
      ranks.push_back(cut_into_stages(std::move(rank), partition_uniform(5, 1)));
    }
    RuntimeOptions options;
    options.optimizer = momentum();
    options.watchdog = std::chrono::milliseconds(20000);
    options.before_op = std::move(before_op);
    return std::make_unique<PipelineRuntime>(
        std::move(ranks), build_schedule(ScheduleKind::kGpipe, 1, 2, Remat::kNever), options, 1, 2);
  };
  // The first rank to reach F(0,1) fails there once the other has gone on
  // into the block's all-to-all.
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
      t.losses.push_back(rt.step(synthetic_batch(task_of(p), 2 * kBatch, 2,
                                                 static_cast<std::uint64_t>(step), kSeed))
                             .loss);
    }
    t.params = whole_params(rt, 2);
    return t;
  };
  try {
    faulty->step(synthetic_batch(task_of(p), 2 * kBatch, 2, 0, kSeed));
    ADD_FAILURE() << "the fault did not stop the step";
  } catch (const StageError& e) {
    EXPECT_NE(std::string(e.what()).find("injected fault"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(expert rank "), std::string::npos) << e.what();
  }
  armed = false;
  expect_same(train(*runtime(nullptr)), train(*faulty));
}

TEST(ExpertParallelRefusals, WhatCannotBeSplit) {
  TransformerParams dense = testing::tiny_executor_transformer_params(2);
  EXPECT_THROW(build_expert_ranks(dense, kSeed, 2), std::invalid_argument);     // no experts
  EXPECT_THROW(build_expert_ranks(params(), kSeed, 3), std::invalid_argument);  // 3 of 4 experts
  // Micro-batches of 3 samples over 2 ranks.
  std::vector<std::vector<LayerList>> ranks;
  for (LayerList& rank : build_expert_ranks(params(), kSeed, 2)) {
    ranks.push_back(cut_into_stages(std::move(rank), partition_uniform(5, 1)));
  }
  PipelineRuntime runtime(std::move(ranks),
                          build_schedule(ScheduleKind::kGpipe, 1, 1, Remat::kNever),
                          RuntimeOptions{}, 1, 2);
  try {
    runtime.step(synthetic_batch(task_of(params()), 3, 1, 0, kSeed));
    ADD_FAILURE() << "3 samples split over 2 ranks";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("3 samples do not split over E = 2 expert ranks"),
              std::string::npos)
        << e.what();
  }
  // Beside context parallelism, 2C chunks must cut the sequences.
  TransformerParams p = long_params();
  p.seq_len = 6;  // 2C = 4 chunks do not cut sequences of 6
  EXPECT_THROW(build_expert_ranks(p, kSeed, 2, nullptr, 2), std::invalid_argument);
  // Elsewhere than the cpu backend's threads and the mpi backend's
  // processes, by name.
  Plan plan;
  plan.expert_parallel = 2;
  try {
    check_tensor_parallel_backend(plan, "ep.json", "cuda");
    ADD_FAILURE() << "the cuda backend accepted E=2";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("ep.json: E: --backend cuda runs each replica's experts"),
              std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(check_tensor_parallel_backend(plan, "ep.json", "mpi"));
  plan.context_parallel = 2;  // both: threads, or processes
  EXPECT_NO_THROW(check_tensor_parallel_backend(plan, "ep.json", "cpu"));
  EXPECT_NO_THROW(check_tensor_parallel_backend(plan, "ep.json", "mpi"));
  EXPECT_THROW(check_tensor_parallel_backend(plan, "ep.json", "cuda"), std::invalid_argument);
  // DeepEP's dispatch is not the executor's all-to-all: refused before the
  // model is read.
  plan.moe_dispatcher = MoeDispatcher::kDeepEp;
  try {
    plan_model(plan, "ep.json");
    ADD_FAILURE() << "the executor took a plan of DeepEP";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("ep.json: moe_dispatcher: the executor exchanges", 0), 0u)
        << e.what();
  }
}

}  // namespace
}  // namespace pipescope::exec
