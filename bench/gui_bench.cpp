// What the desktop app costs on the UI thread. First, one change of K or M
// before the new timeline is on screen: simulate with a timeline (on the
// worker), lay it out, and paint the timeline view into a 1400 x 600 image, for
// the demo scenario at K=8, M=32 and larger (the aim is under 100 ms at K=8,
// M=32; docs/performance.md). Then a timeline of a million events (the demo at K=72,
// M=2048: 1,024,072 events) for what must stay interactive: the layout, a
// paint of the whole step, a paint zoomed in, a hover and a click.
//
//   QT_QPA_PLATFORM=offscreen build/bench/pipescope_gui_bench --benchmark_min_time=1

#include <benchmark/benchmark.h>

#include <random>

#include <QApplication>
#include <QImage>
#include <QPainter>

#include "gui/timeline_layout.h"
#include "gui/timeline_widget.h"
#include "sim/engine/simulator.h"
#include "sim/scenario/scenario_io.h"

namespace pipescope::gui {
namespace {

Scenario demo(int K, int global_batch = 256) {
  // The demo's model on K of its GPUs; 256 sequences so that M up to 256 divides.
  return load_scenario(PIPESCOPE_SOURCE_DIR "/scenarios/demo.json",
                       {"cluster.devices=" + std::to_string(K),
                        "training.global_batch=" + std::to_string(global_batch),
                        "model.layers=" + std::to_string(4 * K)});
}

void BM_SimulateWithTimeline(benchmark::State& state) {
  const int K = static_cast<int>(state.range(0));
  const Scenario sc = demo(K);
  SimConfig config;
  config.stages = K;
  config.micro_batches = static_cast<int>(state.range(1));
  for (auto _ : state) {
    const SimResult r = simulate(sc, config);
    benchmark::DoNotOptimize(r.timeline.events.data());
  }
}

void BM_LayoutAndPaint(benchmark::State& state) {
  const int K = static_cast<int>(state.range(0));
  SimConfig config;
  config.stages = K;
  config.micro_batches = static_cast<int>(state.range(1));
  const SimResult r = simulate(demo(K), config);
  TimelineWidget widget;
  widget.resize(1400, 600);
  QImage image(1400, 600, QImage::Format_ARGB32);
  for (auto _ : state) {
    widget.set_timelines({&r.timeline}, {""});
    QPainter p(&image);
    widget.render_to(p, image.size());
  }
  state.counters["events"] = static_cast<double>(r.timeline.events.size());
}

BENCHMARK(BM_SimulateWithTimeline)->Args({8, 32})->Args({16, 128})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LayoutAndPaint)->Args({8, 32})->Args({16, 128})->Unit(benchmark::kMillisecond);

// The million-event timeline, simulated once: GPipe with remat at K=72, M=2048
// has K(3M+1) compute ops and 2(K-1)M transfers of two events each.
const Timeline& million() {
  static const SimResult r = [] {
    SimConfig config;
    config.stages = 72;
    config.micro_batches = 2048;
    return simulate(demo(72, 2048), config);
  }();
  return r.timeline;
}

// A 1400 x 600 view of it, zoomed out (the whole step) unless zoom > 1.
struct MillionView {
  explicit MillionView(double zoom = 1.0) {
    widget.resize(1400, 600);
    widget.set_timelines({&million()}, {""});
    // About the middle of the step: the steady state, every row busy.
    if (zoom > 1.0) widget.zoom_by(zoom, TimelineWidget::kGutter + widget.axis().width_px / 2);
  }
  TimelineWidget widget;
};

void BM_MillionLayout(benchmark::State& state) {
  const Timeline& t = million();
  for (auto _ : state) {
    const TimelineLayout layout = layout_timelines({&t}, {""}, true);
    benchmark::DoNotOptimize(layout.items.data());
  }
  state.counters["events"] = static_cast<double>(t.events.size());
}

// Paints a 1400 px wide view: 600 px tall, or tall enough for every row.
void paint(benchmark::State& state, double zoom, bool all_rows) {
  MillionView view(zoom);
  const int rows = static_cast<int>(view.widget.layout().rows.size());
  const int height =
      all_rows ? TimelineWidget::kAxisHeight + TimelineWidget::kRowHeight * rows : 600;
  QImage image(1400, height, QImage::Format_ARGB32);
  for (auto _ : state) {
    QPainter p(&image);
    view.widget.render_to(p, image.size());
  }
  state.counters["rows"] = rows;
  state.counters["span_ns"] = view.widget.axis().span_ns();
}

// What the screen shows: the rows that fit in 600 px.
void BM_MillionPaintZoomedOut(benchmark::State& state) {
  paint(state, 1.0, false);
}
// Every row (216 of them, 4,346 px: an export, or a very tall screen).
void BM_MillionPaintZoomedOutAllRows(benchmark::State& state) {
  paint(state, 1.0, true);
}
// 1/2000 of the step: a handful of labelled ops per row.
void BM_MillionPaintZoomedIn(benchmark::State& state) {
  paint(state, 2000.0, false);
}

// A hover: the item under random points of the view.
void BM_MillionHitTest(benchmark::State& state) {
  const Timeline& t = million();
  const std::vector<const Timeline*> sources{&t};
  const TimelineLayout layout = layout_timelines(sources, {""}, true);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> row(0, static_cast<int>(layout.rows.size()) - 1);
  std::uniform_real_distribution<double> time(layout.start_ns, layout.end_ns);
  const double tolerance = 3 * (layout.end_ns - layout.start_ns) / 1220;  // 3 px zoomed out
  std::size_t hits = 0;
  for (auto _ : state) {
    hits += hit_test(layout, row(rng), time(rng), tolerance).has_value();
  }
  benchmark::DoNotOptimize(hits);
}

// A click: the dependencies of random items.
void BM_MillionDependencies(benchmark::State& state) {
  const Timeline& t = million();
  const std::vector<const Timeline*> sources{&t};
  const TimelineLayout layout = layout_timelines(sources, {""}, true);
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::size_t> item(0, layout.items.size() - 1);
  for (auto _ : state) {
    const Dependencies deps = dependencies_of(layout, sources, item(rng));
    benchmark::DoNotOptimize(deps.before.data());
  }
}

BENCHMARK(BM_MillionLayout)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MillionPaintZoomedOut)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MillionPaintZoomedOutAllRows)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MillionPaintZoomedIn)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MillionHitTest)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MillionDependencies)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace pipescope::gui

int main(int argc, char** argv) {
  if (!qEnvironmentVariableIsSet("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
