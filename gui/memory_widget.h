#pragma once
// Peak memory per device as bars against each device's capacity (the dashed
// line), each bar stacked from its weights, gradients, optimizer state and
// activations (darkest first; hovering a bar gives the bytes of each); a device
// that does not fit is drawn in reds with by how much.

#include <vector>

#include <QWidget>

#include "gui/memory_bars.h"

namespace pipescope::gui {

class MemoryWidget : public QWidget {
  Q_OBJECT

 public:
  // The parts of a bar, in the order they are stacked.
  enum Part { kWeights, kGradients, kOptimizer, kActivations, kParts };

  explicit MemoryWidget(QWidget* parent = nullptr);
  void set_bars(std::vector<MemoryBar> bars);
  const std::vector<MemoryBar>& bars() const { return bars_; }
  static QColor bar_color(const MemoryBar& bar);  // red when it does not fit
  // `part` of the bar, a shade of bar_color.
  static QColor part_color(const MemoryBar& bar, Part part);
  // The bar under `pos`, or -1.
  int bar_at(QPoint pos) const;
  // What hovering bar `index` shows: its peak and the bytes of each part.
  QString tooltip(int index) const;

 protected:
  bool event(QEvent* event) override;
  void paintEvent(QPaintEvent* event) override;

 private:
  void draw_legend(QPainter& p, int x);
  void draw_parts(QPainter& p, const MemoryBar& b, QRectF bar);

  std::vector<MemoryBar> bars_;
};

}  // namespace pipescope::gui
