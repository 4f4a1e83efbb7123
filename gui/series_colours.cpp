#include "gui/series_colours.h"

#include <cmath>

namespace pipescope::gui {

namespace {

constexpr double kStartHue = 220.0;  // blue, the first series as in Qt's own theme
constexpr double kSaturation = 0.75;
constexpr double kValue = 0.80;

// HSV to RGB (hue in degrees, saturation and value in [0, 1]), 0..255 a channel.
Rgb from_hsv(double hue, double s, double v) {
  const double h = std::fmod(hue, 360.0) / 60.0;
  const double c = v * s;
  const double x = c * (1.0 - std::fabs(std::fmod(h, 2.0) - 1.0));
  double r = 0, g = 0, b = 0;
  if (h < 1) {
    r = c, g = x;
  } else if (h < 2) {
    r = x, g = c;
  } else if (h < 3) {
    g = c, b = x;
  } else if (h < 4) {
    g = x, b = c;
  } else if (h < 5) {
    r = x, b = c;
  } else {
    r = c, b = x;
  }
  const double m = v - c;
  const auto channel = [m](double u) { return static_cast<int>(std::lround((u + m) * 255.0)); };
  return {channel(r), channel(g), channel(b)};
}

}  // namespace

Rgb series_colour(std::size_t index, std::size_t count) {
  const double share = count == 0 ? 0.0 : static_cast<double>(index) / static_cast<double>(count);
  return from_hsv(kStartHue + 360.0 * share, kSaturation, kValue);
}

}  // namespace pipescope::gui
