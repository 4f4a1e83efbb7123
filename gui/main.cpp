// pipescope-gui: explore K/M trade-offs of a scenario on a timeline.
//   pipescope-gui [SCENARIO] [-K N] [-M N] [-T N] [--cost-model MODEL]
//                 [--measured TRACE] [--screenshot PNG]
// --screenshot renders the window offscreen to a PNG once the simulation is
// done and exits (for the README's picture and for tests).

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include <QApplication>
#include <QCommandLineParser>
#include <QPixmap>

#include "gui/atomic_save.h"
#include "gui/main_window.h"

namespace {

int fail(const QString& message) {
  std::fprintf(stderr, "pipescope-gui: error: %s\n", message.toLocal8Bit().constData());
  return 1;
}

// What the command line asks for; 0 or nullopt: not given.
struct Options {
  QString scenario;
  int k = 0, m = 0, t = 0, c = 0, e = 0;
  std::optional<QString> cost_model;
  std::optional<QString> measured;
  std::optional<QString> screenshot;
};

// A screenshot needs no display: chooses the offscreen platform before Qt
// starts, unless the caller chose one.
void use_offscreen_for_screenshot(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--screenshot") == 0 && std::getenv("QT_QPA_PLATFORM") == nullptr) {
      qputenv("QT_QPA_PLATFORM", "offscreen");
    }
  }
}

// Reads the command line into `options`; --help and --version print and exit
// here. Returns the error when an argument is not valid.
std::optional<QString> parse_command_line(const QApplication& app, Options* options) {
  QCommandLineParser parser;
  parser.setApplicationDescription(
      QStringLiteral("PipeScope: explore pipeline-parallel K/M trade-offs on a timeline"));
  parser.addHelpOption();
  parser.addVersionOption();
  parser.addPositionalArgument(QStringLiteral("scenario"),
                               QStringLiteral("Scenario JSON to open (default: the demo)"),
                               QStringLiteral("[SCENARIO]"));
  const QCommandLineOption stages(QStringList{"K", "stages"}, QStringLiteral("Pipeline stages"),
                                  QStringLiteral("N"));
  const QCommandLineOption micro(QStringList{"M", "micro-batches"}, QStringLiteral("Micro-batches"),
                                 QStringLiteral("N"));
  const QCommandLineOption tensor(
      QStringList{"T", "tensor-parallel"},
      QStringLiteral("Tensor-parallel devices per stage: every layer of a transformer splits over "
                     "T devices; K and D count groups of T (default: training.tensor_parallel, "
                     "else 1)"),
      QStringLiteral("N"));
  const QCommandLineOption context(
      QStringList{"C", "context-parallel"},
      QStringLiteral("Context-parallel devices: each sample's sequence splits over C devices; K "
                     "and D count groups of T x C (default: training.context_parallel, else 1)"),
      QStringLiteral("N"));
  const QCommandLineOption experts(
      QStringList{"E", "expert-parallel"},
      QStringLiteral("Expert-parallel replicas a mixture's experts spread over; D is a multiple "
                     "of E (default: training.expert_parallel, else 1)"),
      QStringLiteral("N"));
  const QCommandLineOption shot(
      QStringLiteral("screenshot"),
      QStringLiteral("Render the window offscreen to this PNG when the simulation is done, "
                     "and exit"),
      QStringLiteral("PNG"));
  const QCommandLineOption measured(
      QStringLiteral("measured"),
      QStringLiteral("A trace measured by `pipescope run --trace`, shown under the prediction"),
      QStringLiteral("TRACE"));
  const QCommandLineOption cost_model(
      QStringLiteral("cost-model"),
      QStringLiteral("How layers are timed: analytic (the device's roofline), kernels (the "
                     "kernel-level model, on devices with a kernel table), a cost-model file "
                     "written by `pipescope calibrate`, or a profile written by `pipescope "
                     "profile` (default: as the scenario says)"),
      QStringLiteral("MODEL"));
  parser.addOptions({stages, micro, tensor, context, experts, cost_model, measured, shot});
  parser.process(app);

  const QStringList args = parser.positionalArguments();
  if (args.size() > 1) return QStringLiteral("give at most one scenario");
  options->scenario =
      args.isEmpty() ? QStringLiteral(PIPESCOPE_SCENARIO_DIR "/demo.json") : args.front();
  const auto number = [&](const QCommandLineOption& o, int* out) {
    if (!parser.isSet(o)) return true;
    bool ok = false;
    *out = parser.value(o).toInt(&ok);
    return ok && *out > 0;
  };
  if (!number(stages, &options->k)) return QStringLiteral("-K takes a positive integer");
  if (!number(micro, &options->m)) return QStringLiteral("-M takes a positive integer");
  if (!number(tensor, &options->t)) return QStringLiteral("-T takes a positive integer");
  if (!number(context, &options->c)) return QStringLiteral("-C takes a positive integer");
  if (!number(experts, &options->e)) return QStringLiteral("-E takes a positive integer");
  if (parser.isSet(cost_model)) options->cost_model = parser.value(cost_model);
  if (parser.isSet(measured)) options->measured = parser.value(measured);
  if (parser.isSet(shot)) options->screenshot = parser.value(shot);
  return std::nullopt;
}

