#include "gui/main_window.h"

#include <algorithm>
#include <numeric>
#include <set>

#include <QApplication>
#include <QComboBox>
#include <QEventLoop>
#include <QFileInfo>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QScrollArea>
#include <QSpinBox>
#include <QSplitter>
#include <QStatusBar>
#include <QTabWidget>
#include <QTableView>
#include <QTimer>
#include <QVBoxLayout>

#include "costmodels/device.h"
#include "gui/device_table_model.h"
#include "gui/job_runner.h"
#include "gui/main_window_util.h"
#include "gui/memory_bars.h"
#include "gui/memory_widget.h"
#include "gui/stage_table_model.h"
#include "gui/timeline_widget.h"
#include "gui/tradeoff_view.h"
#include "sim/formats/trace_io.h"
#include "sim/plan/plan.h"
#include "sim/plan/sweep.h"
#include "sim/scenario/expert_groups.h"
#include "sim/scenario/scenario_io.h"

namespace pipescope::gui {
namespace {

constexpr int kMaxMicroBatches = 512;

}  // namespace

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle(tr("PipeScope"));
  sim_runner_ = new JobRunner(this);
  sweep_runner_ = new JobRunner(this);
  plan_runner_ = new JobRunner(this);

  timeline_ = new TimelineWidget;
  auto* scroll = new QScrollArea;
  scroll->setWidget(timeline_);
  scroll->setWidgetResizable(true);
  scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);

  memory_ = new MemoryWidget;
  stage_model_ = new StageTableModel(this);
  stage_table_ = new QTableView;
  stage_table_->setModel(stage_model_);
  stage_table_->horizontalHeader()->setStretchLastSection(true);
  stage_table_->verticalHeader()->hide();
  device_model_ = new DeviceTableModel(this);
  device_table_ = new QTableView;
  device_table_->setModel(device_model_);
  device_table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  device_table_->verticalHeader()->hide();
  tradeoffs_ = new TradeoffView;
  connect(tradeoffs_, &TradeoffView::selected, this, [this](int k, int m) {
    filling_ = true;
    k_spin_->setValue(k);
    m_combo_->setCurrentIndex(m_combo_->findData(m));
    filling_ = false;
    simulate();
  });

  auto* tabs = new QTabWidget;
  auto* memory_scroll = new QScrollArea;
  memory_scroll->setWidget(memory_);
  memory_scroll->setWidgetResizable(true);
  tabs->addTab(memory_scroll, tr("Memory"));
  tabs->addTab(stage_table_, tr("Stages"));
  tabs->addTab(device_table_, tr("Devices"));
  auto* bottom = new QSplitter(Qt::Horizontal);
  bottom->addWidget(tabs);
  bottom->addWidget(tradeoffs_);
  bottom->setSizes({450, 700});

  auto* split = new QSplitter(Qt::Vertical);
  split->addWidget(scroll);
  split->addWidget(bottom);
  split->setSizes({560, 320});
  setCentralWidget(split);

  build_controls();
  build_menus();
  status_ = new QLabel;
  statusBar()->addWidget(status_, 1);
  resize(1400, 900);
}

MainWindow::~MainWindow() = default;

void MainWindow::rescenario(const nlohmann::json& doc) {
  Scenario parsed = parse_scenario(doc, file_.toStdString());
  if (cost_model_) apply_cost_model_argument(parsed, *cost_model_);
  doc_ = doc;
  scenario_ = std::make_shared<const Scenario>(std::move(parsed));
}

std::optional<QString> MainWindow::set_cost_model(const QString& model) {
  std::shared_ptr<const CostModelArgument> chosen;
  if (!model.isEmpty()) {
    if (const auto error = attempt([&] {
          chosen = std::make_shared<const CostModelArgument>(
              read_cost_model_argument(model.toStdString()));
        })) {
      show_error(*error);
      return error;
    }
  }
  const auto previous = cost_model_;
  cost_model_ = std::move(chosen);
  if (scenario_) {
    if (const auto error = attempt([&] { rescenario(doc_); })) {
      cost_model_ = previous;
      show_error(*error);
      return error;
    }
  }
  cost_model_label_ = model;
  if (scenario_) {
    simulate();
    sweep();
    search_plans();
  }
  return std::nullopt;
}

