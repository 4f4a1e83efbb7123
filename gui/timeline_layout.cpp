#include "gui/timeline_layout.h"

#include <algorithm>
#include <array>
#include <iterator>
#include <limits>
#include <numeric>
#include <span>
#include <utility>

#include "sim/base/format.h"
#include "sim/engine/op_dependencies.h"

namespace pipescope::gui {
namespace {

// A device's lanes in the order their rows are drawn: the tensor-parallel
// collectives, then the expert-parallel all-to-alls, then the exposed
// context-parallel ring exchanges, right under the ops they follow. Lane
// values index the buckets of sort_by_lane, so every value below kLaneCount
// is here once.
constexpr Lane kLanes[] = {Lane::kCompute, Lane::kTensor, Lane::kExpert,
                           Lane::kContext, Lane::kSend,   Lane::kRecv};
constexpr std::size_t kLaneCount = std::size(kLanes);

bool is_transfer(EventKind k) {
  return k == EventKind::kActivation || k == EventKind::kGradient;
}

std::string row_label(const Timeline& t, int device, Lane lane, int sub_row,
                      const std::string& prefix) {
  if (lane == Lane::kCompute && sub_row == 0) {
    std::string label = static_cast<std::size_t>(device) < t.device_names.size()
                            ? t.device_names[static_cast<std::size_t>(device)]
                            : "device " + std::to_string(device);
    return prefix.empty() ? label : prefix + ": " + label;
  }
  // Indented under their device's row, which carries the prefix.
  std::string label = "  " + std::string(to_string(lane));
  if (sub_row > 0) label += " " + std::to_string(sub_row + 1);
  return label;
}

// First fit by start time, as the trace writer assigns rows (sim/formats/trace_io.cpp),
// so that "recv 2" here is "recv 2" there: each slice goes to the lowest row whose
// last slice ended at or before its start. A linear scan of the rows is quadratic
// when many slices overlap; a min-tree over the rows' end times finds the row in
// O(log n). Rows not used yet hold kFree, so the lowest free row is always found.
class FirstFit {
 public:
  explicit FirstFit(std::size_t slices) {
    while (leaves_ < slices) leaves_ *= 2;
    end_.assign(2 * leaves_, kFree);
  }

  std::size_t place(SimTime start, SimTime end) {
    std::size_t node = 1;  // the root; node n has children 2n and 2n + 1
    while (node < leaves_) node = end_[2 * node] <= start ? 2 * node : 2 * node + 1;
    const std::size_t row = node - leaves_;
    end_[node] = end;
    for (node /= 2; node > 0; node /= 2) end_[node] = std::min(end_[2 * node], end_[2 * node + 1]);
    rows_ = std::max(rows_, row + 1);
    return row;
  }
  std::size_t rows() const { return rows_; }

