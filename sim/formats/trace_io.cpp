#include "sim/formats/trace_io.h"

#include "sim/base/file_io.h"
#include "sim/base/input_file.h"
#include "sim/base/json_reader.h"

#include <algorithm>
#include <charconv>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace pipescope {
namespace {

// ns -> "us.fff": exact, no floating point.
void append_micros(std::string& out, SimTime ns) {
  if (ns < 0) out += '-';
  // The magnitude as unsigned: -INT64_MIN does not fit a SimTime.
  const std::uint64_t a =
      ns < 0 ? ~static_cast<std::uint64_t>(ns) + 1 : static_cast<std::uint64_t>(ns);
  char buf[24];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, a / 1000);
  out.append(buf, end);
  const auto frac = static_cast<unsigned>(a % 1000);
  out += '.';
  out += static_cast<char>('0' + frac / 100);
  out += static_cast<char>('0' + frac / 10 % 10);
  out += static_cast<char>('0' + frac % 10);
}

template <typename Int>
void append_int(std::string& out, Int v) {
  char buf[24];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, end);
}

std::string json_string(const std::string& s) {
  return nlohmann::json(s).dump();
}

// Rows and tids. Row r of the compute, send and recv lanes is tid r * kGridLanes
// + lane, as traces have always had it, which takes every tid below
// kTensorTid. The tensor, expert and context lanes came later and have tids
// of their own: row r is kTensorTid + r, kExpertTid + r, kContextTid + r.
// Telling them apart by the tid alone keeps older traces readable as they
// are; a trace within the size limit (4 GiB) cannot need the 333 million rows
// of one lane that would reach kTensorTid, nor the 250 million of a later
// lane that would reach the next.
constexpr int kGridLanes = 3;                     // compute, send, recv
constexpr int kLaneCount = std::size(kAllLanes);  // and tensor, expert, context
constexpr int kTensorTid = 1'000'000'000;         // tid of the tensor lane's first row
constexpr int kExpertTid = 1'500'000'000;         // tid of the expert lane's first row
constexpr int kContextTid = 1'750'000'000;        // tid of the context lane's first row

int tid_of(Lane lane, int row) {
  if (lane == Lane::kTensor) return kTensorTid + row;
  if (lane == Lane::kExpert) return kExpertTid + row;
  if (lane == Lane::kContext) return kContextTid + row;
  return row * kGridLanes + static_cast<int>(lane);
}

// The lanes named only where they have slices.
bool named_when_used(Lane lane) {
  return lane == Lane::kTensor || lane == Lane::kExpert || lane == Lane::kContext;
}

}  // namespace

ChromeTraceWriter::ChromeTraceWriter(std::ostream& out) : out_(out) {
  out_ << "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[";
}

void ChromeTraceWriter::put(const std::string& body) {
  out_ << (events_written_ == 0 ? "\n{" : ",\n{") << body << '}';
  ++events_written_;
}

void ChromeTraceWriter::head(std::string& out, const char* ph, int pid, int tid) {
  out += "\"ph\":\"";
  out += ph;
  out += "\",\"pid\":";
  append_int(out, pid);
  out += ",\"tid\":";
  append_int(out, tid);
}

void ChromeTraceWriter::begin(const std::vector<std::string>& device_names,
                              const std::vector<std::string>& route_names) {
  device_names_ = device_names;
  quoted_routes_.clear();
  for (const std::string& r : route_names) quoted_routes_.push_back(json_string(r));
  std::string body;
  for (std::size_t d = 0; d < device_names_.size(); ++d) {
    const int pid = static_cast<int>(d);
    body.clear();
    head(body, "M", pid, 0);
    body += ",\"name\":\"process_name\",\"args\":{\"name\":" + json_string(device_names_[d]) + "}";
    put(body);
    body.clear();
    head(body, "M", pid, 0);
    body += ",\"name\":\"process_sort_index\",\"args\":{\"sort_index\":";
    append_int(body, pid);
    body += '}';
    put(body);
  }
}

// Chrome's viewers draw the slices of one thread as a stack, so slices there must
// nest. Slices of one lane that overlap without nesting (two transfers landing over
// different links at once) go to further rows of that lane (tid_of), the first
// row whose last slice has ended by the new one's start. The result depends only
// on the order of the events.
int ChromeTraceWriter::row_for(const TimelineEvent& e) {
  const std::size_t key =
      static_cast<std::size_t>(e.device) * kLaneCount + static_cast<std::size_t>(e.lane);
  if (row_ends_.size() <= key) row_ends_.resize(key + 1);
  std::vector<SimTime>& ends = row_ends_[key];
  std::size_t r = 0;
  while (r < ends.size() && ends[r] > e.start) ++r;
  if (r == ends.size()) ends.push_back(e.end);
  ends[r] = e.end;
  return static_cast<int>(r);
}

