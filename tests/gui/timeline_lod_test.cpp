// What the timeline view draws of a row (level of detail), and the row index
// that finds items in a window and under the cursor, without a display.

#include "gui/timeline_lod.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gui/timeline_layout.h"

namespace pipescope::gui {
namespace {

TimelineEvent op(EventKind kind, SimTime start, SimTime end, int device = 0,
                 Lane lane = Lane::kCompute) {
  TimelineEvent e;
  e.device = device;
  e.lane = lane;
  e.kind = kind;
  e.start = start;
  e.end = end;
  return e;
}

// One device's compute row: row 0, its items in the order given (by start).
struct OneRow {
  explicit OneRow(std::vector<TimelineEvent> events) {
    t.device_names = {"d0"};
    t.events = std::move(events);
    layout = layout_timelines({&t}, {""}, false);
  }
  std::vector<RowSpan> spans(double t0, double t1, double width_px) const {
    return row_spans(layout, 0, TimeAxis{t0, t1, width_px});
  }
  Timeline t;
  TimelineLayout layout;
};

// "[2,9] backward 0+3 -": times, kind, first item + count, the item shown.
std::string describe(const std::vector<RowSpan>& spans) {
  std::string out;
  for (const RowSpan& s : spans) {
    out += (out.empty() ? "" : "; ") +
           ("[" + std::to_string(s.start) + "," + std::to_string(s.end) + "] " +
            std::string(to_string(s.kind)) + " " + std::to_string(s.first) + "+" +
            std::to_string(s.count) + " " + (s.item ? "#" + std::to_string(*s.item) : "-"));
  }
  return out;
}

using K = EventKind;

TEST(TimelineLod, OpsWithinOnePixelMergeAndWiderOnesStandAlone) {
  // 10 ns per pixel.
  const OneRow row({op(K::kForward, 2, 4), op(K::kBackward, 4, 6), op(K::kBackward, 7, 9),
                    op(K::kForward, 50, 80), op(K::kRecompute, 100, 103), op(K::kWeight, 995, 1200),
                    op(K::kOptimizer, 1200, 1300)});
  // Three ops in column 0 are one busy span, backward by 4 ns to 2; a 3 px op
  // and a lone narrow one are themselves; one crossing the right edge keeps its
  // end; one beyond it is not drawn.
  EXPECT_EQ(describe(row.spans(0, 1000, 100)),
            "[2,9] backward 0+3 -; [50,80] forward 3+1 #3; [100,103] recompute 4+1 #4; "
            "[995,1200] weight 5+1 #5");
  // 100 ns per pixel: the first four share column 0, forward by 32 ns to 4, and
  // none of them is a pixel wide.
  EXPECT_EQ(describe(row.spans(0, 1000, 10)),
            "[2,80] forward 0+4 -; [100,103] recompute 4+1 #4; [995,1200] weight 5+1 #5");
  // The whole row in one pixel: weight has the most time (205 ns).
  EXPECT_EQ(describe(row.spans(0, 1300, 1)), "[2,1300] weight 0+7 -");
}

TEST(TimelineLod, AnOpWiderThanAPixelIsShownEvenWhenSmallerOnesShareItsFirstPixel) {
  // Window [100, 200) over 10 px. X began before the window and shows 0.5 px:
  // it belongs to column 0, with Y (4.5 px), which the span shows. Z and W tie
  // (1 ns each): the first kind in EventKind's order. Q crosses the right edge.
  const OneRow row({op(K::kForward, 50, 105), op(K::kBackward, 105, 150), op(K::kForward, 151, 152),
                    op(K::kBackward, 152, 153), op(K::kRecompute, 195, 230)});
  EXPECT_EQ(describe(row.spans(100, 200, 10)),
            "[50,150] backward 0+2 #1; [151,153] forward 2+2 -; [195,230] recompute 4+1 #4");
  // Exactly a pixel wide is wide enough.
  const OneRow pixel({op(K::kForward, 0, 1), op(K::kBackward, 5, 15)});
  EXPECT_EQ(describe(pixel.spans(0, 100, 10)), "[0,15] backward 0+2 #1");
}

TEST(TimelineLod, ZoomedInEveryOpIsItsOwnSpan) {
  std::vector<TimelineEvent> ops;
  for (int i = 0; i < 50; ++i) ops.push_back(op(K::kForward, 10 * i, 10 * i + 10));
  const OneRow row(ops);
  // 2 px per ns: 20 px per op, abutting.
  const std::vector<RowSpan> spans = row.spans(0, 500, 1000);
  ASSERT_EQ(spans.size(), 50u);
  for (std::size_t i = 0; i < spans.size(); ++i) {
    EXPECT_EQ(spans[i].first, i);
    EXPECT_EQ(spans[i].count, 1u);
    EXPECT_EQ(spans[i].item, i);
    EXPECT_EQ(spans[i].start, static_cast<SimTime>(10 * i));
    EXPECT_EQ(spans[i].end, static_cast<SimTime>(10 * i + 10));
  }
  // Exactly a pixel wide (10 ns per pixel) is still an op of its own.
  EXPECT_EQ(row.spans(0, 500, 50).size(), 50u);
}

TEST(TimelineLod, AWindowThatShowsNothingGivesNothing) {
  // One op ends where the window starts, the next starts where it ends.
  const OneRow row(
      {op(K::kForward, 0, 100), op(K::kForward, 250, 300), op(K::kBackward, 400, 500)});
  EXPECT_TRUE(row.spans(300, 400, 100).empty());
  EXPECT_TRUE(row.spans(600, 700, 100).empty());
  EXPECT_TRUE(row_spans(row.layout, 1, TimeAxis{0, 500, 100}).empty());   // no such row
  EXPECT_TRUE(row_spans(row.layout, -1, TimeAxis{0, 500, 100}).empty());  // nor this
  // An empty row: a device with no ops keeps its compute row.
  Timeline idle;
  idle.device_names = {"d0"};
  const TimelineLayout empty = layout_timelines({&idle}, {""}, true);
  ASSERT_EQ(empty.rows.size(), 1u);
  EXPECT_TRUE(row_spans(empty, 0, TimeAxis{0, 500, 100}).empty());
  // An op of no duration where the window starts is in it.
  const OneRow instant({op(K::kOptimizer, 300, 300)});
  EXPECT_EQ(describe(instant.spans(300, 400, 100)), "[300,300] optimizer 0+1 #0");
  EXPECT_TRUE(instant.spans(200, 300, 100).empty());
}

// A zoomed-out tensor row (the tensor-parallel collectives after each op) is a
// busy span of the collectives' kind, the last of EventKind.
TEST(TimelineLod, ABusySpanOfTensorCollectivesHasTheirKind) {
  Timeline t;
  t.device_names = {"d0"};
  for (int m = 0; m < 3; ++m) {
    t.events.push_back(op(K::kForward, 10 * m, 10 * m + 7));
    t.events.push_back(op(K::kTensorAllReduce, 10 * m + 7, 10 * m + 10, 0, Lane::kTensor));
  }
  const TimelineLayout layout = layout_timelines({&t}, {""}, true);
  ASSERT_EQ(layout.rows.size(), 2u);
  ASSERT_EQ(layout.rows[1].lane, Lane::kTensor);
  // 100 ns per pixel: each row one span of all its items.
  EXPECT_EQ(describe(row_spans(layout, 1, TimeAxis{0, 1000, 10})), "[7,30] tensor-allreduce 3+3 -");
  EXPECT_EQ(describe(row_spans(layout, 0, TimeAxis{0, 1000, 10})), "[0,27] forward 0+3 -");
  // Zoomed in, each collective is its own span.
  EXPECT_EQ(describe(row_spans(layout, 1, TimeAxis{0, 30, 30})),
            "[7,10] tensor-allreduce 3+1 #3; [17,20] tensor-allreduce 4+1 #4; [27,30] "
            "tensor-allreduce 5+1 #5");
}

// A row of n ops one after another, with gaps of 0 to 3 ns and durations of
// 0 to 20 ns: slices that abut, of no duration, and idle time between.
std::vector<TimelineEvent> random_row(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> gap(0, 3), duration(0, 20), kind(0, 4);
  std::vector<TimelineEvent> events;
  SimTime t = 0;
  for (std::size_t i = 0; i < n; ++i) {
    t += gap(rng);
    const SimTime end = t + duration(rng);
    events.push_back(op(static_cast<EventKind>(kind(rng)), t, end));
    t = end;
  }
  return events;
}

TEST(TimelineLod, SpansStayWithinThePixelsAndCoverEveryOpOnce) {
  const OneRow row(random_row(100'000, 1));
  ASSERT_EQ(row.layout.rows.size(), 1u);  // nothing overlaps
  const auto& items = row.layout.items;
  const double full_end = static_cast<double>(items.back().end);
  std::mt19937 rng(2);
  std::uniform_real_distribution<double> when(-100.0, full_end + 100.0);
  const double widths[] = {1.0, 7.0, 100.0, 999.5, 1220.0, 20'000.0};
  for (int trial = 0; trial < 60; ++trial) {
    double t0 = when(rng), t1 = when(rng);
    if (trial == 0) t0 = 0, t1 = full_end;  // the whole row
    if (t1 < t0) std::swap(t0, t1);
    if (t1 - t0 < 1) continue;
    const double width = widths[trial % std::size(widths)];
    const TimeAxis axis{t0, t1, width};
    const std::vector<RowSpan> spans = row_spans(row.layout, 0, axis);
    EXPECT_LE(spans.size(), static_cast<std::size_t>(std::ceil(width)));

    // The ops in the window, by brute force.
    std::vector<std::size_t> shown;
    for (std::size_t i = 0; i < items.size(); ++i) {
      const double s = static_cast<double>(items[i].start), e = static_cast<double>(items[i].end);
      if (s < t1 && (e > t0 || s >= t0)) shown.push_back(i);
    }
    const ItemRange range = items_in(row.layout, 0, t0, t1);
    ASSERT_EQ(range.size(), shown.size()) << "window " << t0 << " " << t1;
    if (!shown.empty()) {
      EXPECT_EQ(range.first, shown.front());
    }

    // Spans tile that range in order, each in a later pixel column than the last.
    std::size_t next = range.first;
    double last_column = -1;
    for (const RowSpan& s : spans) {
      ASSERT_EQ(s.first, next);
      ASSERT_GE(s.count, 1u);
      next += s.count;
      EXPECT_EQ(s.start, items[s.first].start);
      SimTime end = 0;
      for (std::size_t i = s.first; i < s.first + s.count; ++i) end = std::max(end, items[i].end);
      EXPECT_EQ(s.end, end);
      const double column = std::max(0.0, std::floor(axis.x_of(static_cast<double>(s.start))));
      EXPECT_GT(column, last_column);
      last_column = column;
      if (s.item) {
        EXPECT_GE(*s.item, s.first);
        EXPECT_LT(*s.item, s.first + s.count);
      } else {
        EXPECT_GT(s.count, 1u);
      }
    }
    EXPECT_EQ(next, range.last);
    // Every op at least a pixel wide on screen is shown as itself.
    std::vector<bool> alone(items.size(), false);
    for (const RowSpan& s : spans) {
      if (s.item) alone[*s.item] = true;
    }
    for (const std::size_t i : shown) {
      const double x0 = std::max(0.0, axis.x_of(static_cast<double>(items[i].start)));
      const double x1 = std::min(width, axis.x_of(static_cast<double>(items[i].end)));
      if (x1 - x0 >= 1.0) {
        EXPECT_TRUE(alone[i]) << "item " << i << " in window " << t0;
      }
    }
  }
}

// Overlapping transfers on several devices, so that lanes get further rows.
Timeline random_lanes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> device(0, 2), lane(0, 2), start(0, 100'000), duration(0, 300);
  Timeline t;
  t.device_names = {"d0", "d1", "d2"};
  for (std::size_t i = 0; i < n; ++i) {
    const SimTime s = start(rng);
    t.events.push_back(
        op(K::kActivation, s, s + duration(rng), device(rng), static_cast<Lane>(lane(rng))));
  }
  return t;
}

TEST(TimelineLod, HitTestAgreesWithAScanOfTheRow) {
  const Timeline t = random_lanes(20'000, 3);
  const TimelineLayout layout = layout_timelines({&t}, {""}, true);
  ASSERT_GT(layout.rows.size(), 9u);  // overlaps made further rows
  const int rows = static_cast<int>(layout.rows.size());
  // The item containing time (the later one where two meet), else the nearest
  // within the tolerance, the earlier on a tie.
  const auto scan = [&](int row, double time, double tolerance) -> std::optional<std::size_t> {
    std::optional<std::size_t> inside, near;
    double best = 0;
    for (std::size_t i = 0; i < layout.items.size(); ++i) {
      const TimelineItem& it = layout.items[i];
      if (it.row != row) continue;
      const double s = static_cast<double>(it.start), e = static_cast<double>(it.end);
      if (s <= time && time <= e) inside = i;
      const double d = time < s ? s - time : time > e ? time - e : 0;
      if (d <= tolerance && (!near || d < best)) near = i, best = d;
    }
    return inside ? inside : near;
  };
  std::mt19937 rng(4);
  std::uniform_int_distribution<int> row(-1, rows);
  std::uniform_real_distribution<double> time(-500, 101'000);
  const double tolerances[] = {0.0, 0.5, 3.0, 40.0, 1e6};
  int hits = 0;
  for (int q = 0; q < 20'000; ++q) {
    const int r = row(rng);
    // Whole nanoseconds half the time: on the ends of slices exactly.
    const double when = q % 2 ? time(rng) : std::round(time(rng));
    const double tolerance = tolerances[q % std::size(tolerances)];
    const auto expected = scan(r, when, tolerance);
    ASSERT_EQ(hit_test(layout, r, when, tolerance), expected)
        << "row " << r << " time " << when << " tolerance " << tolerance;
    hits += expected.has_value();
  }
  EXPECT_GT(hits, 5'000);  // the queries did find items
}

TEST(TimelineLod, ItemsInAWindowAgreeWithAScanOfTheRow) {
  const Timeline t = random_lanes(5'000, 5);
  const TimelineLayout layout = layout_timelines({&t}, {""}, true);
  std::mt19937 rng(6);
  std::uniform_real_distribution<double> time(-500, 101'000);
  for (int r = 0; r < static_cast<int>(layout.rows.size()); ++r) {
    for (int q = 0; q < 20; ++q) {
      double t0 = std::round(time(rng)), t1 = std::round(time(rng));
      if (t1 < t0) std::swap(t0, t1);
      std::vector<std::size_t> scan;
      for (std::size_t i = 0; i < layout.items.size(); ++i) {
        const TimelineItem& it = layout.items[i];
        const double s = static_cast<double>(it.start), e = static_cast<double>(it.end);
        if (it.row == r && s < t1 && (e > t0 || s >= t0)) scan.push_back(i);
      }
      const ItemRange range = items_in(layout, r, t0, t1);
      ASSERT_EQ(range.size(), scan.size()) << "row " << r << " [" << t0 << ", " << t1 << ")";
      for (std::size_t k = 0; k < scan.size(); ++k) EXPECT_EQ(range.first + k, scan[k]);
    }
  }
}

}  // namespace
}  // namespace pipescope::gui
