// MainWindow's split of the work beyond the pipeline: the T control (tensor
// parallelism, training.tensor_parallel, as `-T` sets it), sequence
// parallelism, the C control (context parallelism, `-C`), the E control
// (expert parallelism, `-E`) and the ZeRO stage. Each reads the scenario again
// with the field set, as the command line's flags do, so that the scenario's
// own checks (sim/engine/tensor_parallel.h, sim/scenario/context_groups.h,
// sim/scenario/expert_groups.h, sim/engine/zero.h) split the layers and refuse
// what cannot run, in the command line's words.

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <QCheckBox>
#include <QComboBox>
#include <QHBoxLayout>
#include <QSpinBox>

#include "gui/main_window.h"
#include "gui/main_window_util.h"
#include "sim/scenario/expert_groups.h"
#include "sim/scenario/scenario_io.h"

namespace pipescope::gui {
namespace {

// Runs `f`; an error in the scenario's T, C or E names the flag as `pipescope
// simulate -T` does ("FILE: -T 3: ...").
template <typename F>
void naming_split_flags(int t, int c, int e, F&& f) {
  try {
    f();
  } catch (const ScenarioError& error) {
    const std::string& path = error.json_path();
    std::string flag;
    if (path == "training.tensor_parallel") flag = "-T " + std::to_string(t);
    if (path == "training.context_parallel") flag = "-C " + std::to_string(c);
    if (path == "training.expert_parallel") flag = "-E " + std::to_string(e);
    if (flag.empty()) throw;
    throw ScenarioError::in_flag(error.file(), path, flag, error.message());
  }
}

// The C a sequence of seq_len tokens offers over `devices` groups: the
// divisors whose 2 C chunks divide it (causal balancing).
std::vector<int> context_choices(int devices, std::int64_t seq_len) {
  std::vector<int> out;
  for (int c = 1; c <= devices; ++c) {
    if (devices % c == 0 && (c == 1 || seq_len % (2 * c) == 0)) out.push_back(c);
  }
  return out;
}

void fill_combo(QComboBox* combo, const std::vector<int>& choices, int current) {
  combo->clear();
  for (const int v : choices) combo->addItem(QString::number(v), v);
  combo->setCurrentIndex(std::max(0, combo->findData(current)));
  combo->setEnabled(choices.size() > 1);
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

QComboBox* MainWindow::make_context_control() {
  c_combo_ = new QComboBox;
  c_combo_->setObjectName(QStringLiteral("context_parallel"));
  c_combo_->setToolTip(
      tr("Context-parallel devices C (Megatron-LM's): each sample's sequence splits over C "
         "devices, which pass the keys and values round a ring inside the attention; the "
         "devices form groups of T x C (N = T x C x K x D devices)"));
  connect(c_combo_, &QComboBox::currentIndexChanged, this, [this] {
    if (!filling_ && scenario_) set_context_parallel(c_combo_->currentData().toInt());
  });
  return c_combo_;
}

QComboBox* MainWindow::make_expert_control() {
  e_combo_ = new QComboBox;
  e_combo_->setObjectName(QStringLiteral("expert_parallel"));
  e_combo_->setToolTip(
      tr("Expert-parallel replicas E (a mixture of experts): the routed experts spread over E "
         "of the D replicas (of the D x C devices with context parallelism), which exchange "
         "tokens by all-to-all; D x C is a multiple of E"));
  connect(e_combo_, &QComboBox::currentIndexChanged, this, [this] {
    if (!filling_ && scenario_) set_expert_parallel(e_combo_->currentData().toInt());
  });
  return e_combo_;
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
  const int T = c.tensor_parallel, C = c.context_parallel;
  std::vector<int> ts;
  for (int t = 1; t <= physical / C; ++t) {
    if ((physical / C) % t == 0) ts.push_back(t);
  }
  fill_combo(t_combo_, ts, T);
  t_combo_->setEnabled(true);  // a T that cannot split the model says why
  const TransformerParams* p = scenario_->model.transformer.get();
  fill_combo(c_combo_, p ? context_choices(physical / T, p->seq_len) : std::vector<int>{1}, C);
  std::vector<int> es{1};
  if (p && p->moe.enabled()) {
    for (int e = 2; e <= p->moe.experts; ++e) {
      if (p->moe.experts % e == 0 && experts_divide(e, c.devices, C, c.expert_fold))
        es.push_back(e);
    }
  }
  fill_combo(e_combo_, es, scenario_->training.expert_parallel);
  sequence_check_->setChecked(scenario_->training.sequence_parallel);
  sequence_check_->setEnabled(T > 1);
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

int MainWindow::context_parallel() const {
  return scenario_ ? scenario_->cluster.context_parallel : 1;
}

int MainWindow::expert_parallel() const {
  return scenario_ ? scenario_->training.expert_parallel : 1;
}

MainWindow::Split MainWindow::split() const {
  return {tensor_parallel(), sequence_parallel(), zero(), context_parallel(), expert_parallel()};
}

std::optional<QString> MainWindow::set_tensor_parallel(int t) {
  // Sequence parallelism splits among the T devices: none without them;
  // whole experts beside T > 1 need it (expert_tensor_parallel_problem).
  Split s = split();
  s.t = t;
  const bool whole_experts = scenario_ && scenario_->training.expert_tensor_parallel == 1;
  s.sequence = t > 1 && (s.sequence || whole_experts);
  return resplit(s);
}

std::optional<QString> MainWindow::set_sequence_parallel(bool on) {
  Split s = split();
  s.sequence = on;
  return resplit(s);
}

std::optional<QString> MainWindow::set_zero(int stage) {
  Split s = split();
  s.zero = stage;
  return resplit(s);
}

std::optional<QString> MainWindow::set_context_parallel(int c) {
  Split s = split();
  s.c = c;
  return resplit(s);
}

std::optional<QString> MainWindow::set_expert_parallel(int e) {
  Split s = split();
  s.e = e;
  return resplit(s);
}

std::optional<QString> MainWindow::resplit(const Split& s) {
  if (!scenario_) return tr("Open a scenario first");
  nlohmann::json doc = doc_;
  nlohmann::json& training = doc["training"];
  training["tensor_parallel"] = s.t;
  training["sequence_parallel"] = s.sequence;
  training["zero"] = s.zero;
  training["context_parallel"] = s.c;
  training["expert_parallel"] = s.e;
  const int d = data_parallel(), k = k_spin_->value(), m = m_combo_->currentData().toInt();
  if (const auto error =
          attempt([&] { naming_split_flags(s.t, s.c, s.e, [&] { rescenario(doc); }); })) {
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
