#pragma once
// What the timeline view draws, as plain code without Qt, tested without a
// display: one row per device and lane (compute, tensor, send, recv; slices that would
// overlap on a lane get further rows of it), an item per event, hit testing,
// the dependencies of an op (the transfer that fed it, the op it feeds), labels
// and tooltips. A second timeline (a measured run) can be laid out under the
// first with its own row prefix and the same time axis.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sim/engine/timeline.h"

namespace pipescope::gui {

struct TimelineRow {
  int source = 0;  // which timeline: 0 the first laid out, 1 the second, ...
  int device = 0;
  Lane lane = Lane::kCompute;
  int sub_row = 0;    // 0 for the lane's first row, 1 for "recv 2", ...
  std::string label;  // "device 0", "  send", "  recv 2"; prefixed for source > 0,
                      // e.g. "measured: device 0"
};

// What is drawn of an event, copied from it so that queries over a row read one
// array and not the events.
struct TimelineItem {
  int source = 0;
  int row = 0;            // index into TimelineLayout::rows
  std::size_t event = 0;  // index into that timeline's events
  SimTime start = 0;      // ns
  SimTime end = 0;        // ns; an end before the start (a corrupt trace) counts as the start
  EventKind kind = EventKind::kForward;
};

// Items of one source that have the same (kind, stage, micro-batch), or the
// same transfer flow: what dependencies_of looks up. Sorted by key, then item.
struct ItemKey {
  std::int64_t a = 0;  // (source, kind) packed: source * 256 + kind; or the source for flows
  std::int64_t b = 0;  // (stage, micro-batch) packed into 64 bits; or the flow id
  std::size_t item = 0;
  friend bool operator<(const ItemKey& x, const ItemKey& y) {
    return x.a != y.a ? x.a < y.a : x.b != y.b ? x.b < y.b : x.item < y.item;
  }
};

struct TimelineLayout {
  std::vector<TimelineRow> rows;
  // Every shown event of every source, by row, and within a row by start. A row's
  // slices do not overlap (each ends at or before the next starts), so their
  // ends are in order too: the items of a row in a time window are found by
  // binary search (items_in).
  std::vector<TimelineItem> items;
  std::vector<std::size_t> row_begin;  // row r's items are [row_begin[r], row_begin[r + 1])
  std::vector<ItemKey> by_op;          // (source, kind, stage, micro-batch), every item
  std::vector<ItemKey> by_flow;        // (source, flow), items of transfers with a flow
  double start_ns = 0.0;               // earliest start over all sources
  double end_ns = 0.0;                 // latest end over all sources
};

// Lays out timelines one under another: for each, its devices in order, each
// with a compute row, then (when show_transfers and the device has any) its send
// and recv rows. Overlapping slices of one lane go to the first further row of
// that lane where they fit (first fit by start time). prefixes[i] labels the rows
// of source i ("" for none; "measured" gives "measured: device 0").
TimelineLayout layout_timelines(const std::vector<const Timeline*>& sources,
                                const std::vector<std::string>& prefixes, bool show_transfers);

// The items of a row that overlap [t0_ns, t1_ns) (or, for an empty slice,
// start inside it), as [first, last) into layout.items; empty for a row that
// does not exist. O(log n).
struct ItemRange {
  std::size_t first = 0;
  std::size_t last = 0;
  std::size_t size() const { return last - first; }
};
ItemRange items_in(const TimelineLayout& layout, int row, double t0_ns, double t1_ns);

// The item under (row, time), if any: an event of that row whose [start, end]
// contains time, or failing that the nearest one within tolerance_ns. O(log n).
std::optional<std::size_t> hit_test(const TimelineLayout& layout, int row, double time_ns,
                                    double tolerance_ns);

// The kinds of item related to an event by the schedule's dependency rules
// (sim/engine/op_dependencies.h): an event of `kind` and `stage`, of the same
// micro-batch unless any_micro_batch, before or after it. For an op, what it
// depends on and what depends on it, each with the transfer or all-reduce
// between them (a transfer named by the stage that sends it); for a transfer or
// an all-reduce, the ops on its two sides. F(s,m): the activation sent by s-1
// and F(s-1,m) before; the activation sent by s, F(s+1,m), R(s,m) and B(s,m)
// after.
struct RelatedKind {
  EventKind kind;
  int stage;
  bool before;
  bool any_micro_batch = false;
};
std::vector<RelatedKind> related_kinds(const TimelineEvent& me);

// Items related to one item of the same source: the other half of a transfer
// (same flow) first, then each of related_kinds in its order; an item related
// in several ways counts once, as the first. Found through the layout's by_op
// and by_flow indices: O(log n) per related kind plus what it finds.
struct Dependencies {
  std::vector<std::size_t> before;  // item indices, ascending
  std::vector<std::size_t> after;
};
Dependencies dependencies_of(const TimelineLayout& layout,
                             const std::vector<const Timeline*>& sources, std::size_t item);

// "F3", "R3", "B3", "optimizer", "act 3", "grad 3" (as traces name them).
std::string item_label(const TimelineEvent& e);
// Several lines: kind, stage (and peer for transfers), micro-batch, start,
// duration (with units, e.g. "12.5 ms"), bytes for transfers and all-reduces, the link route
// when known, and the CPU time for measured ops.
std::string item_tooltip(const Timeline& timeline, const TimelineEvent& e);

}  // namespace pipescope::gui
