#pragma once
// Peak memory per device as bars against each device's capacity (the dashed
// line); a device that does not fit is drawn in red with by how much.

#include <vector>

#include <QWidget>

#include "gui/memory_bars.h"

namespace pipescope::gui {

class MemoryWidget : public QWidget {
  Q_OBJECT

 public:
  explicit MemoryWidget(QWidget* parent = nullptr);
  void set_bars(std::vector<MemoryBar> bars);
  const std::vector<MemoryBar>& bars() const { return bars_; }
  static QColor bar_color(const MemoryBar& bar);  // red when it does not fit

 protected:
  void paintEvent(QPaintEvent* event) override;

 private:
  std::vector<MemoryBar> bars_;
};

}  // namespace pipescope::gui