std::optional<QString> MainWindow::open_scenario(const QString& path) {
  const QString previous = file_;
  const auto error = attempt([&] {
    nlohmann::json doc = load_scenario_json(path.toStdString());
    file_ = path;
    rescenario(doc);
  });
  if (error) {
    file_ = previous;
    show_error(*error);
    return error;
  }
  measured_.reset();
  setWindowTitle(tr("PipeScope - %1").arg(QFileInfo(path).fileName()));
  add_recent(path);
  fill_controls();
  opening_check_ = true;
  open_at_best_ = false;
  opened_at_best_.clear();
  simulate();
  sweep();
  search_plans();
  return std::nullopt;
}

std::optional<QString> MainWindow::open_schedule_file(const QString& path) {
  if (!scenario_) return tr("Open a scenario before a schedule file");
  std::shared_ptr<const CustomSchedule> custom;
  if (const auto error = attempt([&] {
        custom = std::make_shared<const CustomSchedule>(read_schedule_csv(path.toStdString()));
      })) {
    return error;
  }
  const int d = data_parallel();
  if (custom->devices() > scenario_->cluster.devices / d) {
    return tr("%1: the schedule runs on %2 devices; D=%3 replicas of the cluster's %4 leave %5")
        .arg(path)
        .arg(custom->devices())
        .arg(d)
        .arg(scenario_->cluster.devices)
        .arg(scenario_->cluster.devices / d);
  }
  if ((scenario_->training.global_batch / d) % custom->micro_batches != 0) {
    return tr("%1: its %2 micro-batches do not divide the batch of %3 per replica")
        .arg(path)
        .arg(custom->micro_batches)
        .arg(scenario_->training.global_batch / d);
  }
  custom_ = std::move(custom);
  filling_ = true;
  if (schedule_combo_->findText(QStringLiteral("custom")) < 0) {
    schedule_combo_->addItem(QStringLiteral("custom"));
  }
  set_schedule(ScheduleKind::kCustom);
  fill_k_and_m(custom_->devices(), custom_->micro_batches);
  filling_ = false;
  simulate();
  return std::nullopt;
}

std::optional<QString> MainWindow::open_measured_trace(const QString& path) {
  Timeline measured;
  if (const auto error = attempt([&] { measured = read_chrome_trace_file(path.toStdString()); })) {
    show_error(*error);
    return error;
  }
  measured_ = std::move(measured);
  measured_file_ = path;
  show_result();
  return std::nullopt;
}

void MainWindow::fill_controls() {
  filling_ = true;
  const Scenario& sc = *scenario_;
  fill_parallel_controls();
  // Expert parallelism needs D x C a multiple of E: the first such D.
  const int E = sc.training.expert_parallel;
  const int first_d = E / std::gcd(E, sc.training.context_parallel);
  fill_d(first_d);
  fill_k_and_m(sc.cluster.devices / first_d, sc.training.micro_batches);
  set_remat(sc.training.remat);
  schedule_combo_->setCurrentText(qs(std::string(to_string(sc.training.schedule))));
  if (takes_chunks(sc.training.schedule)) chunks_spin_->setValue(sc.training.chunks);
  const bool preset = doc_.contains("cluster") && doc_["cluster"].contains("preset");
  preset_combo_->setEnabled(preset);
  if (preset_combo_->findText(qs(sc.cluster.name)) < 0) preset_combo_->addItem(qs(sc.cluster.name));
  preset_combo_->setCurrentText(qs(sc.cluster.name));
  filling_ = false;
}

