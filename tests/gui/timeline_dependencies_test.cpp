// The dependency rules as the desktop app relates events (related_kinds, read
// off sim/engine/op_dependencies.h), and dependencies_of through the layout's index
// against a scan of every item with those rules, on simulated and on random
// timelines; and what a simulated run's forwards, backwards, recomputations,
// transfers and optimizer steps depend on, by hand, and a trace that leaves
// out a transfer's receiving stage.

#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <string>
#include <vector>

#include "gui/timeline_layout.h"
#include "sim/engine/simulator.h"
#include "tests/sim/sim_fixtures.h"
#include "timeline_fixtures.h"

namespace pipescope::gui {
namespace {

using namespace timeline_test;

// Every item of the same source against the rules: the other half of a
// transfer (same flow, other lane) first, else the first rule that matches.
Dependencies scan(const TimelineLayout& layout, const std::vector<const Timeline*>& sources,
                  std::size_t item) {
  Dependencies deps;
  const auto event = [&](std::size_t i) -> const TimelineEvent& {
    return sources[static_cast<std::size_t>(layout.items[i].source)]->events[layout.items[i].event];
  };
  const TimelineEvent& me = event(item);
  const bool transfer = me.kind == EventKind::kActivation || me.kind == EventKind::kGradient;
  const std::vector<RelatedKind> rules = related_kinds(me);
  for (std::size_t i = 0; i < layout.items.size(); ++i) {
    if (i == item || layout.items[i].source != layout.items[item].source) continue;
    const TimelineEvent& e = event(i);
    if (transfer && me.flow && e.flow == me.flow) {
      if (e.lane != me.lane) (me.lane == Lane::kSend ? deps.after : deps.before).push_back(i);
      continue;
    }
    for (const RelatedKind& r : rules) {
      if (e.kind == r.kind && e.stage == r.stage &&
          (r.any_micro_batch || e.micro_batch == me.micro_batch)) {
        (r.before ? deps.before : deps.after).push_back(i);
        break;
      }
    }
  }
  return deps;
}

void expect_same_as_scan(const TimelineLayout& layout,
                         const std::vector<const Timeline*>& sources) {
  std::size_t related = 0;
  for (std::size_t i = 0; i < layout.items.size(); ++i) {
    const Dependencies want = scan(layout, sources, i);
    const Dependencies got = dependencies_of(layout, sources, i);
    ASSERT_EQ(got.before, want.before) << "item " << i;
    ASSERT_EQ(got.after, want.after) << "item " << i;
    related += want.before.size() + want.after.size();
  }
  EXPECT_GT(related, layout.items.size());  // the timelines had dependencies to find
}

// (kind, stage, before, any micro-batch) of each related kind, as text.
std::vector<std::string> kinds_of(const TimelineEvent& e) {
  std::vector<std::string> out;
  for (const RelatedKind& r : related_kinds(e)) {
    out.push_back(std::string(r.before ? "<" : ">") + std::string(to_string(r.kind)) + " " +
                  std::to_string(r.stage) + (r.any_micro_batch ? " *" : ""));
  }
  return out;
}

TimelineEvent event(EventKind kind, int stage, std::optional<int> peer = std::nullopt) {
  TimelineEvent e;
  e.kind = kind;
  e.stage = stage;
  e.peer_stage = peer;
  return e;
}

TEST(TimelineDependencies, RelatedKindsFollowTheScheduleRules) {
  using K = EventKind;
  const auto name = [](K k) { return std::string(to_string(k)); };
  const std::string act = name(K::kActivation), grad = name(K::kGradient), ar = name(K::kAllReduce),
                    f = name(K::kForward), r = name(K::kRecompute), b = name(K::kBackward),
                    w = name(K::kWeight), o = name(K::kOptimizer);
  using V = std::vector<std::string>;
  // F(2): the activation from stage 1 and F(1) before; its own activation out,
  // F(3), and R(2) and B(2) of its stage after.
  EXPECT_EQ(kinds_of(event(K::kForward, 2)), (V{"<" + act + " 1", "<" + f + " 1", ">" + act + " 2",
                                                ">" + f + " 3", ">" + r + " 2", ">" + b + " 2"}));
  // B(2): the gradient from 3 and B(3), F(2), R(2) before; the gradient it sends,
  // B(1), W(2), and the all-reduce and optimizer step of stage 2 after.
  EXPECT_EQ(kinds_of(event(K::kBackward, 2)),
            (V{"<" + grad + " 3", "<" + b + " 3", "<" + f + " 2", "<" + r + " 2", ">" + grad + " 2",
               ">" + b + " 1", ">" + w + " 2", ">" + ar + " 2 *", ">" + o + " 2 *"}));
  // The optimizer step: every B and W of its stage, through the all-reduce.
  EXPECT_EQ(kinds_of(event(K::kOptimizer, 1)),
            (V{"<" + ar + " 1 *", "<" + b + " 1 *", "<" + ar + " 1 *", "<" + w + " 1 *"}));
  // A gradient sent by stage 3 goes to 2, or to the stage a trace names.
  EXPECT_EQ(kinds_of(event(K::kGradient, 3)), (V{"<" + b + " 3", ">" + b + " 2"}));
  EXPECT_EQ(kinds_of(event(K::kActivation, 3, 7)), (V{"<" + f + " 3", ">" + f + " 7"}));
  EXPECT_EQ(kinds_of(event(K::kAllReduce, 0)),
            (V{"<" + b + " 0 *", ">" + o + " 0 *", "<" + w + " 0 *", ">" + o + " 0 *"}));
}

TEST(TimelineDependencies, OfEveryOpOfASimulatedRunAndItsMeasuredCopy) {
  // K=4, M=6, GPipe with remat, and its copy 100 ns late as a second source.
  Scenario sc = testing::uniform_scenario(8, 4, 1000.0, 6, 6, true);
  for (LayerSpec& l : sc.model.layers) l.out_bytes = 1000;
  SimConfig config;
  config.stages = 4;
  const SimResult r = simulate(sc, config);
  Timeline late = r.timeline;
  for (TimelineEvent& e : late.events) e.start += 100, e.end += 100;
  const std::vector<const Timeline*> sources{&r.timeline, &late};
  expect_same_as_scan(layout_timelines(sources, {"", "measured"}, true), sources);
  expect_same_as_scan(layout_timelines(sources, {"", "measured"}, false), sources);
}

// Events of every kind with small stages and micro-batches (negative ones
// too, as in a corrupt trace), transfers with flows that several share or none.
Timeline random_timeline(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> kind(0, 7), stage(-1, 4), mb(-1, 5), device(0, 3),
      start(0, 10'000), duration(0, 50), flow(-1, 40), peer(-1, 4);
  Timeline t;
  t.device_names = {"d0", "d1", "d2", "d3"};
  for (std::size_t i = 0; i < n; ++i) {
    TimelineEvent e;
    e.kind = static_cast<EventKind>(kind(rng));
    const bool transfer = e.kind == EventKind::kActivation || e.kind == EventKind::kGradient;
    // Now and then a transfer on the compute lane, as a corrupt trace may have.
    e.lane = transfer ? static_cast<Lane>(rng() % 3)
                      : (e.kind == EventKind::kAllReduce ? Lane::kSend : Lane::kCompute);
    e.device = device(rng);
    e.stage = stage(rng);
    e.micro_batch = mb(rng);
    e.start = start(rng);
    e.end = e.start + duration(rng);
    if (transfer) {
      if (const int f = flow(rng); f >= 0) e.flow = static_cast<std::uint64_t>(f);
      if (const int p = peer(rng); p >= 0) e.peer_stage = p;
    }
    t.events.push_back(e);
  }
  return t;
}

TEST(TimelineDependencies, OfEveryItemOfRandomTimelines) {
  for (unsigned seed = 1; seed <= 4; ++seed) {
    const Timeline a = random_timeline(1'500, seed), b = random_timeline(500, seed + 100);
    const std::vector<const Timeline*> sources{&a, &b};
    expect_same_as_scan(layout_timelines(sources, {"", "measured"}, true), sources);
  }
}

class SimulatedDependencies : public ::testing::Test {
 protected:
  // "F0 s1 compute": label, stage and lane of each item.
  std::multiset<std::string> describe(const std::vector<std::size_t>& items) const {
    std::multiset<std::string> out;
    for (const std::size_t i : items) {
      const TimelineEvent& e = event_of(layout, src, i);
      out.insert(item_label(e) + " s" + std::to_string(e.stage) + " " +
                 std::string(to_string(e.lane)));
    }
    return out;
  }
  Dependencies of(EventKind kind, int stage, int mb, Lane lane = Lane::kCompute) const {
    return dependencies_of(layout, src, find(layout, src, kind, stage, mb, lane));
  }

  SimResult r = three_stages();
  std::vector<const Timeline*> src{&r.timeline};
  TimelineLayout layout = layout_timelines(src, {""}, true);
};

using Set = std::multiset<std::string>;

TEST_F(SimulatedDependencies, OfAForward) {
  const Dependencies f = of(EventKind::kForward, 1, 0);
  EXPECT_EQ(describe(f.before), (Set{"act 0 s0 send", "act 0 s0 recv", "F0 s0 compute"}));
  // After it: the activation it sends, the forward that reads it, and its
  // stage's recompute and backward of the same micro-batch.
  EXPECT_EQ(describe(f.after), (Set{"act 0 s1 send", "act 0 s1 recv", "F0 s2 compute",
                                    "R0 s1 compute", "B0 s1 compute"}));
  // The first stage has nothing before it, the last sends nothing on.
  EXPECT_TRUE(of(EventKind::kForward, 0, 1).before.empty());
  EXPECT_EQ(describe(of(EventKind::kForward, 2, 1).after), (Set{"R1 s2 compute", "B1 s2 compute"}));
  EXPECT_EQ(describe(of(EventKind::kForward, 2, 1).before),
            (Set{"act 1 s1 send", "act 1 s1 recv", "F1 s1 compute"}));
}

TEST_F(SimulatedDependencies, OfABackward) {
  const Dependencies b = of(EventKind::kBackward, 1, 0);
  EXPECT_EQ(describe(b.before), (Set{"grad 0 s2 send", "grad 0 s2 recv", "B0 s2 compute",
                                     "F0 s1 compute", "R0 s1 compute"}));
  // After it: the gradient it sends, the backward that reads it, and its
  // stage's optimizer step, which waits for every backward of the stage.
  EXPECT_EQ(describe(b.after),
            (Set{"grad 0 s1 send", "grad 0 s1 recv", "B0 s0 compute", "optimizer s1 compute"}));
}

TEST_F(SimulatedDependencies, OfARecomputation) {
  const Dependencies rr = of(EventKind::kRecompute, 1, 0);
  EXPECT_EQ(describe(rr.before), (Set{"F0 s1 compute"}));
  EXPECT_EQ(describe(rr.after), (Set{"B0 s1 compute"}));
}

TEST_F(SimulatedDependencies, OfATransfer) {
  // The send of micro-batch 1's activation from stage 0: the forward that
  // produced it before; its receive and the forward that consumes it after.
  const Dependencies send = of(EventKind::kActivation, 0, 1, Lane::kSend);
  EXPECT_EQ(describe(send.before), (Set{"F1 s0 compute"}));
  EXPECT_EQ(describe(send.after), (Set{"act 1 s0 recv", "F1 s1 compute"}));
  // Its receive: the send is before it.
  const Dependencies recv = of(EventKind::kActivation, 0, 1, Lane::kRecv);
  EXPECT_EQ(describe(recv.before), (Set{"F1 s0 compute", "act 1 s0 send"}));
  EXPECT_EQ(describe(recv.after), (Set{"F1 s1 compute"}));
  // The halves found are the same transfer, not another micro-batch's.
  const std::size_t send_item = find(layout, src, EventKind::kActivation, 0, 1, Lane::kSend);
  for (const std::size_t i : recv.before) EXPECT_EQ(event_of(layout, src, i).micro_batch, 1);
  EXPECT_EQ(std::count(recv.before.begin(), recv.before.end(), send_item), 1);
  // Gradients run the other way.
  const Dependencies grad = of(EventKind::kGradient, 2, 0, Lane::kSend);
  EXPECT_EQ(describe(grad.before), (Set{"B0 s2 compute"}));
  EXPECT_EQ(describe(grad.after), (Set{"grad 0 s2 recv", "B0 s1 compute"}));
}

TEST_F(SimulatedDependencies, OfTheOptimizerAndOfNothing) {
  const Dependencies opt = of(EventKind::kOptimizer, 1, 0);
  EXPECT_EQ(describe(opt.before), (Set{"B0 s1 compute", "B1 s1 compute"}));
  EXPECT_TRUE(opt.after.empty());
  const Dependencies none = dependencies_of(layout, src, layout.items.size());
  EXPECT_TRUE(none.before.empty());
  EXPECT_TRUE(none.after.empty());
}

TEST(TimelineLayout, DependenciesOfATransferWithoutItsReceivingStage) {
  // A trace may leave out the receiving stage: activations go to s + 1 and
  // gradients to s - 1. Other micro-batches and stages are not related.
  Timeline t;
  t.device_names = {"d0", "d1"};
  t.events.push_back(ev(0, Lane::kCompute, EventKind::kForward, 0, 0, 0, 10));
  t.events.push_back(ev(0, Lane::kCompute, EventKind::kForward, 0, 1, 10, 20));
  t.events.push_back(ev(0, Lane::kSend, EventKind::kActivation, 0, 0, 10, 15));
  t.events.push_back(ev(1, Lane::kRecv, EventKind::kActivation, 0, 0, 12, 17));
  t.events.push_back(ev(1, Lane::kCompute, EventKind::kForward, 1, 0, 17, 27));
  t.events.push_back(ev(1, Lane::kCompute, EventKind::kBackward, 1, 0, 27, 47));
  t.events.push_back(ev(1, Lane::kSend, EventKind::kGradient, 1, 0, 47, 50));
  t.events.push_back(ev(0, Lane::kRecv, EventKind::kGradient, 1, 0, 48, 51));
  t.events.push_back(ev(0, Lane::kCompute, EventKind::kBackward, 0, 0, 51, 71));
  t.events[2].flow = t.events[3].flow = 7;
  t.events[6].flow = t.events[7].flow = 8;
  const std::vector<const Timeline*> src{&t};
  const TimelineLayout layout = layout_timelines(src, {""}, true);
  const auto events = [&](const std::vector<std::size_t>& items) {
    std::vector<std::size_t> out;
    for (const std::size_t i : items) out.push_back(layout.items[i].event);
    std::sort(out.begin(), out.end());
    return out;
  };
  const Dependencies act =
      dependencies_of(layout, src, find(layout, src, EventKind::kActivation, 0, 0, Lane::kRecv));
  EXPECT_EQ(events(act.before), (std::vector<std::size_t>{0, 2}));
  EXPECT_EQ(events(act.after), (std::vector<std::size_t>{4}));
  const Dependencies grad =
      dependencies_of(layout, src, find(layout, src, EventKind::kGradient, 1, 0, Lane::kSend));
  EXPECT_EQ(events(grad.before), (std::vector<std::size_t>{5}));
  EXPECT_EQ(events(grad.after), (std::vector<std::size_t>{7, 8}));
  const Dependencies f = dependencies_of(layout, src, find(layout, src, EventKind::kForward, 1, 0));
  EXPECT_EQ(events(f.before), (std::vector<std::size_t>{0, 2, 3}));
  EXPECT_EQ(events(f.after), (std::vector<std::size_t>{5}));  // its stage's backward
}

}  // namespace
}  // namespace pipescope::gui
