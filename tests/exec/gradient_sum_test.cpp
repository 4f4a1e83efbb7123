// The ranks that hold the same parameters sum their gradients before the
// optimizer step (exec/gradient_sum.h): every rank ends with the sum, in
// rank order, and the thread's tally counts the laying out and back with the
// all-reduce; the profile's figures of it.

#include <gtest/gtest.h>

#include <optional>
#include <stdexcept>
#include <utility>
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

// The copies are the sum's even where no all-reduce runs (a group of one
// counts none): the tally has their time and no collective.
TEST(GradientSum, TheLayingOutAndBackIsTallied) {
  TensorGroup alone(1);
  std::vector<Param> params = rank_params(0);
  std::vector<Param*> mine;
  for (Param& p : params) mine.push_back(&p);
  CollectiveTally tally;
  {
    const CollectiveScope scope(tally);
    sum_gradients(alone, 0, mine);
  }
  EXPECT_EQ(tally.count, 0);
  EXPECT_EQ(tally.bytes, 0);
  EXPECT_GT(tally.wall, 0);
  EXPECT_EQ(params[1].grad(0, 3), 10.0f);  // its own, unchanged
}

// A group's figures: 1 KiB to 1 MiB a rank at the repeats asked, a larger
// size where asked (fewer times: about as many values in all, at least 3),
// fitted as latency + bytes / bandwidth.
TEST(GradientSum, TheGroupsFiguresFitEachSize) {
  std::vector<std::pair<Eigen::Index, int>> asked;
  const auto one_s = [&asked](int ranks, Eigen::Index floats, int repeats) {
    EXPECT_EQ(ranks, 2);
    asked.emplace_back(floats, repeats);
    return 20e-6 + static_cast<double>(floats) * sizeof(float) / 4e9;
  };
  const TransportFigures f = group_figures(2, 40, "a test", one_s, 262144 * 4);
  EXPECT_NEAR(f.latency_s, 20e-6, 1e-12);
  EXPECT_NEAR(f.bandwidth, 4e9, 1.0);
  const std::vector<std::pair<Eigen::Index, int>> want{
      {256, 40}, {4096, 40}, {32768, 40}, {262144, 40}, {262144 * 4, 10}};
  EXPECT_EQ(asked, want);
  asked.clear();
  group_figures(2, 40, "a test", one_s, 262144 * 100);
  EXPECT_EQ(asked.back().second, 3);
  asked.clear();
  group_figures(2, 40, "a test", one_s, 1000);  // not above 1 MiB: no more sizes
  EXPECT_EQ(asked.size(), 4u);
  EXPECT_THROW(profile_gradient_sum(1, 3), std::invalid_argument);
  EXPECT_THROW(profile_gradient_sum(2, 0), std::invalid_argument);
}

// Each rank holds its gradients, their laid-out copy and the reduced one.
TEST(GradientSum, FitsWhereThreeFloatsAParameterAreThereForEachRank) {
  EXPECT_TRUE(gradient_sum_fits(2, 1000, HostMemory{24000, "test"}));
  EXPECT_FALSE(gradient_sum_fits(2, 1000, HostMemory{23999, "test"}));
  EXPECT_TRUE(gradient_sum_fits(2, 1000, std::nullopt));
}

}  // namespace
}  // namespace pipescope::exec
