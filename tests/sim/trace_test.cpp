// The Chrome trace: structure per docs/file-formats.md ("Chrome traces") and byte-identical output
// for the same input.

#include "sim/formats/trace_io.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "sim/base/file_io.h"
#include "sim/engine/simulator.h"
#include "sim_fixtures.h"

namespace pipescope {
namespace {

Scenario traced_scenario() {
  Scenario sc = testing::uniform_scenario(6, 3, 1000.0, 8, 4, true);
  for (LayerSpec& l : sc.model.layers) {
    l.out_bytes = 300;
    l.stash_bytes = 500;
  }
  sc.cluster.interconnect = Interconnect{TopologyKind::kPcieHost, 1e9, 1e-6};
  return sc;
}

std::string trace_text(const Scenario& sc) {
  std::ostringstream out;
  write_chrome_trace(out, simulate(sc, SimConfig{}).timeline);
  return out.str();
}

TEST(ChromeTrace, SameInputGivesIdenticalBytes) {
  const std::string a = trace_text(traced_scenario());
  const std::string b = trace_text(traced_scenario());
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(a, b);
}

TEST(ChromeTrace, FollowsTheEventFormat) {
  const SimResult r = simulate(traced_scenario(), SimConfig{});
  std::ostringstream out;
  write_chrome_trace(out, r.timeline);
  const nlohmann::json doc = nlohmann::json::parse(out.str());
  ASSERT_TRUE(doc.contains("traceEvents"));
  std::map<std::string, int> by_phase;
  std::map<int, std::set<int>> tids;  // pid -> lanes with complete events
  std::map<std::uint64_t, std::string> flows;
  int process_names = 0;
  for (const auto& e : doc["traceEvents"]) {
    const std::string ph = e["ph"];
    ++by_phase[ph];
    if (ph == "M" && e["name"] == "process_name") ++process_names;
    if (ph == "X") {
      tids[e["pid"].get<int>()].insert(e["tid"].get<int>());
      EXPECT_TRUE(e["args"].contains("stage"));
      EXPECT_GE(e["dur"].get<double>(), 0.0);
    }
    if (ph == "s" || ph == "f") flows[e["id"].get<std::uint64_t>()] += ph;
  }
  EXPECT_EQ(process_names, 3);
  // 3 stages x (4 F + 4 R + 4 B + 1 optimizer) compute events; 2 boundaries x 4
  // micro-batches x 2 directions transfers, each a send and a recv.
  EXPECT_EQ(r.compute_ops, 39);
  EXPECT_EQ(r.transfers, 16);
  EXPECT_EQ(by_phase["X"], 39 + 2 * 16);
  EXPECT_EQ(flows.size(), 16u);
  for (const auto& [id, phases] : flows) EXPECT_EQ(phases, "sf") << id;
  EXPECT_GT(by_phase["C"], 0);
  for (int pid = 0; pid < 3; ++pid) EXPECT_EQ(tids[pid], (std::set<int>{0, 1, 2}));
}

// Every (pid, tid) must hold slices that do not overlap, or the viewers draw them
// wrongly. Long latencies and slow links make transfers queue back to back: a
// slice that counted the latency as well as the link time would overlap the next.
TEST(ChromeTrace, SlicesOfAThreadNeverOverlap) {
  Scenario sc = traced_scenario();
  sc.training.global_batch = 32;
  sc.training.micro_batches = 32;
  sc.cluster.interconnect = Interconnect{TopologyKind::kRing, 1e8, 1e-3};
  std::ostringstream out;
  write_chrome_trace(out, simulate(sc, SimConfig{}).timeline);
  const nlohmann::json doc = nlohmann::json::parse(out.str());
  std::map<std::pair<int, int>, std::vector<std::pair<std::int64_t, std::int64_t>>> slices;
  std::set<std::pair<int, int>> named;
  for (const auto& e : doc["traceEvents"]) {
    const std::pair<int, int> key{e["pid"].get<int>(), e["tid"].get<int>()};
    if (e["ph"] == "M" && e["name"] == "thread_name") named.insert(key);
    if (e["ph"] != "X") continue;
    const auto ns = [](double us) { return static_cast<std::int64_t>(std::llround(us * 1000)); };
    const std::int64_t start = ns(e["ts"].get<double>());
    slices[key].push_back({start, start + ns(e["dur"].get<double>())});
  }
  for (auto& [key, list] : slices) {
    EXPECT_TRUE(named.count(key)) << "thread without a name: " << key.first << "/" << key.second;
    std::sort(list.begin(), list.end());
    for (std::size_t i = 1; i < list.size(); ++i) {
      EXPECT_LE(list[i - 1].second, list[i].first) << "pid " << key.first << " tid " << key.second;
    }
  }
}

TEST(ChromeTrace, OverlappingSlicesGoToAFurtherRow) {
  Timeline t;
  t.device_names = {"d0"};
  TimelineEvent a;
  a.lane = Lane::kRecv;
  a.kind = EventKind::kActivation;
  a.start = 0;
  a.end = 100;
  TimelineEvent b = a;
  b.kind = EventKind::kGradient;
  b.start = 50;
  b.end = 150;
  TimelineEvent c = a;
  c.start = 100;
  c.end = 120;
  t.events = {a, b, c};
  std::ostringstream out;
  write_chrome_trace(out, t);
  const nlohmann::json doc = nlohmann::json::parse(out.str());
  std::vector<int> tids;
  bool named = false;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "X") tids.push_back(e["tid"].get<int>());
    if (e["ph"] == "M" && e["tid"] == 5 && e["args"]["name"] == "recv 2") named = true;
  }
  EXPECT_EQ(tids, (std::vector<int>{2, 5, 2}));
  EXPECT_TRUE(named);
}

