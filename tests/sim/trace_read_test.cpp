// Reading a Chrome trace back (a measured run under the prediction in the GUI):
// what the writer wrote comes back field for field, and a broken trace is one
// error naming the file and the JSON path.

#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "sim/simulator.h"
#include "sim/trace_io.h"
#include "sim_fixtures.h"

namespace pipescope {
namespace {

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

TEST(TraceRead, RoundTripsFieldByField) {
  const Timeline t = simulated_timeline();
  ASSERT_FALSE(t.memory.empty());
  const Timeline back = read(write(t));
  EXPECT_EQ(back.device_names, t.device_names);
  ASSERT_EQ(back.events.size(), t.events.size());
  int transfers = 0, with_cpu = 0;
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
    EXPECT_EQ(b.cpu_time, a.cpu_time) << i;
    ASSERT_EQ(b.route.has_value(), a.route.has_value()) << i;
    if (a.route) {
      EXPECT_EQ(back.route_names[static_cast<std::size_t>(*b.route)],
                t.route_names[static_cast<std::size_t>(*a.route)]);
    }
    transfers += a.flow ? 1 : 0;
    with_cpu += a.cpu_time ? 1 : 0;
  }
  EXPECT_GT(transfers, 0);
  EXPECT_GT(with_cpu, 0);
  ASSERT_EQ(back.memory.size(), t.memory.size());
  for (std::size_t d = 0; d < t.memory.size(); ++d) {
    ASSERT_EQ(back.memory[d].size(), t.memory[d].size());
    for (std::size_t p = 0; p < t.memory[d].size(); ++p) {
      EXPECT_EQ(back.memory[d][p].time, t.memory[d][p].time);
      EXPECT_EQ(back.memory[d][p].bytes, t.memory[d][p].bytes);
    }
  }
  // Written again, the same bytes.
  EXPECT_EQ(write(back), write(t));
}

TEST(TraceRead, ExactNanosecondsFromMicroseconds) {
  Timeline t;
  t.device_names = {"d"};
  TimelineEvent e;
  e.start = 123'456'789'123;  // 123 s and a bit, odd ns
  e.end = e.start + 999'999'999'999;
  t.events.push_back(e);
  const Timeline back = read(write(t));
  ASSERT_EQ(back.events.size(), 1u);
  EXPECT_EQ(back.events[0].start, e.start);
  EXPECT_EQ(back.events[0].end, e.end);
}

TEST(TraceRead, EmptyTrace) {
  const Timeline back = read(R"({"traceEvents": []})");
  EXPECT_TRUE(back.events.empty());
  EXPECT_TRUE(back.device_names.empty());
}

TEST(TraceRead, SkipsOtherToolsEvents) {
  const Timeline back = read(
      R"({"traceEvents": [{"ph": "i", "name": "mark", "ts": 1, "pid": 0, "tid": 0},
                          {"ph": "M", "name": "thread_name", "pid": 0, "tid": 0, "args": {"name": "x"}}]})");
  EXPECT_TRUE(back.events.empty());
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

std::string with(const std::string& key, const nlohmann::json& value) {
  nlohmann::json e = nlohmann::json::parse(kSlice);
  if (value.is_discarded()) {
    e.erase(key);
  } else {
    e[key] = value;
  }
  return nlohmann::json{{"traceEvents", {e}}}.dump();
}

TEST(TraceRead, BadTracesNameTheFileAndField) {
  expect_error("{", "", "t.json: not valid JSON");
  expect_error("[1, 2]", "", "t.json: a trace is a JSON object with traceEvents");
  expect_error("{}", "traceEvents", "t.json: traceEvents: missing");
  expect_error(R"({"traceEvents": 3})", "traceEvents", "t.json: traceEvents: expected an array");
  expect_error(R"({"traceEvents": [3]})", "traceEvents[0]",
               "t.json: traceEvents[0]: expected an object");
  EXPECT_NO_THROW(read(nlohmann::json{{"traceEvents", {nlohmann::json::parse(kSlice)}}}.dump()));
  expect_error(with("ts", nlohmann::json(nlohmann::json::value_t::discarded)), "traceEvents[0].ts",
               "t.json: traceEvents[0].ts: missing");
  expect_error(with("ts", "soon"), "traceEvents[0].ts",
               "t.json: traceEvents[0].ts: expected a number of microseconds");
  expect_error(with("dur", -1.5), "traceEvents[0].dur",
               "t.json: traceEvents[0].dur: negative duration");
  expect_error(with("cat", "lunch"), "traceEvents[0].cat",
               "t.json: traceEvents[0].cat: unknown kind 'lunch'");
  expect_error(with("tid", 1), "traceEvents[0].tid",
               "t.json: traceEvents[0].tid: a forward slice on the send lane");
  expect_error(with("tid", -2), "traceEvents[0].tid",
               "t.json: traceEvents[0].tid: out of range: -2");
  expect_error(with("pid", 1e300), "traceEvents[0].pid",
               "t.json: traceEvents[0].pid: expected an integer");
  expect_error(with("ts", 1e300), "traceEvents[0].ts", "t.json: traceEvents[0].ts: out of range");
  expect_error(with("args", nlohmann::json::object()), "traceEvents[0].args.stage",
               "t.json: traceEvents[0].args.stage: missing");
  expect_error(R"({"traceEvents": [{"ph":"s","pid":0,"tid":1,"id":3,"ts":1}]})", "traceEvents[0]",
               "t.json: traceEvents[0]: a flow event without its slice before it");
}

TEST(TraceRead, MissingFileIsNamed) {
  try {
    read_chrome_trace_file("/no/such/trace.json");
    FAIL() << "expected TraceError";
  } catch (const TraceError& e) {
    EXPECT_STREQ(e.what(), "/no/such/trace.json: cannot open file");
  }
}

}  // namespace
}  // namespace pipescope
