// MainWindow's configuration panel: the controls for D, K, T (with sequence
// parallelism), M, the schedule, its chunks, remat, ZeRO, the partition and the
// cluster preset, the summary and the best plan, and what each control's change
// runs (T and ZeRO's in main_window_parallel.cpp).

#include <QCheckBox>
#include <QComboBox>
#include <QDockWidget>
#include <QFormLayout>
#include <QLabel>
#include <QPushButton>
#include <QSignalBlocker>
#include <QSpinBox>

#include "costmodels/device.h"
#include "gui/main_window.h"
#include "gui/main_window_util.h"
#include "gui/timeline_widget.h"

namespace pipescope::gui {

void MainWindow::build_controls() {
  auto* panel = new QWidget;
  auto* form = new QFormLayout(panel);
  build_layout_controls();
  build_schedule_controls();
  build_cluster_controls();
  add_control_rows(form);
  add_result_rows(form);

  auto* dock = new QDockWidget(tr("Configuration"), this);
  dock->setObjectName(QStringLiteral("configuration"));
  dock->setWidget(panel);
  dock->setFeatures(QDockWidget::DockWidgetMovable);
  addDockWidget(Qt::LeftDockWidgetArea, dock);

  connect_controls();
}

void MainWindow::build_layout_controls() {
  d_combo_ = new QComboBox;
  d_combo_->setObjectName(QStringLiteral("data_parallel"));
  d_combo_->setToolTip(tr("Data-parallel replicas D of the pipeline (N = T x K x D devices)"));
  k_spin_ = new QSpinBox;
  k_spin_->setToolTip(tr("Pipeline stages K"));
  m_combo_ = new QComboBox;
  m_combo_->setToolTip(tr("Micro-batches M (divisors of the global batch)"));
}

void MainWindow::build_schedule_controls() {
  schedule_combo_ = new QComboBox;
  for (const ScheduleKind k : kAllSchedules)
    schedule_combo_->addItem(qs(std::string(to_string(k))));
  chunks_spin_ = new QSpinBox;
  chunks_spin_->setRange(1, 16);
  chunks_spin_->setValue(2);
  chunks_spin_->setEnabled(false);
  chunks_spin_->setToolTip(
      tr("Model chunks v per device for interleaved-1f1b, interleaved-zb and looped-bfs (K x v "
         "stages, stage s on device s mod K; interleaved-1f1b needs M >= K in whole rounds); zb-v "
         "and dualpipe-v run exactly 2, stages d and 2K-1-d on device d"));
  remat_combo_ = new QComboBox;
  for (const Remat r : kAllRemats) {
    remat_combo_->addItem(qs(std::string(to_string(r))), static_cast<int>(r));
  }
  remat_combo_->setToolTip(
      tr("Rematerialization: always recomputes every micro-batch's forward before its "
         "backward, keeping only each stage's input (each layer's under the scenario's "
         "training.checkpoint layer); except-last all but the last "
         "micro-batch's; selective keeps all but a transformer's attention core, which "
         "each backward rebuilds first; never keeps every activation"));
}

void MainWindow::build_cluster_controls() {
  partition_combo_ = new QComboBox;
  for (const char* p : {"optimal", "uniform", "params", "gpipe"}) partition_combo_->addItem(p);
  preset_combo_ = new QComboBox;
  for (const DevicePreset& p : device_presets()) preset_combo_->addItem(qs(p.device.name));
  transfers_check_ = new QCheckBox(tr("show transfers"));
  transfers_check_->setChecked(true);
}

void MainWindow::add_control_rows(QFormLayout* form) {
  form->addRow(tr("D"), d_combo_);
  form->addRow(tr("K"), k_spin_);
  form->addRow(tr("T"), make_tensor_controls());
  form->addRow(tr("C"), make_context_control());
  form->addRow(tr("E"), make_expert_control());
  form->addRow(tr("M"), m_combo_);
  form->addRow(tr("schedule"), schedule_combo_);
  form->addRow(tr("chunks"), chunks_spin_);
  form->addRow(tr("remat"), remat_combo_);
  form->addRow(tr("ZeRO"), make_zero_control());
  form->addRow(tr("partition"), partition_combo_);
  form->addRow(tr("cluster"), preset_combo_);
  form->addRow(QString(), transfers_check_);
}

void MainWindow::add_result_rows(QFormLayout* form) {
  summary_ = new QLabel;
  summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  summary_->setWordWrap(true);
  form->addRow(summary_);
  best_label_ = new QLabel(tr("Best plan: searching..."));
  best_label_->setWordWrap(true);
  best_apply_ = new QPushButton(tr("Apply best plan"));
  best_apply_->setEnabled(false);
  form->addRow(best_label_);
  form->addRow(best_apply_);
}

void MainWindow::connect_controls() {
  const auto changed = [this] {
    if (!filling_) simulate();
  };
  connect(d_combo_, &QComboBox::currentIndexChanged, this, [this] {
    if (filling_ || !scenario_) return;
    fill_k_and_m(k_spin_->value(), m_combo_->currentData().toInt());
    simulate();
    sweep();
  });
  connect(k_spin_, &QSpinBox::valueChanged, this, changed);
  connect(m_combo_, &QComboBox::currentIndexChanged, this, changed);
  connect(remat_combo_, &QComboBox::currentIndexChanged, this, changed);
  const auto schedule_changed = [this] {
    // The V-shaped schedules run exactly two chunks: shown, not editable; the
    // count chosen for a loop comes back with the loop.
    const bool v = v_shaped(schedule());
    chunks_spin_->setEnabled(takes_chunks(schedule()) && !v);
    const QSignalBlocker quiet(chunks_spin_);
    if (v && !chunks_before_v_) {
      chunks_before_v_ = chunks_spin_->value();
      chunks_spin_->setValue(kDefaultChunks);
    } else if (!v && chunks_before_v_) {
      chunks_spin_->setValue(*chunks_before_v_);
      chunks_before_v_.reset();
    }
    if (filling_ || !scenario_) return;
    simulate();
    sweep();
  };
  connect(schedule_combo_, &QComboBox::currentIndexChanged, this, schedule_changed);
  connect(chunks_spin_, &QSpinBox::valueChanged, this, [this] {
    if (filling_ || !scenario_ || !takes_chunks(schedule()) || v_shaped(schedule())) return;
    simulate();
    sweep();
  });
  connect(partition_combo_, &QComboBox::currentIndexChanged, this, changed);
  connect(preset_combo_, &QComboBox::currentTextChanged, this, [this](const QString& name) {
    if (!filling_) set_preset(name);
  });
  connect(transfers_check_, &QCheckBox::toggled, timeline_, &TimelineWidget::set_show_transfers);
  connect(best_apply_, &QPushButton::clicked, this, &MainWindow::apply_best_plan);
}

}  // namespace pipescope::gui
