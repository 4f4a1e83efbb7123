#include "gui/series_colours.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

namespace pipescope::gui {
namespace {

int distance(const Rgb& a, const Rgb& b) {
  return std::abs(a.r - b.r) + std::abs(a.g - b.g) + std::abs(a.b - b.b);
}

// The first series is blue: hue 220 at saturation 0.75 and value 0.8 is
// (0.2, 0.4, 0.8) x 255.
TEST(SeriesColours, TheFirstIsBlue) {
  EXPECT_EQ(series_colour(0, 1), (Rgb{51, 102, 204}));
  EXPECT_EQ(series_colour(0, 7), (Rgb{51, 102, 204}));
  // Half way round the wheel from it: hue 40, an orange.
  EXPECT_EQ(series_colour(1, 2), (Rgb{204, 153, 51}));
}

// Up to 16 series (K = 1, 2, 4, ... and more), every pair told apart, none
// close to the current point's black mark: Qt's theme repeats after five.
TEST(SeriesColours, NoTwoSeriesShareAColour) {
  for (std::size_t count = 1; count <= 16; ++count) {
    for (std::size_t i = 0; i < count; ++i) {
      const Rgb a = series_colour(i, count);
      EXPECT_GE(std::max({a.r, a.g, a.b}), 200) << i << " of " << count;
      for (std::size_t j = i + 1; j < count; ++j) {
        EXPECT_GT(distance(a, series_colour(j, count)), 40) << i << ", " << j << " of " << count;
      }
    }
  }
}

}  // namespace
}  // namespace pipescope::gui