// A timeline without tensor-parallel collectives is written as it always was:
// compute, send and recv named on every device (tid r * 3 + lane), no tensor
// lane. These are the exact bytes.
TEST(ChromeTrace, ATimelineWithoutTensorCollectivesKeepsItsBytes) {
  Timeline t;
  t.device_names = {"d0", "d1"};
  TimelineEvent f;
  f.start = 0;
  f.end = 1'000;
  TimelineEvent r;
  r.device = 1;
  r.lane = Lane::kRecv;
  r.kind = EventKind::kActivation;
  r.bytes = 300;
  r.start = 1'000;
  r.end = 1'500;
  TimelineEvent r2 = r;
  r2.micro_batch = 1;
  r2.start = 1'200;
  t.events = {f, r, r2};
  std::ostringstream out;
  write_chrome_trace(out, t);
  EXPECT_EQ(
      out.str(),
      "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n"
      "{\"ph\":\"M\",\"pid\":0,\"tid\":0,\"name\":\"process_name\",\"args\":{\"name\":\"d0\"}},\n"
      "{\"ph\":\"M\",\"pid\":0,\"tid\":0,\"name\":\"process_sort_index\",\"args\":{\"sort_"
      "index\":0}},\n"
      "{\"ph\":\"M\",\"pid\":1,\"tid\":0,\"name\":\"process_name\",\"args\":{\"name\":\"d1\"}},\n"
      "{\"ph\":\"M\",\"pid\":1,\"tid\":0,\"name\":\"process_sort_index\",\"args\":{\"sort_"
      "index\":1}},\n"
      "{\"ph\":\"X\",\"pid\":0,\"tid\":0,\"name\":\"F0\",\"cat\":\"forward\",\"ts\":0.000,"
      "\"dur\":1.000,\"args\":{\"stage\":0,\"micro_batch\":0}},\n"
      "{\"ph\":\"X\",\"pid\":1,\"tid\":2,\"name\":\"act 0\",\"cat\":\"activation\",\"ts\":1."
      "000,\"dur\":0.500,\"args\":{\"stage\":0,\"micro_batch\":0,\"bytes\":300}},\n"
      "{\"ph\":\"X\",\"pid\":1,\"tid\":5,\"name\":\"act 1\",\"cat\":\"activation\",\"ts\":1."
      "200,\"dur\":0.300,\"args\":{\"stage\":0,\"micro_batch\":1,\"bytes\":300}},\n"
      "{\"ph\":\"M\",\"pid\":0,\"tid\":0,\"name\":\"thread_name\",\"args\":{\"name\":\"compute\"}"
      "},\n"
      "{\"ph\":\"M\",\"pid\":0,\"tid\":1,\"name\":\"thread_name\",\"args\":{\"name\":\"send\"}},\n"
      "{\"ph\":\"M\",\"pid\":0,\"tid\":2,\"name\":\"thread_name\",\"args\":{\"name\":\"recv\"}},\n"
      "{\"ph\":\"M\",\"pid\":1,\"tid\":0,\"name\":\"thread_name\",\"args\":{\"name\":\"compute\"}"
      "},\n"
      "{\"ph\":\"M\",\"pid\":1,\"tid\":1,\"name\":\"thread_name\",\"args\":{\"name\":\"send\"}},\n"
      "{\"ph\":\"M\",\"pid\":1,\"tid\":2,\"name\":\"thread_name\",\"args\":{\"name\":\"recv\"}},\n"
      "{\"ph\":\"M\",\"pid\":1,\"tid\":5,\"name\":\"thread_name\",\"args\":{\"name\":\"recv "
      "2\"}}\n"
      "]}\n");
}

