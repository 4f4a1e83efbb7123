// The ranks that hold the same parameters sum their gradients before the
// optimizer step (exec/gradient_sum.h): every rank ends with the sum, in
// rank order, and the thread's tally counts the laying out and back with the
// all-reduce; the profile's figures of it.

#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "exec/compute/tensor_group.h"
#include "exec/gradient_sum.h"
#include "exec/timing.h"

namespace pipescope::exec {
namespace {

// Rank r's gradients: a 2 x 3 and a 1 x 4 parameter, element i of the pair
// laid end to end worth (r + 1) (i + 1).
std::vector<Param> rank_params(int r) {
  std::vector<Param> params(2);
  params[0].grad = Matrix(2, 3);
  params[1].grad = Matrix(1, 4);
  float v = 1.0f;
  for (Param& p : params) {
    for (Index i = 0; i < p.grad.size(); ++i) p.grad.data()[i] = static_cast<float>(r + 1) * v++;
  }
  return params;
}

TEST(GradientSum, EveryRankEndsWithTheSumAndTalliesItOnce) {
  constexpr int kRanks = 3;
  TensorGroup group(kRanks);
  std::vector<std::vector<Param>> params(kRanks);
  std::vector<CollectiveTally> tallies(kRanks);
  run_threads(kRanks, [&](int r) {
    params[static_cast<std::size_t>(r)] = rank_params(r);
    std::vector<Param*> mine;
    for (Param& p : params[static_cast<std::size_t>(r)]) mine.push_back(&p);
    const CollectiveScope scope(tallies[static_cast<std::size_t>(r)]);
    sum_gradients(group, r, mine);
  });
  for (int r = 0; r < kRanks; ++r) {
    const std::vector<Param>& p = params[static_cast<std::size_t>(r)];
    ASSERT_EQ(p[0].grad.rows(), 2);
    ASSERT_EQ(p[0].grad.cols(), 3);
    ASSERT_EQ(p[1].grad.cols(), 4);
    float v = 1.0f;
    for (const Param& q : p) {
      for (Index i = 0; i < q.grad.size(); ++i) EXPECT_EQ(q.grad.data()[i], 6.0f * v++);
    }
    // One all-reduce of the 10 gradients, the copies in its time.
    const CollectiveTally& t = tallies[static_cast<std::size_t>(r)];
    EXPECT_EQ(t.count, 1);
    EXPECT_EQ(t.bytes, 10 * static_cast<Bytes>(sizeof(float)));
    EXPECT_GT(t.wall, 0);
  }
}

TEST(GradientSum, TheProfileFitsLatencyAndBandwidth) {
  const TransportFigures f = profile_gradient_sum(2, 3, 300000);
  EXPECT_GE(f.latency_s, 0.0);
  EXPECT_LT(f.latency_s, 1.0);
  EXPECT_GT(f.bandwidth, 0.0);
  EXPECT_THROW(profile_gradient_sum(1, 3), std::invalid_argument);
  EXPECT_THROW(profile_gradient_sum(2, 0), std::invalid_argument);
}

}  // namespace
}  // namespace pipescope::exec