void MainWindow::fill_d(int d) {
  const Scenario& sc = *scenario_;
  d_combo_->clear();
  for (int v = 1; v <= sc.cluster.devices; ++v) {
    if (sc.cluster.devices % v == 0 && sc.training.global_batch % v == 0 &&
        experts_divide(sc.training.expert_parallel, v, sc.training.context_parallel,
                       sc.cluster.expert_fold)) {
      d_combo_->addItem(QString::number(v), v);
    }
  }
  d_combo_->setCurrentIndex(std::max(0, d_combo_->findData(d)));
}

// K up to the replica's devices (and the layers), M among the divisors of the
// replica's batch; keeps k and m where they are still allowed.
void MainWindow::fill_k_and_m(int k, int m) {
  const bool was_filling = filling_;
  filling_ = true;
  const Scenario& sc = *scenario_;
  const int d = data_parallel();
  const int layers = static_cast<int>(sc.model.layers.size());
  const int k_max = std::max(1, std::min(sc.cluster.devices / d, layers));
  k_spin_->setRange(1, k_max);
  k_spin_->setValue(std::clamp(k, 1, k_max));
  const std::int64_t batch = sc.training.global_batch / d;
  m_combo_->clear();
  for (std::int64_t v = 1; v <= std::min<std::int64_t>(batch, kMaxMicroBatches); ++v) {
    if (batch % v == 0) m_combo_->addItem(QString::number(v), static_cast<int>(v));
  }
  int index = m_combo_->findData(m);
  if (index < 0) {  // the largest M not above m
    index = 0;
    for (int i = 0; i < m_combo_->count(); ++i) {
      if (m_combo_->itemData(i).toInt() <= m) index = i;
    }
  }
  m_combo_->setCurrentIndex(index);
  filling_ = was_filling;
}

int MainWindow::data_parallel() const {
  return std::max(1, d_combo_->currentData().toInt());
}

ScheduleKind MainWindow::schedule() const {
  return parse_schedule(schedule_combo_->currentText().toStdString())
      .value_or(ScheduleKind::kGpipe);
}

void MainWindow::set_schedule(ScheduleKind schedule) {
  schedule_combo_->setCurrentText(qs(std::string(to_string(schedule))));
}

void MainWindow::set_chunks(int v) {
  chunks_spin_->setValue(v);
}

int MainWindow::chunks() const {
  if (v_shaped(schedule())) return kDefaultChunks;
  return takes_chunks(schedule()) ? chunks_spin_->value() : 1;
}

Scenario MainWindow::replica() const {
  Scenario r = replica_scenario(*scenario_, k_spin_->value(), data_parallel());
  r.training.schedule = schedule();
  r.training.chunks = chunks();
  return r;
}

void MainWindow::set_data_parallel(int d) {
  const int index = d_combo_->findData(d);
  if (index < 0) {
    show_error(tr("D=%1 does not divide both the devices and the batch").arg(d));
    return;
  }
  d_combo_->setCurrentIndex(index);
}

void MainWindow::set_stages(int k) {
  k_spin_->setValue(k);
}

void MainWindow::set_micro_batches(int m) {
  const int index = m_combo_->findData(m);
  if (index < 0) {
    show_error(tr("M=%1 does not divide the global batch").arg(m));
    return;
  }
  m_combo_->setCurrentIndex(index);
}

void MainWindow::set_remat(Remat remat) {
  remat_combo_->setCurrentIndex(std::max(0, remat_combo_->findData(static_cast<int>(remat))));
}

Remat MainWindow::remat() const {
  return static_cast<Remat>(remat_combo_->currentData().toInt());
}

void MainWindow::set_preset(const QString& name) {
  if (!scenario_) return;
  nlohmann::json doc = doc_;
  doc["cluster"]["preset"] = name.toStdString();
  if (const auto error = attempt([&] { rescenario(doc); })) {
    show_error(*error);
    return;
  }
  simulate();
  sweep();
  search_plans();
}

