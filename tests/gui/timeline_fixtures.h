#pragma once
// What the timeline's tests share: a simulated run of three stages, events
// made by hand, and the rows' and items' labels.

#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

#include "gui/timeline_layout.h"
#include "sim/engine/simulator.h"
#include "tests/sim/sim_fixtures.h"

namespace pipescope::gui::timeline_test {

// K=3 stages of two layers, M=2, GPipe with remat: F takes 2 us, R 2 us, B 4 us;
// 1000-byte activations and gradients take 1 us over the 1 GB/s links.
inline SimResult three_stages() {
  Scenario sc = testing::uniform_scenario(6, 3, 1000.0, 2, 2, true);
  for (LayerSpec& l : sc.model.layers) l.out_bytes = 1000;
  SimConfig config;
  config.stages = 3;
  return simulate(sc, config);
}

inline TimelineEvent ev(int device, Lane lane, EventKind kind, int stage, int mb, SimTime start,
                        SimTime end, Bytes bytes = 0) {
  TimelineEvent e;
  e.device = device;
  e.lane = lane;
  e.kind = kind;
  e.stage = stage;
  e.micro_batch = mb;
  e.start = start;
  e.end = end;
  e.bytes = bytes;
  return e;
}

inline const TimelineEvent& event_of(const TimelineLayout& layout,
                                     const std::vector<const Timeline*>& sources,
                                     std::size_t item) {
  return sources[static_cast<std::size_t>(layout.items[item].source)]
      ->events[layout.items[item].event];
}

inline std::vector<std::string> row_labels(const TimelineLayout& layout) {
  std::vector<std::string> out;
  for (const TimelineRow& r : layout.rows) out.push_back(r.label);
  return out;
}

// The labels of a row's items, in order: "F0 F1 R1".
inline std::string row_items(const TimelineLayout& layout,
                             const std::vector<const Timeline*>& sources, int row) {
  std::string out;
  for (std::size_t i = 0; i < layout.items.size(); ++i) {
    if (layout.items[i].row != row) continue;
    out += (out.empty() ? "" : " ") + item_label(event_of(layout, sources, i));
  }
  return out;
}

// The item of an event, by what it is.
inline std::size_t find(const TimelineLayout& layout, const std::vector<const Timeline*>& sources,
                        EventKind kind, int stage, int mb, Lane lane = Lane::kCompute,
                        int source = 0) {
  for (std::size_t i = 0; i < layout.items.size(); ++i) {
    const TimelineEvent& e = event_of(layout, sources, i);
    if (layout.items[i].source == source && e.kind == kind && e.stage == stage &&
        e.micro_batch == mb && e.lane == lane) {
      return i;
    }
  }
  ADD_FAILURE() << "no such item";
  return layout.items.size();
}

}  // namespace pipescope::gui::timeline_test
