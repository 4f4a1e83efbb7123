// MainWindow's summary of the step shown: its time, throughput, bubble and
// MFU, the largest peak memory and what makes it up, how the devices split
// the work (T, C, K, D, E, ZeRO), the cost model, and a measured run's error.

#include <algorithm>

#include <QFileInfo>

#include "gui/main_window.h"
#include "gui/main_window_util.h"
#include "gui/memory_bars.h"
#include "sim/base/format.h"

namespace pipescope::gui {
namespace {

// "Peak memory 9.42 GiB on device 1: weights 672 MiB, ...", the device of the
// largest peak, as `pipescope simulate` splits it.
QString memory_line(const SimResult& r) {
  const std::vector<DeviceMetrics>& devices = r.metrics.devices;
  const auto peak = std::max_element(
      devices.begin(), devices.end(),
      [](const DeviceMetrics& a, const DeviceMetrics& b) { return a.peak_memory < b.peak_memory; });
  if (peak == devices.end()) return {};
  const auto device = static_cast<int>(peak - devices.begin());
  return QObject::tr("\nPeak memory %1 on device %2%3: %4")
      .arg(qs(format_bytes(static_cast<double>(peak->peak_memory))))
      .arg(device)
      .arg(r.metrics.fits() ? QString() : QObject::tr(" (does not fit)"))
      .arg(qs(split_text(memory_split(r, device))));
}

// "Parallelism T=2 (sequence parallel) x C=2 x K=4 x D=2 (E=2) = 32 devices,
// ZeRO-1", C and E where they split anything.
QString parallelism_line(const SimResult& r, int replicas) {
  QString text = QObject::tr("\nParallelism T=%1").arg(r.tensor_parallel);
  if (r.sequence_parallel) text += QObject::tr(" (sequence parallel)");
  if (r.context_parallel > 1) text += QObject::tr(" x C=%1").arg(r.context_parallel);
  text += QObject::tr(" x K=%1 x D=%2").arg(r.stages).arg(replicas);
  if (r.expert_parallel > 1) text += QObject::tr(" (E=%1)").arg(r.expert_parallel);
  text += QObject::tr(" = %1 devices")
              .arg(std::int64_t{r.tensor_parallel} * r.context_parallel * r.stages * replicas);
  if (r.zero > 0) {
    text += QObject::tr(", ZeRO-%1").arg(r.zero);
    if (replicas == 1 && r.context_parallel == 1) {
      text += QObject::tr(" (nothing to shard with D=1)");
    }
  }
  return text;
}

// "Measured step 612 ms (prediction +2.8 %)".
QString measured_line(const Timeline& measured, const Metrics& m) {
  if (measured.events.empty()) return {};
  SimTime first = measured.events.front().start, last = 0;
  for (const TimelineEvent& e : measured.events) {
    first = std::min(first, e.start);
    last = std::max(last, e.end);
  }
  const double measured_s = simtime_to_seconds(last - first);
  return QObject::tr("\nMeasured step %1 (prediction %2)")
      .arg(qs(format_seconds(measured_s)))
      .arg(measured_s > 0
               ? QString::asprintf("%+.1f %%", 100 * (m.step_time_s() - measured_s) / measured_s)
               : QStringLiteral("-"));
}

}  // namespace

QString MainWindow::summary_text() const {
  if (!result_) return {};
  const Metrics& m = result_->metrics;
  // Replicas of the simulated result (the D control may already say otherwise).
  const auto d =
      static_cast<int>(scenario_->training.global_batch / replica_->training.global_batch);
  QString text = tr("Step time %1\nThroughput %2 samples/s\nBubble %3\nMFU %4")
                     .arg(qs(format_seconds(m.step_time_s())))
                     .arg(m.samples_per_s * d, 0, 'f', 2)
                     .arg(qs(format_percent(m.bubble_fraction)))
                     .arg(qs(format_percent(m.mfu)));
  text += memory_line(*result_);
  text += parallelism_line(*result_, d);
  text += tr("\nCost model %1").arg(qs(result_->cost_model));
  if (cost_model_ && (cost_model_->file || cost_model_->profile)) {
    text += tr(" (%1)").arg(QFileInfo(cost_model_label_).fileName());
  }
  if (d > 1) {
    text += tr("\nOne of D=%1 replicas shown, with each stage's gradient all-reduce among "
               "them; throughput counts all")
                .arg(d);
  }
  if (measured_) text += measured_line(*measured_, m);
  return text;
}

}  // namespace pipescope::gui
