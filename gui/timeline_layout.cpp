#include "gui/timeline_layout.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <tuple>

#include "sim/format.h"

namespace pipescope::gui {
namespace {

constexpr Lane kLanes[] = {Lane::kCompute, Lane::kSend, Lane::kRecv};

std::string lane_row_label(const Timeline& t, int device, Lane lane, int sub_row,
                           const std::string& prefix) {
  std::string label;
  if (lane == Lane::kCompute && sub_row == 0) {
    label = static_cast<std::size_t>(device) < t.device_names.size()
                ? t.device_names[static_cast<std::size_t>(device)]
                : "device " + std::to_string(device);
    if (!prefix.empty()) label = prefix + ": " + label;
    return label;
  }
  label = "  " + std::string(to_string(lane));
  if (sub_row > 0) label += " " + std::to_string(sub_row + 1);
  return label;
}

bool is_transfer(EventKind k) {
  return k == EventKind::kActivation || k == EventKind::kGradient;
}

// The items of one row: items are sorted by (row, start).
std::pair<std::size_t, std::size_t> row_range(const TimelineLayout& layout, int row) {
  const auto lo = std::lower_bound(layout.items.begin(), layout.items.end(), row,
                                   [](const TimelineItem& it, int r) { return it.row < r; });
  const auto hi = std::upper_bound(lo, layout.items.end(), row,
                                   [](int r, const TimelineItem& it) { return r < it.row; });
  return {static_cast<std::size_t>(lo - layout.items.begin()),
          static_cast<std::size_t>(hi - layout.items.begin())};
}

}  // namespace

TimelineLayout layout_timelines(const std::vector<const Timeline*>& sources,
                                const std::vector<std::string>& prefixes, bool show_transfers) {
  TimelineLayout layout;
  bool any = false;
  for (std::size_t s = 0; s < sources.size(); ++s) {
    const Timeline& t = *sources[s];
    const std::string prefix = s < prefixes.size() ? prefixes[s] : std::string();
    int devices = static_cast<int>(t.device_names.size());
    for (const TimelineEvent& e : t.events) devices = std::max(devices, e.device + 1);
    // Events per (device, lane), in order of start.
    std::vector<std::vector<std::size_t>> by_lane(static_cast<std::size_t>(devices) * 3);
    std::vector<std::size_t> order(t.events.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return t.events[a].start < t.events[b].start;
    });
    for (const std::size_t i : order) {
      const TimelineEvent& e = t.events[i];
      if (e.device < 0) continue;
      by_lane[static_cast<std::size_t>(e.device) * 3 + static_cast<std::size_t>(e.lane)].push_back(
          i);
      const double start = static_cast<double>(e.start), end = static_cast<double>(e.end);
      layout.start_ns = any ? std::min(layout.start_ns, start) : start;
      layout.end_ns = any ? std::max(layout.end_ns, end) : end;
      any = true;
    }
    for (int d = 0; d < devices; ++d) {
      for (const Lane lane : kLanes) {
        const auto& events =
            by_lane[static_cast<std::size_t>(d) * 3 + static_cast<std::size_t>(lane)];
        if (lane != Lane::kCompute && (!show_transfers || events.empty())) continue;
        // First fit: each event to the first sub-row whose last slice has ended.
        std::vector<SimTime> row_end;
        std::vector<std::vector<std::size_t>> rows;
        for (const std::size_t i : events) {
          const TimelineEvent& e = t.events[i];
          std::size_t r = 0;
          while (r < row_end.size() && row_end[r] > e.start) ++r;
          if (r == row_end.size()) {
            row_end.push_back(e.end);
            rows.emplace_back();
          } else {
            row_end[r] = e.end;
          }
          rows[r].push_back(i);
        }
        if (rows.empty()) rows.emplace_back();  // a compute row even when idle
        for (std::size_t r = 0; r < rows.size(); ++r) {
          const int row = static_cast<int>(layout.rows.size());
          layout.rows.push_back(
              TimelineRow{static_cast<int>(s), d, lane, static_cast<int>(r),
                          lane_row_label(t, d, lane, static_cast<int>(r), prefix)});
          for (const std::size_t i : rows[r]) {
            layout.items.push_back(TimelineItem{static_cast<int>(s), i, row});
          }
        }
      }
    }
  }
  return layout;
}

std::optional<std::size_t> hit_test(const TimelineLayout& layout,
                                    const std::vector<const Timeline*>& sources, int row,
                                    double time_ns, double tolerance_ns) {
  const auto [lo, hi] = row_range(layout, row);
  if (lo == hi) return std::nullopt;
  const auto event = [&](std::size_t item) -> const TimelineEvent& {
    const TimelineItem& it = layout.items[item];
    return sources[static_cast<std::size_t>(it.source)]->events[it.event];
  };
  // The last item starting at or before time_ns (slices of a row do not overlap).
  std::size_t first = lo, count = hi - lo;
  while (count > 0) {
    const std::size_t half = count / 2;
    if (static_cast<double>(event(first + half).start) <= time_ns) {
      first += half + 1;
      count -= half + 1;
    } else {
      count = half;
    }
  }
  std::optional<std::size_t> best;
  double best_distance = tolerance_ns;
  if (first > lo) {
    const TimelineEvent& e = event(first - 1);
    if (time_ns <= static_cast<double>(e.end)) return first - 1;
    const double d = time_ns - static_cast<double>(e.end);
    if (d <= best_distance) best = first - 1, best_distance = d;
  }
  if (first < hi) {
    const double d = static_cast<double>(event(first).start) - time_ns;
    if (d <= best_distance) best = first;
  }
  return best;
}

