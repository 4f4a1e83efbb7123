#pragma once
// The desktop app's window: controls for D, K, T (tensor parallelism), M,
// schedule, remat, ZeRO, partition and cluster preset on the left; the timeline (prediction, and a
// measured run under it) in the middle; memory per device (split into weights, gradients, optimizer
// state and activations), the stage and device tables, the K/M trade-off charts and the summary
// with the planner's best plan below. Every change re-simulates off the UI thread; menus open
// scenarios and measured traces and export plans, framework forms, traces and images.

#include <memory>
#include <optional>
#include <string>

#include <QMainWindow>
#include <nlohmann/json.hpp>

#include "sim/engine/simulator.h"
#include "sim/formats/cost_model_file.h"
#include "sim/plan/plan.h"
#include "sim/plan/planner.h"
#include "sim/scenario/scenario.h"

QT_BEGIN_NAMESPACE
class QCheckBox;
class QComboBox;
class QFormLayout;
class QLabel;
class QMenu;
class QPushButton;
class QSpinBox;
class QTableView;
QT_END_NAMESPACE

namespace pipescope::gui {

class DeviceTableModel;
class JobRunner;
class MemoryWidget;
class StageTableModel;
class TimelineWidget;
class TradeoffView;

class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  // Loads a scenario file; on failure leaves the current one and returns the
  // error (one sentence naming the file and field).
  std::optional<QString> open_scenario(const QString& path);
  // How layers are timed, as `--cost-model MODEL` says it (analytic, kernels, a
  // cost-model file of `pipescope calibrate` or a profile of `pipescope
  // profile`); empty: as the scenario says. A file is read once, here, and
  // applied to every scenario opened and every cluster preset chosen after.
  // On failure (an unreadable file, a model the current scenario cannot use)
  // nothing changes and the error names the file or the device.
  std::optional<QString> set_cost_model(const QString& model);
  // The MODEL of set_cost_model in use; empty: the scenario's own.
  QString cost_model() const { return cost_model_label_; }
  // A measured trace (`pipescope run --trace`) shown under the prediction.
  std::optional<QString> open_measured_trace(const QString& path);
  // A custom schedule, PyTorch pipelining's per-rank action CSV: the schedule
  // control gains "custom" and K and M follow the file. On failure nothing
  // changes and the error names the file, row and column.
  std::optional<QString> open_schedule_file(const QString& path);

  // Data-parallel replicas D of the pipeline: the timeline shows one replica
  // (N / D devices, batch / D); throughput counts all of them.
  void set_data_parallel(int d);
  void set_stages(int k);
  void set_micro_batches(int m);
  void set_remat(Remat remat);
  Remat remat() const;
  void set_schedule(ScheduleKind schedule);
  // v, model chunks per device; used when the schedule takes chunks.
  void set_chunks(int v);
  void set_preset(const QString& name);
  // T, the devices that split every layer (training.tensor_parallel, as `-T`
  // sets it): the scenario is read again with it, its devices groups of T, and
  // D, K and M kept where still allowed; the planner plans that T. On failure
  // (a model that is not a transformer, a T that does not divide its heads or
  // the devices) nothing changes and the error is `pipescope simulate -T`'s.
  std::optional<QString> set_tensor_parallel(int t);
  int tensor_parallel() const;
  // Sequence parallelism under T > 1 (training.sequence_parallel).
  std::optional<QString> set_sequence_parallel(bool on);
  bool sequence_parallel() const;
  // The ZeRO stage, 0 to 3 (training.zero): what the D replicas shard.
  std::optional<QString> set_zero(int stage);
  int zero() const;
  // C, the devices each sample's sequence splits over (training.context_parallel,
  // as `-C` sets it): the devices form groups of T x C, which K and D count.
  // On failure (a model whose attention cannot split, a C that does not
  // divide the devices) nothing changes and the error is `simulate -C`'s.
  std::optional<QString> set_context_parallel(int c);
  int context_parallel() const;
  // E, the replicas a mixture's experts spread over (training.expert_parallel,
  // as `-E` sets it); D stays a multiple of E. Errors as `simulate -E`'s.
  std::optional<QString> set_expert_parallel(int e);
  int expert_parallel() const;

  // Waits (running the event loop) until no simulation, sweep or plan search
  // runs; false after timeout_ms.
  bool wait_idle(int timeout_ms);

  const Scenario* scenario() const { return scenario_.get(); }
  std::shared_ptr<const SimResult> result() const { return result_; }
  TimelineWidget* timeline() const { return timeline_; }
  MemoryWidget* memory() const { return memory_; }
  TradeoffView* tradeoffs() const { return tradeoffs_; }
  StageTableModel* stage_model() const { return stage_model_; }
  DeviceTableModel* device_model() const { return device_model_; }
  QString summary_text() const;
  // The planner's best plan, once the search is done; apply_best_plan() sets
  // D, K, M, remat and the ZeRO stage to it (false: there is none yet, or its
  // split of the layers could not be made).
  const std::optional<PlanCandidate>& best_plan() const { return best_; }
  bool apply_best_plan();
  QString best_plan_text() const;  // what the window says of the best plan
  // A scenario opens at its default layout (K = its devices, D = 1) and,
  // where that does not fit, moves to the planner's best plan once it is
  // found, saying so beside it. A layout chosen on the command line (-K, -M,
  // -T) stays: keep_opened_layout() cancels the move.
  void keep_opened_layout() { open_at_best_ = opening_check_ = false; }
  QString last_error() const { return last_error_; }