 private:
  static constexpr SimTime kFree = std::numeric_limits<SimTime>::min();
  std::size_t leaves_ = 1;
  std::size_t rows_ = 0;
  std::vector<SimTime> end_;  // min of the rows' end times under each node
};

// What laying out needs of an event, gathered by device and lane in one pass
// over the events: reading them there, strided, cost more than the rest.
struct LaneEvent {
  SimTime start = 0;
  SimTime end = 0;
  std::size_t event = 0;
  EventKind kind = EventKind::kForward;
};

// An event with a negative device or an unknown lane (corrupt input) has no row.
bool has_row(const TimelineEvent& e) {
  return e.device >= 0 && static_cast<std::size_t>(e.lane) < kLaneCount;
}

// A timeline's events by (device, lane, start), ties in timeline order as in the
// trace writer: device d's lane l is events[begin[b]] to events[begin[b + 1] - 1]
// for b = kLaneCount * d + l.
struct ByLane {
  std::vector<LaneEvent> events;
  std::vector<std::size_t> begin;
};

ByLane sort_by_lane(const Timeline& t, int devices) {
  // A counting sort by device and lane keeps timeline order, which is usually
  // order of start already.
  const auto bucket = [](const TimelineEvent& e) {
    return static_cast<std::size_t>(e.device) * kLaneCount + static_cast<std::size_t>(e.lane);
  };
  ByLane out;
  out.begin.assign(static_cast<std::size_t>(devices) * kLaneCount + 1, 0);
  for (const TimelineEvent& e : t.events) {
    if (has_row(e)) ++out.begin[bucket(e) + 1];
  }
  std::partial_sum(out.begin.begin(), out.begin.end(), out.begin.begin());
  out.events.resize(out.begin.back());
  std::vector<std::size_t> fill(out.begin.begin(), out.begin.end() - 1);
  for (std::size_t i = 0; i < t.events.size(); ++i) {
    const TimelineEvent& e = t.events[i];
    if (has_row(e)) out.events[fill[bucket(e)]++] = LaneEvent{e.start, e.end, i, e.kind};
  }
  const auto by_start = [](const LaneEvent& a, const LaneEvent& b) { return a.start < b.start; };
  for (std::size_t b = 0; b + 1 < out.begin.size(); ++b) {
    const auto lo = out.events.begin() + static_cast<std::ptrdiff_t>(out.begin[b]);
    const auto hi = out.events.begin() + static_cast<std::ptrdiff_t>(out.begin[b + 1]);
    if (!std::is_sorted(lo, hi, by_start)) std::stable_sort(lo, hi, by_start);
  }
  return out;
}

// Appends the rows and items of one device's lane; `events` are its events in
// order of start.
void lay_out_lane(const Timeline& t, int source, int device, Lane lane,
                  std::span<const LaneEvent> events, const std::string& prefix,
                  TimelineLayout& layout) {
  FirstFit fit(events.size());
  std::vector<std::size_t> sub_row(events.size());
  for (std::size_t k = 0; k < events.size(); ++k) {
    sub_row[k] = fit.place(events[k].start, events[k].end);
  }
  // A device's compute row stays even when it is idle: its bubble is the point.
  const std::size_t rows = std::max<std::size_t>(fit.rows(), lane == Lane::kCompute ? 1 : 0);
  // Items go row by row, each row in order of start (the queries rely on it): a
  // counting sort by sub-row, stable in start order.
  std::vector<std::size_t> begin(rows + 1, 0);
  for (const std::size_t r : sub_row) ++begin[r + 1];
  std::partial_sum(begin.begin(), begin.end(), begin.begin());
  const int first_row = static_cast<int>(layout.rows.size());
  const std::size_t first_item = layout.items.size();
  for (std::size_t r = 0; r < rows; ++r) layout.row_begin.push_back(first_item + begin[r]);
  layout.items.resize(first_item + events.size());
  for (std::size_t k = 0; k < events.size(); ++k) {
    const LaneEvent& e = events[k];
    layout.items[first_item + begin[sub_row[k]]++] = TimelineItem{
        source, first_row + static_cast<int>(sub_row[k]), e.event, e.start, e.end, e.kind};
  }
  for (std::size_t r = 0; r < rows; ++r) {
    const int sub = static_cast<int>(r);
    layout.rows.push_back(
        TimelineRow{source, device, lane, sub, row_label(t, device, lane, sub, prefix)});
  }
}

// (stage, micro-batch) as one ordered 64-bit key: stage in the high half.
std::int64_t pack(int stage, int micro_batch) {
  return static_cast<std::int64_t>(stage) * (std::int64_t{1} << 32) +
         static_cast<std::int64_t>(static_cast<std::uint32_t>(micro_batch));
}

std::int64_t op_class(int source, EventKind kind) {
  return static_cast<std::int64_t>(source) * 256 + static_cast<std::int64_t>(kind);
}

// The dependency lookup, built once per layout (a sort of every item), where
// scanning every item on each click took 25 ms at a million events.
void index_dependencies(const std::vector<const Timeline*>& sources, TimelineLayout& layout) {
  std::vector<std::size_t> item_of;  // per event of one source; items.size() for none
  std::size_t next = 0;              // sources' items are contiguous, in source order
  for (std::size_t s = 0; s < sources.size(); ++s) {
    if (sources[s] == nullptr) continue;
    const Timeline& t = *sources[s];
    item_of.assign(t.events.size(), layout.items.size());
    for (; next < layout.items.size() && layout.items[next].source == static_cast<int>(s); ++next) {
      item_of[layout.items[next].event] = next;
    }
    // In event order: reads the events front to back.
    for (std::size_t i = 0; i < t.events.size(); ++i) {
      if (item_of[i] == layout.items.size()) continue;  // hidden, or no row
      const TimelineEvent& e = t.events[i];
      layout.by_op.push_back(
          ItemKey{op_class(static_cast<int>(s), e.kind), pack(e.stage, e.micro_batch), item_of[i]});
      if (e.flow) {
        layout.by_flow.push_back(
            ItemKey{static_cast<std::int64_t>(s), static_cast<std::int64_t>(*e.flow), item_of[i]});
      }
    }
  }
  std::sort(layout.by_op.begin(), layout.by_op.end());
  std::sort(layout.by_flow.begin(), layout.by_flow.end());
}

}  // namespace

TimelineLayout layout_timelines(const std::vector<const Timeline*>& sources,
                                const std::vector<std::string>& prefixes, bool show_transfers) {
  TimelineLayout layout;
  std::size_t events = 0;
  for (const Timeline* t : sources) events += t != nullptr ? t->events.size() : 0;
  layout.items.reserve(events);
  bool any = false;
  for (std::size_t s = 0; s < sources.size(); ++s) {
    if (sources[s] == nullptr) continue;
    const Timeline& t = *sources[s];
    const std::string& prefix = s < prefixes.size() ? prefixes[s] : std::string();
    int devices = static_cast<int>(t.device_names.size());
    for (const TimelineEvent& e : t.events) {
      if (!has_row(e)) continue;
      devices = std::max(devices, e.device + 1);
      // The extent counts hidden transfers too: the axis does not jump when
      // they are switched on.
      const double start = static_cast<double>(e.start), end = static_cast<double>(e.end);
      layout.start_ns = any ? std::min(layout.start_ns, start) : start;
      layout.end_ns = any ? std::max(layout.end_ns, end) : end;
      any = true;
    }
    const ByLane by_lane = sort_by_lane(t, devices);
    for (int d = 0; d < devices; ++d) {
      for (const Lane lane : kLanes) {
        const std::size_t b =
            static_cast<std::size_t>(d) * kLaneCount + static_cast<std::size_t>(lane);
        const std::span<const LaneEvent> lane_events(by_lane.events.data() + by_lane.begin[b],
                                                     by_lane.begin[b + 1] - by_lane.begin[b]);
        // Communication (transfers, all-reduces, tensor-parallel collectives)
        // shows with the transfers, and a lane only where it has slices.
        if (lane != Lane::kCompute && (!show_transfers || lane_events.empty())) continue;
        lay_out_lane(t, static_cast<int>(s), d, lane, lane_events, prefix, layout);
      }
    }
  }
  layout.row_begin.push_back(layout.items.size());
  index_dependencies(sources, layout);
  return layout;
}

namespace {

const TimelineEvent& event_of(const TimelineLayout& layout,
                              const std::vector<const Timeline*>& sources, std::size_t item) {
  const TimelineItem& it = layout.items[item];
  return sources[static_cast<std::size_t>(it.source)]->events[it.event];
}

}  // namespace

namespace {

// Where an item ends on screen: an end before the start (a corrupt trace)
// draws as the start. In a row these are in order: each slice ends at or
// before the next starts (first fit), so max(start, end) never decreases.
double end_of(const TimelineItem& item) {
  return static_cast<double>(std::max(item.start, item.end));
}

ItemRange row_items(const TimelineLayout& layout, int row) {
  if (row < 0 || static_cast<std::size_t>(row) + 1 >= layout.row_begin.size()) return {};
  return {layout.row_begin[static_cast<std::size_t>(row)],
          layout.row_begin[static_cast<std::size_t>(row) + 1]};
}

// The first item of [first, last) for which pred holds, pred being false then
// true along the range.
template <typename Pred>
std::size_t partition_point(const TimelineLayout& layout, std::size_t first, std::size_t last,
                            Pred pred) {
  const auto begin = layout.items.begin();
  return static_cast<std::size_t>(
      std::partition_point(begin + static_cast<std::ptrdiff_t>(first),
                           begin + static_cast<std::ptrdiff_t>(last),
                           [&](const TimelineItem& it) { return !pred(it); }) -
      begin);
}

}  // namespace

ItemRange items_in(const TimelineLayout& layout, int row, double t0_ns, double t1_ns) {
  const ItemRange all = row_items(layout, row);
  // Starts and ends both ascend along a row, so both tests flip once.
  const std::size_t first = partition_point(layout, all.first, all.last, [&](const auto& it) {
    return end_of(it) > t0_ns || static_cast<double>(it.start) >= t0_ns;
  });
  const std::size_t last = partition_point(layout, first, all.last, [&](const auto& it) {
    return static_cast<double>(it.start) >= t1_ns;
  });
  return {first, last};
}

std::optional<std::size_t> hit_test(const TimelineLayout& layout, int row, double time_ns,
                                    double tolerance_ns) {
  const ItemRange all = row_items(layout, row);
  if (all.size() == 0) return std::nullopt;
  // One past the last item starting at or before time_ns. Slices of a row do not
  // overlap, so only that item can contain time_ns, and it and the next are the
  // nearest on either side.
  const std::size_t first = partition_point(layout, all.first, all.last, [&](const auto& it) {
    return static_cast<double>(it.start) > time_ns;
  });
  std::optional<std::size_t> best;
  double best_distance = 0.0;
  if (first > all.first) {
    const double end = end_of(layout.items[first - 1]);
    if (time_ns <= end) return first - 1;
    if (time_ns - end <= tolerance_ns) best = first - 1, best_distance = time_ns - end;
  }
  if (first < all.last) {
    // Strictly nearer: a tie goes to the slice before, which ended there.
    const double d = static_cast<double>(layout.items[first].start) - time_ns;
    if (d <= tolerance_ns && (!best || d < best_distance)) best = first;
  }
  return best;
}

namespace {

// The event that carries a dependency between stages, if any.
std::optional<EventKind> carrier(Via via) {
  switch (via) {
    case Via::kActivation:
      return EventKind::kActivation;
    case Via::kGradient:
      return EventKind::kGradient;
    case Via::kAllReduce:
      return EventKind::kAllReduce;
    case Via::kSameStage:
      break;
  }
  return std::nullopt;
}

std::optional<OpKind> op_kind(EventKind k) {
  for (const OpKind o : kOpKinds) {
    if (event_kind(o) == k) return o;
  }
  return std::nullopt;
}

// An op's dependencies (before) and its dependents (after), each with the
// transfer or all-reduce between them. A carrier is named by the stage that
// sends it (activations go from s to s + 1, gradients back) or, for an
// all-reduce, by the stage it sums.
void relate_op(OpKind kind, int s, std::vector<RelatedKind>& out) {
  for (const Dependency& d : op_dependencies(kind)) {
    const int from = s + d.stage_offset;
    if (const auto c = carrier(d.via)) {
      out.push_back({*c, d.via == Via::kAllReduce ? s : from, true, d.via == Via::kAllReduce});
    }
    out.push_back({event_kind(d.on), from, true, d.every_micro_batch});
  }
  for (const OpKind dependent : kOpKinds) {
    const bool any = !has_micro_batch(event_kind(dependent));
    for (const Dependency& d : op_dependencies(dependent)) {
      if (d.on != kind) continue;
      if (const auto c = carrier(d.via)) out.push_back({*c, s, false, d.via == Via::kAllReduce});
      out.push_back({event_kind(dependent), s - d.stage_offset, false, any});
    }
  }
}

// A transfer's or an all-reduce's two sides: the ops that the rules connect
// through it. A trace may name the receiving stage (peer_stage).
void relate_carrier(const TimelineEvent& me, std::vector<RelatedKind>& out) {
  for (const OpKind dependent : kOpKinds) {
    for (const Dependency& d : op_dependencies(dependent)) {
      if (carrier(d.via) != me.kind) continue;
      const bool all_reduce = d.via == Via::kAllReduce;
      out.push_back({event_kind(d.on), me.stage, true, all_reduce});
      const int to = all_reduce ? me.stage : me.peer_stage.value_or(me.stage - d.stage_offset);
      out.push_back({event_kind(dependent), to, false, all_reduce});
    }
  }
}

}  // namespace

std::vector<RelatedKind> related_kinds(const TimelineEvent& me) {
  std::vector<RelatedKind> out;
  if (const auto op = op_kind(me.kind)) {
    relate_op(*op, me.stage, out);
  } else {
    relate_carrier(me, out);
  }
  return out;
}

namespace {

// The keys equal to `key` in an index, or with any micro-batch: [lo, hi].
std::pair<std::vector<ItemKey>::const_iterator, std::vector<ItemKey>::const_iterator> keys(
    const std::vector<ItemKey>& index, std::int64_t a, std::int64_t b_lo, std::int64_t b_hi) {
  const auto lo = std::lower_bound(index.begin(), index.end(), ItemKey{a, b_lo, 0});
  const auto hi =
      std::upper_bound(lo, index.end(), ItemKey{a, b_hi, std::numeric_limits<std::size_t>::max()});
  return {lo, hi};
}

}  // namespace

Dependencies dependencies_of(const TimelineLayout& layout,
                             const std::vector<const Timeline*>& sources, std::size_t item) {
  Dependencies deps;
  if (item >= layout.items.size()) return deps;
  const int source = layout.items[item].source;
  const TimelineEvent& me = event_of(layout, sources, item);
  const std::vector<RelatedKind> related = related_kinds(me);
  const bool by_flow = is_transfer(me.kind) && me.flow;
  const auto same_flow = [&](std::size_t i) {
    return by_flow && event_of(layout, sources, i).flow == me.flow;
  };
  // (item, rank, before): an item related in several ways counts once, as the
  // first of them (the other half of a transfer first, then related's order).
  struct Found {
    std::size_t item;
    std::size_t rank;
    bool before;
  };
  std::vector<Found> found;
  if (by_flow) {
    const auto flow = static_cast<std::int64_t>(*me.flow);
    const auto [lo, hi] = keys(layout.by_flow, source, flow, flow);
    for (auto it = lo; it != hi; ++it) {
      // The other half of this transfer: the send comes before its receive.
      if (it->item != item && event_of(layout, sources, it->item).lane != me.lane) {
        found.push_back({it->item, 0, me.lane != Lane::kSend});
      }
    }
  }
  for (std::size_t r = 0; r < related.size(); ++r) {
    const RelatedKind& rel = related[r];
    const std::int64_t b_lo = pack(rel.stage, rel.any_micro_batch ? 0 : me.micro_batch);
    const std::int64_t b_hi = pack(rel.stage, rel.any_micro_batch ? -1 : me.micro_batch);
    const auto [lo, hi] = keys(layout.by_op, op_class(source, rel.kind), b_lo, b_hi);
    for (auto it = lo; it != hi; ++it) {
      // Items of the same flow are this transfer's halves, handled above.
      if (it->item != item && !same_flow(it->item)) found.push_back({it->item, r + 1, rel.before});
    }
  }
  std::sort(found.begin(), found.end(), [](const Found& x, const Found& y) {
    return x.item != y.item ? x.item < y.item : x.rank < y.rank;
  });
  for (std::size_t k = 0; k < found.size(); ++k) {
    if (k > 0 && found[k].item == found[k - 1].item) continue;
    (found[k].before ? deps.before : deps.after).push_back(found[k].item);
  }
  return deps;
}

std::string item_label(const TimelineEvent& e) {
  return event_name(e);
}

std::string item_tooltip(const Timeline& timeline, const TimelineEvent& e) {
  const bool transfer = is_transfer(e.kind);
  // "F3: forward", "act 3: activation (recv)", but not "optimizer: optimizer".
  std::string text = item_label(e);
  if (text != to_string(e.kind)) text += ": " + std::string(to_string(e.kind));
  if (transfer) text += " (" + std::string(to_string(e.lane)) + ")";
  text += ", stage " + std::to_string(e.stage);
  if (e.peer_stage) text += " -> " + std::to_string(*e.peer_stage);
  if (has_micro_batch(e.kind)) text += ", micro-batch " + std::to_string(e.micro_batch);
  if (is_collective(e.kind)) {
    text += ", " + format_bytes(static_cast<double>(e.bytes));
  }
  const SimTime duration = e.end - e.start;
  text += "\nstart " + format_seconds(simtime_to_seconds(e.start)) + ", duration " +
          format_seconds(simtime_to_seconds(duration));
  if (transfer) {
    text += "\n" + format_bytes(static_cast<double>(e.bytes));
    // A route no transfer took has no name (""); skip rather than print "over ".
    if (e.route && *e.route >= 0 &&
        static_cast<std::size_t>(*e.route) < timeline.route_names.size() &&
        !timeline.route_names[static_cast<std::size_t>(*e.route)].empty()) {
      text += " over " + timeline.route_names[static_cast<std::size_t>(*e.route)];
    }
  }
  if (e.cpu_time) {
    // Below 100 % the OS or a hypervisor took the rest (steal).
    text += "\nCPU time " + format_seconds(simtime_to_seconds(*e.cpu_time));
    if (duration > 0) {
      text += " (" +
              format_percent(static_cast<double>(*e.cpu_time) / static_cast<double>(duration)) +
              " of the duration)";
    }
  }
  return text;
}

}  // namespace pipescope::gui
