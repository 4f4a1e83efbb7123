// MainWindow's menus and files: opening scenarios (recent and bundled ones),
// choosing the cost model (by name, or a cost-model file or profile), and
// exporting the current simulation as a plan, a framework's form, a Chrome
// trace or a picture.

#include <QApplication>
#include <QBuffer>
#include <QComboBox>
#include <QDir>
#include <QDirIterator>
#include <QFileDialog>
#include <QFileInfo>
#include <QImage>
#include <QMenu>
#include <QMenuBar>
#include <QMessageBox>
#include <QPainter>
#include <QSettings>
#include <QSvgGenerator>

#include "gui/atomic_save.h"
#include "gui/main_window.h"
#include "gui/main_window_util.h"
#include "gui/timeline_widget.h"
#include "sim/base/file_io.h"
#include "sim/export/plan_export.h"
#include "sim/formats/plan_io.h"
#include "sim/formats/trace_io.h"
#include "sim/plan/plan.h"

namespace pipescope::gui {
namespace {

constexpr int kMaxRecent = 8;

}  // namespace

void MainWindow::build_menus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  file->addAction(tr("&Open scenario..."), QKeySequence::Open, this, [this] {
    const QString path =
        QFileDialog::getOpenFileName(this, tr("Open scenario"), {}, tr("Scenarios (*.json)"));
    if (path.isEmpty()) return;
    if (const auto error = open_scenario(path)) QMessageBox::warning(this, tr("Open"), *error);
  });
  recent_menu_ = file->addMenu(tr("Open &recent"));
  rebuild_recent_menu();
  QMenu* bundled = file->addMenu(tr("&Bundled scenarios"));
  const QString dir = QStringLiteral(PIPESCOPE_SCENARIO_DIR);
  QStringList found;
  for (QDirIterator it(dir, {QStringLiteral("*.json")}, QDir::Files, QDirIterator::Subdirectories);
       it.hasNext();) {
    found << it.next();
  }
  found.sort();
  for (const QString& path : found) {
    bundled->addAction(QDir(dir).relativeFilePath(path), this, [this, path] {
      if (const auto error = open_scenario(path)) QMessageBox::warning(this, tr("Open"), *error);
    });
  }
  bundled->setEnabled(!found.isEmpty());
  file->addAction(tr("Open &schedule file..."), this, [this] {
    const QString path =
        QFileDialog::getOpenFileName(this, tr("Open schedule file"), {},
                                     tr("PyTorch pipelining action CSV (*.csv);;All files (*)"));
    if (path.isEmpty()) return;
    if (const auto error = open_schedule_file(path)) {
      QMessageBox::warning(this, tr("Open schedule file"), *error);
    }
  });
  file->addAction(tr("Open &measured trace..."), this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, tr("Open measured trace"), {},
                                                      tr("Chrome traces (*.json *.json.gz)"));
    if (path.isEmpty()) return;
    if (const auto error = open_measured_trace(path)) {
      QMessageBox::warning(this, tr("Open measured trace"), *error);
    }
  });
  // --cost-model's choices: by name, or a file (a cost-model file or a profile).
  QMenu* cost = file->addMenu(tr("Cost &model"));
  const auto choose = [this](const QString& model) {
    if (const auto error = set_cost_model(model)) {
      QMessageBox::warning(this, tr("Cost model"), *error);
    }
  };
  cost->addAction(tr("As the scenario says"), this, [choose] { choose({}); });
  cost->addAction(tr("&Analytic (the device's roofline)"), this,
                  [choose] { choose(QStringLiteral("analytic")); });
  cost->addAction(tr("&Kernels (the kernel-level model)"), this,
                  [choose] { choose(QStringLiteral("kernels")); });
  cost->addAction(tr("Open cost-model file or &profile..."), this, [this, choose] {
    const QString path =
        QFileDialog::getOpenFileName(this, tr("Open cost-model file or profile"), {},
                                     tr("Cost-model files and profiles (*.json);;All files (*)"));
    if (!path.isEmpty()) choose(path);
  });
  file->addSeparator();
  const auto save = [this](const QString& title, const QString& filter, auto export_fn) {
    const QString path = QFileDialog::getSaveFileName(this, title, {}, filter);
    if (path.isEmpty()) return;
    if (const auto error = export_fn(path)) QMessageBox::warning(this, title, *error);
  };
  file->addAction(tr("Export &plan..."), this, [this, save] {
    save(tr("Export plan"), tr("Plans (*.json)"),
         [this](const QString& p) { return export_plan(p); });
  });
  QMenu* frameworks = file->addMenu(tr("Export &for"));
  for (const char* f : {"torchgpipe", "deepspeed", "megatron", "torch-pipelining"}) {
    const QString format = QString::fromLatin1(f);
    frameworks->addAction(format, this, [this, save, format] {
      save(tr("Export for %1").arg(format), tr("All files (*)"),
           [this, format](const QString& p) { return export_framework(p, format); });
    });
  }
  file->addAction(tr("Export Chrome &trace..."), this, [this, save] {
    save(tr("Export trace"), tr("Chrome traces (*.json *.json.gz)"),
         [this](const QString& p) { return export_trace(p); });
  });
  file->addAction(tr("Export timeline &image..."), this, [this, save] {
    save(tr("Export image"), tr("Images (*.png *.svg)"),
         [this](const QString& p) { return export_image(p); });
  });
  file->addSeparator();
  file->addAction(tr("&Quit"), QKeySequence::Quit, qApp, &QApplication::quit);

  QMenu* view = menuBar()->addMenu(tr("&View"));
  view->addAction(tr("&Reset zoom"), timeline_, &TimelineWidget::reset_zoom);
  view->addAction(tr("Zoom &back"), timeline_, &TimelineWidget::zoom_back);
}

