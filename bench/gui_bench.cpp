// What one change of K or M costs the desktop app before the new timeline is
// on screen: simulate with a timeline (on the worker), lay it out, and paint the
// timeline view into a 1400 x 600 image (on the UI thread), for the demo
// scenario at K=8, M=32 and larger. The issue of record asks for under 100 ms
// at K=8, M=32.
//
//   QT_QPA_PLATFORM=offscreen build/bench/pipescope_gui_bench --benchmark_min_time=1

#include <benchmark/benchmark.h>

#include <QApplication>
#include <QImage>
#include <QPainter>

#include "gui/timeline_layout.h"
#include "gui/timeline_widget.h"
#include "sim/scenario_io.h"
#include "sim/simulator.h"

namespace pipescope::gui {
namespace {

Scenario demo(int K) {
  // The demo's model on K of its GPUs; 256 sequences so that M up to 256 divides.
  return load_scenario(PIPESCOPE_SOURCE_DIR "/scenarios/demo.json",
                       {"cluster.devices=" + std::to_string(K), "training.global_batch=256",
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
