// What the timeline draws, without a display: rows, items, hit testing,
// labels and tooltips (what an op depends on: timeline_dependencies_test.cpp).

#include "gui/timeline_layout.h"

#include <gtest/gtest.h>

#include "timeline_fixtures.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/engine/simulator.h"
#include "sim/formats/trace_io.h"
#include "tests/sim/sim_fixtures.h"

namespace pipescope::gui {
namespace {

using namespace timeline_test;

// Every event in exactly one item, on a row of its source, device and lane; items
// in order of row, and of start within a row, whose slices do not overlap.
void expect_well_formed(const TimelineLayout& layout, const std::vector<const Timeline*>& sources) {
  std::size_t events = 0;
  for (const Timeline* t : sources) events += t->events.size();
  ASSERT_EQ(layout.items.size(), events);
  std::set<std::pair<int, std::size_t>> seen;
  for (std::size_t i = 0; i < layout.items.size(); ++i) {
    const TimelineItem& item = layout.items[i];
    ASSERT_GE(item.row, 0);
    ASSERT_LT(static_cast<std::size_t>(item.row), layout.rows.size());
    EXPECT_TRUE(seen.insert({item.source, item.event}).second) << "placed twice: " << item.event;
    const TimelineRow& row = layout.rows[static_cast<std::size_t>(item.row)];
    const TimelineEvent& e = event_of(layout, sources, i);
    EXPECT_EQ(row.source, item.source);
    EXPECT_EQ(row.device, e.device);
    EXPECT_EQ(row.lane, e.lane);
    if (i == 0) continue;
    const TimelineItem& prev = layout.items[i - 1];
    ASSERT_LE(prev.row, item.row);
    if (prev.row == item.row) {
      EXPECT_LE(event_of(layout, sources, i - 1).end, e.start);
    }
  }
}

TEST(TimelineLayout, RowsOfASimulatedRun) {
  const SimResult r = three_stages();
  const Timeline& t = r.timeline;
  const std::vector<const Timeline*> src{&t};
  const TimelineLayout layout = layout_timelines(src, {""}, true);
  EXPECT_EQ(row_labels(layout),
            (std::vector<std::string>{"device 0 (exact)", "  send", "  recv", "device 1 (exact)",
                                      "  send", "  recv", "device 2 (exact)", "  send", "  recv"}));
  for (int row = 0; row < 9; ++row) {
    EXPECT_EQ(layout.rows[static_cast<std::size_t>(row)].device, row / 3);
    EXPECT_EQ(layout.rows[static_cast<std::size_t>(row)].lane, static_cast<Lane>(row % 3));
    EXPECT_EQ(layout.rows[static_cast<std::size_t>(row)].sub_row, 0);
    EXPECT_EQ(layout.rows[static_cast<std::size_t>(row)].source, 0);
  }
  // GPipe with remat: all forwards (the last micro-batch's recomputation right
  // after its forward, its stash still in place), then backwards in reverse.
  EXPECT_EQ(row_items(layout, src, 0), "F0 F1 R1 B1 R0 B0 optimizer");
  EXPECT_EQ(row_items(layout, src, 1), "act 0 act 1");
  EXPECT_EQ(row_items(layout, src, 2), "grad 1 grad 0");
  EXPECT_EQ(row_items(layout, src, 3), "F0 F1 R1 B1 R0 B0 optimizer");
  EXPECT_EQ(row_items(layout, src, 4), "act 0 act 1 grad 1 grad 0");
  EXPECT_EQ(row_items(layout, src, 5), "act 0 act 1 grad 1 grad 0");
  EXPECT_EQ(row_items(layout, src, 6), "F0 F1 R1 B1 R0 B0 optimizer");
  EXPECT_EQ(row_items(layout, src, 7), "grad 1 grad 0");
  EXPECT_EQ(row_items(layout, src, 8), "act 0 act 1");
  expect_well_formed(layout, src);
  EXPECT_EQ(layout.items.size(), 37u);  // 21 ops, 8 transfers x 2 halves
  EXPECT_EQ(layout.start_ns, 0);
  EXPECT_EQ(layout.end_ns, 32'000);
  EXPECT_EQ(layout.end_ns, static_cast<double>(r.metrics.step_time));

  // Without transfers only the compute rows remain; the extent is the same.
  const TimelineLayout compute = layout_timelines(src, {""}, false);
  EXPECT_EQ(row_labels(compute),
            (std::vector<std::string>{"device 0 (exact)", "device 1 (exact)", "device 2 (exact)"}));
  EXPECT_EQ(compute.items.size(), 21u);
  EXPECT_EQ(static_cast<std::int64_t>(compute.items.size()), r.compute_ops);
  EXPECT_EQ(row_items(compute, src, 2), "F0 F1 R1 B1 R0 B0 optimizer");
  EXPECT_EQ(compute.end_ns, 32'000);
}

TEST(TimelineLayout, OverlappingSlicesGoToTheFirstRowWhereTheyFit) {
  Timeline t;
  t.device_names = {"d0", "d1"};
  // Receives landing at once over different links, given out of order as a
  // measured trace may: A [0,100], B [10,50], C [20,200], D [60,70], E [100,150].
  t.events.push_back(ev(0, Lane::kRecv, EventKind::kActivation, 0, 3, 60, 70));    // D
  t.events.push_back(ev(0, Lane::kRecv, EventKind::kActivation, 0, 0, 0, 100));    // A
  t.events.push_back(ev(0, Lane::kRecv, EventKind::kActivation, 0, 1, 10, 50));    // B
  t.events.push_back(ev(0, Lane::kRecv, EventKind::kActivation, 0, 4, 100, 150));  // E
  t.events.push_back(ev(0, Lane::kRecv, EventKind::kActivation, 0, 2, 20, 200));   // C
  t.events.push_back(ev(0, Lane::kCompute, EventKind::kForward, 0, 0, 200, 300));  // F0
  const std::vector<const Timeline*> src{&t};
  const TimelineLayout layout = layout_timelines(src, {""}, true);
  // d1 has no events: its compute row stays (all bubble), without send or recv.
  EXPECT_EQ(row_labels(layout),
            (std::vector<std::string>{"d0", "  recv", "  recv 2", "  recv 3", "d1"}));
  EXPECT_EQ(layout.rows[3].sub_row, 2);
  EXPECT_EQ(layout.rows[4].device, 1);
  // First fit: D fits row 2 again once B ended at 50; E fits row 1 at 100 exactly.
  EXPECT_EQ(row_items(layout, src, 0), "F0");
  EXPECT_EQ(row_items(layout, src, 1), "act 0 act 4");
  EXPECT_EQ(row_items(layout, src, 2), "act 1 act 3");
  EXPECT_EQ(row_items(layout, src, 3), "act 2");
  EXPECT_EQ(row_items(layout, src, 4), "");
  expect_well_formed(layout, src);
  EXPECT_EQ(layout.start_ns, 0);
  EXPECT_EQ(layout.end_ns, 300);
}

TEST(TimelineLayout, RowsMatchTheTraceWriters) {
  // The trace puts row r of lane l in tid r * 3 + l, and row r of the tensor
  // lane in tid 1000000000 + r; the layout must agree, so "recv 2" and
  // "tensor 2" are the same rows in the app and in Perfetto.
  const SimResult r = three_stages();
  Timeline t = r.timeline;
  std::vector<TimelineEvent> tensor;
  for (TimelineEvent& e : t.events) {
    if (e.lane != Lane::kCompute) e.end += 2'500;  // slow links: transfers overlap
    if (e.kind != EventKind::kForward && e.kind != EventKind::kBackward) continue;
    // A slow collective after each forward and backward: they overlap too.
    TimelineEvent tp = e;
    tp.lane = Lane::kTensor;
    tp.kind = EventKind::kTensorAllReduce;
    tp.start = e.end;
    tp.end = e.end + 3'000;
    tensor.push_back(tp);
  }
  t.events.insert(t.events.end(), tensor.begin(), tensor.end());
  const std::vector<const Timeline*> src{&t};
  const TimelineLayout layout = layout_timelines(src, {""}, true);
  std::vector<int> layout_tid(t.events.size());
  for (const TimelineItem& item : layout.items) {
    const TimelineRow& row = layout.rows[static_cast<std::size_t>(item.row)];
    layout_tid[item.event] = row.lane == Lane::kTensor
                                 ? 1'000'000'000 + row.sub_row
                                 : row.sub_row * 3 + static_cast<int>(row.lane);
  }
  std::ostringstream out;
  write_chrome_trace(out, t);
  std::vector<int> trace_tid;
  const nlohmann::json doc = nlohmann::json::parse(out.str());
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "X") trace_tid.push_back(e["tid"].get<int>());
  }
  EXPECT_EQ(layout_tid, trace_tid);
  const std::vector<std::string> labels = row_labels(layout);
  EXPECT_NE(std::find(labels.begin(), labels.end(), "  recv 2"), labels.end());
  EXPECT_NE(std::find(labels.begin(), labels.end(), "  tensor 2"), labels.end());
}

// A tensor-parallel op: its compute, then its group's all-reduces on the tensor
// lane, whose row comes right after the device's compute row, before its send
// and recv rows, and only on devices that have such events.
TEST(TimelineLayout, TensorCollectivesGetARowAfterTheirDevicesCompute) {
  Timeline t;
  t.device_names = {"d0", "d1"};
  t.events.push_back(ev(0, Lane::kCompute, EventKind::kForward, 0, 0, 0, 100));
  t.events.push_back(ev(0, Lane::kTensor, EventKind::kTensorAllReduce, 0, 0, 100, 130, 4096));
  t.events.push_back(ev(0, Lane::kSend, EventKind::kActivation, 0, 0, 130, 150, 1000));
  t.events.push_back(ev(0, Lane::kCompute, EventKind::kForward, 0, 1, 130, 230));
  t.events.push_back(ev(0, Lane::kTensor, EventKind::kTensorAllReduce, 0, 1, 230, 260, 4096));
  t.events.push_back(ev(1, Lane::kRecv, EventKind::kActivation, 0, 0, 140, 150, 1000));
  t.events.push_back(ev(1, Lane::kCompute, EventKind::kForward, 1, 0, 150, 250));
  const std::vector<const Timeline*> src{&t};
  const TimelineLayout layout = layout_timelines(src, {""}, true);
  ASSERT_EQ(row_labels(layout),
            (std::vector<std::string>{"d0", "  tensor", "  send", "d1", "  recv"}));
  EXPECT_EQ(layout.rows[1].lane, Lane::kTensor);
  EXPECT_EQ(layout.rows[1].device, 0);
  EXPECT_EQ(layout.rows[1].sub_row, 0);
  EXPECT_EQ(layout.rows[2].lane, Lane::kSend);
  EXPECT_EQ(row_items(layout, src, 0), "F0 F1");
  EXPECT_EQ(row_items(layout, src, 1), "tp 0 tp 1");
  EXPECT_EQ(row_items(layout, src, 2), "act 0");
  EXPECT_EQ(row_items(layout, src, 4), "act 0");
  expect_well_formed(layout, src);
  const auto hit = hit_test(layout, 1, 115, 0);
  ASSERT_TRUE(hit);
  EXPECT_EQ(event_of(layout, src, *hit).kind, EventKind::kTensorAllReduce);
  EXPECT_EQ(event_of(layout, src, *hit).micro_batch, 0);
  EXPECT_EQ(layout.end_ns, 260);

  // Overlapping collectives take further rows, "tensor 2", as in the trace.
  t.events.push_back(ev(0, Lane::kTensor, EventKind::kTensorAllReduce, 0, 2, 240, 300, 4096));
  EXPECT_EQ(row_labels(layout_timelines(src, {""}, true)),
            (std::vector<std::string>{"d0", "  tensor", "  tensor 2", "  send", "d1", "  recv"}));

  // They are communication: hidden with the transfers, the extent unchanged.
  const TimelineLayout compute = layout_timelines(src, {""}, false);
  EXPECT_EQ(row_labels(compute), (std::vector<std::string>{"d0", "d1"}));
  EXPECT_EQ(compute.items.size(), 3u);
  EXPECT_EQ(compute.end_ns, 300);
}

// An expert-parallel op's all-to-alls: a row of their own under the tensor
// row (the order they run in after the op), with their bytes in the tooltip.
TEST(TimelineLayout, ExpertAllToAllsGetARowAfterTheTensorRow) {
  Timeline t;
  t.device_names = {"d0"};
  t.events.push_back(ev(0, Lane::kCompute, EventKind::kForward, 0, 0, 0, 100));
  t.events.push_back(ev(0, Lane::kTensor, EventKind::kTensorAllReduce, 0, 0, 100, 130, 4096));
  t.events.push_back(ev(0, Lane::kExpert, EventKind::kExpertAllToAll, 0, 0, 130, 190, 1 << 20));
  t.events.push_back(ev(0, Lane::kSend, EventKind::kActivation, 0, 0, 190, 210, 1000));
  const std::vector<const Timeline*> src{&t};
  const TimelineLayout layout = layout_timelines(src, {""}, true);
  ASSERT_EQ(row_labels(layout), (std::vector<std::string>{"d0", "  tensor", "  expert", "  send"}));
  EXPECT_EQ(layout.rows[2].lane, Lane::kExpert);
  EXPECT_EQ(row_items(layout, src, 2), "ep 0");
  expect_well_formed(layout, src);
  const auto hit = hit_test(layout, 2, 150, 0);
  ASSERT_TRUE(hit);
  const TimelineEvent& e = event_of(layout, src, *hit);
  EXPECT_EQ(e.kind, EventKind::kExpertAllToAll);
  const std::string tip = item_tooltip(t, e);
  EXPECT_NE(tip.find("ep 0: expert-alltoall"), std::string::npos) << tip;
  EXPECT_NE(tip.find("1.00 MiB"), std::string::npos) << tip;
  // Communication: hidden with the transfers.
  EXPECT_EQ(row_labels(layout_timelines(src, {""}, false)), (std::vector<std::string>{"d0"}));
}

TEST(TimelineLayout, HitTesting) {
  Timeline t;
  t.device_names = {"d0", "d1"};
  t.events.push_back(ev(0, Lane::kCompute, EventKind::kForward, 0, 0, 100, 200));
  t.events.push_back(ev(0, Lane::kCompute, EventKind::kForward, 0, 1, 300, 400));
  t.events.push_back(ev(0, Lane::kCompute, EventKind::kForward, 0, 2, 400, 450));
  t.events.push_back(ev(0, Lane::kRecv, EventKind::kActivation, 0, 5, 0, 1000));
  t.events.push_back(ev(0, Lane::kRecv, EventKind::kActivation, 0, 6, 500, 600));
  const std::vector<const Timeline*> src{&t};
  const TimelineLayout layout = layout_timelines(src, {""}, true);
  ASSERT_EQ(row_labels(layout), (std::vector<std::string>{"d0", "  recv", "  recv 2", "d1"}));
  const auto hit = [&](int row, double time, double tolerance) -> std::string {
    const auto item = hit_test(layout, row, time, tolerance);
    return item ? item_label(event_of(layout, src, *item)) : "-";
  };
  // Inside, ends included.
  EXPECT_EQ(hit(0, 150, 0), "F0");
  EXPECT_EQ(hit(0, 100, 0), "F0");
  EXPECT_EQ(hit(0, 200, 0), "F0");
  EXPECT_EQ(hit(0, 350.5, 0), "F1");
  EXPECT_EQ(hit(0, 400, 0), "F2");  // where one ends and the next starts: the next
  EXPECT_EQ(hit(0, 450, 0), "F2");
  // Near, within the tolerance: the nearest; a tie goes to the earlier.
  EXPECT_EQ(hit(0, 205, 10), "F0");
  EXPECT_EQ(hit(0, 295, 10), "F1");
  EXPECT_EQ(hit(0, 90, 10), "F0");
  EXPECT_EQ(hit(0, 460, 10), "F2");
  EXPECT_EQ(hit(0, 240, 60), "F0");
  EXPECT_EQ(hit(0, 260, 60), "F1");
  EXPECT_EQ(hit(0, 250, 50), "F0");
  // Misses: in a gap far from both, before the first, after the last.
  EXPECT_EQ(hit(0, 250, 10), "-");
  EXPECT_EQ(hit(0, 89, 10), "-");
  EXPECT_EQ(hit(0, 461, 10), "-");
  EXPECT_EQ(hit(0, 205, -1), "-");
  // Further rows of a lane, an idle row, rows that do not exist.
  EXPECT_EQ(hit(1, 550, 0), "act 5");
  EXPECT_EQ(hit(2, 550, 0), "act 6");
  EXPECT_EQ(hit(2, 450, 0), "-");
  EXPECT_EQ(hit(3, 150, 1e9), "-");
  EXPECT_EQ(hit(4, 150, 1e9), "-");
  EXPECT_EQ(hit(-1, 150, 1e9), "-");
}

TEST(TimelineLayout, AMeasuredRunUnderThePrediction) {
  const SimResult r = three_stages();
  const Timeline& predicted = r.timeline;
  // The "measured" run: the prediction's trace read back, 500 ns late.
  std::ostringstream trace;
  write_chrome_trace(trace, predicted);
  std::istringstream in(trace.str());
  Timeline measured = read_chrome_trace(in, "measured.json");
  for (TimelineEvent& e : measured.events) e.start += 500, e.end += 500;
  const std::vector<const Timeline*> src{&predicted, &measured};
  const TimelineLayout layout = layout_timelines(src, {"", "measured"}, true);
  EXPECT_EQ(row_labels(layout),
            (std::vector<std::string>{"device 0 (exact)", "  send", "  recv", "device 1 (exact)",
                                      "  send", "  recv", "device 2 (exact)", "  send", "  recv",
                                      "measured: device 0 (exact)", "  send", "  recv",
                                      "measured: device 1 (exact)", "  send", "  recv",
                                      "measured: device 2 (exact)", "  send", "  recv"}));
  for (std::size_t row = 0; row < layout.rows.size(); ++row) {
    EXPECT_EQ(layout.rows[row].source, row < 9 ? 0 : 1);
  }
  expect_well_formed(layout, src);
  EXPECT_EQ(row_items(layout, src, 9), "F0 F1 R1 B1 R0 B0 optimizer");
  EXPECT_EQ(layout.start_ns, 0);
  EXPECT_EQ(layout.end_ns, 32'500);
  // Hits and dependencies stay within their own source.
  const auto hit = hit_test(layout, 9, 1'000, 0);
  ASSERT_TRUE(hit);
  EXPECT_EQ(layout.items[*hit].source, 1);
  EXPECT_EQ(item_label(event_of(layout, src, *hit)), "F0");
  const std::size_t f = find(layout, src, EventKind::kForward, 1, 0, Lane::kCompute, 1);
  const Dependencies deps = dependencies_of(layout, src, f);
  EXPECT_EQ(deps.before.size(), 3u);
  EXPECT_EQ(deps.after.size(), 5u);  // send, receive, F(2,0), R(1,0), B(1,0)
  for (const std::size_t i : deps.before) EXPECT_EQ(layout.items[i].source, 1);
  for (const std::size_t i : deps.after) EXPECT_EQ(layout.items[i].source, 1);
  // Missing prefixes mean none.
  EXPECT_EQ(layout_timelines(src, {}, false).rows[3].label, "device 0 (exact)");
}

TEST(TimelineLayout, LabelsAndTooltips) {
  Timeline t;
  t.device_names = {"d0", "d1"};
  t.route_names = {"0->1", ""};
  TimelineEvent f = ev(0, Lane::kCompute, EventKind::kForward, 2, 3, 1'000'000, 13'500'000);
  f.cpu_time = 12'000'000;
  TimelineEvent act = ev(0, Lane::kSend, EventKind::kActivation, 2, 3, 0, 2'000, 4 << 20);
  act.peer_stage = 3;
  act.route = 0;
  TimelineEvent grad =
      ev(1, Lane::kRecv, EventKind::kGradient, 3, 5, 1'500'000'000, 1'500'000'500, 1000);
  grad.peer_stage = 2;
  grad.route = 1;  // a route with no name
  const TimelineEvent opt = ev(0, Lane::kCompute, EventKind::kOptimizer, 2, 0, 0, 10);
  const TimelineEvent tp =
      ev(0, Lane::kTensor, EventKind::kTensorAllReduce, 2, 3, 13'500'000, 13'800'000, 3 << 20);
  EXPECT_EQ(item_label(f), "F3");
  EXPECT_EQ(item_label(ev(0, Lane::kCompute, EventKind::kRecompute, 0, 7, 0, 1)), "R7");
  EXPECT_EQ(item_label(ev(0, Lane::kCompute, EventKind::kBackward, 0, 12, 0, 1)), "B12");
  EXPECT_EQ(item_label(opt), "optimizer");
  EXPECT_EQ(item_label(act), "act 3");
  EXPECT_EQ(item_label(grad), "grad 5");
  EXPECT_EQ(item_label(tp), "tp 3");
  EXPECT_EQ(item_tooltip(t, f),
            "F3: forward, stage 2, micro-batch 3\n"
            "start 1.00 ms, duration 12.5 ms\n"
            "CPU time 12.0 ms (96.0 % of the duration)");
  EXPECT_EQ(item_tooltip(t, act),
            "act 3: activation (send), stage 2 -> 3, micro-batch 3\n"
            "start 0 s, duration 2.00 us\n"
            "4.00 MiB over 0->1");
  EXPECT_EQ(item_tooltip(t, grad),
            "grad 5: gradient (recv), stage 3 -> 2, micro-batch 5\n"
            "start 1.50 s, duration 500 ns\n"
            "1000 B");
  grad.route = 7;  // out of range: no route either
  EXPECT_EQ(item_tooltip(t, grad).substr(item_tooltip(t, grad).rfind('\n')), "\n1000 B");
  EXPECT_EQ(item_tooltip(t, opt),
            "optimizer, stage 2\n"
            "start 0 s, duration 10.0 ns");
  // A tensor-parallel collective names its bytes, as the all-reduce does.
  EXPECT_EQ(item_tooltip(t, tp),
            "tp 3: tensor-allreduce, stage 2, micro-batch 3, 3.00 MiB\n"
            "start 13.5 ms, duration 300 us");
}

// A synthetic run of 110k events: 8 devices of 5000 back-to-back 1 us forwards,
// each sending a 2.5 us transfer to the next device, so that three transfers
// overlap on every send and recv lane at any time.
Timeline large_timeline() {
  constexpr int kDevices = 8, kOps = 5000;
  Timeline t;
  std::uint64_t flow = 0;
  for (int d = 0; d < kDevices; ++d) {
    t.device_names.push_back("gpu " + std::to_string(d));
    for (int m = 0; m < kOps; ++m) {
      const SimTime start = 1000 * (d + m);
      t.events.push_back(ev(d, Lane::kCompute, EventKind::kForward, d, m, start, start + 1000));
      if (d + 1 == kDevices) continue;
      TimelineEvent send =
          ev(d, Lane::kSend, EventKind::kActivation, d, m, start + 1000, start + 3500, 1 << 20);
      send.peer_stage = d + 1;
      send.flow = flow++;
      TimelineEvent recv = send;
      recv.device = d + 1;
      recv.lane = Lane::kRecv;
      t.events.push_back(send);
      t.events.push_back(recv);
    }
  }
  return t;
}

// Large timelines lay out correctly (how fast is for bench/, not for tests).
TEST(TimelineLayout, LargeTimelinesLayOutCorrectly) {
  const Timeline t = large_timeline();
  ASSERT_EQ(t.events.size(), 110'000u);
  const std::vector<const Timeline*> src{&t};
  const TimelineLayout layout = layout_timelines(src, {""}, true);
  const std::size_t f = find(layout, src, EventKind::kForward, 3, 2500);
  const Dependencies deps = dependencies_of(layout, src, f);
  // Device 0: compute and three send rows; 1-6: compute, 3 send, 3 recv; 7: 1 + 3.
  EXPECT_EQ(layout.rows.size(), 4u + 6u * 7u + 4u);
  EXPECT_EQ(row_labels(layout)[3], "  send 3");
  expect_well_formed(layout, src);
  // Transfer m starts 1 us after m - 1 and lasts 2.5 us: first fit cycles rows.
  for (const TimelineItem& item : layout.items) {
    const TimelineEvent& e = t.events[item.event];
    const TimelineRow& row = layout.rows[static_cast<std::size_t>(item.row)];
    EXPECT_EQ(row.sub_row, e.lane == Lane::kCompute ? 0 : e.micro_batch % 3);
  }
  EXPECT_EQ(deps.before.size(), 3u);  // act 2500 from stage 2 (both halves), F(2, 2500)
  EXPECT_EQ(deps.after.size(), 3u);
}

TEST(TimelineLayout, ManyOverlappingSlicesGetARowEach) {
  // 20k slices all overlapping on one lane need 20k rows.
  Timeline t;
  t.device_names = {"d0"};
  for (int i = 0; i < 20'000; ++i) {
    t.events.push_back(ev(0, Lane::kRecv, EventKind::kGradient, 1, i, i, 1'000'000 - i));
  }
  const std::vector<const Timeline*> src{&t};
  const TimelineLayout layout = layout_timelines(src, {""}, true);
  ASSERT_EQ(layout.rows.size(), 20'001u);
  EXPECT_EQ(layout.rows.back().label, "  recv 20000");
  expect_well_formed(layout, src);
  // Each row its one slice.
  for (const TimelineItem& item : layout.items) {
    EXPECT_EQ(item.row, 1 + t.events[item.event].micro_batch);
  }
}

}  // namespace
}  // namespace pipescope::gui