  // Export; each returns the error, if any. Files are written atomically.
  std::optional<QString> export_plan(const QString& path);
  std::optional<QString> export_framework(const QString& path, const QString& format);
  std::optional<QString> export_trace(const QString& path);
  std::optional<QString> export_image(const QString& path);  // .png or .svg

 private:
  void build_menus();
  // The configuration panel, docked on the left: its controls, in tab order,
  // then the summary and the best plan.
  void build_controls();
  // D, K and M.
  void build_layout_controls();
  // The schedule, its chunks and remat.
  void build_schedule_controls();
  // The partition, the cluster preset and the transfers toggle.
  void build_cluster_controls();
  // One row per control, T and ZeRO's made here.
  void add_control_rows(QFormLayout* form);
  // The summary, the best plan and its apply button.
  void add_result_rows(QFormLayout* form);
  // What each control's change runs.
  void connect_controls();
  // The T control with the sequence-parallel toggle, the C and E controls, and
  // the ZeRO control.
  QWidget* make_tensor_controls();
  QComboBox* make_context_control();
  QComboBox* make_expert_control();
  QComboBox* make_zero_control();
  void fill_controls();
  // T's choices (the divisors of the physical devices over C), C's (the
  // divisors over T that halve into the sequence), E's (the divisors of the
  // experts and the groups), sequence parallelism and ZeRO, as the scenario
  // has them.
  void fill_parallel_controls();
  // D's choices, those dividing the devices and the batch; keeps d if allowed.
  void fill_d(int d);
  // The training fields the parallel controls set, as the scenario has them.
  struct Split {
    int t = 1;
    bool sequence = false;
    int zero = 0;
    int c = 1;
    int e = 1;
  };
  Split split() const;
  // Reads the scenario again with these training fields; shows and returns
  // the error, changing nothing, when it cannot.
  std::optional<QString> resplit(const Split& s);
  void simulate();
  void sweep();
  void search_plans();
  void show_result();
  void show_error(const QString& message);
  void add_recent(const QString& path);
  void rebuild_recent_menu();
  SimConfig current_config() const;
  int data_parallel() const;
  ScheduleKind schedule() const;
  int chunks() const;  // the control's v under interleaving, else 1
  // The scenario one replica runs (cluster of K devices, batch / D).
  Scenario replica() const;
  void fill_k_and_m(int k, int m);
  Plan current_plan() const;
  // Parses `doc` (the cost model of set_cost_model applied) and makes it the
  // scenario; throws, changing nothing, when it is not valid.
  void rescenario(const nlohmann::json& doc);

  // The scenario as JSON (the preset control edits it) and as parsed.
  nlohmann::json doc_;
  QString file_;
  std::shared_ptr<const Scenario> scenario_;
  std::shared_ptr<const Scenario> replica_;  // what result_ simulated
  std::shared_ptr<const SimResult> result_;
  std::optional<Timeline> measured_;
  std::shared_ptr<const CustomSchedule> custom_;  // the last schedule file opened
  // set_cost_model's model as read; null: the scenario's own.
  std::shared_ptr<const CostModelArgument> cost_model_;
  QString cost_model_label_;
  QString measured_file_;
  std::optional<PlanCandidate> best_;
  QString last_error_;
  bool filling_ = false;  // controls are being set from the scenario
  // After open_scenario the first result decides (opening_check_) whether the
  // best plan replaces a default that does not fit (open_at_best_).
  bool opening_check_ = false;
  bool open_at_best_ = false;
  QString opened_layout_;   // the default's layout, "K=98, D=1"
  QString opened_at_best_;  // why the window moved to the best plan, said beside it
  void open_at_best_if_pending();

  JobRunner* sim_runner_ = nullptr;
  JobRunner* sweep_runner_ = nullptr;
  JobRunner* plan_runner_ = nullptr;

  QComboBox* d_combo_ = nullptr;
  QSpinBox* k_spin_ = nullptr;
  QSpinBox* chunks_spin_ = nullptr;
  // The chunks chosen for a loop, kept while a V shows its fixed 2.
  std::optional<int> chunks_before_v_;
  QComboBox* m_combo_ = nullptr;
  QComboBox* schedule_combo_ = nullptr;
  QComboBox* remat_combo_ = nullptr;
  QComboBox* t_combo_ = nullptr;
  QCheckBox* sequence_check_ = nullptr;
  QComboBox* c_combo_ = nullptr;
  QComboBox* e_combo_ = nullptr;
  QComboBox* zero_combo_ = nullptr;
  QComboBox* partition_combo_ = nullptr;
  QComboBox* preset_combo_ = nullptr;
  QCheckBox* transfers_check_ = nullptr;
  QLabel* summary_ = nullptr;
  QLabel* best_label_ = nullptr;
  QPushButton* best_apply_ = nullptr;
  QLabel* status_ = nullptr;
  TimelineWidget* timeline_ = nullptr;
  MemoryWidget* memory_ = nullptr;
  TradeoffView* tradeoffs_ = nullptr;
  StageTableModel* stage_model_ = nullptr;
  QTableView* stage_table_ = nullptr;
  DeviceTableModel* device_model_ = nullptr;
  QTableView* device_table_ = nullptr;
  QMenu* recent_menu_ = nullptr;
};

}  // namespace pipescope::gui
