#include "gui/device_table_model.h"

#include <QBrush>
#include <QColor>
#include <QStringList>

#include "sim/base/format.h"
#include "sim/engine/custom_schedule.h"
#include "sim/engine/schedule.h"

namespace pipescope::gui {

DeviceTableModel::DeviceTableModel(QObject* parent) : QAbstractTableModel(parent) {}

void DeviceTableModel::set_result(std::shared_ptr<const SimResult> result) {
  beginResetModel();
  result_ = std::move(result);
  splits_ = result_ ? memory_splits(*result_) : std::vector<MemorySplit>{};
  endResetModel();
}

int DeviceTableModel::rowCount(const QModelIndex& parent) const {
  if (parent.isValid() || !result_) return 0;
  return static_cast<int>(result_->metrics.devices.size());
}

int DeviceTableModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : kColumns;
}

Bytes DeviceTableModel::bytes(std::size_t device, int column) const {
  const MemorySplit& s = splits_.at(device);
  const DeviceMetrics& m = result_->metrics.devices.at(device);
  switch (column) {
    case kWeights:
      return s.weights;
    case kGradients:
      return s.gradients;
    case kOptimizer:
      return s.optimizer;
    case kActivations:
      return s.activations;
    case kPeak:
      return m.peak_memory;
    case kCapacity:
      return m.memory_capacity;
    default:
      return -1;
  }
}

QString DeviceTableModel::stages_of(std::size_t device) const {
  QStringList stages;
  for (std::size_t s = 0; s < result_->stage_costs.size(); ++s) {
    const auto placed = static_cast<std::size_t>(placed_device(
        result_->schedule, result_->custom.get(), static_cast<int>(s), result_->stages));
    if (placed == device) stages << QString::number(s);
  }
  return stages.join(QStringLiteral(", "));
}

QVariant DeviceTableModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount() || index.column() >= kColumns) return {};
  const auto d = static_cast<std::size_t>(index.row());
  const int column = index.column();
  if (role == Qt::ForegroundRole && column == kPeak && !result_->metrics.devices[d].fits()) {
    return QBrush(QColor(0xd3, 0x2f, 0x2f));
  }
  if (role == Qt::TextAlignmentRole) {
    return column <= kStages ? QVariant(Qt::AlignCenter)
                             : QVariant(Qt::AlignRight | Qt::AlignVCenter);
  }
  const Bytes b = bytes(d, column);
  if (role == kBytesRole) return b < 0 ? QVariant() : QVariant(static_cast<qlonglong>(b));
  if (role != Qt::DisplayRole) return {};
  if (column == kDevice) return index.row();
  if (column == kStages) return stages_of(d);
  return QString::fromStdString(format_bytes(static_cast<double>(b)));
}

QVariant DeviceTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (role != Qt::DisplayRole || orientation != Qt::Horizontal) {
    return QAbstractTableModel::headerData(section, orientation, role);
  }
  static const char* const names[kColumns] = {"device",    "stages",    "peak",        "weights",
                                              "gradients", "optimizer", "activations", "capacity"};
  return section >= 0 && section < kColumns ? QVariant(tr(names[section])) : QVariant();
}

}  // namespace pipescope::gui
