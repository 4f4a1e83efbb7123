#include "gui/memory_widget.h"

#include <algorithm>

#include <QPainter>

namespace pipescope::gui {

MemoryWidget::MemoryWidget(QWidget* parent) : QWidget(parent) {
  setMinimumHeight(90);
}

void MemoryWidget::set_bars(std::vector<MemoryBar> bars) {
  bars_ = std::move(bars);
  setMinimumHeight(std::max(90, 24 + 22 * static_cast<int>(bars_.size())));
  update();
}

QColor MemoryWidget::bar_color(const MemoryBar& bar) {
  return bar.fits ? QColor(0x4c, 0x8b, 0xd6) : QColor(0xd3, 0x2f, 0x2f);
}

void MemoryWidget::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), palette().color(QPalette::Base));
  if (bars_.empty()) return;
  // One scale for all bars: the larger of the largest peak and the capacity.
  double scale = 1;
  for (const MemoryBar& b : bars_) {
    scale = std::max({scale, static_cast<double>(b.peak), static_cast<double>(b.capacity)});
  }
  const int label_w = 80, text_w = 260;
  const double plot_w = std::max(40, width() - label_w - text_w - 16);
  p.setPen(palette().color(QPalette::Text));
  p.drawText(QRect(4, 2, width() - 8, 18), Qt::AlignLeft | Qt::AlignVCenter,
             tr("Peak memory per device (dashed: capacity)"));
  for (std::size_t i = 0; i < bars_.size(); ++i) {
    const MemoryBar& b = bars_[i];
    const int y = 24 + static_cast<int>(i) * 22;
    p.setPen(palette().color(QPalette::Text));
    p.drawText(QRect(4, y, label_w - 8, 18), Qt::AlignVCenter | Qt::AlignLeft,
               tr("device %1").arg(b.device));
    const double w = plot_w * static_cast<double>(b.peak) / scale;
    p.fillRect(QRectF(label_w, y + 2, std::max(1.0, w), 14), bar_color(b));
    const double cap_x = label_w + plot_w * static_cast<double>(b.capacity) / scale;
    p.setPen(QPen(palette().color(QPalette::Text), 1, Qt::DashLine));
    p.drawLine(QPointF(cap_x, y), QPointF(cap_x, y + 18));
    p.setPen(b.fits ? palette().color(QPalette::Text) : bar_color(b));
    p.drawText(QRect(label_w + static_cast<int>(plot_w) + 8, y, text_w, 18),
               Qt::AlignVCenter | Qt::AlignLeft, QString::fromStdString(b.label));
  }
}

}  // namespace pipescope::gui
