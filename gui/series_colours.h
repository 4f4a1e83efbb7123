#pragma once
// Colours for a chart's series (the trade-off view's one line per K), plain
// code without Qt. Qt Charts' themes hold five colours and repeat them from
// the sixth series on, so K = 1 and K = 32 could share a line colour; these
// are `count` hues spread evenly around the colour wheel, each told apart from
// its neighbours and from the black mark of the current point.

#include <cstddef>

namespace pipescope::gui {

struct Rgb {
  int r = 0;
  int g = 0;
  int b = 0;
  friend bool operator==(const Rgb&, const Rgb&) = default;
};

// The colour of series `index` of `count` (index < count): hue 360 * index /
// count degrees, starting at blue, at a saturation and value that stay
// readable on a white background.
Rgb series_colour(std::size_t index, std::size_t count);

}  // namespace pipescope::gui
