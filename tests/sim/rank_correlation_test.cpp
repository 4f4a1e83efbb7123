// Spearman's rank correlation (sim/validation/rank_correlation.h), against
// hand-computed figures.

#include "sim/validation/rank_correlation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

namespace pipescope {
namespace {

TEST(RankCorrelation, TiedValuesShareTheMeanOfTheirRanks) {
  EXPECT_EQ(ranks_of({3.0, 1.0, 3.0}), (std::vector<double>{2.5, 1.0, 2.5}));
  EXPECT_EQ(ranks_of({5.0, 4.0, 4.0, 4.0, 9.0}), (std::vector<double>{4.0, 2.0, 2.0, 2.0, 5.0}));
  EXPECT_EQ(ranks_of({0.5, 0.25}), (std::vector<double>{2.0, 1.0}));
}

// Five items, two swapped neighbours: d = 0, 0, 1, -1, 0, so
// rho = 1 - 6 * 2 / (5 * 24) = 0.9. The scale does not matter, only the
// order; the reverse order is -1, and a list that orders nothing 0.
TEST(RankCorrelation, SpearmanOfHandRankedLists) {
  const std::vector<double> measured{10, 20, 30, 40, 50};
  EXPECT_NEAR(spearman({1, 2, 4, 3, 5}, measured), 0.9, 1e-12);
  EXPECT_NEAR(spearman({100, 200.5, 1e6, 999, 2e6}, measured), 0.9, 1e-12);
  EXPECT_NEAR(spearman({5, 4, 3, 2, 1}, measured), -1.0, 1e-12);
  EXPECT_NEAR(spearman(measured, measured), 1.0, 1e-12);
  EXPECT_EQ(spearman({7, 7, 7, 7, 7}, measured), 0.0);
  // With ties: ranks {1.5, 1.5, 3} against {1, 2, 3}: centred -0.5, -0.5, 1
  // and -1, 0, 1; 1.5 / sqrt(1.5 * 2) = 0.866.
  EXPECT_NEAR(spearman({1, 1, 2}, {1, 2, 3}), 1.5 / std::sqrt(3.0), 1e-12);
}

TEST(RankCorrelation, NeedsTwoListsOfOneLength) {
  EXPECT_THROW(spearman({1, 2}, {1, 2, 3}), std::invalid_argument);
  EXPECT_THROW(spearman({1}, {1}), std::invalid_argument);
  EXPECT_THROW(spearman({1, std::nan("")}, {1, 2}), std::invalid_argument);
  EXPECT_THROW(ranks_of({1, INFINITY}), std::invalid_argument);
}

}  // namespace
}  // namespace pipescope
