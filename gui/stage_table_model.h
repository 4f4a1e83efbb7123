#pragma once
// The stages of a simulated step as a table: layers, parameters, forward,
// backward and recompute time per micro-batch, and the device's peak memory.

#include <memory>

#include <QAbstractTableModel>

#include "sim/engine/simulator.h"

namespace pipescope::gui {

class StageTableModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column { kStage, kLayers, kParams, kForward, kBackward, kRecompute, kPeakMemory, kColumns };

  explicit StageTableModel(QObject* parent = nullptr);
  // Null: an empty table.
  void set_result(std::shared_ptr<const SimResult> result);

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;

 private:
  std::shared_ptr<const SimResult> result_;
};

}  // namespace pipescope::gui