SimConfig MainWindow::current_config() const {
  SimConfig c;
  c.stages = k_spin_->value();
  c.micro_batches = m_combo_->currentData().toInt();
  c.remat = remat();
  c.schedule = schedule();
  c.chunks = chunks();
  if (c.schedule == ScheduleKind::kCustom && custom_) {
    c.custom = custom_;
    c.chunks = custom_->chunks();
  }
  c.partition = parse_partition_method(partition_combo_->currentText().toStdString())
                    .value_or(PartitionMethod::kOptimal);
  c.record_timeline = true;
  return c;
}

void MainWindow::simulate() {
  if (!scenario_) return;
  const auto sc = std::make_shared<const Scenario>(replica());
  SimConfig config = current_config();
  status_->setText(tr("Simulating K=%1, M=%2...").arg(*config.stages).arg(*config.micro_batches));
  sim_runner_->submit(
      [this, sc, config, whole = scenario_->cluster,
       d = data_parallel()]() mutable -> std::function<void()> {
        config.data_parallel =
            data_parallel_ring(whole, *config.stages, d, sc->training.expert_parallel);
        auto result = std::make_shared<const SimResult>(pipescope::simulate(*sc, config));
        return [this, sc, result] {
          replica_ = sc;
          result_ = result;
          last_error_.clear();
          show_result();
          if (opening_check_) {
            opening_check_ = false;
            open_at_best_ = !result->metrics.fits();
            opened_layout_ = tr("K=%1, D=%2").arg(result->stages).arg(data_parallel());
            open_at_best_if_pending();
          }
        };
      },
      [this](const QString& error) { show_error(error); });
}

void MainWindow::sweep() {
  // A custom schedule fixes K and M: there is no grid to sweep.
  if (schedule() == ScheduleKind::kCustom) return;
  // D replicas of K devices for every K up to devices / D, M dividing batch / D;
  // each point one replica with its gradient all-reduce, throughput of all D.
  const int d = data_parallel();
  Scenario whole = *scenario_;
  whole.training.schedule = schedule();
  whole.training.chunks = chunks();
  const auto sc = std::make_shared<const Scenario>(std::move(whole));
  SweepRequest request;
  request.data_parallel = d;
  const int layers = static_cast<int>(sc->model.layers.size());
  for (int k = 1; k <= std::min(sc->cluster.devices / d, layers); k *= 2) {
    request.stages.push_back(k);
  }
  const std::int64_t batch = sc->training.global_batch / d;
  for (std::int64_t m = 1; m <= std::min<std::int64_t>(batch, kMaxMicroBatches); m *= 2) {
    if (batch % m == 0) request.micro_batches.push_back(static_cast<int>(m));
  }
  sweep_runner_->submit(
      [this, sc, request]() -> std::function<void()> {
        auto points = run_sweep(*sc, request);
        return [this, points = std::move(points)]() mutable {
          tradeoffs_->set_points(std::move(points));
          tradeoffs_->set_current(k_spin_->value(), m_combo_->currentData().toInt());
        };
      },
      [this](const QString& error) { show_error(tr("sweep: %1").arg(error)); });
}

void MainWindow::search_plans() {
  const std::shared_ptr<const Scenario> sc = scenario_;
  best_.reset();
  best_apply_->setEnabled(false);
  best_label_->setText(tr("Best plan: searching..."));
  plan_runner_->submit(
      [this, sc]() -> std::function<void()> {
        // The T, C and E chosen (the scenario's, split by their controls).
        PlanRequest request;
        request.tensor_parallel = sc->cluster.tensor_parallel;
        request.context_parallel = sc->cluster.context_parallel;
        request.expert_parallel = sc->training.expert_parallel;
        PlanReport report = run_planner(*sc, request);
        return [this, sc, report = std::move(report)]() mutable {
          // A search of a scenario since replaced (another T, preset or cost
          // model): the search of the new one follows.
          if (sc != scenario_) return;
          if (report.ranked.empty()) {
            best_label_->setText(tr("Best plan: nothing fits"));
            return;
          }
          best_ = std::move(report.ranked.front());
          best_label_->setText(tr("Best plan: %1, %2 samples/s%3")
                                   .arg(qs(best_->label()))
                                   .arg(best_->samples_per_s, 0, 'f', 2)
                                   .arg(opened_at_best_));
          best_apply_->setEnabled(true);
          best_apply_->setToolTip(tr("Set D, K, M, remat and the ZeRO stage to the best plan's"));
          open_at_best_if_pending();
        };
      },
      [this](const QString& error) { best_label_->setText(tr("Best plan: %1").arg(error)); });
}

