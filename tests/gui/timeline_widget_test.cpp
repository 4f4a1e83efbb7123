// The timeline view's pixels, offscreen: zoomed out a busy stretch of a
// hundred thousand ops is one colour and idle time stays the bubble; zoomed in
// ops carry labels; the selected op is outlined either way; a paint of part of
// the view draws there what a paint of all of it does.

#include <gtest/gtest.h>

#include <QImage>
#include <QPainter>
#include <QRegion>

#include "gui/timeline_widget.h"

namespace pipescope::gui {
namespace {

constexpr int kWidth = 1400;
constexpr QRgb kForward = 0xff4c8bd6, kBackward = 0xff3fa86b, kBubble = 0xfff6e3e3;

// `devices` compute rows; on each, forwards of 10 ns back to back from 0 to
// 0.25 ms and from 0.5 to 0.75 ms, backwards from 1 ms to 1.5 ms (100k ops),
// idle between.
Timeline busy_timeline(int devices) {
  Timeline t;
  for (int d = 0; d < devices; ++d) {
    t.device_names.push_back("gpu " + std::to_string(d));
    for (int i = 0; i < 100'000; ++i) {
      TimelineEvent e;
      e.device = d;
      e.kind = i < 50'000 ? EventKind::kForward : EventKind::kBackward;
      e.micro_batch = i;
      e.start = (i < 25'000 ? 0 : i < 50'000 ? 250'000 : 500'000) + 10 * SimTime{i};
      e.end = e.start + 10;
      t.events.push_back(e);
    }
  }
  return t;
}

struct View {
  explicit View(int devices) : timeline(busy_timeline(devices)) {
    widget.resize(kWidth, 600);
    widget.set_timelines({&timeline}, {""});
  }
  QImage paint() const {
    QImage image(kWidth, 600, QImage::Format_ARGB32);
    QPainter p(&image);
    widget.render_to(p, image.size());
    return image;
  }
  Timeline timeline;
  TimelineWidget widget;
};

// The middle of row 0's ops, at a pixel of the plot.
QRgb at(const QImage& image, double plot_x, int row = 0) {
  return image.pixel(TimelineWidget::kGutter + static_cast<int>(plot_x),
                     TimelineWidget::kAxisHeight + row * TimelineWidget::kRowHeight +
                         TimelineWidget::kRowHeight / 2);
}

TEST(TimelineWidget, ZoomedOutBusyTimeIsItsKindsColourAndIdleTimeTheBubble) {
  View view(1);
  const TimeAxis& axis = view.widget.axis();
  ASSERT_DOUBLE_EQ(axis.span_ns(), 1'500'000);
  const QImage image = view.paint();
  EXPECT_EQ(at(image, axis.x_of(125'000)), kForward);
  EXPECT_EQ(at(image, axis.x_of(375'000)), kBubble);  // between ops of one kind
  EXPECT_EQ(at(image, axis.x_of(625'000)), kForward);
  EXPECT_EQ(at(image, axis.x_of(875'000)), kBubble);
  EXPECT_EQ(at(image, axis.x_of(1'250'000)), kBackward);
}

TEST(TimelineWidget, ZoomedInOpsCarryLabels) {
  View view(1);
  // 200 ns about the start of the step: 10 ns ops about 60 px wide.
  view.widget.zoom_by(1'500'000.0 / 200, TimelineWidget::kGutter);
  const TimeAxis& axis = view.widget.axis();
  ASSERT_NEAR(axis.span_ns(), 200, 1e-6);
  const QImage image = view.paint();
  // Across an op, beside its fill there are the label's lighter pixels.
  int fill = 0, light = 0;
  for (double x = axis.x_of(20) + 2; x < axis.x_of(30) - 2; ++x) {
    const QRgb c = at(image, x);
    fill += c == kForward;
    light += qRed(c) > 0xa0 && qGreen(c) > 0xa0 && qBlue(c) > 0xa0;
  }
  EXPECT_GT(fill, 20);
  EXPECT_GT(light, 0);
}

TEST(TimelineWidget, TheSelectedOpIsOutlinedZoomedOutAndIn) {
  View view(1);
  // Forward 20,000, at 200 us: a hundredth of a pixel zoomed out.
  const std::size_t f = 20'000;
  ASSERT_EQ(view.widget.layout().items[f].start, 200'000);
  view.widget.select(f);
  const auto black_near = [&](const QImage& image, double x) {
    int black = 0;
    for (double dx = -3; dx <= 3; ++dx) black += at(image, x + dx) == 0xff000000;
    return black;
  };
  EXPECT_GT(black_near(view.paint(), view.widget.axis().x_of(200'000)), 0);
  view.widget.zoom_by(1'500'000.0 / 200,
                      TimelineWidget::kGutter + view.widget.axis().x_of(200'000));
  EXPECT_GT(black_near(view.paint(), view.widget.axis().x_of(200'000)), 0);
  view.widget.select(std::nullopt);
  EXPECT_EQ(black_near(view.paint(), view.widget.axis().x_of(200'000)), 0);
}

TEST(TimelineWidget, PaintingPartOfTheViewDrawsWhatPaintingAllOfItDoes) {
  View view(8);
  view.widget.resize(kWidth, view.widget.minimumHeight());
  const QSize size = view.widget.size();
  ASSERT_EQ(size.height(), TimelineWidget::kAxisHeight + 8 * TimelineWidget::kRowHeight);
  QImage all(size, QImage::Format_ARGB32);
  {
    QPainter p(&all);
    view.widget.render_to(p, size);
  }
  // From the middle of row 3 into row 5, as a scroll area exposes it.
  const QRect part(0, TimelineWidget::kAxisHeight + 3 * TimelineWidget::kRowHeight + 7, kWidth,
                   2 * TimelineWidget::kRowHeight);
  QImage some(size, QImage::Format_ARGB32);
  some.fill(Qt::magenta);
  view.widget.render(&some, part.topLeft(), QRegion(part));
  int differ = 0, outside = 0;
  for (int y = 0; y < size.height(); ++y) {
    for (int x = 0; x < size.width(); ++x) {
      if (part.contains(x, y)) {
        differ += some.pixel(x, y) != all.pixel(x, y);
      } else {
        outside += some.pixel(x, y) != QColor(Qt::magenta).rgb();
      }
    }
  }
  EXPECT_EQ(differ, 0);
  EXPECT_EQ(outside, 0);
}

}  // namespace
}  // namespace pipescope::gui
