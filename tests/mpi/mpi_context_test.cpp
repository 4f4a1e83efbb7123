// Context parallelism over MPI: each device's C shares as processes of their
// own, rank c K + d running share c of device d, their attention passing keys
// and values round a ring of processes (exec/compute/ring_exchange.h over
// exec/mpi/mpi_group_link.h), or trading sequence for heads by the link's
// all-to-alls (exec/compute/heads_attention.h). Under `mpirun -np 2` one device of C = 2, under
// `-np 4` K = 2 devices of C = 2. Every process also trains the same model
// with the threaded runtime (C threads a device) and checks that the job's
// losses and the parameters of its share's stages agree within 1e-6
// (relative). Before that, the linked ring against hand-computed blocks; and
// the profile's measurement of the shares' exchanges.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "../tiny_models.h"
#include "exec/compute/ring_exchange.h"
#include "exec/compute/tensor_group.h"
#include "exec/mpi/mpi_group_link.h"
#include "exec/mpi/mpi_group_profile.h"
#include "exec/mpi/mpi_transport.h"
#include "exec/tensor_shard.h"
#include "mpi_group_training.h"

namespace pipescope::exec {
namespace mpi_context {  // named: the tests' unity build joins the other MPI tests' files

constexpr int kC = 2;
constexpr std::uint64_t kSeed = 13;

// Rank r posts, on channel k, blocks of r + 1 rows and k + 2 columns holding
// 100 r + 10 k + i for its i-th post: it takes rank r - 1's, in order, on
// each channel (three posts before the first take, so sends do not wait for
// their receives).
TEST(MpiRing, PassesEachBlockToTheNextRankInOrder) {
  RingExchange ring(mpi_group::whole_job());
  const int n = MpiSession::size(), r = MpiSession::rank(), from = (r + n - 1) % n;
  ASSERT_EQ(ring.ranks(), n);
  constexpr int kPosts = 3;
  for (int i = 0; i < kPosts; ++i) {
    for (int k = 0; k < RingExchange::kChannels; ++k) {
      const Matrix block = Matrix::Constant(r + 1, k + 2, static_cast<float>(100 * r + 10 * k + i));
      ring.post(r, k, block);
    }
  }
  CollectiveTally tally;
  {
    CollectiveScope scope(tally);
    for (int k = RingExchange::kChannels - 1; k >= 0; --k) {  // channels apart
      for (int i = 0; i < kPosts; ++i) {
        Matrix got;
        ring.take(r, k, got);
        ASSERT_EQ(got.rows(), from + 1) << "post " << i << " on channel " << k;
        ASSERT_EQ(got.cols(), k + 2);
        EXPECT_EQ(got.minCoeff(), static_cast<float>(100 * from + 10 * k + i));
        EXPECT_EQ(got.maxCoeff(), static_cast<float>(100 * from + 10 * k + i));
      }
    }
  }
  EXPECT_EQ(tally.count, kPosts * RingExchange::kChannels);
  EXPECT_EQ(tally.bytes, static_cast<std::int64_t>(kPosts * (from + 1) * (2 + 3) * sizeof(float)));
  // Another process's rank is refused; after a failed step (reset) the ring
  // is refused whole.
  Matrix m = Matrix::Zero(1, 1);
  EXPECT_THROW(ring.post((r + 1) % n, 0, m), std::invalid_argument);
  EXPECT_THROW(ring.take((r + 1) % n, 0, m), std::invalid_argument);
  ring.reset();
  for (const bool post : {true, false}) {
    try {
      post ? ring.post(r, 0, m) : ring.take(r, 0, m);
      ADD_FAILURE() << "a linked ring " << (post ? "posted" : "took") << " after reset";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("after a failed step"), std::string::npos) << e.what();
    }
  }
}

// A take whose block never comes gives up at its tally's limit, naming the
// rank it waited for, and stops at once when the step does; nothing of it
// stays with MPI (no message was sent), so the job ends clean. Rank 0 waits,
// the others only meet it at the barrier.
TEST(MpiRing, ATakeGivesUpAtItsLimitOrWhenTheStepStops) {
  RingExchange ring(mpi_group::whole_job());
  const int n = MpiSession::size(), r = MpiSession::rank();
  if (r == 0) {
    std::atomic<bool> stop{false};
    CollectiveTally tally;
    tally.abort = &stop;
    tally.limit = std::chrono::milliseconds(50);
    Matrix m;
    {
      CollectiveScope scope(tally);
      try {
        ring.take(0, 1, m);
        ADD_FAILURE() << "a take returned without a block";
      } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("a ring exchange waited 50 ms for rank " +
                                             std::to_string(n - 1) + " of its group"),
                  std::string::npos)
            << e.what();
      }
      stop = true;
      EXPECT_THROW(ring.take(0, 1, m), CollectiveAborted);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// The tiny transformer with sequences of 8 tokens (2C chunks), two blocks.
TransformerParams sequences_of_eight() {
  TransformerParams p = testing::tiny_executor_transformer_params(2);
  p.seq_len = 8;
  return p;
}

// C = 2 shares of the model's sequences, over MPI or as threads: round the
// ring, or trading sequence for heads (the model's two heads, one a share).
mpi_group::GroupModel shares(bool by_heads = false) {
  mpi_group::GroupModel g;
  g.params = sequences_of_eight();
  g.context_parallel = kC;
  g.seed = kSeed;
  g.build = [p = g.params, by_heads](const std::shared_ptr<GroupLink>& link) {
    return build_context_ranks(p, kSeed, 1, kC, link, by_heads);
  };
  return g;
}

TEST(MpiContextParallel, GpipeMatchesTheThreadedBackend) {
  mpi_group::expect_threaded_training(shares(), ScheduleKind::kGpipe, Remat::kNever);
}

TEST(MpiContextParallel, OneFOneBWithRematMatchesTheThreadedBackend) {
  mpi_group::expect_threaded_training(shares(), ScheduleKind::k1F1B, Remat::kAlways);
}

TEST(MpiContextParallel, SharesTradingHeadsMatchTheThreadedBackend) {
  mpi_group::expect_threaded_training(shares(true), ScheduleKind::k1F1B, Remat::kAlways);
}

// The shares' exchanges as C = 2 of the job's processes measure them
// (measure_mpi_context): round the ring, the takes' mean times
// (context_ring); trading heads, the group's all-to-all (alltoall_group);
// rank 0 alone keeps them; a model without shares measures nothing.
TEST(MpiContextParallel, TheProcessesMeasureTheirExchanges) {
  const auto share = [](bool heads) {
    TensorSplit split;
    split.context = kC;
    split.heads_over_context = heads;
    return make_transformer(sequences_of_eight(), "tiny", split);
  };
  Profile ring, heads, none;
  measure_mpi_context(ring, share(false), 2, kSeed);
  measure_mpi_context(heads, share(true), 2, kSeed);
  measure_mpi_context(none, make_transformer(sequences_of_eight(), "tiny"), 2, kSeed);
  EXPECT_EQ(none.context_ring.ranks, 0);
  EXPECT_EQ(none.alltoall_group.ranks, 0);
  EXPECT_EQ(none.gradient_sum.ranks, 0);
  if (MpiSession::rank() != 0) {
    EXPECT_EQ(ring.context_ring.ranks, 0);
    EXPECT_EQ(heads.alltoall_group.ranks, 0);
    EXPECT_EQ(ring.gradient_sum.ranks, 0);
    return;
  }
  // The shares' gradient sum over their processes, either form.
  for (const Profile* p : {&ring, &heads}) {
    EXPECT_EQ(p->gradient_sum.ranks, kC);
    EXPECT_GT(p->gradient_sum.bandwidth, 0.0);
  }
  EXPECT_EQ(ring.context_ring.ranks, kC);
  EXPECT_EQ(ring.context_ring.micro_batch, 2);
  EXPECT_GT(ring.context_ring.forward_take_s, 0.0);
  EXPECT_GT(ring.context_ring.backward_take_s, 0.0);
  EXPECT_EQ(ring.alltoall_group.ranks, 0);
  EXPECT_EQ(heads.alltoall_group.ranks, kC);
  EXPECT_EQ(heads.alltoall_group.micro_batch, 2);
  EXPECT_GT(heads.alltoall_group.latency_s, 0.0);
  EXPECT_GT(heads.alltoall_group.bandwidth, 0.0);
  EXPECT_EQ(heads.context_ring.ranks, 0);
}

// The shares' runs of a plan's op lists as processes (mpi_plan_runs), round
// the ring and trading heads, count what the threads' count; a profile given
// the plan takes the shares' slowdown from them, at its micro-batch.
TEST(MpiContextParallel, TheProcessesRunAPlansOpListsAsTheThreadsDo) {
  for (const bool heads : {false, true}) {
    const ModelSpec m = testing::tiny_context_share(heads);
    mpi_group::expect_op_lists_as_threads(m, kSeed);
    const PlanStages one{build_1f1b(1, 3, Remat::kAlways), {{0, m.layers.size()}}};
    const Profile given = mpi_group::with_kept_slowdown(
        [&](Profile& p) { measure_mpi_context(p, m, 4, kSeed, &one); });
    Profile passes;
    measure_mpi_context(passes, m, 4, kSeed);
    if (MpiSession::rank() != 0) continue;
    EXPECT_EQ(given.group_slowdown.ranks, kC) << heads;
    EXPECT_TRUE(given.group_slowdown.op_lists) << heads;
    EXPECT_FALSE(given.group_slowdown.experts) << heads;
    EXPECT_EQ(given.group_slowdown.micro_batch, 4) << heads;
    EXPECT_GT(given.group_slowdown.forward, 0.0) << heads;
    EXPECT_GT(given.group_slowdown.backward, 0.0) << heads;
    // Without the layers' times alone, passes give no slowdown.
    EXPECT_EQ(passes.group_slowdown.ranks, 0) << heads;
  }
}

}  // namespace mpi_context
}  // namespace pipescope::exec
