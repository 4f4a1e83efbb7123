#include "sim/trace_io.h"

#include "sim/file_io.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace pipescope {
namespace {

// ns -> "us.fff": exact, no floating point.
std::string micros(SimTime ns) {
  char buf[32];
  const char* sign = ns < 0 ? "-" : "";
  const SimTime a = ns < 0 ? -ns : ns;
  std::snprintf(buf, sizeof buf, "%s%" PRId64 ".%03" PRId64, sign, a / 1000, a % 1000);
  return buf;
}

std::string quoted(const std::string& s) {
  return nlohmann::json(s).dump();
}

std::string event_name(const TimelineEvent& e) {
  const std::string mb = std::to_string(e.micro_batch);
  switch (e.kind) {
    case EventKind::kForward:
      return "F" + mb;
    case EventKind::kRecompute:
      return "R" + mb;
    case EventKind::kBackward:
      return "B" + mb;
    case EventKind::kOptimizer:
      return "optimizer";
    case EventKind::kActivation:
      return "act " + mb;
    case EventKind::kGradient:
      return "grad " + mb;
  }
  return "?";
}

class Writer {
 public:
  explicit Writer(std::ostream& out) : out_(out) {}
  void event(const std::string& body) {
    out_ << (first_ ? "\n" : ",\n") << '{' << body << '}';
    first_ = false;
  }

 private:
  std::ostream& out_;
  bool first_ = true;
};

std::string head(const char* ph, int pid, int tid) {
  return std::string("\"ph\":\"") + ph + "\",\"pid\":" + std::to_string(pid) +
         ",\"tid\":" + std::to_string(tid);
}

constexpr int kLanes = 3;

// Chrome's viewers draw the slices of one thread as a stack, so slices there must
// nest. Slices of one lane that overlap without nesting (two transfers landing over
// different links at once) go to further rows of that lane: row r of lane l is
// tid r * kLanes + l. First fit in order of start time, so the result depends only
// on the timeline.
struct Rows {
  std::vector<int> of_event;                 // row of each event
  std::map<std::pair<int, int>, int> count;  // (device, lane) -> rows used
};

Rows assign_rows(const Timeline& t) {
  Rows rows;
  rows.of_event.assign(t.events.size(), 0);
  std::map<std::pair<int, int>, std::vector<std::size_t>> lanes;
  for (std::size_t i = 0; i < t.events.size(); ++i) {
    lanes[{t.events[i].device, static_cast<int>(t.events[i].lane)}].push_back(i);
  }
  for (auto& [key, idx] : lanes) {
    std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) {
      return t.events[a].start < t.events[b].start;
    });
    std::vector<SimTime> row_end;
    for (std::size_t i : idx) {
      const TimelineEvent& e = t.events[i];
      std::size_t r = 0;
      while (r < row_end.size() && row_end[r] > e.start) ++r;
      if (r == row_end.size()) row_end.push_back(e.end);
      row_end[r] = e.end;
      rows.of_event[i] = static_cast<int>(r);
    }
    rows.count[key] = static_cast<int>(row_end.size());
  }
  return rows;
}

void write_metadata(Writer& w, const Timeline& t, const Rows& rows) {
  for (std::size_t d = 0; d < t.device_names.size(); ++d) {
    const int pid = static_cast<int>(d);
    w.event(head("M", pid, 0) +
            ",\"name\":\"process_name\",\"args\":{\"name\":" + quoted(t.device_names[d]) + "}");
    w.event(head("M", pid, 0) + ",\"name\":\"process_sort_index\",\"args\":{\"sort_index\":" +
            std::to_string(pid) + "}");
    for (Lane lane : {Lane::kCompute, Lane::kSend, Lane::kRecv}) {
      const int l = static_cast<int>(lane);
      const auto it = rows.count.find({pid, l});
      const int n = it == rows.count.end() ? 1 : it->second;
      for (int r = 0; r < n; ++r) {
        const std::string name =
            std::string(to_string(lane)) + (r == 0 ? "" : " " + std::to_string(r + 1));
        w.event(head("M", pid, r * kLanes + l) + ",\"name\":\"thread_name\",\"args\":{\"name\":\"" +
                name + "\"}");
      }
    }
  }
}

void write_event(Writer& w, const Timeline& t, const TimelineEvent& e, int row) {
  const int tid = row * kLanes + static_cast<int>(e.lane);
  std::string args = "\"stage\":" + std::to_string(e.stage);
  if (e.kind != EventKind::kOptimizer) args += ",\"micro_batch\":" + std::to_string(e.micro_batch);
  if (e.lane != Lane::kCompute) {
    args += ",\"bytes\":" + std::to_string(e.bytes);
    if (e.peer_stage) args += ",\"to_stage\":" + std::to_string(*e.peer_stage);
    if (e.route && static_cast<std::size_t>(*e.route) < t.route_names.size()) {
      args += ",\"links\":" + quoted(t.route_names[static_cast<std::size_t>(*e.route)]);
    }
  }
  if (e.cpu_time) args += ",\"cpu_us\":" + micros(*e.cpu_time);
  w.event(head("X", e.device, tid) + ",\"name\":" + quoted(event_name(e)) + ",\"cat\":\"" +
          std::string(to_string(e.kind)) + "\",\"ts\":" + micros(e.start) +
          ",\"dur\":" + micros(e.end - e.start) + ",\"args\":{" + args + "}");
  if (e.flow) {
    // The arrow runs from the start of the send slice to the start of the recv
    // slice; "bp":"e" binds its end to the slice that encloses it.
    const bool send = e.lane == Lane::kSend;
    w.event(head(send ? "s" : "f", e.device, tid) +
            ",\"name\":\"transfer\",\"cat\":\"flow\",\"id\":" + std::to_string(*e.flow) +
            ",\"ts\":" + micros(e.start) + (send ? "" : ",\"bp\":\"e\""));
  }
}

void write_memory(Writer& w, const Timeline& t) {
  for (std::size_t d = 0; d < t.memory.size(); ++d) {
    for (const MemoryPoint& p : t.memory[d]) {
      w.event(head("C", static_cast<int>(d), 0) + ",\"name\":\"memory\",\"ts\":" + micros(p.time) +
              ",\"args\":{\"bytes\":" + std::to_string(p.bytes) + "}");
    }
  }
}

}  // namespace

void write_chrome_trace(std::ostream& out, const Timeline& timeline) {
  out << "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[";
  Writer w(out);
  const Rows rows = assign_rows(timeline);
  write_metadata(w, timeline, rows);
  for (std::size_t i = 0; i < timeline.events.size(); ++i) {
    write_event(w, timeline, timeline.events[i], rows.of_event[i]);
  }
  write_memory(w, timeline);
  out << "\n]}\n";
}

void write_chrome_trace_file(const std::filesystem::path& path, const Timeline& timeline) {
  write_file_atomically(path, [&](std::ostream& out) { write_chrome_trace(out, timeline); });
}

}  // namespace pipescope
