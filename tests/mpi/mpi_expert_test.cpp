// Expert parallelism over MPI: each device's E expert ranks as processes of
// their own (exec/mpi/mpi_group_link.h), rank e K + d running expert rank e of
// device d. Under `mpirun -np 2` one device of E = 2, under `-np 4` K = 2
// devices of E = 2, and one device of E = 2 expert ranks of C = 2 shares. Every process also trains
// the same model with the threaded runtime (E threads a device) and checks that the job's losses
// and the parameters of its rank's stages agree within 1e-6 (relative). Before that, the linked
// group's collectives against hand-computed values over the whole job; and the profile's
// measurement of the ranks' load.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "../tiny_models.h"
#include "exec/compute/tensor_group.h"
#include "exec/expert_shard.h"
#include "exec/mpi/mpi_group_link.h"
#include "exec/mpi/mpi_group_profile.h"
#include "exec/mpi/mpi_transport.h"
#include "mpi_group_training.h"

namespace pipescope::exec {
namespace mpi_expert {  // named: the tests' unity build joins the runtime test's file

constexpr int kE = 2;
constexpr std::uint64_t kSeed = 11;

// Rank r's matrix holds r + 1 everywhere but its last entry, r: the sum is
// n(n+1)/2 and n(n-1)/2, the maximum n and n - 1.
TEST(MpiGroupLink, AllReducesInRankOrderOnEveryProcess) {
  TensorGroup group(mpi_group::whole_job());
  const int n = MpiSession::size(), r = MpiSession::rank();
  ASSERT_EQ(group.ranks(), n);
  Matrix m = Matrix::Constant(2, 3, static_cast<float>(r + 1));
  m(1, 2) = static_cast<float>(r);
  Matrix max = m;
  group.all_reduce(r, m);
  group.all_reduce(r, max, TensorGroup::Reduce::kMax);
  EXPECT_EQ(m(0, 0), static_cast<float>(n * (n + 1) / 2));
  EXPECT_EQ(m(1, 2), static_cast<float>(n * (n - 1) / 2));
  EXPECT_EQ(max(0, 1), static_cast<float>(n));
  EXPECT_EQ(max(1, 2), static_cast<float>(n - 1));
  // Another process's rank is refused; a shape that differs, on every rank.
  Matrix other = Matrix::Zero(1, 1);
  EXPECT_THROW(group.all_reduce((r + 1) % n, other), std::invalid_argument);
  Matrix odd = Matrix::Zero(r == 0 ? 2 : 1, 1);
  try {
    group.all_reduce(r, odd);
    ADD_FAILURE() << "shapes (2, 1) and (1, 1) reduced";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("met one of"), std::string::npos) << e.what();
  }
}

// Rank s sends rank d a part of s + d rows (none from rank 0 to itself), each
// entry 100 s + d: rank r receives from s that part.
TEST(MpiGroupLink, AllToAllDeliversEachPartToItsRank) {
  TensorGroup group(mpi_group::whole_job());
  const int n = MpiSession::size(), r = MpiSession::rank();
  std::vector<Matrix> parts;
  for (int d = 0; d < n; ++d)
    parts.push_back(Matrix::Constant(r + d, 3, static_cast<float>(100 * r + d)));
  CollectiveTally tally;
  {
    CollectiveScope scope(tally);
    group.all_to_all(r, parts);
  }
  ASSERT_EQ(parts.size(), static_cast<std::size_t>(n));
  std::int64_t from_others = 0;
  for (int s = 0; s < n; ++s) {
    const Matrix& got = parts[static_cast<std::size_t>(s)];
    ASSERT_EQ(got.rows(), s + r) << "from " << s;
    ASSERT_EQ(got.cols(), 3);
    if (got.size() > 0) {
      EXPECT_EQ(got.minCoeff(), static_cast<float>(100 * s + r));
      EXPECT_EQ(got.maxCoeff(), static_cast<float>(100 * s + r));
    }
    if (s != r) from_others += got.size();
  }
  EXPECT_EQ(tally.count, 1);
  EXPECT_EQ(tally.bytes, from_others * static_cast<std::int64_t>(sizeof(float)));
}

// A collective that the other ranks do not join in time gives up at its
// tally's limit, naming whom it waited for, and the group refuses the next
// one (the processes would pair it with the one given up); one the step
// stops ends at once. Rank 0 calls them; the others then complete the
// first phase rank 0 left with MPI (each all-to-all first trades its
// parts' sizes), so that the job ends with nothing pending.
TEST(MpiGroupLink, ACollectiveNobodyJoinsGivesUp) {
  const auto link = std::static_pointer_cast<MpiGroupLink>(mpi_group::whole_job());
  const auto stopped = std::static_pointer_cast<MpiGroupLink>(mpi_group::whole_job());
  const int n = MpiSession::size(), r = MpiSession::rank();
  const std::vector<GroupLink::Bytes> parts(static_cast<std::size_t>(n),
                                            GroupLink::Bytes(4, std::byte{7}));
  if (r == 0) {
    CollectiveTally tally;
    tally.limit = std::chrono::milliseconds(50);
    try {
      (void)link->all_to_all(parts, &tally, "an all-to-all");
      ADD_FAILURE() << "an all-to-all returned without the other ranks";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(
          std::string(e.what()).find("an all-to-all waited 50 ms for the other ranks of its group"),
          std::string::npos)
          << e.what();
    }
    try {
      (void)link->all_gather(parts[0], &tally, "an all-gather");
      ADD_FAILURE() << "a group whose collective was given up ran another";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(
                    "an all-gather on a group whose earlier collective was given up"),
                std::string::npos)
          << e.what();
    }
    std::atomic<bool> stop{true};
    tally.abort = &stop;
    tally.limit = std::chrono::milliseconds(60000);
    EXPECT_THROW((void)stopped->all_to_all(parts, &tally, "an all-to-all"), CollectiveAborted);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (r != 0) {  // the sizes' trade rank 0 left pending, on each group
    for (const auto& group : {link, stopped}) {
      std::vector<int> sizes(static_cast<std::size_t>(n), 4), got(static_cast<std::size_t>(n));
      // Non-blocking, as a blocking collective does not match one that is not.
      MPI_Request request = MPI_REQUEST_NULL;
      MPI_Ialltoall(sizes.data(), 1, MPI_INT, got.data(), 1, MPI_INT, group->communicator(),
                    &request);
      MPI_Wait(&request, MPI_STATUS_IGNORE);
      EXPECT_EQ(got[0], 4);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// The job split in two by rank parity (ranked by rank, descending): each
// half's all-reduce sums its own ranks alone, and its ranks are renumbered.
TEST(MpiGroupLink, ASplitLinksEachColoursRanksAlone) {
  const std::shared_ptr<GroupLink> whole = mpi_group::whole_job();
  const int n = MpiSession::size(), r = MpiSession::rank();
  const std::shared_ptr<GroupLink> half = whole->split(r % 2, -r);
  const int mine = (n - r % 2 + 1) / 2;  // ranks of this parity
  ASSERT_EQ(half->ranks(), mine);
  EXPECT_EQ(half->rank(), (mine - 1) - r / 2);
  TensorGroup group(half);
  Matrix m = Matrix::Constant(1, 2, static_cast<float>(r));
  group.all_reduce(half->rank(), m);
  float want = 0.0f;
  for (int q = r % 2; q < n; q += 2) want += static_cast<float>(q);
  EXPECT_EQ(m(0, 1), want);
}

// The tiny transformer with four experts of width 12, two a token, block 0
// dense (the executor's expert tests' model).
TransformerParams mixture() {
  TransformerParams p = testing::tiny_executor_transformer_params(3);
  p.moe = {4, 2, 12, 0, 1, 1.0};
  return p;
}

// E = 2 expert ranks of the mixture, over MPI or as threads.
mpi_group::GroupModel experts() {
  mpi_group::GroupModel g;
  g.params = mixture();
  g.expert_parallel = kE;
  g.samples = 4 * kE;
  g.seed = kSeed;
  g.build = [p = g.params](const std::shared_ptr<GroupLink>& link) {
    return build_expert_ranks(p, kSeed, kE, link);
  };
  return g;
}

TEST(MpiExpertParallel, GpipeMatchesTheThreadedBackend) {
  mpi_group::expect_threaded_training(experts(), ScheduleKind::kGpipe, Remat::kNever);
}

TEST(MpiExpertParallel, OneFOneBWithRematMatchesTheThreadedBackend) {
  mpi_group::expect_threaded_training(experts(), ScheduleKind::k1F1B, Remat::kAlways);
}

// E = 2 expert ranks of C = 2 shares of each sequence (sequences of 8): the
// four processes of a device (under -np 4) meet round their expert rank's
// ring and in their share's mixtures over links split from the device's.
TEST(MpiExpertParallel, ExpertRanksOfSharesMatchTheThreadedBackend) {
  mpi_group::GroupModel g = experts();
  g.params.seq_len = 8;
  g.context_parallel = 2;
  g.build = [p = g.params](const std::shared_ptr<GroupLink>& link) {
    return build_expert_ranks(p, kSeed, kE, link, 2);
  };
  mpi_group::expect_threaded_training(g, ScheduleKind::k1F1B, Remat::kAlways);
}

// The expert ranks' load and all-to-all as E = 2 of the job's processes
// measure them (measure_mpi_experts): with every token sent to every expert
// each rank's experts receive the same rows (the busiest exactly the mean,
// nothing extra); the top-2 router loads one rank more; rank 0 alone keeps
// the figures; a model without expert ranks measures nothing.
TEST(MpiExpertParallel, TheProcessesMeasureTheirLoadAndAllToAll) {
  const auto rank_of = [](int top_k) {
    TransformerParams p = mixture();
    p.moe.experts_per_token = top_k;
    TensorSplit split;
    split.experts = kE;
    return make_transformer(p, "tiny", split);
  };
  Profile every, routed, none;
  measure_mpi_experts(every, rank_of(4), 4, kSeed);
  measure_mpi_experts(routed, rank_of(2), 4, kSeed);
  measure_mpi_experts(none, make_transformer(mixture(), "tiny"), 4, kSeed);
  EXPECT_EQ(none.expert_load.ranks, 0);
  EXPECT_EQ(none.alltoall_group.ranks, 0);
  EXPECT_EQ(none.gradient_sum.ranks, 0);
  if (MpiSession::rank() != 0) {
    EXPECT_EQ(every.expert_load.ranks, 0);
    EXPECT_EQ(routed.alltoall_group.ranks, 0);
    EXPECT_EQ(every.gradient_sum.ranks, 0);
    return;
  }
  // The ranks' gradient sum over their processes.
  EXPECT_EQ(every.gradient_sum.ranks, kE);
  EXPECT_GT(every.gradient_sum.bandwidth, 0.0);
  EXPECT_EQ(every.expert_load.ranks, kE);
  EXPECT_EQ(every.expert_load.micro_batch, 4);
  EXPECT_DOUBLE_EQ(every.expert_load.imbalance, 1.0);
  EXPECT_EQ(every.expert_load.forward_s, 0.0);
  EXPECT_EQ(every.expert_load.backward_s, 0.0);
  EXPECT_EQ(every.alltoall_group.ranks, kE);
  EXPECT_EQ(every.alltoall_group.micro_batch, 4);
  EXPECT_GT(every.alltoall_group.latency_s, 0.0);
  EXPECT_GT(every.alltoall_group.bandwidth, 0.0);
  EXPECT_GT(routed.expert_load.imbalance, 1.0);
  EXPECT_LE(routed.expert_load.imbalance, 2.0);
  EXPECT_EQ(routed.alltoall_group.ranks, kE);
}

// The expert ranks' runs of a plan's op lists as processes (mpi_plan_runs)
// count the threads' all-to-alls and make their mixture calls; a profile
// given the plan takes the ranks' load, all-to-all and slowdown from them.
TEST(MpiExpertParallel, TheProcessesRunAPlansOpListsAsTheThreadsDo) {
  TensorSplit split;
  split.experts = kE;
  const ModelSpec m = make_transformer(mixture(), "tiny", split);
  mpi_group::expect_op_lists_as_threads(m, kSeed);
  const PlanStages one{build_1f1b(1, 3, Remat::kAlways), {{0, m.layers.size()}}};
  const Profile p =
      mpi_group::with_kept_slowdown([&](Profile& q) { measure_mpi_experts(q, m, 4, kSeed, &one); });
  if (MpiSession::rank() != 0) {
    EXPECT_EQ(p.expert_load.ranks, 0);
    return;
  }
  EXPECT_EQ(p.group_slowdown.ranks, kE);
  EXPECT_TRUE(p.group_slowdown.op_lists);
  EXPECT_TRUE(p.group_slowdown.experts);
  EXPECT_EQ(p.expert_load.ranks, kE);
  EXPECT_EQ(p.expert_load.micro_batch, 4);
  EXPECT_GE(p.expert_load.imbalance, 1.0);
  EXPECT_EQ(p.alltoall_group.ranks, kE);
  EXPECT_EQ(p.gradient_sum.ranks, kE);
}

// E = 2 expert ranks of C = 2 shares as four of the job's processes
// (measure_mpi_expert_shares): given a plan, their slowdown together from
// its op lists (time-sliced where the four outnumber the cores) and their
// gradient sum over all four, at rank 0; a job of two measures nothing.
TEST(MpiExpertParallel, ExpertRanksOfSharesMeasureTheirSlowdownAndSum) {
  const ModelSpec m = testing::wide_experts_of_shares();
  const PlanStages one{build_1f1b(1, 2, Remat::kNever), {{0, m.layers.size()}}};
  const Profile q = mpi_group::with_kept_slowdown(
      [&](Profile& r) { measure_mpi_expert_shares(r, m, 2, kSeed, &one); });
  if (MpiSession::size() < 4 || MpiSession::rank() != 0) {
    EXPECT_EQ(q.gradient_sum.ranks, 0);
    EXPECT_EQ(q.group_slowdown.ranks, 0);
    return;
  }
  EXPECT_EQ(q.group_slowdown.ranks, 4);
  EXPECT_EQ(q.group_slowdown.shares, 2);
  EXPECT_TRUE(q.group_slowdown.experts);
  EXPECT_TRUE(q.group_slowdown.op_lists);
  EXPECT_EQ(q.group_slowdown.micro_batch, 2);
  EXPECT_EQ(q.gradient_sum.ranks, 4);
  EXPECT_GT(q.gradient_sum.bandwidth, 0.0);
  EXPECT_EQ(q.context_ring.ranks, 0);
}

// Rank 0 combines the processes' runs as a step places them, process p rank
// p / K of device p % K: K = G = 2, process p's runs make one call of p rows,
// p + 1 exchanges and compute of 100 (p + 1) + i forward, 1000 (p + 1) + i
// backward in pair i. Rank 0 runs devices 0 and 1 as processes 0 and 1,
// rank 1 as 2 and 3: pair 0 forward (300 + 700) / 2 = 500 over the rank
// alone's 250, backward 5000 over 2500; pair 1's rank alone timed nothing
// forward, so it gives no ratio.
TEST(MpiExpertParallel, RankZeroCombinesTheProcessesRunsByRankAndDevice) {
  std::vector<std::vector<GroupRun>> processes(4, std::vector<GroupRun>(2));
  for (int p = 0; p < 4; ++p) {
    for (int i = 0; i < 2; ++i) {
      GroupRun& run = processes[static_cast<std::size_t>(p)][static_cast<std::size_t>(i)];
      run.calls = {{false, p, 0}};
      run.exchanges = {p + 1, 0, 0};
      run.compute = {100 * (p + 1) + i, 1000 * (p + 1) + i};
    }
  }
  const PairedGroupRuns pairs =
      paired_process_runs(std::move(processes), {250, 2500, 0, 2500}, 2, 2);
  ASSERT_EQ(pairs.ranks.size(), 2u);
  const std::vector<std::int64_t> rows[2] = {{0, 1}, {2, 3}};
  for (std::size_t g = 0; g < 2; ++g) {
    ASSERT_EQ(pairs.ranks[g].size(), 2u);
    for (const GroupRun& run : pairs.ranks[g]) {
      ASSERT_EQ(run.calls.size(), 2u);
      EXPECT_EQ(run.calls[0].rows, rows[g][0]);
      EXPECT_EQ(run.calls[1].rows, rows[g][1]);
      EXPECT_EQ(run.exchanges.count, g == 0 ? 3 : 7);
    }
  }
  EXPECT_EQ(pairs.ranks[1][1].compute[0], 301 + 401);
  ASSERT_EQ(pairs.ratios.size(), 1u);
  EXPECT_DOUBLE_EQ(pairs.ratios[0].forward, 2.0);
  EXPECT_DOUBLE_EQ(pairs.ratios[0].backward, 2.0);
}

// Time-sliced, the devices' groups ran at once: each pair's ratio over how
// many ran at once on the mean. With the runs above, pair 0's device 0
// spans 3,300 (process 2: 300 + 3,000) and device 1 4,400 (process 3), so
// 7,700 / 4,400 = 1.75 devices at once, and the ratio of 2 reads 2 / 1.75.
TEST(MpiExpertParallel, DevicesRunAtOnceDivideTheRatioByHowManyRan) {
  std::vector<std::vector<GroupRun>> processes(4, std::vector<GroupRun>(1));
  for (int p = 0; p < 4; ++p) {
    processes[static_cast<std::size_t>(p)][0].compute = {100 * (p + 1), 1000 * (p + 1)};
  }
  const PairedGroupRuns pairs = paired_process_runs(std::move(processes), {250, 2500}, 2, 2, true);
  ASSERT_EQ(pairs.ratios.size(), 1u);
  EXPECT_DOUBLE_EQ(pairs.ratios[0].forward, 2.0 / 1.75);
  EXPECT_DOUBLE_EQ(pairs.ratios[0].backward, 2.0 / 1.75);
  EXPECT_EQ(pairs.ranks[1][0].compute[0], 300 + 400);  // the runs themselves as they were
}

TEST(MpiExpertParallel, RefusesAJobOfTheWrongSize) {
  MpiTransport t;
  const int n = MpiSession::size();
  try {
    t.link_group(n, kE);  // n devices of 2 ranks: twice the job
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(
        std::string(e.what()).find("of 2 ranks each (" + std::to_string(2 * n) +
                                   " processes) but this MPI job has " + std::to_string(n) +
                                   " processes; start it with mpirun -np " + std::to_string(2 * n)),
        std::string::npos)
        << e.what();
  }
}

}  // namespace mpi_expert
}  // namespace pipescope::exec