Dependencies dependencies_of(const TimelineLayout& layout,
                             const std::vector<const Timeline*>& sources, std::size_t item) {
  Dependencies deps;
  if (item >= layout.items.size()) return deps;
  const int source = layout.items[item].source;
  const Timeline& t = *sources[static_cast<std::size_t>(source)];
  const TimelineEvent& me = t.events[layout.items[item].event];
  // Index this source's items by what they are.
  using Key = std::tuple<int, int, int, int>;  // kind, stage, peer stage (-1), micro-batch
  std::map<Key, std::vector<std::size_t>> index;
  for (std::size_t i = 0; i < layout.items.size(); ++i) {
    if (layout.items[i].source != source) continue;
    const TimelineEvent& e = t.events[layout.items[i].event];
    index[{static_cast<int>(e.kind), e.stage, e.peer_stage.value_or(-1), e.micro_batch}].push_back(
        i);
  }
  const auto add = [&](std::vector<std::size_t>& out, EventKind kind, int stage, int peer, int mb) {
    const auto it = index.find({static_cast<int>(kind), stage, peer, mb});
    if (it == index.end()) return;
    for (const std::size_t i : it->second) {
      if (i != item) out.push_back(i);
    }
  };
  const int s = me.stage, m = me.micro_batch;
  switch (me.kind) {
    case EventKind::kForward:
      add(deps.before, EventKind::kActivation, s - 1, s, m);
      add(deps.before, EventKind::kForward, s - 1, -1, m);
      add(deps.after, EventKind::kActivation, s, s + 1, m);
      add(deps.after, EventKind::kForward, s + 1, -1, m);
      break;
    case EventKind::kRecompute:
      add(deps.before, EventKind::kForward, s, -1, m);
      add(deps.after, EventKind::kBackward, s, -1, m);
      break;
    case EventKind::kBackward:
      add(deps.before, EventKind::kGradient, s + 1, s, m);
      add(deps.before, EventKind::kBackward, s + 1, -1, m);
      add(deps.before, EventKind::kForward, s, -1, m);
      add(deps.before, EventKind::kRecompute, s, -1, m);
      add(deps.after, EventKind::kGradient, s, s - 1, m);
      add(deps.after, EventKind::kBackward, s - 1, -1, m);
      break;
    case EventKind::kOptimizer:
      for (const auto& [key, items] : index) {
        if (std::get<0>(key) == static_cast<int>(EventKind::kBackward) && std::get<1>(key) == s) {
          deps.before.insert(deps.before.end(), items.begin(), items.end());
        }
      }
      break;
    case EventKind::kActivation:
    case EventKind::kGradient: {
      const EventKind op =
          me.kind == EventKind::kActivation ? EventKind::kForward : EventKind::kBackward;
      add(deps.before, op, s, -1, m);
      if (me.peer_stage) add(deps.after, op, *me.peer_stage, -1, m);
      // The other half of this transfer: the send comes before its receive.
      for (std::size_t i = 0; i < layout.items.size(); ++i) {
        const TimelineEvent& e = t.events[layout.items[i].event];
        if (i == item || layout.items[i].source != source || !is_transfer(e.kind) ||
            e.flow != me.flow || !me.flow) {
          continue;
        }
        (me.lane == Lane::kSend ? deps.after : deps.before).push_back(i);
      }
      break;
    }
  }
  return deps;
}

std::string item_label(const TimelineEvent& e) {
  return event_name(e);
}

std::string item_tooltip(const Timeline& timeline, const TimelineEvent& e) {
  std::string text(to_string(e.kind));
  text += ", stage " + std::to_string(e.stage);
  if (e.peer_stage) text += " -> " + std::to_string(*e.peer_stage);
  if (e.kind != EventKind::kOptimizer) text += ", micro-batch " + std::to_string(e.micro_batch);
  text += "\nstart " + format_seconds(simtime_to_seconds(e.start)) + ", duration " +
          format_seconds(simtime_to_seconds(e.end - e.start));
  if (is_transfer(e.kind)) text += "\n" + format_bytes(static_cast<double>(e.bytes));
  if (e.route && *e.route >= 0 &&
      static_cast<std::size_t>(*e.route) < timeline.route_names.size()) {
    text += " over " + timeline.route_names[static_cast<std::size_t>(*e.route)];
  }
  if (e.cpu_time) text += "\nCPU time " + format_seconds(simtime_to_seconds(*e.cpu_time));
  return text;
}

}  // namespace pipescope::gui