// Applies -T, -C, -E, -K and -M to the opened scenario, T, C and E first: K
// counts their groups.
std::optional<QString> apply_layout(pipescope::gui::MainWindow& window, const Options& options) {
  const int k = options.k, m = options.m, t = options.t;
  if (t > 0) {
    if (const auto error = window.set_tensor_parallel(t)) return error;
  }
  if (options.c > 0) {
    if (const auto error = window.set_context_parallel(options.c)) return error;
  }
  if (options.e > 0) {
    if (const auto error = window.set_expert_parallel(options.e)) return error;
  }
  if (k > 0) {
    const pipescope::Cluster& cluster = window.scenario()->cluster;
    if (k > cluster.devices) {
      return QStringLiteral("K=%1 is more stages than the cluster's %2")
          .arg(k)
          .arg(QString::fromStdString(cluster.devices_text(cluster.devices)));
    }
    window.set_stages(k);
  }
  if (m > 0) {
    if (window.scenario()->training.global_batch % m != 0) {
      return QStringLiteral("M=%1 does not divide the global batch %2")
          .arg(m)
          .arg(window.scenario()->training.global_batch);
    }
    window.set_micro_batches(m);
  }
  return std::nullopt;
}

// Opens the cost model, the scenario at the layout asked for and the measured
// trace in the window; returns the first error.
std::optional<QString> open_inputs(pipescope::gui::MainWindow& window, const Options& options) {
  // Before the scenario: read once, and applied to it as it opens.
  if (options.cost_model) {
    if (const auto error = window.set_cost_model(*options.cost_model)) return error;
  }
  if (const auto error = window.open_scenario(options.scenario)) return error;
  if (options.k > 0 || options.m > 0 || options.t > 0 || options.c > 0 || options.e > 0) {
    window.keep_opened_layout();
  }
  if (const auto error = apply_layout(window, options)) return error;
  if (options.measured) {
    if (const auto error = window.open_measured_trace(*options.measured)) return error;
  }
  return std::nullopt;
}

// Waits for the simulation and writes the window to the PNG at `path`; the
// exit code.
int save_screenshot(pipescope::gui::MainWindow& window, const QString& path) {
  if (!window.wait_idle(120000)) return fail(QStringLiteral("the simulation did not finish"));
  if (!window.last_error().isEmpty()) return fail(window.last_error());
  if (const auto error = pipescope::gui::save_png_atomically(window.grab().toImage(), path)) {
    return fail(*error);
  }
  std::printf("Screenshot written to %s (%dx%d)\n", path.toLocal8Bit().constData(), window.width(),
              window.height());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  use_offscreen_for_screenshot(argc, argv);
  QApplication app(argc, argv);
  QApplication::setOrganizationName(QStringLiteral("PipeScope"));
  QApplication::setApplicationName(QStringLiteral("pipescope-gui"));
  QApplication::setApplicationVersion(QStringLiteral("0.1.0"));

  Options options;
  if (const auto error = parse_command_line(app, &options)) return fail(*error);
  pipescope::gui::MainWindow window;
  if (const auto error = open_inputs(window, options)) return fail(*error);
  window.show();
  if (!options.screenshot) return QApplication::exec();
  return save_screenshot(window, *options.screenshot);
}
