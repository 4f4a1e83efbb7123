// MainWindow's split of the work beyond the pipeline: the T control (tensor
// parallelism, training.tensor_parallel, as `-T` sets it), sequence
// parallelism and the ZeRO stage. Each reads the scenario again with the field
// set, as the command line's flags do, so that the scenario's own checks
// (sim/engine/tensor_parallel.h, sim/engine/zero.h) split the layers and refuse what cannot
// run, in the command line's words.

#include <algorithm>
#include <string>

#include <QCheckBox>
#include <QComboBox>
#include <QHBoxLayout>
#include <QSpinBox>

#include "gui/main_window.h"
#include "gui/main_window_util.h"
#include "sim/scenario/scenario_io.h"

namespace pipescope::gui {
namespace {

// Runs `f`; an error in the scenario's T names the flag as `pipescope
// simulate -T` does ("FILE: -T 3: ...").
template <typename F>
void naming_t_flag(int t, F&& f) {
  try {
    f();
  } catch (const ScenarioError& e) {
    if (e.json_path() != "training.tensor_parallel") throw;
    throw ScenarioError::in_flag(e.file(), e.json_path(), "-T " + std::to_string(t), e.message());
  }
}

}  // namespace

QWidget* MainWindow::make_tensor_controls() {
  auto* row = new QWidget;
  auto* layout = new QHBoxLayout(row);
  layout->setContentsMargins(0, 0, 0, 0);
  t_combo_ = new QComboBox;
  t_combo_->setObjectName(QStringLiteral("tensor_parallel"));
  t_combo_->setToolTip(
      tr("Tensor-parallel devices T per stage (Megatron-LM's): every layer of a transformer "
         "splits over T devices, which all-reduce its results; the devices form groups of T, "
         "which K and D count (N = T x K x D devices)"));
  sequence_check_ = new QCheckBox(tr("sequence parallel"));
  sequence_check_->setObjectName(QStringLiteral("sequence_parallel"));
  sequence_check_->setToolTip(
      tr("Sequence parallelism (T > 1): the layer norms, dropouts and residuals split by "
         "tokens too, so all of a block's activations divide by T"));
  layout->addWidget(t_combo_);
  layout->addWidget(sequence_check_);
  connect(t_combo_, &QComboBox::currentIndexChanged, this, [this] {
    if (!filling_ && scenario_) set_tensor_parallel(t_combo_->currentData().toInt());
  });
  connect(sequence_check_, &QCheckBox::toggled, this, [this](bool on) {
    if (!filling_ && scenario_) set_sequence_parallel(on);
  });
  return row;
}

QComboBox* MainWindow::make_zero_control() {
  zero_combo_ = new QComboBox;
  zero_combo_->setObjectName(QStringLiteral("zero"));
  zero_combo_->addItem(tr("0: nothing sharded"), 0);
  zero_combo_->addItem(tr("1: optimizer state"), 1);
  zero_combo_->addItem(tr("2: optimizer state, gradients"), 2);
  zero_combo_->addItem(tr("3: optimizer state, gradients, weights"), 3);
  zero_combo_->setToolTip(
      tr("ZeRO stage: what each of the D replicas keeps 1/D of (stage 1 is Megatron-LM's "
         "distributed optimizer); nothing changes with D=1"));
  connect(zero_combo_, &QComboBox::currentIndexChanged, this, [this] {
    if (!filling_ && scenario_) set_zero(zero_combo_->currentData().toInt());
  });
  return zero_combo_;
}

void MainWindow::fill_parallel_controls() {
  const bool was_filling = filling_;
  filling_ = true;
  const Cluster& c = scenario_->cluster;
  const int physical = c.physical_devices();
  t_combo_->clear();
  for (int t = 1; t <= physical; ++t) {
    if (physical % t == 0) t_combo_->addItem(QString::number(t), t);
  }
  t_combo_->setCurrentIndex(std::max(0, t_combo_->findData(c.tensor_parallel)));
  sequence_check_->setChecked(scenario_->training.sequence_parallel);
  sequence_check_->setEnabled(c.tensor_parallel > 1);
  zero_combo_->setCurrentIndex(std::max(0, zero_combo_->findData(scenario_->training.zero)));
  filling_ = was_filling;
}

int MainWindow::tensor_parallel() const {
  return scenario_ ? scenario_->cluster.tensor_parallel : 1;
}

bool MainWindow::sequence_parallel() const {
  return scenario_ && scenario_->training.sequence_parallel;
}

int MainWindow::zero() const {
  return scenario_ ? scenario_->training.zero : 0;
}

std::optional<QString> MainWindow::set_tensor_parallel(int t) {
  // Sequence parallelism splits among the T devices: none without them.
  return resplit(t, t > 1 && sequence_parallel(), zero());
}

std::optional<QString> MainWindow::set_sequence_parallel(bool on) {
  return resplit(tensor_parallel(), on, zero());
}

std::optional<QString> MainWindow::set_zero(int stage) {
  return resplit(tensor_parallel(), sequence_parallel(), stage);
}

std::optional<QString> MainWindow::resplit(int t, bool sequence, int zero) {
  if (!scenario_) return tr("Open a scenario first");
  nlohmann::json doc = doc_;
  nlohmann::json& training = doc["training"];
  training["tensor_parallel"] = t;
  training["sequence_parallel"] = sequence;
  training["zero"] = zero;
  const int d = data_parallel(), k = k_spin_->value(), m = m_combo_->currentData().toInt();
  if (const auto error = attempt([&] { naming_t_flag(t, [&] { rescenario(doc); }); })) {
    fill_parallel_controls();  // back to the split in use
    show_error(*error);
    return error;
  }
  filling_ = true;
  fill_parallel_controls();
  fill_d(d);
  fill_k_and_m(k, m);
  filling_ = false;
  simulate();
  sweep();
  search_plans();
  return std::nullopt;
}

}  // namespace pipescope::gui
