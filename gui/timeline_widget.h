#pragma once
// The timeline: one row per device and lane, ops coloured by kind and labelled
// with their micro-batch, idle time left visible as the bubble. Wheel zooms
// about the cursor, dragging pans, Shift+drag (or the right button) zooms to a
// rubber band, Backspace goes back, Escape resets; hovering shows an op's
// details, clicking one highlights what fed it and what it feeds. The geometry,
// layout and level of detail are gui/time_axis.h, gui/timeline_layout.h and
// gui/timeline_lod.h; this only draws, the rows in view and at most a
// rectangle per pixel of each, so that a million events stay interactive.

#include <optional>
#include <vector>

#include <QWidget>

#include "gui/time_axis.h"
#include "gui/timeline_layout.h"
#include "sim/engine/timeline.h"

namespace pipescope::gui {

class TimelineWidget : public QWidget {
  Q_OBJECT

 public:
  explicit TimelineWidget(QWidget* parent = nullptr);

  // The timelines to show, one under another ("" and "measured" prefixes); they
  // must outlive the next call.
  void set_timelines(std::vector<const Timeline*> sources, std::vector<std::string> prefixes);
  void set_show_transfers(bool show);

  const TimelineLayout& layout() const { return layout_; }
  const TimeAxis& axis() const { return axis_; }
  std::optional<std::size_t> selected() const { return selected_; }
  void select(std::optional<std::size_t> item);
  const Dependencies& selected_dependencies() const { return deps_; }

  void reset_zoom();
  void zoom_back();
  void zoom_by(double factor, double x);  // x in widget pixels

  // Draws the whole view at `size` (for PNG and SVG export).
  void render_to(QPainter& painter, const QSize& size) const;

  static constexpr int kGutter = 180;  // px of row labels
  static constexpr int kAxisHeight = 26;
  static constexpr int kRowHeight = 20;

 protected:
  void paintEvent(QPaintEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;
  void wheelEvent(QWheelEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void mouseReleaseEvent(QMouseEvent* event) override;
  void keyPressEvent(QKeyEvent* event) override;
  bool event(QEvent* event) override;

 private:
  void relayout();
  // Draws what lies in `exposed` of the view at `size`: the rows there, their
  // ops, and the time axis if it is exposed.
  void paint_area(QPainter& painter, const QSize& size, const QRect& exposed) const;
  struct RowRange {
    int first = 0;
    int last = 0;  // one past
  };
  void paint_rows(QPainter& painter, const TimeAxis& axis, int width, RowRange rows) const;
  void paint_ops(QPainter& painter, const TimeAxis& axis, RowRange rows) const;
  void paint_axis(QPainter& painter, const TimeAxis& axis, int width) const;
  double plot_width(int widget_width) const;
  std::optional<int> row_at(int y) const;
  std::optional<std::size_t> item_at(const QPoint& p) const;

  std::vector<const Timeline*> sources_;
  std::vector<std::string> prefixes_;
  bool show_transfers_ = true;
  TimelineLayout layout_;
  TimeAxis axis_;
  ZoomStack zooms_;
  std::optional<std::size_t> selected_;
  Dependencies deps_;
  // Mouse state.
  std::optional<QPoint> press_;
  bool panning_ = false;
  bool banding_ = false;
  int last_x_ = 0;
  int band_x_ = 0;
};

}  // namespace pipescope::gui