QString MainWindow::best_plan_text() const {
  return best_label_->text();
}

void MainWindow::open_at_best_if_pending() {
  if (!open_at_best_ || !best_) return;
  open_at_best_ = false;
  opened_at_best_ =
      tr(", opened at it: the scenario's default layout (%1) does not fit").arg(opened_layout_);
  if (!apply_best_plan()) {
    opened_at_best_.clear();
    return;
  }
  // A new split searches again, and its label says it; otherwise say it here.
  if (best_) best_label_->setText(best_label_->text() + opened_at_best_);
}

bool MainWindow::apply_best_plan() {
  if (!best_) return false;
  const PlanCandidate best = *best_;  // a new split searches again, resetting best_
  const TrainingConfig& planned = best.scenario->training;
  if (planned.zero != scenario_->training.zero ||
      planned.sequence_parallel != scenario_->training.sequence_parallel) {
    Split s = split();
    s.sequence = planned.sequence_parallel;
    s.zero = planned.zero;
    if (resplit(s)) return false;
  }
  filling_ = true;
  d_combo_->setCurrentIndex(std::max(0, d_combo_->findData(best.data_parallel)));
  fill_k_and_m(best.stages, best.micro_batches);
  set_remat(best.remat);
  set_schedule(best.schedule);
  if (best.chunks > 1) chunks_spin_->setValue(best.chunks);
  filling_ = false;
  simulate();
  sweep();
  return true;
}

void MainWindow::show_result() {
  if (!result_) return;
  std::vector<const Timeline*> sources{&result_->timeline};
  std::vector<std::string> prefixes{""};
  if (measured_) {
    sources.push_back(&*measured_);
    prefixes.emplace_back("measured");
  }
  timeline_->set_timelines(std::move(sources), std::move(prefixes));
  memory_->set_bars(memory_bars(*result_));
  stage_model_->set_result(result_);
  device_model_->set_result(result_);
  tradeoffs_->set_current(result_->stages, result_->micro_batches);
  summary_->setText(summary_text());
  status_->setText(tr("K=%1, M=%2: %3 ops")
                       .arg(result_->stages)
                       .arg(result_->micro_batches)
                       .arg(result_->compute_ops + result_->transfers));
}

void MainWindow::show_error(const QString& message) {
  last_error_ = message;
  status_->setText(tr("Error: %1").arg(message));
}

bool MainWindow::wait_idle(int timeout_ms) {
  // Sleeps in the event loop until a runner finishes or the time is up, rather
  // than spinning: a spinning UI thread takes a core from the work it awaits.
  const auto busy = [this] {
    return sim_runner_->busy() || sweep_runner_->busy() || plan_runner_->busy();
  };
  QEventLoop loop;
  for (JobRunner* runner : {sim_runner_, sweep_runner_, plan_runner_}) {
    connect(runner, &JobRunner::idle, &loop, [&] {
      if (!busy()) loop.quit();
    });
  }
  QTimer deadline;
  deadline.setSingleShot(true);
  connect(&deadline, &QTimer::timeout, &loop, &QEventLoop::quit);
  if (busy()) {
    deadline.start(timeout_ms);
    loop.exec();
  }
  QApplication::processEvents();
  return !busy();
}

}  // namespace pipescope::gui
