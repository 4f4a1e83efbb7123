// Reading a Chrome trace back (a measured run under the prediction in the GUI):
// what the writer wrote comes back field for field, and a broken trace is one
// error naming the file and the JSON path.

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/engine/simulator.h"
#include "sim/formats/trace_io.h"
#include "sim_fixtures.h"

namespace pipescope {
namespace {

using nlohmann::json;

Timeline simulated_timeline() {
  Scenario sc = testing::uniform_scenario(6, 3, 1000.0, 8, 4, true);
  for (LayerSpec& l : sc.model.layers) {
    l.out_bytes = 300;
    l.stash_bytes = 500;
  }
  sc.cluster.interconnect = Interconnect{TopologyKind::kPcieHost, 1e9, 1e-6};
  Timeline t = simulate(sc, SimConfig{}).timeline;
  // As a measured run records them: CPU time on a few compute ops.
  int n = 0;
  for (TimelineEvent& e : t.events) {
    if (e.lane == Lane::kCompute && n++ % 3 == 0) e.cpu_time = (e.end - e.start) * 9 / 10 + 7;
  }
  return t;
}

std::string write(const Timeline& t) {
  std::ostringstream out;
  write_chrome_trace(out, t);
  return out.str();
}

Timeline read(const std::string& text) {
  std::istringstream in(text);
  return read_chrome_trace(in, "t.json");
}

void expect_same(const Timeline& back, const Timeline& t) {
  EXPECT_EQ(back.device_names, t.device_names);
  EXPECT_EQ(back.route_names, t.route_names);
  ASSERT_EQ(back.events.size(), t.events.size());
  for (std::size_t i = 0; i < t.events.size(); ++i) {
    const TimelineEvent& a = t.events[i];
    const TimelineEvent& b = back.events[i];
    EXPECT_EQ(b.device, a.device) << i;
    EXPECT_EQ(b.lane, a.lane) << i;
    EXPECT_EQ(b.kind, a.kind) << i;
    EXPECT_EQ(b.stage, a.stage) << i;
    EXPECT_EQ(b.micro_batch, a.micro_batch) << i;
    EXPECT_EQ(b.start, a.start) << i;
    EXPECT_EQ(b.end, a.end) << i;
    EXPECT_EQ(b.bytes, a.bytes) << i;
    EXPECT_EQ(b.peer_stage, a.peer_stage) << i;
    EXPECT_EQ(b.flow, a.flow) << i;
    EXPECT_EQ(b.route, a.route) << i;
    EXPECT_EQ(b.cpu_time, a.cpu_time) << i;
  }
  ASSERT_EQ(back.memory.size(), t.memory.size());
  for (std::size_t d = 0; d < t.memory.size(); ++d) {
    ASSERT_EQ(back.memory[d].size(), t.memory[d].size()) << d;
    for (std::size_t p = 0; p < t.memory[d].size(); ++p) {
      EXPECT_EQ(back.memory[d][p].time, t.memory[d][p].time) << d << " " << p;
      EXPECT_EQ(back.memory[d][p].bytes, t.memory[d][p].bytes) << d << " " << p;
    }
  }
}

TEST(TraceRead, RoundTripsFieldByField) {
  const Timeline t = simulated_timeline();
  // What the comparison covers: 3 devices, transfers over named routes, CPU
  // times, memory curves.
  ASSERT_EQ(t.device_names.size(), 3u);
  ASSERT_EQ(t.memory.size(), 3u);
  ASSERT_EQ(t.route_names.size(), 6u);
  EXPECT_EQ(t.route_names[0], "0->host, host->1");
  int transfers = 0, with_cpu = 0;
  for (const TimelineEvent& e : t.events) {
    transfers += e.flow && e.route ? 1 : 0;
    with_cpu += e.cpu_time ? 1 : 0;
  }
  EXPECT_EQ(transfers, 2 * 2 * 2 * 4);  // send + recv, act + grad, 2 boundaries, M = 4
  EXPECT_GT(with_cpu, 0);
  const std::string text = write(t);
  const Timeline back = read(text);
  expect_same(back, t);
  // Written again, the same bytes.
  EXPECT_EQ(write(back), text);
}

// A timeline as `pipescope run` records it: every route named, times far from
// zero, CPU times, no memory; here also a flow id beyond 2^63.
TEST(TraceRead, RoundTripsAMeasuredStyleTimeline) {
  Timeline t;
  t.device_names = {"device 0 (cpu thread)", "device 1 (cpu thread)"};
  t.route_names.assign(4, "in-process queue");
  TimelineEvent f;
  f.start = 1'000'000'001;
  f.end = 1'000'250'002;
  f.cpu_time = 200'001;
  t.events.push_back(f);
  TimelineEvent send;
  send.lane = Lane::kSend;
  send.kind = EventKind::kActivation;
  send.bytes = 4096;
  send.peer_stage = 1;
  send.flow = std::numeric_limits<std::uint64_t>::max();
  send.route = 0;
  send.start = 1'000'250'003;
  send.end = 1'000'250'900;
  t.events.push_back(send);
  TimelineEvent recv = send;
  recv.device = 1;
  recv.lane = Lane::kRecv;
  recv.start = 1'000'250'500;
  recv.end = 1'000'251'000;
  t.events.push_back(recv);
  TimelineEvent grad = send;
  grad.device = 1;
  grad.kind = EventKind::kGradient;
  grad.stage = 1;
  grad.peer_stage = 0;
  grad.flow = 5;
  grad.route = 1;
  grad.start = 1'000'300'000;
  grad.end = 1'000'300'000;  // zero duration is fine
  t.events.push_back(grad);
  TimelineEvent opt;
  opt.device = 1;
  opt.stage = 1;
  opt.kind = EventKind::kOptimizer;
  opt.start = 1'000'400'000;
  opt.end = 1'000'400'999;
  opt.cpu_time = 0;
  t.events.push_back(opt);
  const std::string text = write(t);
  const Timeline back = read(text);
  // The trace names only routes a transfer took; the unused last boundary's
  // two come back empty.
  Timeline expected = t;
  expected.route_names = {"in-process queue", "in-process queue", "", ""};
  expect_same(back, expected);
  EXPECT_EQ(write(back), text);
}

// Tensor-parallel collectives (the tensor lane, its own rows of tids) come back
// field for field among the other lanes, and write the same bytes again.
TEST(TraceRead, RoundTripsTensorCollectives) {
  Timeline t = simulated_timeline();
  // Each forward's group all-reduces 2048 bytes per micro-batch after it; some
  // also overlap an earlier one, which takes a second row of the lane.
  std::vector<TimelineEvent> events;
  int tensor = 0;
  for (const TimelineEvent& e : t.events) {
    events.push_back(e);
    if (e.kind != EventKind::kForward) continue;
    TimelineEvent tp = e;
    tp.lane = Lane::kTensor;
    tp.kind = EventKind::kTensorAllReduce;
    tp.bytes = 2048 * (e.micro_batch + 1);
    tp.cpu_time.reset();
    tp.start = e.end;
    tp.end = e.end + 700 + (e.micro_batch % 2 == 0 ? 50'000 : 0);
    events.push_back(tp);
    ++tensor;
  }
  t.events = events;
  ASSERT_EQ(tensor, 3 * 4);
  const std::string text = write(t);
  EXPECT_NE(
      text.find("\"tid\":1000000001,\"name\":\"thread_name\",\"args\":{\"name\":\"tensor 2\"}"),
      std::string::npos);
  const Timeline back = read(text);
  expect_same(back, t);
  int read_tensor = 0;
  for (const TimelineEvent& e : back.events) {
    if (e.lane != Lane::kTensor) continue;
    ++read_tensor;
    EXPECT_EQ(e.kind, EventKind::kTensorAllReduce);
    EXPECT_EQ(e.bytes, 2048 * (e.micro_batch + 1));
  }
  EXPECT_EQ(read_tensor, tensor);
  EXPECT_EQ(write(back), text);
}

// "123456789.123" us is not a double; the reader still gets 123456789123 ns, and
// every ns count below 2^43 us comes back exactly.
TEST(TraceRead, ExactNanosecondsFromMicroseconds) {
  std::vector<SimTime> times = {0, 1, 999, 1000, 123'456'789'123};
  const SimTime limit_ns = (SimTime{1} << 43) * 1000;  // 2^43 us
  for (int k = 10; k <= 43; ++k) {
    const SimTime p = (SimTime{1} << k) * 1000;
    for (SimTime d = 1; d <= 7; ++d) times.push_back(p - d);
  }
  std::uint64_t x = 88172645463325252ull;  // xorshift64: fixed pseudo-random times
  for (int i = 0; i < 20000; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    times.push_back(static_cast<SimTime>(x % static_cast<std::uint64_t>(limit_ns)));
  }
  Timeline t;
  t.device_names = {"d"};
  t.memory.resize(1);
  for (const SimTime ns : times) t.memory[0].push_back(MemoryPoint{ns, 1});
  TimelineEvent e;
  e.start = 123'456'789'123;
  e.end = e.start + 999'999'999'999;
  t.events.push_back(e);
  const Timeline back = read(write(t));
  ASSERT_EQ(back.events.size(), 1u);
  EXPECT_EQ(back.events[0].start, 123'456'789'123);
  EXPECT_EQ(back.events[0].end, 1'123'456'789'122);
  ASSERT_EQ(back.memory.size(), 1u);
  ASSERT_EQ(back.memory[0].size(), times.size());
  int wrong = 0;
  for (std::size_t i = 0; i < times.size(); ++i) wrong += back.memory[0][i].time != times[i];
  EXPECT_EQ(wrong, 0);
  // At 2^43 us the doubles are too far apart for every ns: refused, not rounded.
  t.memory[0] = {MemoryPoint{limit_ns, 1}};
  try {
    read(write(t));
    ADD_FAILURE() << "2^43 us read without error";
  } catch (const TraceError& err) {
    // 2 process metadata, 1 slice; the lanes' names come last.
    EXPECT_EQ(err.json_path(), "traceEvents[3].ts");
  }
}

TEST(TraceRead, EmptyTrace) {
  const Timeline back = read(R"({"traceEvents": []})");
  EXPECT_TRUE(back.events.empty());
  EXPECT_TRUE(back.device_names.empty());
  EXPECT_TRUE(back.memory.empty());
  EXPECT_TRUE(back.route_names.empty());
  const std::string empty = write(Timeline{});
  EXPECT_EQ(empty, "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n]}\n");
  EXPECT_EQ(write(read(empty)), empty);
}

TEST(TraceRead, SkipsOtherToolsEvents) {
  const Timeline back = read(
      R"({"traceEvents": [{"ph": "i", "name": "mark", "ts": 1, "pid": 0, "tid": 0},
                          {"ph": "M", "name": "thread_name", "pid": 0, "tid": 0, "args": {"name": "x"}},
                          {"ph": "C", "name": "cpu", "pid": 0, "ts": 1, "args": {"load": 3}}],
          "otherData": {"tool": "x"}})");
  EXPECT_TRUE(back.events.empty());
  EXPECT_TRUE(back.memory.empty());
}

void expect_error(const std::string& text, const std::string& path, const std::string& what) {
  try {
    read(text);
    ADD_FAILURE() << "expected TraceError for " << text;
  } catch (const TraceError& e) {
    EXPECT_EQ(e.file(), "t.json");
    EXPECT_EQ(e.json_path(), path) << e.what();
    EXPECT_STREQ(e.what(), what.c_str());
  }
}

const char* const kSlice =
    R"({"ph":"X","pid":0,"tid":0,"name":"F0","cat":"forward","ts":1.000,"dur":2.000,"args":{"stage":0,"micro_batch":0}})";
const char* const kSend =
    R"({"ph":"X","pid":0,"tid":1,"name":"act 2","cat":"activation","ts":1.000,"dur":2.000,"args":{"stage":0,"micro_batch":2,"bytes":300,"to_stage":1,"links":"0->1"}})";
const char* const kAllReduceSlice =
    R"({"ph":"X","pid":0,"tid":1,"name":"all-reduce","cat":"allreduce","ts":1.000,"dur":2.000,"args":{"stage":0,"bytes":300}})";
const char* const kTensorSlice =
    R"({"ph":"X","pid":0,"tid":1000000000,"name":"tp 2","cat":"tensor-allreduce","ts":3.000,"dur":0.500,"args":{"stage":0,"micro_batch":2,"bytes":4096}})";
const char* const kFlow =
    R"({"ph":"s","pid":0,"tid":1,"name":"transfer","cat":"flow","id":7,"ts":1.000})";

json discarded() {
  return json(json::value_t::discarded);
}

// kSlice (or `base`) with `key` set to `value`, or removed when `value` is discarded.
std::string with(const std::string& key, const json& value, const char* base = kSlice) {
  json e = json::parse(base);
  json& target = key.rfind("args.", 0) == 0 ? e["args"] : e;
  const std::string k = key.rfind("args.", 0) == 0 ? key.substr(5) : key;
  if (value.is_discarded()) {
    target.erase(k);
  } else {
    target[k] = value;
  }
  return json{{"traceEvents", {e}}}.dump();
}

std::string events(std::initializer_list<const char*> list) {
  json a = json::array();
  for (const char* e : list) a.push_back(json::parse(e));
  return json{{"traceEvents", a}}.dump();
}

TEST(TraceRead, BadDocumentsNameTheFileAndPath) {
  expect_error("{", "",
               "t.json: malformed JSON at line 1, column 2: syntax error while parsing object key "
               "- unexpected end of input; expected string literal");
  expect_error("[1, 2]", "", "t.json: a trace is a JSON object with traceEvents");
  expect_error("{}", "traceEvents", "t.json: traceEvents: missing");
  expect_error(R"({"traceEvents": 3})", "traceEvents", "t.json: traceEvents: expected an array");
  expect_error(R"({"traceEvents": [3]})", "traceEvents[0]",
               "t.json: traceEvents[0]: expected an object");
  expect_error(R"({"traceEvents": [{"name": "x"}]})", "traceEvents[0].ph",
               "t.json: traceEvents[0].ph: missing");
}

// The checks of every JSON input: a repeated key is refused rather than one of
// its values silently kept, and nesting stops at the limit before any tree is
// built.
TEST(TraceRead, RepeatedKeysAndDeepNestingAreRefused) {
  expect_error(R"({"traceEvents": [], "traceEvents": []})", "traceEvents",
               "t.json: traceEvents: the key appears twice in its object");
  const std::string deep =
      R"({"traceEvents": [], "x": )" + std::string(100, '[') + std::string(100, ']') + "}";
  try {
    read(deep);
    ADD_FAILURE() << "expected TraceError";
  } catch (const TraceError& e) {
    EXPECT_NE(std::string(e.what()).find("nest deeper than 64 levels, the limit for JSON inputs"),
              std::string::npos)
        << e.what();
  }
}

TEST(TraceRead, BadSlicesNameTheField) {
  EXPECT_NO_THROW(read(events({kSlice})));
  EXPECT_NO_THROW(read(events({kSend, kFlow})));
  expect_error(with("ts", discarded()), "traceEvents[0].ts", "t.json: traceEvents[0].ts: missing");
  expect_error(with("ts", "soon"), "traceEvents[0].ts",
               "t.json: traceEvents[0].ts: expected a number of microseconds");
  expect_error(with("ts", 1e300), "traceEvents[0].ts", "t.json: traceEvents[0].ts: out of range");
  expect_error(with("dur", -1.5), "traceEvents[0].dur",
               "t.json: traceEvents[0].dur: negative duration");
  expect_error(with("args.cpu_us", -0.001), "traceEvents[0].args.cpu_us",
               "t.json: traceEvents[0].args.cpu_us: negative duration");
  expect_error(with("name", "F1"), "traceEvents[0].name",
               "t.json: traceEvents[0].name: unknown event name 'F1' (this forward slice is 'F0')");
  expect_error(with("name", "lunch"), "traceEvents[0].name",
               "t.json: traceEvents[0].name: unknown event name 'lunch' (this forward slice is "
               "'F0')");
  expect_error(with("name", discarded()), "traceEvents[0].name",
               "t.json: traceEvents[0].name: missing");
  expect_error(with("cat", "lunch"), "traceEvents[0].cat",
               "t.json: traceEvents[0].cat: unknown kind 'lunch'");
  expect_error(with("tid", 1), "traceEvents[0].tid",
               "t.json: traceEvents[0].tid: a forward slice on the send lane (expected the "
               "compute lane)");
  EXPECT_NO_THROW(read(with("tid", 3)));  // row 2 of the compute lane
  // Rows 1 to 333333333 of the first three lanes reach tid 999999999, as they
  // always did; the tensor lane starts at tid 1000000000.
  const Timeline far = read(with("tid", 999'999'999));
  ASSERT_EQ(far.events.size(), 1u);
  EXPECT_EQ(far.events[0].lane, Lane::kCompute);
  expect_error(with("tid", 1'000'000'000), "traceEvents[0].tid",
               "t.json: traceEvents[0].tid: a forward slice on the tensor lane (expected the "
               "compute lane)");
  expect_error(with("tid", 0, kSend), "traceEvents[0].tid",
               "t.json: traceEvents[0].tid: a activation slice on the compute lane (expected the "
               "send or recv lane)");
  EXPECT_NO_THROW(read(events({kAllReduceSlice})));
  expect_error(with("tid", 2, kAllReduceSlice), "traceEvents[0].tid",
               "t.json: traceEvents[0].tid: a allreduce slice on the recv lane (expected the send "
               "lane)");
  expect_error(with("tid", 1'000'000'000, kAllReduceSlice), "traceEvents[0].tid",
               "t.json: traceEvents[0].tid: a allreduce slice on the tensor lane (expected the "
               "send lane)");
}

// A tensor-allreduce goes on the tensor lane only, and carries its bytes.
TEST(TraceRead, TensorCollectivesOnTheTensorLaneOnly) {
  const Timeline t = read(events({kSlice, kTensorSlice}));
  ASSERT_EQ(t.events.size(), 2u);
  const TimelineEvent& tp = t.events[1];
  EXPECT_EQ(tp.device, 0);
  EXPECT_EQ(tp.lane, Lane::kTensor);
  EXPECT_EQ(tp.kind, EventKind::kTensorAllReduce);
  EXPECT_EQ(tp.stage, 0);
  EXPECT_EQ(tp.micro_batch, 2);
  EXPECT_EQ(tp.bytes, 4096);
  EXPECT_EQ(tp.start, 3'000);
  EXPECT_EQ(tp.end, 3'500);
  EXPECT_FALSE(tp.flow);
  EXPECT_FALSE(tp.peer_stage);
  // Row 2 of the tensor lane.
  EXPECT_EQ(read(with("tid", 1'000'000'001, kTensorSlice)).events.at(0).lane, Lane::kTensor);
  // On any other lane it is refused, naming the field and the lane it belongs on.
  expect_error(with("tid", 1, kTensorSlice), "traceEvents[0].tid",
               "t.json: traceEvents[0].tid: a tensor-allreduce slice on the send lane (expected "
               "the tensor lane)");
  expect_error(with("tid", 2, kTensorSlice), "traceEvents[0].tid",
               "t.json: traceEvents[0].tid: a tensor-allreduce slice on the recv lane (expected "
               "the tensor lane)");
  expect_error(with("tid", 3, kTensorSlice), "traceEvents[0].tid",
               "t.json: traceEvents[0].tid: a tensor-allreduce slice on the compute lane "
               "(expected the tensor lane)");
  // Its fields, as the all-reduce's.
  expect_error(with("args.bytes", discarded(), kTensorSlice), "traceEvents[0].args.bytes",
               "t.json: traceEvents[0].args.bytes: missing");
  expect_error(with("args.bytes", -1, kTensorSlice), "traceEvents[0].args.bytes",
               "t.json: traceEvents[0].args.bytes: out of range: -1");
  expect_error(with("args.micro_batch", discarded(), kTensorSlice),
               "traceEvents[0].args.micro_batch",
               "t.json: traceEvents[0].args.micro_batch: missing");
  expect_error(with("name", "tp 3", kTensorSlice), "traceEvents[0].name",
               "t.json: traceEvents[0].name: unknown event name 'tp 3' (this tensor-allreduce "
               "slice is 'tp 2')");
  // No flow arrow follows a collective.
  json f = json::parse(kFlow);
  f["tid"] = 1'000'000'000;
  f["ts"] = 3.0;
  expect_error(events({kTensorSlice, f.dump().c_str()}), "traceEvents[1].ph",
               "t.json: traceEvents[1].ph: a flow start ('s') after a slice that is no send");
}

TEST(TraceRead, BadFieldsOfOursAreErrors) {
  expect_error(with("tid", -2), "traceEvents[0].tid",
               "t.json: traceEvents[0].tid: out of range: -2");
  expect_error(with("tid", 1e300), "traceEvents[0].tid",
               "t.json: traceEvents[0].tid: expected an integer");
  expect_error(with("tid", 4294967296), "traceEvents[0].tid",
               "t.json: traceEvents[0].tid: out of range: 4294967296");
  expect_error(with("pid", 65537), "traceEvents[0].pid",
               "t.json: traceEvents[0].pid: out of range: 65537");
  expect_error(with("args", json::object()), "traceEvents[0].args.stage",
               "t.json: traceEvents[0].args.stage: missing");
  expect_error(with("args", 3), "traceEvents[0].args",
               "t.json: traceEvents[0].args: expected an object");
  expect_error(with("args.micro_batch", "0"), "traceEvents[0].args.micro_batch",
               "t.json: traceEvents[0].args.micro_batch: expected an integer");
  expect_error(with("args.bytes", -300, kSend), "traceEvents[0].args.bytes",
               "t.json: traceEvents[0].args.bytes: out of range: -300");
  expect_error(with("args.bytes", discarded(), kSend), "traceEvents[0].args.bytes",
               "t.json: traceEvents[0].args.bytes: missing");
  expect_error(with("args.to_stage", 2, kSend), "traceEvents[0].args.to_stage",
               "t.json: traceEvents[0].args.to_stage: an activation from stage 0 to 2");
  expect_error(with("args.to_stage", discarded(), kSend), "traceEvents[0].args.to_stage",
               "t.json: traceEvents[0].args.to_stage: missing (a transfer over links names it)");
  expect_error(with("args.links", 5, kSend), "traceEvents[0].args.links",
               "t.json: traceEvents[0].args.links: expected a string");
  // Two transfers over one route (stage 0 -> 1) naming different links.
  const std::string other = with("args.links", "0->host, host->1", kSend);
  json doc = json::parse(other);
  doc["traceEvents"].insert(doc["traceEvents"].begin(), json::parse(kSend));
  expect_error(doc.dump(), "traceEvents[1].args.links",
               "t.json: traceEvents[1].args.links: '0->host, host->1', but an earlier transfer "
               "over this route gave '0->1'");
  expect_error(R"({"traceEvents": [{"ph":"M","name":"process_name","pid":0,"args":{}}]})",
               "traceEvents[0].args.name", "t.json: traceEvents[0].args.name: missing");
  expect_error(R"({"traceEvents": [{"ph":"C","name":"memory","pid":0,"ts":0,"args":{}}]})",
               "traceEvents[0].args.bytes", "t.json: traceEvents[0].args.bytes: missing");
}

TEST(TraceRead, FlowEventsFollowTheirSlice) {
  const Timeline t = read(events({kSend, kFlow}));
  ASSERT_EQ(t.events.size(), 1u);
  EXPECT_EQ(t.events[0].flow, 7u);
  EXPECT_EQ(t.events[0].route, 0);
  EXPECT_EQ(t.route_names, (std::vector<std::string>{"0->1", "", "", ""}));
  expect_error(events({kFlow}), "traceEvents[0]",
               "t.json: traceEvents[0]: a flow event without its slice before it");
  const char* const thread_name =
      R"({"ph":"M","pid":0,"tid":0,"name":"thread_name","args":{"name":"x"}})";
  expect_error(events({kSend, thread_name, kFlow}), "traceEvents[2]",
               "t.json: traceEvents[2]: a flow event without its slice before it");
  expect_error(events({kSend, kSlice, kFlow}), "traceEvents[2].ph",
               "t.json: traceEvents[2].ph: a flow start ('s') after a slice that is no send");
  json f = json::parse(kFlow);
  f["ph"] = "f";
  expect_error(events({kSend, f.dump().c_str()}), "traceEvents[1].ph",
               "t.json: traceEvents[1].ph: a flow end ('f') after a slice that is no receive");
  f = json::parse(kFlow);
  f["tid"] = 4;
  expect_error(events({kSend, f.dump().c_str()}), "traceEvents[1].tid",
               "t.json: traceEvents[1].tid: not its slice's");
  f = json::parse(kFlow);
  f["ts"] = 1.001;
  expect_error(events({kSend, f.dump().c_str()}), "traceEvents[1].ts",
               "t.json: traceEvents[1].ts: not its slice's start");
  f = json::parse(kFlow);
  f["id"] = -7;
  expect_error(events({kSend, f.dump().c_str()}), "traceEvents[1].id",
               "t.json: traceEvents[1].id: expected a non-negative integer");
}

TEST(TraceRead, MissingFileIsNamed) {
  try {
    read_chrome_trace_file("/no/such/trace.json");
    FAIL() << "expected TraceError";
  } catch (const TraceError& e) {
    EXPECT_EQ(e.file(), "/no/such/trace.json");
    EXPECT_EQ(e.json_path(), "");
    EXPECT_STREQ(e.what(), "/no/such/trace.json: cannot open file");
  }
}

}  // namespace
}  // namespace pipescope