void ChromeTraceWriter::event(const TimelineEvent& e) {
  const int tid = tid_of(e.lane, row_for(e));
  std::string& b = buffer_;
  b.clear();
  head(b, "X", e.device, tid);
  b += ",\"name\":\"";
  b += event_name(e);  // letters, digits, spaces and dashes: nothing to escape
  b += "\",\"cat\":\"";
  b += to_string(e.kind);
  b += "\",\"ts\":";
  append_micros(b, e.start);
  b += ",\"dur\":";
  append_micros(b, e.end - e.start);
  b += ",\"args\":{\"stage\":";
  append_int(b, e.stage);
  if (has_micro_batch(e.kind)) {
    b += ",\"micro_batch\":";
    append_int(b, e.micro_batch);
  }
  if (e.lane != Lane::kCompute) {
    b += ",\"bytes\":";
    append_int(b, e.bytes);
    if (e.peer_stage) {
      b += ",\"to_stage\":";
      append_int(b, *e.peer_stage);
    }
    if (e.route && static_cast<std::size_t>(*e.route) < quoted_routes_.size()) {
      b += ",\"links\":";
      b += quoted_routes_[static_cast<std::size_t>(*e.route)];
    }
  }
  if (e.cpu_time) {
    b += ",\"cpu_us\":";
    append_micros(b, *e.cpu_time);
  }
  b += '}';
  put(b);
  if (e.flow) {
    // The arrow runs from the start of the send slice to the start of the recv
    // slice; "bp":"e" binds its end to the slice that encloses it.
    const bool send = e.lane == Lane::kSend;
    b.clear();
    head(b, send ? "s" : "f", e.device, tid);
    b += ",\"name\":\"transfer\",\"cat\":\"flow\",\"id\":";
    append_int(b, *e.flow);
    b += ",\"ts\":";
    append_micros(b, e.start);
    if (!send) b += ",\"bp\":\"e\"";
    put(b);
  }
  ++slices_;
}

void ChromeTraceWriter::memory_point(int device, const MemoryPoint& point) {
  std::string& b = buffer_;
  b.clear();
  head(b, "C", device, 0);
  b += ",\"name\":\"memory\",\"ts\":";
  append_micros(b, point.time);
  b += ",\"args\":{\"bytes\":";
  append_int(b, point.bytes);
  b += '}';
  put(b);
}

// The lanes' names last, once their rows are known (viewers take metadata
// anywhere in the file). Compute, send and recv are named on every device, used
// or not; the tensor, expert and context lanes only where they have slices,
// so that a run without those parallelisms gives the same bytes as before
// there were any.
void ChromeTraceWriter::end() {
  std::string body;
  for (std::size_t d = 0; d < device_names_.size(); ++d) {
    const int pid = static_cast<int>(d);
    for (const Lane lane : kAllLanes) {
      const std::size_t key = d * kLaneCount + static_cast<std::size_t>(lane);
      const std::size_t used = key < row_ends_.size() ? row_ends_[key].size() : 0;
      const std::size_t rows = named_when_used(lane) ? used : std::max<std::size_t>(1, used);
      for (std::size_t r = 0; r < rows; ++r) {
        body.clear();
        head(body, "M", pid, tid_of(lane, static_cast<int>(r)));
        body += ",\"name\":\"thread_name\",\"args\":{\"name\":\"";
        body += to_string(lane);
        if (r > 0) {
          body += ' ';
          append_int(body, r + 1);
        }
        body += "\"}";
        put(body);
      }
    }
  }
  out_ << "\n]}\n";
}

