#include "sim/trace_io.h"

#include "sim/file_io.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
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

namespace pipescope {
namespace {

std::string error_text(const std::string& file, const std::string& path, const std::string& msg) {
  return path.empty() ? file + ": " + msg : file + ": " + path + ": " + msg;
}

class TraceReader {
 public:
  explicit TraceReader(std::string file) : file_(std::move(file)) {}

  Timeline read(const nlohmann::json& doc) {
    if (!doc.is_object()) fail("", "a trace is a JSON object with traceEvents");
    const auto events = doc.find("traceEvents");
    if (events == doc.end()) fail("traceEvents", "missing");
    if (!events->is_array()) fail("traceEvents", "expected an array");
    for (std::size_t i = 0; i < events->size(); ++i) event((*events)[i], i);
    return std::move(t_);
  }

 private:
  [[noreturn]] void fail(const std::string& path, const std::string& msg) const {
    throw TraceError(file_, path, msg);
  }

  const nlohmann::json& field(const nlohmann::json& e, const std::string& path,
                              const char* key) const {
    const auto it = e.find(key);
    if (it == e.end()) fail(path + "." + key, "missing");
    return *it;
  }
  std::int64_t integer(const nlohmann::json& e, const std::string& path, const char* key) const {
    const nlohmann::json& v = field(e, path, key);
    if (!v.is_number_integer()) fail(path + "." + key, "expected an integer");
    return v.get<std::int64_t>();
  }
  int small(const nlohmann::json& e, const std::string& path, const char* key) const {
    const std::int64_t v = integer(e, path, key);
    if (v < 0 || v > (1 << 24)) fail(path + "." + key, "out of range: " + std::to_string(v));
    return static_cast<int>(v);
  }
  // Microseconds with three decimals to nanoseconds.
  SimTime nanos(const nlohmann::json& e, const std::string& path, const char* key) const {
    const nlohmann::json& v = field(e, path, key);
    if (!v.is_number()) fail(path + "." + key, "expected a number of microseconds");
    const double us = v.get<double>();
    if (!std::isfinite(us) || std::fabs(us) > 9e12) {
      fail(path + "." + key, "out of range");
    }
    return static_cast<SimTime>(std::llround(us * 1000.0));
  }
  std::string text(const nlohmann::json& e, const std::string& path, const char* key) const {
    const nlohmann::json& v = field(e, path, key);
    if (!v.is_string()) fail(path + "." + key, "expected a string");
    return v.get<std::string>();
  }

  void event(const nlohmann::json& e, std::size_t index) {
    const std::string path = "traceEvents[" + std::to_string(index) + "]";
    if (!e.is_object()) fail(path, "expected an object");
    const std::string ph = text(e, path, "ph");
    if (ph == "M") {
      if (text(e, path, "name") != "process_name") return;
      const int pid = small(e, path, "pid");
      const nlohmann::json& args = field(e, path, "args");
      if (!args.is_object()) fail(path + ".args", "expected an object");
      if (t_.device_names.size() <= static_cast<std::size_t>(pid)) {
        t_.device_names.resize(static_cast<std::size_t>(pid) + 1);
      }
      t_.device_names[static_cast<std::size_t>(pid)] = text(args, path + ".args", "name");
    } else if (ph == "X") {
      slice(e, path);
    } else if (ph == "s" || ph == "f") {
      if (t_.events.empty() || !last_slice_) fail(path, "a flow event without its slice before it");
      TimelineEvent& last = t_.events.back();
      if (small(e, path, "pid") != last.device || nanos(e, path, "ts") != last.start) {
        fail(path, "a flow event that does not follow its slice");
      }
      const std::int64_t id = integer(e, path, "id");
      if (id < 0) fail(path + ".id", "negative");
      last.flow = static_cast<std::uint64_t>(id);
      last_slice_ = false;
    } else if (ph == "C") {
      const int pid = small(e, path, "pid");
      const nlohmann::json& args = field(e, path, "args");
      if (!args.is_object()) fail(path + ".args", "expected an object");
      const std::int64_t bytes = integer(args, path + ".args", "bytes");
      if (bytes < 0) fail(path + ".args.bytes", "negative");
      if (t_.memory.size() <= static_cast<std::size_t>(pid)) {
        t_.memory.resize(static_cast<std::size_t>(pid) + 1);
      }
      t_.memory[static_cast<std::size_t>(pid)].push_back(MemoryPoint{nanos(e, path, "ts"), bytes});
    }
    // Other phases (instant events, other tools' metadata) carry nothing we draw.
  }

  void slice(const nlohmann::json& e, const std::string& path) {
    TimelineEvent ev;
    ev.device = small(e, path, "pid");
    const int tid = small(e, path, "tid");
    ev.lane = static_cast<Lane>(tid % 3);
    const std::string cat = text(e, path, "cat");
    bool known = false;
    for (const EventKind k :
         {EventKind::kForward, EventKind::kRecompute, EventKind::kBackward, EventKind::kOptimizer,
          EventKind::kActivation, EventKind::kGradient}) {
      if (to_string(k) == cat) {
        ev.kind = k;
        known = true;
      }
    }
    if (!known) fail(path + ".cat", "unknown kind '" + cat + "'");
    const bool transfer = ev.kind == EventKind::kActivation || ev.kind == EventKind::kGradient;
    if (transfer == (ev.lane == Lane::kCompute)) {
      fail(path + ".tid",
           "a " + cat + " slice on the " + std::string(to_string(ev.lane)) + " lane");
    }
    ev.start = nanos(e, path, "ts");
    const SimTime duration = nanos(e, path, "dur");
    if (duration < 0) fail(path + ".dur", "negative duration");
    ev.end = ev.start + duration;
    const nlohmann::json& args = field(e, path, "args");
    const std::string apath = path + ".args";
    if (!args.is_object()) fail(apath, "expected an object");
    ev.stage = small(args, apath, "stage");
    if (ev.kind != EventKind::kOptimizer) ev.micro_batch = small(args, apath, "micro_batch");
    if (transfer) {
      ev.bytes = integer(args, apath, "bytes");
      if (ev.bytes < 0) fail(apath + ".bytes", "negative");
      if (args.contains("to_stage")) ev.peer_stage = small(args, apath, "to_stage");
      if (args.contains("links")) {
        const std::string links = text(args, apath, "links");
        const auto it = std::find(t_.route_names.begin(), t_.route_names.end(), links);
        ev.route = static_cast<int>(it - t_.route_names.begin());
        if (it == t_.route_names.end()) t_.route_names.push_back(links);
      }
    }
    if (args.contains("cpu_us")) ev.cpu_time = nanos(args, apath, "cpu_us");
    t_.events.push_back(ev);
    last_slice_ = true;
  }

  std::string file_;
  Timeline t_;
  bool last_slice_ = false;
};

}  // namespace

TraceError::TraceError(std::string file, std::string json_path, const std::string& message)
    : std::runtime_error(error_text(file, json_path, message)),
      file_(std::move(file)),
      json_path_(std::move(json_path)) {}

Timeline read_chrome_trace(std::istream& in, const std::string& file) {
  const nlohmann::json doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) throw TraceError(file, "", "not valid JSON");
  return TraceReader(file).read(doc);
}

Timeline read_chrome_trace_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw TraceError(path.string(), "", "cannot open file");
  return read_chrome_trace(in, path.string());
}

}  // namespace pipescope
