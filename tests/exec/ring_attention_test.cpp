// Ring attention (exec/compute/ring_attention.h) on C threads against the
// whole sequence's attention (attention_forward/backward): every share's
// output and gradients are the whole attention's rows at the share's
// positions; a share's positions by hand; the ring's mailboxes.

#include <gtest/gtest.h>

#include <random>
#include <thread>
#include <vector>

#include "exec/compute/kernels.h"
#include "exec/compute/ring_attention.h"
#include "exec/compute/ring_exchange.h"

namespace pipescope::exec {
namespace {

using MatD = Mat<double>;

template <class F>
void on_ranks(int ranks, F f) {
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) threads.emplace_back([&f, r] { f(r); });
  for (std::thread& t : threads) t.join();
}

MatD random_matrix(Index rows, Index cols, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> n(0.0, 1.0);
  MatD m(rows, cols);
  for (Index r = 0; r < rows; ++r) {
    for (Index c = 0; c < cols; ++c) m(r, c) = n(rng);
  }
  return m;
}

// Share c's rows of `whole` (b sequences of `seq` rows): the rows at the
// share's positions, sequence by sequence.
MatD share_rows(const MatD& whole, Index batch, Index seq, const RingShare& share) {
  const Index s = seq / share.ranks;
  MatD out(batch * s, whole.cols());
  for (Index i = 0; i < batch; ++i) {
    for (Index t = 0; t < s; ++t) {
      out.row(i * s + t) = whole.row(i * seq + share.position(share.rank, t, s));
    }
  }
  return out;
}

TEST(RingShare, ChunksCAndTwoCMinusOneMinusC) {
  // C = 2 over 8 positions: rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
  const RingShare zero{0, 2}, one{1, 2};
  std::vector<Index> a, b;
  for (Index t = 0; t < 4; ++t) {
    a.push_back(zero.position(0, t, 4));
    b.push_back(one.position(1, t, 4));
  }
  EXPECT_EQ(a, (std::vector<Index>{0, 1, 6, 7}));
  EXPECT_EQ(b, (std::vector<Index>{2, 3, 4, 5}));
  EXPECT_EQ(RingShare{}.position(0, 3, 4), 3);  // one share: the sequence itself
}

TEST(RingExchange, EachRankTakesWhatThePreviousRankPosted) {
  RingExchange ring(3);
  std::vector<MatD> got(3);
  on_ranks(3, [&](int r) {
    const auto i = static_cast<std::size_t>(r);
    ring.post(r, 0, MatD(MatD::Constant(2, 2, r + 1)));
    ring.post(r, 1, MatD(MatD::Constant(1, 3, 10 * (r + 1))));  // another channel, not waiting
    MatD other;
    ring.take(r, 1, other);
    ring.take(r, 0, got[i]);
    got[i] += other.leftCols(1).replicate(2, 2);  // both came from rank r - 1
  });
  EXPECT_EQ(got[0](0, 0), 3.0 + 30.0);
  EXPECT_EQ(got[1](1, 1), 1.0 + 10.0);
  EXPECT_EQ(got[2](0, 1), 2.0 + 20.0);
  // A ring of one takes its own; a reset drops what nobody took.
  RingExchange one(1);
  one.post(0, 0, MatD(MatD::Constant(1, 1, 7.0)));
  MatD mine;
  one.take(0, 0, mine);
  EXPECT_EQ(mine(0, 0), 7.0);
  one.post(0, 0, MatD(MatD::Constant(1, 1, 8.0)));  // left behind by a failed step
  one.reset();
  one.post(0, 0, MatD(MatD::Constant(1, 1, 9.0)));
  one.take(0, 0, mine);
  EXPECT_EQ(mine(0, 0), 9.0);
  EXPECT_THROW(one.post(1, 0, mine), std::invalid_argument);
  EXPECT_THROW(one.post(0, 2, mine), std::invalid_argument);
}

// The whole attention of b sequences of `seq` tokens, and the ring's on C
// threads, forward and backward, compared row by row.
void expect_ring_is_whole(int C, Index batch, Index seq, Index heads, Index kv_heads) {
  const Index dh = 3, h = heads * dh, dkv = kv_heads * dh;
  const MatD qkv = random_matrix(batch * seq, h + 2 * dkv, 11);
  const MatD dout = random_matrix(batch * seq, h, 12);
  const AttentionShape whole{batch, seq, heads, kv_heads, dh};
  MatD probs;
  const MatD out = attention_forward(qkv, whole, probs);
  const MatD dqkv = attention_backward(dout, qkv, probs, whole);

  AttentionShape local = whole;
  local.seq = seq / C;
  RingExchange ring(C);
  std::vector<MatD> outs(static_cast<std::size_t>(C)), grads(static_cast<std::size_t>(C));
  on_ranks(C, [&](int c) {
    const RingShare share{c, C};
    const RingExchange::Port port = ring.port(c);
    const MatD my_qkv = share_rows(qkv, batch, seq, share);
    MatD lse;
    const auto i = static_cast<std::size_t>(c);
    outs[i] = ring_attention_forward(my_qkv, local, share, port, lse);
    grads[i] = ring_attention_backward(share_rows(dout, batch, seq, share), my_qkv, outs[i], lse,
                                       local, share, port);
  });
  for (int c = 0; c < C; ++c) {
    const RingShare share{c, C};
    const auto i = static_cast<std::size_t>(c);
    EXPECT_TRUE(outs[i].isApprox(share_rows(out, batch, seq, share), 1e-12)) << "C=" << C;
    EXPECT_TRUE(grads[i].isApprox(share_rows(dqkv, batch, seq, share), 1e-12))
        << "C=" << C << " rank " << c << "\n"
        << grads[i] << "\n\n"
        << share_rows(dqkv, batch, seq, share);
  }
}

TEST(RingAttention, TwoSharesAreTheWholeAttention) {
  expect_ring_is_whole(2, 2, 8, 2, 1);  // grouped-query: two heads read one key/value head
}

TEST(RingAttention, FourSharesAreTheWholeAttention) {
  expect_ring_is_whole(4, 1, 16, 2, 2);
}

TEST(RingAttention, OneShareIsTheDeviceAttention) {
  expect_ring_is_whole(1, 2, 6, 2, 1);
}

// The rows a step computes: the whole block against itself at step 0, then
// half a block on every rank (all queries against an earlier share's first
// half of keys, or the later chunk's queries against all of a later share's
// keys), and within those rows every pair is visible but at step 0: the
// causal load balance, checked pair by pair against the positions.
TEST(RingAttention, EachStepAfterTheFirstIsHalfABlockOfVisiblePairs) {
  constexpr Index kSeq = 8;  // a share's rows of a sequence
  constexpr int kRanks = 4;
  for (int rank = 0; rank < kRanks; ++rank) {
    const RingShare share{rank, kRanks};
    for (int from = 0; from < kRanks; ++from) {
      const ring_detail::Visible v = ring_detail::visible(kSeq, rank, from);
      if (from == rank) {
        EXPECT_EQ(v.q_rows * v.k_rows, kSeq * kSeq);
        continue;
      }
      EXPECT_EQ(v.q_rows * v.k_rows, kSeq * kSeq / 2) << rank << " " << from;
      // Every pair of the block: visible exactly when it is in the rows.
      for (Index t = 0; t < kSeq; ++t) {
        for (Index u = 0; u < kSeq; ++u) {
          const bool sees = share.position(from, u, kSeq) <= share.position(rank, t, kSeq);
          const bool inside =
              t >= v.q_at && t < v.q_at + v.q_rows && u >= v.k_at && u < v.k_at + v.k_rows;
          EXPECT_EQ(sees, inside) << "rank " << rank << " from " << from << " t " << t << " u "
                                  << u;
        }
      }
    }
  }
}

}  // namespace
}  // namespace pipescope::exec