void write_chrome_trace(std::ostream& out, const Timeline& timeline) {
  ChromeTraceWriter w(out);
  w.begin(timeline.device_names, timeline.route_names);
  for (const TimelineEvent& e : timeline.events) w.event(e);
  for (std::size_t d = 0; d < timeline.memory.size(); ++d) {
    for (const MemoryPoint& p : timeline.memory[d]) w.memory_point(static_cast<int>(d), p);
  }
  w.end();
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

// Indices read from a trace size vectors (device names, memory curves, route
// names), so they are bounded: a broken file cannot ask for gigabytes.
constexpr std::int64_t kMaxDevice = std::int64_t{1} << 16;
constexpr std::int64_t kMaxStage = std::int64_t{1} << 20;
constexpr std::int64_t kMaxInt = std::numeric_limits<int>::max();
constexpr std::int64_t kMaxBytes = std::numeric_limits<std::int64_t>::max();

// Times are written as microseconds with three decimals, and the JSON parser
// gives the double v nearest to that decimal. Below 2^43 us the doubles are at
// most 2^-10 us apart, so |v - exact| <= 2^-11 us = 0.49 ns. The whole
// microseconds of v are exact; its fraction times 1000 is off by those 0.49 ns
// and a rounding error near 1e-13 ns, so llround gives the written ns exactly.
// (llround(v * 1000) is not enough: from 2^42 us on, v * 1000 is rounded to a
// multiple of 0.5 ns and can land on n + 0.5.) 2^43 us = 8.8e15 ns, about 101
// days; from there on about half of all ns counts would come back off by one.
constexpr double kMaxMicros = 0x1p43;

bool is_transfer(EventKind k) {
  return k == EventKind::kActivation || k == EventKind::kGradient;
}

Lane lane_of_tid(int tid) {
  if (tid >= kContextTid) return Lane::kContext;
  if (tid >= kExpertTid) return Lane::kExpert;
  return tid >= kTensorTid ? Lane::kTensor : static_cast<Lane>(tid % kGridLanes);
}

// The lanes the writer puts a kind of slice on, one bit per Lane.
unsigned lanes_of(EventKind k) {
  const auto bit = [](Lane l) { return 1u << static_cast<unsigned>(l); };
  switch (k) {
    case EventKind::kForward:
    case EventKind::kRecompute:
    case EventKind::kBackward:
    case EventKind::kWeight:
    case EventKind::kOptimizer:
      return bit(Lane::kCompute);
    case EventKind::kActivation:
    case EventKind::kGradient:
      return bit(Lane::kSend) | bit(Lane::kRecv);
    case EventKind::kAllReduce:
      return bit(Lane::kSend);
    case EventKind::kTensorAllReduce:
      return bit(Lane::kTensor);
    case EventKind::kExpertAllToAll:
      return bit(Lane::kExpert);
    case EventKind::kContextExchange:
      return bit(Lane::kContext);
  }
  return 0;
}

// "the compute lane", "the send or recv lane".
std::string lane_names(unsigned lanes) {
  std::string out;
  for (const Lane l : kAllLanes) {
    if (((lanes >> static_cast<unsigned>(l)) & 1u) == 0) continue;
    out += out.empty() ? "the " : " or ";
    out += to_string(l);
  }
  return out + " lane";
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
    // route_names is indexed by route_id() over every boundary of the pipeline,
    // as the simulator and the executor fill it; routes no transfer took have no
    // name in the trace and come back empty.
    if (!t_.events.empty()) t_.route_names.assign(2 * static_cast<std::size_t>(stages_), "");
    for (const auto& [id, name] : routes_) t_.route_names[static_cast<std::size_t>(id)] = name;
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
  const nlohmann::json& object(const nlohmann::json& e, const std::string& path,
                               const char* key) const {
    const nlohmann::json& v = field(e, path, key);
    if (!v.is_object()) fail(path + "." + key, "expected an object");
    return v;
  }
  // Every integer of ours is a count or an index: 0 to `max`.
  std::int64_t integer(const nlohmann::json& e, const std::string& path, const char* key,
                       std::int64_t max) const {
    const nlohmann::json& v = field(e, path, key);
    if (!v.is_number_integer()) fail(path + "." + key, "expected an integer");
    const bool fits = v.is_number_unsigned()
                          ? v.get<std::uint64_t>() <= static_cast<std::uint64_t>(max)
                          : v.get<std::int64_t>() >= 0;
    if (!fits) fail(path + "." + key, "out of range: " + v.dump());
    return v.get<std::int64_t>();
  }
  int index(const nlohmann::json& e, const std::string& path, const char* key,
            std::int64_t max) const {
    return static_cast<int>(integer(e, path, key, max));
  }
  SimTime nanos(const nlohmann::json& e, const std::string& path, const char* key) const {
    const nlohmann::json& v = field(e, path, key);
    if (!v.is_number()) fail(path + "." + key, "expected a number of microseconds");
    const double us = v.get<double>();
    if (!(std::fabs(us) < kMaxMicros)) fail(path + "." + key, "out of range");
    const double whole = std::floor(us);
    return static_cast<SimTime>(whole) * 1000 + std::llround((us - whole) * 1000.0);
  }
  SimTime duration(const nlohmann::json& e, const std::string& path, const char* key) const {
    const SimTime ns = nanos(e, path, key);
    if (ns < 0) fail(path + "." + key, "negative duration");
    return ns;
  }
  std::string text(const nlohmann::json& e, const std::string& path, const char* key) const {
    const nlohmann::json& v = field(e, path, key);
    if (!v.is_string()) fail(path + "." + key, "expected a string");
    return v.get<std::string>();
  }

  void event(const nlohmann::json& e, std::size_t index) {
    const std::string path = "traceEvents[" + std::to_string(index) + "]";
    if (!e.is_object()) fail(path, "expected an object");
    const std::optional<int> after_slice = std::exchange(last_slice_tid_, std::nullopt);
    const std::string ph = text(e, path, "ph");
    if (ph == "M") {
      if (text(e, path, "name") == "process_name") process_name(e, path);
    } else if (ph == "X") {
      slice(e, path);
    } else if (ph == "s" || ph == "f") {
      flow(e, path, ph == "s", after_slice);
    } else if (ph == "C") {
      if (text(e, path, "name") == "memory") counter(e, path);
    }
    // Other phases, thread names and other tools' counters carry nothing we draw.
  }

  void process_name(const nlohmann::json& e, const std::string& path) {
    const auto pid = static_cast<std::size_t>(index(e, path, "pid", kMaxDevice));
    const std::string name = text(object(e, path, "args"), path + ".args", "name");
    if (t_.device_names.size() <= pid) t_.device_names.resize(pid + 1);
    t_.device_names[pid] = name;
  }

  void counter(const nlohmann::json& e, const std::string& path) {
    const auto pid = static_cast<std::size_t>(index(e, path, "pid", kMaxDevice));
    const SimTime time = nanos(e, path, "ts");
    const Bytes bytes = integer(object(e, path, "args"), path + ".args", "bytes", kMaxBytes);
    if (t_.memory.size() <= pid) t_.memory.resize(pid + 1);
    t_.memory[pid].push_back(MemoryPoint{time, bytes});
  }

  // The writer puts a transfer's flow event right after its slice: "s" after the
  // send, "f" after the receive, at the slice's start.
  void flow(const nlohmann::json& e, const std::string& path, bool send,
            std::optional<int> slice_tid) {
    if (!slice_tid) fail(path, "a flow event without its slice before it");
    TimelineEvent& slice = t_.events.back();
    if (slice.lane != (send ? Lane::kSend : Lane::kRecv)) {
      fail(path + ".ph", send ? "a flow start ('s') after a slice that is no send"
                              : "a flow end ('f') after a slice that is no receive");
    }
    if (index(e, path, "pid", kMaxDevice) != slice.device) fail(path + ".pid", "not its slice's");
    if (index(e, path, "tid", kMaxInt) != *slice_tid) fail(path + ".tid", "not its slice's");
    if (nanos(e, path, "ts") != slice.start) fail(path + ".ts", "not its slice's start");
    const nlohmann::json& id = field(e, path, "id");
    if (!id.is_number_unsigned()) fail(path + ".id", "expected a non-negative integer");
    slice.flow = id.get<std::uint64_t>();
  }

  EventKind kind(const nlohmann::json& e, const std::string& path) const {
    const std::string cat = text(e, path, "cat");
    for (const EventKind k : kAllEventKinds) {
      if (to_string(k) == cat) return k;
    }
    fail(path + ".cat", "unknown kind '" + cat + "'");
  }

  void slice(const nlohmann::json& e, const std::string& path) {
    TimelineEvent ev;
    ev.device = index(e, path, "pid", kMaxDevice);
    const int tid = index(e, path, "tid", kMaxInt);
    ev.lane = lane_of_tid(tid);
    ev.kind = kind(e, path);
    const unsigned lanes = lanes_of(ev.kind);
    if (((lanes >> static_cast<unsigned>(ev.lane)) & 1u) == 0) {
      fail(path + ".tid", "a " + std::string(to_string(ev.kind)) + " slice on the " +
                              std::string(to_string(ev.lane)) + " lane (expected " +
                              lane_names(lanes) + ")");
    }
    ev.start = nanos(e, path, "ts");
    ev.end = ev.start + duration(e, path, "dur");
    const std::string apath = path + ".args";
    const nlohmann::json& args = object(e, path, "args");
    ev.stage = index(args, apath, "stage", kMaxStage);
    if (has_micro_batch(ev.kind)) ev.micro_batch = index(args, apath, "micro_batch", kMaxInt);
    if (is_transfer(ev.kind)) transfer_args(args, apath, ev);
    if (is_collective(ev.kind)) {
      ev.bytes = integer(args, apath, "bytes", kMaxBytes);
    }
    if (args.contains("cpu_us")) ev.cpu_time = duration(args, apath, "cpu_us");
    const std::string name = text(e, path, "name");
    if (ev.kind == EventKind::kAllReduce) {
      for (const ReplicaCollective c :
           {ReplicaCollective::kAllReduce, ReplicaCollective::kReduceScatter,
            ReplicaCollective::kAllGather}) {
        if (name == to_string(c)) ev.collective = c;
      }
    }
    if (name != event_name(ev)) {
      fail(path + ".name", "unknown event name '" + name + "' (this " +
                               std::string(to_string(ev.kind)) + " slice is '" + event_name(ev) +
                               "')");
    }
    stages_ = std::max({stages_, ev.stage + 1, ev.peer_stage.value_or(0) + 1});
    t_.events.push_back(ev);
    last_slice_tid_ = tid;
  }

  // Bytes, the receiving stage (an activation goes from stage s to s + 1, a
  // gradient to s - 1) and the route, whose index route_id() follows from both.
  void transfer_args(const nlohmann::json& args, const std::string& apath, TimelineEvent& ev) {
    const bool act = ev.kind == EventKind::kActivation;
    ev.bytes = integer(args, apath, "bytes", kMaxBytes);
    if (args.contains("to_stage")) {
      const int to = index(args, apath, "to_stage", kMaxStage);
      if (to != ev.stage + (act ? 1 : -1)) {
        fail(apath + ".to_stage", std::string(act ? "an activation" : "a gradient") +
                                      " from stage " + std::to_string(ev.stage) + " to " +
                                      std::to_string(to));
      }
      ev.peer_stage = to;
    }
    if (!args.contains("links")) return;
    const std::string links = text(args, apath, "links");
    if (!ev.peer_stage) fail(apath + ".to_stage", "missing (a transfer over links names it)");
    const int boundary = std::min(ev.stage, *ev.peer_stage);
    ev.route = route_id(act ? TransferKind::kActivation : TransferKind::kGradient, boundary);
    const auto [it, added] = routes_.emplace(*ev.route, links);
    if (!added && it->second != links) {
      fail(apath + ".links",
           "'" + links + "', but an earlier transfer over this route gave '" + it->second + "'");
    }
  }

  std::string file_;
  Timeline t_;
  std::optional<int> last_slice_tid_;  // set while the previous event is a slice
  int stages_ = 0;                     // highest stage seen + 1
  std::map<int, std::string> routes_;  // route_id() -> links
};

}  // namespace

TraceError::TraceError(std::string file, std::string json_path, const std::string& message)
    : std::runtime_error(error_text(file, json_path, message)),
      file_(std::move(file)),
      json_path_(std::move(json_path)) {}

namespace {

// The checks every JSON input has (sim/base/json_reader.h: nesting, repeated keys),
// then the trace's own.
Timeline read_chrome_trace_text(const std::string& text, const std::string& file) {
  if (const std::optional<json_io::JsonProblem> problem = json_io::find_json_problem(text)) {
    throw TraceError(file, problem->path, problem->message);
  }
  return TraceReader(file).read(nlohmann::json::parse(text));
}

}  // namespace

Timeline read_chrome_trace(std::istream& in, const std::string& file) {
  const std::string text(std::istreambuf_iterator<char>(in), {});
  return read_chrome_trace_text(text, file);
}

std::string read_trace_input(const std::filesystem::path& path, std::uint64_t max_bytes) {
  return read_maybe_gzipped(path, max_bytes, "a Chrome trace", [&](const std::string& reason) {
    throw TraceError(path.string(), "", reason);
  });
}

Timeline read_chrome_trace_file(const std::filesystem::path& path) {
  return read_chrome_trace_text(read_trace_input(path), path.string());
}

}  // namespace pipescope
