#pragma once
// Level of detail for the timeline view, as plain code without Qt, tested
// without a display: what to draw of one row in the visible window, so that
// the rectangles a paint draws are bounded by the pixels on screen and not by
// the events (a row of 6,000 ops zoomed out to 1,220 px is at most 1,220
// rectangles). Finding them reads the row's items in the window once, after
// a binary search (items_in).
//
// The row's items in the window are taken in order of start. Each belongs to
// the pixel column of its start (clamped to the window: an item that began
// before it belongs to column 0), and the items of one column form one span.
// An op at least a pixel wide on screen ends past its column, so the next op
// starts in another: zoomed in, every op is a span of its own (smaller ops
// sharing its first pixel join it without hiding it); zoomed out, the ops that
// fall within a pixel merge into one "busy" span, coloured by the kind that
// covers most of it. Spans start in different columns, so a row gives at most
// ceil(width_px) of them.

#include <cstddef>
#include <optional>
#include <vector>

#include "gui/time_axis.h"
#include "gui/timeline_layout.h"

namespace pipescope::gui {

struct RowSpan {
  SimTime start = 0;  // ns: its first item's start
  SimTime end = 0;    // ns: the latest end of its items (an end before its start counts as it)
  // The kind with the most time inside the window among its items; on a tie
  // (items of no duration), the one with more items, then the first in
  // EventKind's order.
  EventKind kind = EventKind::kForward;
  std::size_t first = 0;  // its items are layout.items[first] to [first + count - 1]
  std::size_t count = 0;
  // The item it shows as itself (its colour, its label): its only item, or its
  // only item at least a pixel wide on screen. None for a busy span of small
  // items.
  std::optional<std::size_t> item;
};

// The spans of one row in axis's window [start_ns, end_ns) over width_px
// pixels, in order; none for a row that does not exist or shows nothing there.
std::vector<RowSpan> row_spans(const TimelineLayout& layout, int row, const TimeAxis& axis);

}  // namespace pipescope::gui
