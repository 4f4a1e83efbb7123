#include "gui/stage_table_model.h"

#include <QBrush>
#include <QColor>

#include "sim/base/format.h"
#include "sim/engine/custom_schedule.h"
#include "sim/engine/schedule.h"

namespace pipescope::gui {

StageTableModel::StageTableModel(QObject* parent) : QAbstractTableModel(parent) {}

void StageTableModel::set_result(std::shared_ptr<const SimResult> result) {
  beginResetModel();
  result_ = std::move(result);
  endResetModel();
}

int StageTableModel::rowCount(const QModelIndex& parent) const {
  if (parent.isValid() || !result_) return 0;
  return static_cast<int>(result_->stage_costs.size());
}

int StageTableModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : kColumns;
}

QVariant StageTableModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount() || index.column() >= kColumns) return {};
  const std::size_t s = static_cast<std::size_t>(index.row());
  const StageCost& c = result_->stage_costs[s];
  const DeviceMetrics* device = &result_->metrics.devices.at(static_cast<std::size_t>(placed_device(
      result_->schedule, result_->custom.get(), static_cast<int>(s), result_->stages)));
  if (role == Qt::ForegroundRole && index.column() == kPeakMemory && device && !device->fits()) {
    return QBrush(QColor(0xd3, 0x2f, 0x2f));
  }
  if (role == Qt::TextAlignmentRole) {
    return index.column() == kStage ? QVariant(Qt::AlignCenter)
                                    : QVariant(Qt::AlignRight | Qt::AlignVCenter);
  }
  if (role != Qt::DisplayRole) return {};
  switch (index.column()) {
    case kStage:
      return index.row();
    case kLayers:
      return QStringLiteral("%1-%2 (%3)")
          .arg(c.layers.first_layer)
          .arg(c.layers.last_layer)
          .arg(c.layers.layer_count());
    case kParams:
      return QString::fromStdString(format_count(static_cast<double>(c.params)));
    case kForward:
      return QString::fromStdString(format_seconds(simtime_to_seconds(c.forward)));
    case kBackward:
      return QString::fromStdString(
          format_seconds(simtime_to_seconds(c.backward_time(result_->split_backward()))));
    case kRecompute:
      return QString::fromStdString(
          result_->remat != Remat::kNever ? format_seconds(simtime_to_seconds(c.recompute)) : "-");
    case kPeakMemory:
      if (!device) return {};
      return QString::fromStdString(format_bytes(static_cast<double>(device->peak_memory)) + " / " +
                                    format_bytes(static_cast<double>(device->memory_capacity)));
    default:
      return {};
  }
}

QVariant StageTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (role != Qt::DisplayRole || orientation != Qt::Horizontal) {
    return QAbstractTableModel::headerData(section, orientation, role);
  }
  static const char* const names[kColumns] = {"stage",    "layers",    "params",     "forward",
                                              "backward", "recompute", "peak memory"};
  return section >= 0 && section < kColumns ? QVariant(tr(names[section])) : QVariant();
}

}  // namespace pipescope::gui
