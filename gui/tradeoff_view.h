#pragma once
// Throughput and bubble fraction against M, one line per K (from a sweep), with
// the current choice marked; clicking a point selects that K and M.

#include <vector>

#include <QWidget>

#include "sim/plan/sweep.h"

QT_BEGIN_NAMESPACE
class QChart;
class QChartView;
class QScatterSeries;
QT_END_NAMESPACE

namespace pipescope::gui {

class TradeoffView : public QWidget {
  Q_OBJECT

 public:
  explicit TradeoffView(QWidget* parent = nullptr);
  // Points of one sweep (row-major over K, then M, as run_sweep returns them).
  void set_points(std::vector<SweepPoint> points);
  void set_current(int stages, int micro_batches);
  const std::vector<SweepPoint>& points() const { return points_; }
  // The line series per K in each chart (for tests: K values in order).
  std::vector<int> stage_values() const;
  // The charts, for tests.
  const QChart* throughput_chart() const;
  const QChart* bubble_chart() const;

 signals:
  void selected(int stages, int micro_batches);

 private:
  void rebuild();
  void point_clicked(int stages, double micro_batches);

  std::vector<SweepPoint> points_;
  int current_k_ = 0;
  int current_m_ = 0;
  QChartView* throughput_view_ = nullptr;
  QChartView* bubble_view_ = nullptr;
};

}  // namespace pipescope::gui
