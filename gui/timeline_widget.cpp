#include "gui/timeline_widget.h"

#include <algorithm>
#include <cmath>

#include <QHelpEvent>
#include <QKeyEvent>
#include <QMouseEvent>
#include <QPaintEvent>
#include <QPainter>
#include <QToolTip>
#include <QWheelEvent>

#include "gui/timeline_lod.h"

namespace pipescope::gui {
namespace {

QColor kind_color(EventKind k) {
  switch (k) {
    case EventKind::kForward:
      return QColor(0x4c, 0x8b, 0xd6);  // blue
    case EventKind::kRecompute:
      return QColor(0x9b, 0x7b, 0xd8);  // violet
    case EventKind::kBackward:
      return QColor(0x3f, 0xa8, 0x6b);  // green
    case EventKind::kWeight:
      return QColor(0x2e, 0x8f, 0x8f);  // teal
    case EventKind::kOptimizer:
      return QColor(0x8a, 0x8a, 0x8a);
    case EventKind::kActivation:
      return QColor(0xe0, 0x9b, 0x3d);  // orange
    case EventKind::kGradient:
      return QColor(0xd0, 0x6a, 0x5a);  // red-brown
    case EventKind::kAllReduce:
      return QColor(0x5a, 0x7d, 0xb8);  // slate blue
    case EventKind::kTensorAllReduce:
      return QColor(0xc2, 0x5b, 0x9a);  // magenta
    case EventKind::kExpertAllToAll:
      return QColor(0xb8, 0x86, 0x0b);  // dark gold
    case EventKind::kContextExchange:
      return QColor(0x6b, 0x8e, 0x23);  // olive
  }
  return Qt::gray;
}

const QColor kBubble(0xf6, 0xe3, 0xe3);  // idle compute time: the bubble
const QColor kBefore(0x1f, 0x4e, 0xc9);  // what fed the selected op
const QColor kAfter(0xe0, 0x6c, 0x00);   // what it feeds
// Narrower than the shortest label ("F0", 2 characters and a margin) is not
// worth building a label for, px.
constexpr double kMinLabelWidth = 12.0;

int y_of(int row) {
  return TimelineWidget::kAxisHeight + row * TimelineWidget::kRowHeight;
}

// Where an op (or a span of ops) of a row is drawn; none outside the plot.
std::optional<QRectF> op_rect(const TimeAxis& axis, SimTime start, SimTime end, int row) {
  double x0 = axis.x_of(static_cast<double>(start));
  double x1 = axis.x_of(static_cast<double>(std::max(start, end)));
  if (x1 < 0 || x0 > axis.width_px) return std::nullopt;
  x0 = std::max(x0, -2.0);
  x1 = std::min(x1, axis.width_px + 2);
  return QRectF(TimelineWidget::kGutter + x0, y_of(row) + 2, std::max(1.0, x1 - x0),
                TimelineWidget::kRowHeight - 4);
}

}  // namespace

TimelineWidget::TimelineWidget(QWidget* parent) : QWidget(parent) {
  setMouseTracking(false);
  setFocusPolicy(Qt::StrongFocus);
  setMinimumSize(400, kAxisHeight + kRowHeight);
  setAttribute(Qt::WA_OpaquePaintEvent);
}

void TimelineWidget::set_timelines(std::vector<const Timeline*> sources,
                                   std::vector<std::string> prefixes) {
  sources_ = std::move(sources);
  prefixes_ = std::move(prefixes);
  relayout();
}

void TimelineWidget::set_show_transfers(bool show) {
  show_transfers_ = show;
  relayout();
}

void TimelineWidget::relayout() {
  layout_ = layout_timelines(sources_, prefixes_, show_transfers_);
  selected_.reset();
  deps_ = {};
  zooms_.reset();
  axis_ = TimeAxis::fit(layout_.start_ns, layout_.end_ns, plot_width(width()));
  setMinimumHeight(kAxisHeight +
                   kRowHeight * std::max<int>(1, static_cast<int>(layout_.rows.size())));
  update();
}

double TimelineWidget::plot_width(int widget_width) const {
  return std::max(1.0, static_cast<double>(widget_width - kGutter));
}

void TimelineWidget::select(std::optional<std::size_t> item) {
  selected_ = item;
  deps_ = item ? dependencies_of(layout_, sources_, *item) : Dependencies{};
  update();
}

void TimelineWidget::reset_zoom() {
  zooms_.reset();
  axis_ = TimeAxis::fit(layout_.start_ns, layout_.end_ns, plot_width(width()));
  update();
}

void TimelineWidget::zoom_back() {
  if (const auto previous = zooms_.pop()) axis_ = previous->resized(plot_width(width()));
  update();
}

void TimelineWidget::zoom_by(double factor, double x) {
  axis_ = axis_.zoomed(factor, x - kGutter, layout_.start_ns, layout_.end_ns);
  update();
}

std::optional<int> TimelineWidget::row_at(int y) const {
  if (y < kAxisHeight) return std::nullopt;
  const int row = (y - kAxisHeight) / kRowHeight;
  if (row >= static_cast<int>(layout_.rows.size())) return std::nullopt;
  return row;
}

std::optional<std::size_t> TimelineWidget::item_at(const QPoint& p) const {
  const auto row = row_at(p.y());
  if (!row || p.x() < kGutter) return std::nullopt;
  const double t = axis_.t_of(p.x() - kGutter);
  return hit_test(layout_, *row, t, 3 * axis_.span_ns() / axis_.width_px);
}

void TimelineWidget::paintEvent(QPaintEvent* event) {
  QPainter p(this);
  paint_area(p, size(), event->rect());
  if (banding_ && press_) {
    const int x0 = std::min(press_->x(), band_x_), x1 = std::max(press_->x(), band_x_);
    p.fillRect(QRect(x0, kAxisHeight, x1 - x0, height() - kAxisHeight), QColor(80, 120, 200, 50));
  }
}

void TimelineWidget::render_to(QPainter& p, const QSize& size) const {
  paint_area(p, size, QRect(QPoint(0, 0), size));
}

void TimelineWidget::paint_area(QPainter& p, const QSize& size, const QRect& exposed) const {
  const TimeAxis axis = axis_.resized(plot_width(size.width()));
  const QRect area = exposed.intersected(QRect(QPoint(0, 0), size));
  if (area.isEmpty()) return;
  p.fillRect(area, palette().color(QPalette::Base));
  p.setRenderHint(QPainter::Antialiasing, false);
  // Only the rows in the exposed area: in its scroll area the widget is as tall
  // as all rows, and a paint shows a screenful of them.
  const int rows = static_cast<int>(layout_.rows.size());
  const RowRange in_view{std::max(0, (area.top() - kAxisHeight) / kRowHeight),
                         area.bottom() < kAxisHeight
                             ? 0
                             : std::min(rows, (area.bottom() - kAxisHeight) / kRowHeight + 1)};
  paint_rows(p, axis, size.width(), in_view);
  p.save();
  p.setClipRect(QRect(kGutter, kAxisHeight, size.width() - kGutter, size.height() - kAxisHeight) &
                area);
  paint_ops(p, axis, in_view);
  p.restore();
  if (area.top() < kAxisHeight) paint_axis(p, axis, size.width());
}

void TimelineWidget::paint_rows(QPainter& p, const TimeAxis& axis, int width, RowRange rows) const {
  // Labels, and the bubble under the compute rows between the first start and
  // the last end (ops drawn over it leave the idle time showing).
  const QFontMetrics fm(p.font());
  const double x_start = kGutter + std::max(0.0, axis.x_of(layout_.start_ns));
  const double x_end = kGutter + std::min(axis.width_px, axis.x_of(layout_.end_ns));
  for (int r = rows.first; r < rows.last; ++r) {
    const TimelineRow& row = layout_.rows[static_cast<std::size_t>(r)];
    const int y = y_of(r);
    if (row.lane == Lane::kCompute && x_end > x_start) {
      p.fillRect(QRectF(x_start, y + 1, x_end - x_start, kRowHeight - 2), kBubble);
    }
    p.setPen(palette().color(QPalette::Text));
    p.drawText(QRect(4, y, kGutter - 8, kRowHeight), Qt::AlignVCenter | Qt::AlignLeft,
               fm.elidedText(QString::fromStdString(row.label), Qt::ElideMiddle, kGutter - 8));
    p.setPen(QColor(0, 0, 0, 25));
    p.drawLine(0, y + kRowHeight - 1, width, y + kRowHeight - 1);
  }
}

void TimelineWidget::paint_ops(QPainter& p, const TimeAxis& axis, RowRange rows) const {
  // By level of detail (gui/timeline_lod.h): each op wider than a pixel with its
  // colour and label, the ops within one pixel as one busy span.
  const QFontMetrics fm(p.font());
  for (int r = rows.first; r < rows.last; ++r) {
    const bool lighter = layout_.rows[static_cast<std::size_t>(r)].source > 0;
    const auto fill = [&](const QRectF& rect, EventKind kind) {
      p.fillRect(rect, lighter ? kind_color(kind).lighter(125) : kind_color(kind));
    };
    // Unlabelled spans of one kind that touch (within half a pixel) are one
    // rectangle on screen: drawn as one, a busy stretch of a zoomed-out row
    // costs one fill and not one per pixel.
    std::optional<std::pair<QRectF, EventKind>> run;
    for (const RowSpan& span : row_spans(layout_, r, axis)) {
      const auto rect = op_rect(axis, span.start, span.end, r);
      if (!rect) continue;
      const EventKind kind = span.item ? layout_.items[*span.item].kind : span.kind;
      // Building a label costs more than the rectangle: only where one may fit.
      if (!span.item || rect->width() < kMinLabelWidth) {
        if (run && run->second == kind && rect->left() <= run->first.right() + 0.5) {
          run->first.setRight(std::max(run->first.right(), rect->right()));
        } else {
          if (run) fill(run->first, run->second);
          run.emplace(*rect, kind);
        }
        continue;
      }
      if (run) fill(run->first, run->second), run.reset();
      fill(*rect, kind);
      const TimelineItem& item = layout_.items[*span.item];
      const QString label = QString::fromStdString(
          item_label(sources_[static_cast<std::size_t>(item.source)]->events[item.event]));
      if (rect->width() > fm.horizontalAdvance(label) + 4) {
        p.setPen(Qt::white);
        p.drawText(*rect, Qt::AlignCenter, label);
      }
    }
    if (run) fill(run->first, run->second);
  }
  // The selected op and what it depends on, outlined over the spans, which may
  // have merged them with their neighbours.
  const auto outline = [&](std::size_t i, const QColor& color) {
    const TimelineItem& item = layout_.items[i];
    if (item.row < rows.first || item.row >= rows.last) return;
    if (const auto rect = op_rect(axis, item.start, item.end, item.row)) {
      p.setPen(QPen(color, 2));
      p.drawRect(rect->width() > 4 ? rect->adjusted(1, 1, -1, -1) : *rect);
    }
  };
  for (const std::size_t i : deps_.before) outline(i, kBefore);
  for (const std::size_t i : deps_.after) outline(i, kAfter);
  if (selected_) outline(*selected_, Qt::black);
}

void TimelineWidget::paint_axis(QPainter& p, const TimeAxis& axis, int width) const {
  p.fillRect(QRect(0, 0, width, kAxisHeight), palette().color(QPalette::Window));
  p.setPen(palette().color(QPalette::WindowText));
  for (const Tick& t : time_ticks(axis, 90)) {
    const int x = kGutter + static_cast<int>(std::lround(t.x));
    p.drawLine(x, kAxisHeight - 6, x, kAxisHeight);
    p.drawText(x + 3, kAxisHeight - 9, QString::fromStdString(t.label));
  }
  p.drawLine(kGutter, kAxisHeight - 1, width, kAxisHeight - 1);
}

void TimelineWidget::resizeEvent(QResizeEvent*) {
  axis_ = axis_.resized(plot_width(width()));
}

void TimelineWidget::wheelEvent(QWheelEvent* event) {
  const double steps = event->angleDelta().y() / 120.0;
  if (steps == 0) return;
  zoom_by(std::pow(1.25, steps), event->position().x());
  event->accept();
}

void TimelineWidget::mousePressEvent(QMouseEvent* event) {
  press_ = event->pos();
  last_x_ = event->pos().x();
  band_x_ = last_x_;
  banding_ = event->button() == Qt::RightButton || (event->modifiers() & Qt::ShiftModifier);
  panning_ = false;
}

void TimelineWidget::mouseMoveEvent(QMouseEvent* event) {
  if (!press_) return;
  const int x = event->pos().x();
  if (banding_) {
    band_x_ = x;
  } else if (panning_ || std::abs(x - press_->x()) > 3) {
    panning_ = true;
    axis_ = axis_.panned(last_x_ - x, layout_.start_ns, layout_.end_ns);
  }
  last_x_ = x;
  update();
}

void TimelineWidget::mouseReleaseEvent(QMouseEvent* event) {
  if (!press_) return;
  if (banding_ && std::abs(band_x_ - press_->x()) > 3) {
    zooms_.push(axis_);
    axis_ =
        axis_.selected(press_->x() - kGutter, band_x_ - kGutter, layout_.start_ns, layout_.end_ns);
  } else if (!panning_ && !banding_) {
    select(item_at(event->pos()));
  }
  press_.reset();
  banding_ = panning_ = false;
  update();
}

void TimelineWidget::keyPressEvent(QKeyEvent* event) {
  switch (event->key()) {
    case Qt::Key_Escape:
      reset_zoom();
      break;
    case Qt::Key_Backspace:
      zoom_back();
      break;
    case Qt::Key_Plus:
      zoom_by(1.5, kGutter + axis_.width_px / 2);
      break;
    case Qt::Key_Minus:
      zoom_by(1 / 1.5, kGutter + axis_.width_px / 2);
      break;
    default:
      QWidget::keyPressEvent(event);
  }
}

bool TimelineWidget::event(QEvent* event) {
  if (event->type() == QEvent::ToolTip) {
    auto* help = static_cast<QHelpEvent*>(event);
    if (const auto item = item_at(help->pos())) {
      const TimelineItem& it = layout_.items[*item];
      const Timeline& t = *sources_[it.source];
      QToolTip::showText(help->globalPos(),
                         QString::fromStdString(item_tooltip(t, t.events[it.event])), this);
    } else {
      QToolTip::hideText();
      event->ignore();
    }
    return true;
  }
  return QWidget::event(event);
}

}  // namespace pipescope::gui