// A tensor-parallel op: its compute on the compute lane, then its group's
// all-reduces on the tensor lane, whose rows are tid 1000000000, 1000000001, ...
// (apart from the r * 3 + lane of the others) and named "tensor", "tensor 2".
TEST(ChromeTrace, TensorCollectivesHaveTheirOwnLane) {
  Timeline t;
  t.device_names = {"d0", "d1"};
  TimelineEvent f;
  f.stage = 1;
  f.micro_batch = 2;
  f.start = 0;
  f.end = 1'000;
  TimelineEvent tp = f;
  tp.lane = Lane::kTensor;
  tp.kind = EventKind::kTensorAllReduce;
  tp.bytes = 4096;
  tp.start = 1'000;
  tp.end = 1'250;
  TimelineEvent tp2 = tp;  // overlaps tp: a second row of the tensor lane
  tp2.micro_batch = 3;
  tp2.bytes = 8192;
  tp2.start = 1'100;
  tp2.end = 1'300;
  TimelineEvent g = f;  // device 1: no tensor lane
  g.device = 1;
  t.events = {f, tp, tp2, g};
  std::ostringstream out;
  write_chrome_trace(out, t);
  const nlohmann::json doc = nlohmann::json::parse(out.str());
  std::vector<nlohmann::json> slices;
  std::map<std::pair<int, int>, std::string> thread_names;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "X") slices.push_back(e);
    if (e["ph"] == "M" && e["name"] == "thread_name") {
      thread_names[{e["pid"].get<int>(), e["tid"].get<int>()}] = e["args"]["name"];
    }
  }
  ASSERT_EQ(slices.size(), 4u);
  EXPECT_EQ(slices[0]["tid"], 0);
  EXPECT_EQ(slices[1]["tid"], 1'000'000'000);
  EXPECT_EQ(slices[1]["name"], "tp 2");
  EXPECT_EQ(slices[1]["cat"], "tensor-allreduce");
  EXPECT_EQ(slices[1]["ts"].get<double>(), 1.0);
  EXPECT_EQ(slices[1]["dur"].get<double>(), 0.25);
  EXPECT_EQ(slices[1]["args"], (nlohmann::json{{"stage", 1}, {"micro_batch", 2}, {"bytes", 4096}}));
  EXPECT_EQ(slices[2]["tid"], 1'000'000'001);
  EXPECT_EQ(slices[2]["name"], "tp 3");
  EXPECT_EQ(slices[2]["args"]["bytes"], 8192);
  EXPECT_EQ(slices[3]["pid"], 1);
  EXPECT_EQ(slices[3]["tid"], 0);
  // No flow arrows: a collective is not a transfer between two stages.
  EXPECT_EQ(out.str().find("\"flow\""), std::string::npos);
  const std::map<std::pair<int, int>, std::string> expected = {{{0, 0}, "compute"},
                                                               {{0, 1}, "send"},
                                                               {{0, 2}, "recv"},
                                                               {{0, 1'000'000'000}, "tensor"},
                                                               {{0, 1'000'000'001}, "tensor 2"},
                                                               {{1, 0}, "compute"},
                                                               {{1, 1}, "send"},
                                                               {{1, 2}, "recv"}};
  EXPECT_EQ(thread_names, expected);
}

// An expert-parallel op: its all-to-alls on the expert lane, whose rows are
// tid 1500000000, ... named "expert", after the tensor lane's; read back as
// they were written.
TEST(ChromeTrace, ExpertAllToAllsHaveTheirOwnLane) {
  Timeline t;
  t.device_names = {"d0"};
  TimelineEvent f;
  f.stage = 0;
  f.micro_batch = 1;
  f.start = 0;
  f.end = 1'000;
  TimelineEvent tp = f;
  tp.lane = Lane::kTensor;
  tp.kind = EventKind::kTensorAllReduce;
  tp.bytes = 4096;
  tp.start = 1'000;
  tp.end = 1'250;
  TimelineEvent ep = tp;
  ep.lane = Lane::kExpert;
  ep.kind = EventKind::kExpertAllToAll;
  ep.bytes = 65536;
  ep.start = 1'250;
  ep.end = 2'000;
  t.events = {f, tp, ep};
  std::ostringstream out;
  write_chrome_trace(out, t);
  const nlohmann::json doc = nlohmann::json::parse(out.str());
  std::vector<nlohmann::json> slices;
  std::map<int, std::string> thread_names;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "X") slices.push_back(e);
    if (e["ph"] == "M" && e["name"] == "thread_name") {
      thread_names[e["tid"].get<int>()] = e["args"]["name"];
    }
  }
  ASSERT_EQ(slices.size(), 3u);
  EXPECT_EQ(slices[2]["tid"], 1'500'000'000);
  EXPECT_EQ(slices[2]["name"], "ep 1");
  EXPECT_EQ(slices[2]["cat"], "expert-alltoall");
  EXPECT_EQ(slices[2]["args"],
            (nlohmann::json{{"stage", 0}, {"micro_batch", 1}, {"bytes", 65536}}));
  const std::map<int, std::string> expected = {{0, "compute"},
                                               {1, "send"},
                                               {2, "recv"},
                                               {1'000'000'000, "tensor"},
                                               {1'500'000'000, "expert"}};
  EXPECT_EQ(thread_names, expected);

  std::istringstream in(out.str());
  const Timeline back = read_chrome_trace(in, "t.json");
  ASSERT_EQ(back.events.size(), 3u);
  const auto read = std::find_if(back.events.begin(), back.events.end(),
                                 [](const TimelineEvent& e) { return e.lane == Lane::kExpert; });
  ASSERT_NE(read, back.events.end());
  EXPECT_EQ(read->kind, EventKind::kExpertAllToAll);
  EXPECT_EQ(read->bytes, 65536);
  EXPECT_EQ(read->start, 1'250);
  EXPECT_EQ(read->end, 2'000);
  EXPECT_EQ(read->micro_batch, 1);
}

TEST(ChromeTrace, TimesAreMicrosecondsWithNanosecondDigits) {
  Timeline t;
  t.device_names = {"d0"};
  TimelineEvent e;
  e.start = 1'234'567;
  e.end = 1'234'567 + 1'001;
  t.events.push_back(e);
  std::ostringstream out;
  write_chrome_trace(out, t);
  EXPECT_NE(out.str().find("\"ts\":1234.567,\"dur\":1.001"), std::string::npos) << out.str();
}

TEST(ChromeTrace, FileIsWrittenWhole) {
  const auto path = std::filesystem::temp_directory_path() / "pipescope_trace_test.json";
  std::filesystem::remove(path);
  write_chrome_trace_file(path, simulate(traced_scenario(), SimConfig{}).timeline);
  std::ifstream in(path);
  const nlohmann::json doc = nlohmann::json::parse(in);
  EXPECT_GT(doc["traceEvents"].size(), 0u);
  EXPECT_FALSE(std::filesystem::exists(path.string() + ".tmp"));
  std::filesystem::remove(path);
}

// Streamed while the engine runs (simulate --trace), the trace is the same bytes
// as one written from the whole timeline afterwards, and nothing is held.
TEST(ChromeTrace, StreamedTraceEqualsTheWholeTimelines) {
  for (const ScheduleKind kind : {ScheduleKind::kGpipe, ScheduleKind::kZbH1}) {
    SimConfig config;
    config.schedule = kind;
    std::ostringstream streamed;
    ChromeTraceWriter writer(streamed);
    config.timeline_sink = &writer;
    const SimResult r = simulate(traced_scenario(), config);
    EXPECT_TRUE(r.timeline.events.empty());
    EXPECT_TRUE(r.timeline.memory.empty());

    config.timeline_sink = nullptr;
    const SimResult whole = simulate(traced_scenario(), config);
    std::ostringstream written;
    write_chrome_trace(written, whole.timeline);
    EXPECT_EQ(streamed.str(), written.str()) << to_string(kind);
    EXPECT_EQ(writer.slices(), static_cast<std::int64_t>(whole.timeline.events.size()));
    EXPECT_EQ(whole.timeline.events.size(),
              static_cast<std::size_t>(whole.compute_ops + 2 * whole.transfers));
  }
}

// A simulation that fails while its trace streams leaves no file behind, not
// even the temporary one.
TEST(ChromeTrace, FailedStreamLeavesNoFile) {
  const auto path = std::filesystem::temp_directory_path() / "pipescope_trace_fail.json";
  std::filesystem::remove(path);
  SimConfig config;
  config.stages = 99;  // more than the scenario's devices
  EXPECT_THROW(write_file_atomically(path,
                                     [&](std::ostream& out) {
                                       ChromeTraceWriter writer(out);
                                       config.timeline_sink = &writer;
                                       simulate(traced_scenario(), config);
                                     }),
               ConfigError);
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path.string() + ".tmp"));
}

TEST(ChromeTrace, UnwritablePathIsAnErrorNamingIt) {
  try {
    write_chrome_trace_file("/nonexistent-dir/x.json", Timeline{});
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(),
                 "/nonexistent-dir/x.json: cannot create a file in /nonexistent-dir: No such file "
                 "or directory");
  }
}

}  // namespace
}  // namespace pipescope