void MainWindow::add_recent(const QString& path) {
  QSettings settings;
  QStringList recent = settings.value(QStringLiteral("recentFiles")).toStringList();
  const QString absolute = QFileInfo(path).absoluteFilePath();
  recent.removeAll(absolute);
  recent.prepend(absolute);
  while (recent.size() > kMaxRecent) recent.removeLast();
  settings.setValue(QStringLiteral("recentFiles"), recent);
  rebuild_recent_menu();
}

void MainWindow::rebuild_recent_menu() {
  recent_menu_->clear();
  const QStringList recent = QSettings().value(QStringLiteral("recentFiles")).toStringList();
  for (const QString& path : recent) {
    recent_menu_->addAction(path, this, [this, path] {
      if (const auto error = open_scenario(path)) QMessageBox::warning(this, tr("Open"), *error);
    });
  }
  recent_menu_->setEnabled(!recent.isEmpty());
}

Plan MainWindow::current_plan() const {
  // The replica result_ simulated, and how many of them make up the scenario.
  const auto d =
      static_cast<int>(scenario_->training.global_batch / replica_->training.global_batch);
  return make_plan(*replica_, *result_, d, partition_combo_->currentText().toStdString());
}

std::optional<QString> MainWindow::export_plan(const QString& path) {
  if (!result_) return tr("nothing simulated yet");
  return attempt([&] {
    const Plan plan = current_plan();
    write_plan_file(path.toStdString(), plan);
  });
}

std::optional<QString> MainWindow::export_framework(const QString& path, const QString& format) {
  if (!result_) return tr("nothing simulated yet");
  const auto f = parse_export_format(format.toStdString());
  if (!f) return tr("unknown export format '%1'").arg(format);
  return attempt([&] {
    const Plan plan = current_plan();
    write_file_atomically(path.toStdString(), pipescope::export_plan(plan, *f));
  });
}

std::optional<QString> MainWindow::export_trace(const QString& path) {
  if (!result_) return tr("nothing simulated yet");
  return attempt([&] { write_chrome_trace_file(path.toStdString(), result_->timeline); });
}

std::optional<QString> MainWindow::export_image(const QString& path) {
  const QSize size(std::max(800, timeline_->width()), timeline_->minimumHeight());
  if (path.endsWith(QStringLiteral(".svg"), Qt::CaseInsensitive)) {
    QByteArray bytes;
    QBuffer buffer(&bytes);
    QSvgGenerator svg;
    svg.setOutputDevice(&buffer);
    svg.setSize(size);
    svg.setViewBox(QRect(QPoint(0, 0), size));
    svg.setTitle(tr("PipeScope timeline"));
    {
      QPainter p(&svg);
      timeline_->render_to(p, size);
    }
    return save_bytes_atomically(bytes, path);
  }
  QImage image(size, QImage::Format_ARGB32);
  {
    QPainter p(&image);
    timeline_->render_to(p, size);
  }
  return save_png_atomically(image, path);
}

}  // namespace pipescope::gui
