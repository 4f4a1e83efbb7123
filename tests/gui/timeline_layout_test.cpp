// What the timeline draws, without a display: rows, items, hit testing,
// dependencies, labels and tooltips.

#include "gui/timeline_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "../sim/sim_fixtures.h"
#include "sim/simulator.h"

namespace pipescope::gui {
namespace {

// K=3 stages of two layers, M=2, GPipe with remat; 1000-byte activations take
// 1 us over the 1 GB/s links.
SimResult three_stages() {
  Scenario sc = testing::uniform_scenario(6, 3, 1000.0, 2, 2, true);
  for (LayerSpec& l : sc.model.layers) l.out_bytes = 1000;
  SimConfig config;
  config.stages = 3;
  return simulate(sc, config);
}

TimelineEvent ev(int device, Lane lane, EventKind kind, int stage, int mb, SimTime start,
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

std::vector<std::string> row_labels(const TimelineLayout& layout) {
  std::vector<std::string> out;
  for (const TimelineRow& r : layout.rows) out.push_back(r.label);
  return out;
}

std::optional<std::size_t> find(const TimelineLayout& layout, const Timeline& t, EventKind kind,
                                int stage, int mb, std::optional<Lane> lane = std::nullopt) {
  for (std::size_t i = 0; i < layout.items.size(); ++i) {
    const TimelineEvent& e = t.events[layout.items[i].event];
    if (e.kind == kind && e.stage == stage && e.micro_batch == mb && (!lane || e.lane == *lane)) {
      return i;
    }
  }
  return std::nullopt;
}

TEST(TimelineLayout, RowsPerDeviceAndLane) {
  const SimResult r = three_stages();
  const Timeline& t = r.timeline;
  const TimelineLayout layout = layout_timelines({&t}, {""}, true);
  EXPECT_EQ(row_labels(layout),
            (std::vector<std::string>{t.device_names[0], "  send", "  recv", t.device_names[1],
                                      "  send", "  recv", t.device_names[2], "  send", "  recv"}));
  // Every event in exactly one row, of its device and lane.
  ASSERT_EQ(layout.items.size(), t.events.size());
  std::vector<int> seen(t.events.size(), 0);
  for (const TimelineItem& item : layout.items) {
    ++seen[item.event];
    const TimelineRow& row = layout.rows[static_cast<std::size_t>(item.row)];
    EXPECT_EQ(row.device, t.events[item.event].device);
    EXPECT_EQ(row.lane, t.events[item.event].lane);
  }
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
  EXPECT_EQ(layout.start_ns, 0);
  EXPECT_EQ(layout.end_ns, static_cast<double>(r.metrics.step_time));
  // Without transfers only the compute rows remain.
  const TimelineLayout compute = layout_timelines({&t}, {""}, false);
  EXPECT_EQ(compute.rows.size(), 3u);
  EXPECT_EQ(static_cast<std::int64_t>(compute.items.size()), r.compute_ops);
}

TEST(TimelineLayout, OverlappingSlicesGoToAFurtherRow) {
  Timeline t;
  t.device_names = {"d0"};
  // Two receives landing at once over different links, and a third after both.
  t.events.push_back(ev(0, Lane::kRecv, EventKind::kActivation, 0, 0, 0, 100));
  t.events.push_back(ev(0, Lane::kRecv, EventKind::kActivation, 0, 1, 50, 150));
  t.events.push_back(ev(0, Lane::kRecv, EventKind::kActivation, 0, 2, 150, 200));
  const TimelineLayout layout = layout_timelines({&t}, {""}, true);
  EXPECT_EQ(row_labels(layout), (std::vector<std::string>{"d0", "  recv", "  recv 2"}));
  std::map<int, int> row_of;  // micro-batch -> row
  for (const TimelineItem& item : layout.items) row_of[t.events[item.event].micro_batch] = item.row;
  EXPECT_EQ(row_of[0], 1);
  EXPECT_EQ(row_of[1], 2);
  EXPECT_EQ(row_of[2], 1);  // first fit: row 1 is free again at 150 (0..100 ended)
}

TEST(TimelineLayout, HitTesting) {
  Timeline t;
  t.device_names = {"d0"};
  t.events.push_back(ev(0, Lane::kCompute, EventKind::kForward, 0, 0, 100, 200));
  t.events.push_back(ev(0, Lane::kCompute, EventKind::kForward, 0, 1, 300, 400));
  const TimelineLayout layout = layout_timelines({&t}, {""}, true);
  ASSERT_EQ(layout.rows.size(), 1u);
  const auto event_at = [&](double time, double tol) -> int {
    const auto hit = hit_test(layout, {&t}, 0, time, tol);
    return hit ? static_cast<int>(layout.items[*hit].event) : -1;
  };
  EXPECT_EQ(event_at(150, 0), 0);
  EXPECT_EQ(event_at(100, 0), 0);
  EXPECT_EQ(event_at(400, 0), 1);
  EXPECT_EQ(event_at(250, 10), -1);  // in the gap, far from both
  EXPECT_EQ(event_at(205, 10), 0);   // just after the first
  EXPECT_EQ(event_at(295, 10), 1);   // just before the second
  EXPECT_EQ(event_at(50, 10), -1);
  EXPECT_FALSE(hit_test(layout, {&t}, 5, 150, 0));  // no such row
}

TEST(TimelineLayout, DependenciesFollowTheSchedule) {
  const SimResult r = three_stages();
  const Timeline& t = r.timeline;
  const TimelineLayout layout = layout_timelines({&t}, {""}, true);
  const auto kinds = [&](const std::vector<std::size_t>& items) {
    std::multiset<std::string> out;
    for (const std::size_t i : items) {
      const TimelineEvent& e = t.events[layout.items[i].event];
      out.insert(std::string(to_string(e.kind)) + " " + std::to_string(e.stage) + " " +
                 std::string(to_string(e.lane)));
    }
    return out;
  };
  const auto f10 = find(layout, t, EventKind::kForward, 1, 0);
  ASSERT_TRUE(f10);
  const Dependencies f = dependencies_of(layout, {&t}, *f10);
  EXPECT_EQ(kinds(f.before), (std::multiset<std::string>{"activation 0 send", "activation 0 recv",
                                                         "forward 0 compute"}));
  EXPECT_EQ(kinds(f.after), (std::multiset<std::string>{"activation 1 send", "activation 1 recv",
                                                        "forward 2 compute"}));
  const auto b10 = find(layout, t, EventKind::kBackward, 1, 0);
  ASSERT_TRUE(b10);
  const Dependencies b = dependencies_of(layout, {&t}, *b10);
  EXPECT_EQ(kinds(b.before),
            (std::multiset<std::string>{"gradient 2 send", "gradient 2 recv", "backward 2 compute",
                                        "forward 1 compute", "recompute 1 compute"}));
  EXPECT_EQ(kinds(b.after), (std::multiset<std::string>{"gradient 1 send", "gradient 1 recv",
                                                        "backward 0 compute"}));
  const auto r10 = find(layout, t, EventKind::kRecompute, 1, 0);
  ASSERT_TRUE(r10);
  const Dependencies rr = dependencies_of(layout, {&t}, *r10);
  EXPECT_EQ(kinds(rr.before), (std::multiset<std::string>{"forward 1 compute"}));
  EXPECT_EQ(kinds(rr.after), (std::multiset<std::string>{"backward 1 compute"}));
  // A send: the forward that produced it before, its receive and the forward
  // that consumes it after.
  const auto send = find(layout, t, EventKind::kActivation, 0, 1, Lane::kSend);
  ASSERT_TRUE(send);
  const Dependencies s = dependencies_of(layout, {&t}, *send);
  EXPECT_EQ(kinds(s.before), (std::multiset<std::string>{"forward 0 compute"}));
  EXPECT_EQ(kinds(s.after), (std::multiset<std::string>{"activation 0 recv", "forward 1 compute"}));
  for (const std::size_t i : s.after) EXPECT_EQ(t.events[layout.items[i].event].micro_batch, 1);
}

TEST(TimelineLayout, SecondSourceUnderTheFirst) {
  const SimResult r = three_stages();
  const Timeline& t = r.timeline;
  const TimelineLayout layout = layout_timelines({&t, &t}, {"", "measured"}, false);
  ASSERT_EQ(layout.rows.size(), 6u);
  EXPECT_EQ(layout.rows[3].label, "measured: " + t.device_names[0]);
  EXPECT_EQ(layout.rows[3].source, 1);
  EXPECT_EQ(layout.items.size(), 2 * static_cast<std::size_t>(r.compute_ops));
  // Dependencies stay within their own source.
  const auto f = find(layout, t, EventKind::kForward, 1, 0);
  std::size_t measured_f = 0;
  for (std::size_t i = 0; i < layout.items.size(); ++i) {
    const TimelineEvent& e = t.events[layout.items[i].event];
    if (layout.items[i].source == 1 && e.kind == EventKind::kForward && e.stage == 1 &&
        e.micro_batch == 0) {
      measured_f = i;
    }
  }
  ASSERT_TRUE(f);
  for (const std::size_t i : dependencies_of(layout, {&t, &t}, measured_f).before) {
    EXPECT_EQ(layout.items[i].source, 1);
  }
}

TEST(TimelineLayout, LabelsAndTooltips) {
  Timeline t;
  t.device_names = {"d0", "d1"};
  t.route_names = {"0->1"};
  TimelineEvent f = ev(0, Lane::kCompute, EventKind::kForward, 2, 3, 1'000'000, 13'500'000);
  f.cpu_time = 12'000'000;
  TimelineEvent a = ev(0, Lane::kSend, EventKind::kActivation, 2, 3, 0, 2'000, 4 << 20);
  a.peer_stage = 3;
  a.route = 0;
  TimelineEvent opt = ev(0, Lane::kCompute, EventKind::kOptimizer, 2, 0, 0, 10);
  EXPECT_EQ(item_label(f), "F3");
  EXPECT_EQ(item_label(a), "act 3");
  EXPECT_EQ(item_label(opt), "optimizer");
  EXPECT_EQ(item_label(ev(0, Lane::kCompute, EventKind::kRecompute, 0, 7, 0, 1)), "R7");
  EXPECT_EQ(item_tooltip(t, f),
            "forward, stage 2, micro-batch 3\nstart 1.00 ms, duration 12.5 ms\nCPU time 12.0 ms");
  EXPECT_EQ(item_tooltip(t, a),
            "activation, stage 2 -> 3, micro-batch 3\nstart 0 s, duration 2.00 us\n4.00 MiB over "
            "0->1");
  EXPECT_EQ(item_tooltip(t, opt).rfind("optimizer, stage 2\n", 0), 0u);
}

}  // namespace
}  // namespace pipescope::gui
