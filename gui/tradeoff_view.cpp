#include "gui/tradeoff_view.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <QChart>
#include <QChartView>
#include <QColor>
#include <QHBoxLayout>
#include <QLineSeries>
#include <QLogValueAxis>
#include <QScatterSeries>
#include <QValueAxis>

#include "gui/series_colours.h"

namespace pipescope::gui {

namespace {
// Legend entries that a row below a chart of the window's width shows whole.
constexpr std::size_t kLegendBelowAtMost = 6;
}  // namespace

TradeoffView::TradeoffView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QHBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  throughput_view_ = new QChartView(this);
  bubble_view_ = new QChartView(this);
  for (QChartView* v : {throughput_view_, bubble_view_}) {
    v->setRenderHint(QPainter::Antialiasing);
    v->setMinimumSize(260, 200);
    layout->addWidget(v);
  }
  rebuild();
}

void TradeoffView::set_points(std::vector<SweepPoint> points) {
  points_ = std::move(points);
  rebuild();
}

void TradeoffView::set_current(int stages, int micro_batches) {
  current_k_ = stages;
  current_m_ = micro_batches;
  rebuild();
}

const QChart* TradeoffView::throughput_chart() const {
  return throughput_view_->chart();
}

const QChart* TradeoffView::bubble_chart() const {
  return bubble_view_->chart();
}

std::vector<int> TradeoffView::stage_values() const {
  std::set<int> ks;
  for (const SweepPoint& p : points_) {
    if (p.error.empty()) ks.insert(p.stages);
  }
  return {ks.begin(), ks.end()};
}

void TradeoffView::point_clicked(int stages, double micro_batches) {
  // The nearest M of that K's line (the axis is logarithmic: compare log2).
  int best = 0;
  double best_d = 1e300;
  for (const SweepPoint& p : points_) {
    if (p.stages != stages || !p.error.empty()) continue;
    const double d =
        std::fabs(std::log2(p.micro_batches) - std::log2(std::max(micro_batches, 1e-9)));
    if (d < best_d) {
      best_d = d;
      best = p.micro_batches;
    }
  }
  if (best > 0) emit selected(stages, best);
}

void TradeoffView::rebuild() {
  const auto make_chart = [&](const QString& title, const QString& y_title, bool percent,
                              auto value) {
    auto* chart = new QChart();
    chart->setTitle(title);
    // A row of legends below the chart truncates its labels to bare colour
    // boxes once there are more than a few K: many K are listed at the right.
    const std::size_t series = stage_values().size() + 1;  // and the current mark
    chart->legend()->setAlignment(series > kLegendBelowAtMost ? Qt::AlignRight : Qt::AlignBottom);
    chart->legend()->setShowToolTips(true);
    auto* x = new QLogValueAxis();
    x->setBase(2);
    x->setLabelFormat("%d");
    x->setTitleText(QObject::tr("micro-batches M"));
    auto* y = new QValueAxis();
    y->setTitleText(y_title);
    if (percent) y->setLabelFormat("%.0f %%");
    chart->addAxis(x, Qt::AlignBottom);
    chart->addAxis(y, Qt::AlignLeft);
    double y_max = 0;
    int m_max = 1;
    std::map<int, QLineSeries*> lines;
    for (const SweepPoint& p : points_) {
      if (!p.error.empty()) continue;
      QLineSeries*& s = lines[p.stages];
      if (!s) {
        s = new QLineSeries();
        s->setName(QStringLiteral("K=%1").arg(p.stages));
        s->setPointsVisible(true);
        chart->addSeries(s);
        s->attachAxis(x);
        s->attachAxis(y);
        const int k = p.stages;
        connect(s, &QLineSeries::clicked, this,
                [this, k](const QPointF& at) { point_clicked(k, at.x()); });
      }
      const double v = value(p);
      s->append(p.micro_batches, v);
      y_max = std::max(y_max, v);
      m_max = std::max(m_max, p.micro_batches);
    }
    // One hue a K, however many (Qt's theme repeats after five).
    std::size_t index = 0;
    for (auto& entry : lines) {
      const Rgb c = series_colour(index++, lines.size());
      entry.second->setColor(QColor(c.r, c.g, c.b));
    }
    auto* mark = new QScatterSeries();
    mark->setName(QObject::tr("current"));
    mark->setMarkerSize(13);
    mark->setColor(Qt::black);
    for (const SweepPoint& p : points_) {
      if (p.error.empty() && p.stages == current_k_ && p.micro_batches == current_m_) {
        mark->append(p.micro_batches, value(p));
      }
    }
    chart->addSeries(mark);
    mark->attachAxis(x);
    mark->attachAxis(y);
    x->setRange(1, std::max(2, m_max));
    if (percent) {
      y->setRange(0, 100);
    } else {
      y->setRange(0, y_max > 0 ? y_max * 1.08 : 1);
      y->applyNiceNumbers();
    }
    return chart;
  };
  QChart* old_t = throughput_view_->chart();
  QChart* old_b = bubble_view_->chart();
  throughput_view_->setChart(make_chart(tr("Throughput"), tr("samples/s"), false,
                                        [](const SweepPoint& p) { return p.samples_per_s; }));
  bubble_view_->setChart(make_chart(tr("Bubble"), tr("bubble"), true,
                                    [](const SweepPoint& p) { return 100 * p.bubble_fraction; }));
  delete old_t;
  delete old_b;
}

}  // namespace pipescope::gui
