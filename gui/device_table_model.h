#pragma once
// The devices of a simulated step as a table: the stages each runs, its peak
// memory, the peak split into weights, gradients, optimizer state and
// activations (memory_splits), the four adding up to it, and its capacity.

#include <memory>
#include <vector>

#include <QAbstractTableModel>

#include "sim/engine/simulator.h"

namespace pipescope::gui {

class DeviceTableModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column {
    kDevice,
    kStages,
    kPeak,
    kWeights,
    kGradients,
    kOptimizer,
    kActivations,
    kCapacity,
    kColumns
  };
  // A byte column's bytes, as a number (the display role formats them).
  static constexpr int kBytesRole = Qt::UserRole;

  explicit DeviceTableModel(QObject* parent = nullptr);
  // Null: an empty table.
  void set_result(std::shared_ptr<const SimResult> result);

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;

 private:
  // Column `column`'s bytes for device `device`; -1 for a column of no bytes.
  Bytes bytes(std::size_t device, int column) const;
  QString stages_of(std::size_t device) const;

  std::shared_ptr<const SimResult> result_;
  std::vector<MemorySplit> splits_;
};

}  // namespace pipescope::gui
