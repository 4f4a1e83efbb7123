#include "gui/memory_widget.h"

#include <algorithm>
#include <array>

#include <QHelpEvent>
#include <QPainter>
#include <QToolTip>

namespace pipescope::gui {
namespace {

constexpr int kLegend = 20;  // the legend's row, below the title
constexpr int kTop = 42;     // the first bar's, below the legend
constexpr int kRow = 22;
constexpr int kBarRow = 18;

std::array<Bytes, MemoryWidget::kParts> parts_of(const MemorySplit& s) {
  return {s.weights, s.gradients, s.optimizer, s.activations};
}

}  // namespace

MemoryWidget::MemoryWidget(QWidget* parent) : QWidget(parent) {
  setMinimumHeight(90);
}

void MemoryWidget::set_bars(std::vector<MemoryBar> bars) {
  bars_ = std::move(bars);
  setMinimumHeight(std::max(90, kTop + kRow * static_cast<int>(bars_.size())));
  update();
}

QColor MemoryWidget::bar_color(const MemoryBar& bar) {
  return bar.fits ? QColor(0x4c, 0x8b, 0xd6) : QColor(0xd3, 0x2f, 0x2f);
}

QColor MemoryWidget::part_color(const MemoryBar& bar, Part part) {
  const QColor base = bar_color(bar);
  switch (part) {
    case kWeights:
      return base.darker(170);
    case kGradients:
      return base.darker(130);
    case kActivations:
      return base.lighter(150);
    default:
      return base;
  }
}

int MemoryWidget::bar_at(QPoint pos) const {
  if (pos.y() < kTop) return -1;
  const int index = (pos.y() - kTop) / kRow;
  return index < static_cast<int>(bars_.size()) ? index : -1;
}

QString MemoryWidget::tooltip(int index) const {
  if (index < 0 || index >= static_cast<int>(bars_.size())) return {};
  const MemoryBar& b = bars_[static_cast<std::size_t>(index)];
  return tr("device %1: %2\n%3")
      .arg(b.device)
      .arg(QString::fromStdString(b.label))
      .arg(QString::fromStdString(split_text(b.split)));
}

bool MemoryWidget::event(QEvent* event) {
  if (event->type() != QEvent::ToolTip) return QWidget::event(event);
  const auto* help = static_cast<QHelpEvent*>(event);
  const QString text = tooltip(bar_at(help->pos()));
  if (text.isEmpty()) {
    QToolTip::hideText();
    event->ignore();
  } else {
    QToolTip::showText(help->globalPos(), text, this);
  }
  return true;
}

void MemoryWidget::draw_legend(QPainter& p, int x) {
  const MemoryBar sample;  // fits: the legend's shades are the blue ones
  const std::array<QString, kParts> names = {tr("weights"), tr("gradients"), tr("optimizer"),
                                             tr("activations")};
  for (int part = 0; part < kParts; ++part) {
    p.fillRect(QRect(x, kLegend + 4, 10, 10), part_color(sample, static_cast<Part>(part)));
    x += 14;
    const QString& name = names[static_cast<std::size_t>(part)];
    p.drawText(QRect(x, kLegend, 200, 18), Qt::AlignLeft | Qt::AlignVCenter, name);
    x += p.fontMetrics().horizontalAdvance(name) + 12;
  }
}

// The bar's parts left to right, scaled to fill `bar` (the whole peak); one
// block when the parts are not known.
void MemoryWidget::draw_parts(QPainter& p, const MemoryBar& b, QRectF bar) {
  const auto parts = parts_of(b.split);
  Bytes total = 0;
  for (const Bytes part : parts) total += part;
  if (total <= 0) {
    p.fillRect(bar, bar_color(b));
    return;
  }
  double x = bar.left();
  for (int part = 0; part < kParts; ++part) {
    const double w = bar.width() * static_cast<double>(parts[static_cast<std::size_t>(part)]) /
                     static_cast<double>(total);
    p.fillRect(QRectF(x, bar.top(), w, bar.height()), part_color(b, static_cast<Part>(part)));
    x += w;
  }
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
  draw_legend(p, 4);
  for (std::size_t i = 0; i < bars_.size(); ++i) {
    const MemoryBar& b = bars_[i];
    const int y = kTop + static_cast<int>(i) * kRow;
    p.setPen(palette().color(QPalette::Text));
    p.drawText(QRect(4, y, label_w - 8, kBarRow), Qt::AlignVCenter | Qt::AlignLeft,
               tr("device %1").arg(b.device));
    const double w = plot_w * static_cast<double>(b.peak) / scale;
    draw_parts(p, b, QRectF(label_w, y + 2, std::max(1.0, w), 14));
    const double cap_x = label_w + plot_w * static_cast<double>(b.capacity) / scale;
    p.setPen(QPen(palette().color(QPalette::Text), 1, Qt::DashLine));
    p.drawLine(QPointF(cap_x, y), QPointF(cap_x, y + kBarRow));
    p.setPen(b.fits ? palette().color(QPalette::Text) : bar_color(b));
    p.drawText(QRect(label_w + static_cast<int>(plot_w) + 8, y, text_w, kBarRow),
               Qt::AlignVCenter | Qt::AlignLeft, QString::fromStdString(b.label));
  }
}

}  // namespace pipescope::gui
