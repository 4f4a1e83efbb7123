// The planner's search over ZeRO stages and sequence parallelism, and the
// floor under a step by which it leaves candidates unsimulated: the orders
// its pruning rests on, checked by simulation; its best plan against every
// stage and split planned alone; the floor against simulated steps.

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "costmodels/cost_model.h"
#include "floor_fixtures.h"
#include "planner_fixtures.h"
#include "scenario_docs.h"
#include "sim/engine/device_partition.h"
#include "sim/engine/schedule.h"
#include "sim/engine/simulator.h"
#include "sim/plan/planner.h"
#include "sim/plan/step_floor.h"
#include "sim/scenario/scenario_io.h"
#include "sim_fixtures.h"

namespace pipescope {
namespace {

using nlohmann::json;
using testing::small_node;

struct Outcome {
  SimTime step = 0;
  Bytes peak = 0;
};

// One configuration of `node` at T = 2, K stages and D = 4 / K replicas.
Outcome run(int zero, bool sequence, ScheduleKind schedule, Remat remat, int K) {
  const Scenario sc =
      small_node(80.0, {{"tensor_parallel", 2}, {"zero", zero}, {"sequence_parallel", sequence}});
  const int D = 4 / K;
  SimConfig config;
  config.stages = K;
  config.micro_batches = 4;
  config.schedule = schedule;
  config.chunks = schedule == ScheduleKind::kInterleaved1F1B ? 2 : 1;
  config.remat = remat;
  config.data_parallel = data_parallel_ring(sc.cluster, K, D);
  config.record_timeline = false;
  const SimResult r = simulate(replica_scenario(sc, K, D), config);
  Outcome out{r.metrics.step_time, 0};
  for (const auto& d : r.metrics.devices) out.peak = std::max(out.peak, d.peak_memory);
  return out;
}

// What the planner's pruning assumes, by simulation: ZeRO-1 is never slower
// nor larger than 0; 2 never faster than 1 and smaller; sequence parallelism
// never slower nor larger. ZeRO-3, which the planner tries where 1 and 2 do
// not fit, keeps less than 2 on stages of five layers or more (the
// shard and two layers gathered against whole weights: 8 + 2 x 2/5 bytes a
// parameter against 9 at D = 2), more on the interleaved runs' chunks of two
// or three.
TEST(ZeroPlanner, TheOrdersItsPruningRestsOnHold) {
  int checked = 0;
  for (const ScheduleKind schedule : {ScheduleKind::kGpipe, ScheduleKind::k1F1B,
                                      ScheduleKind::kZbH1, ScheduleKind::kInterleaved1F1B}) {
    for (const Remat remat : {Remat::kNever, Remat::kAlways}) {
      for (const int K : {1, 2}) {
        if (schedule == ScheduleKind::kInterleaved1F1B && K == 1) continue;
        for (const bool sequence : {false, true}) {
          const Outcome z0 = run(0, sequence, schedule, remat, K);
          const Outcome z1 = run(1, sequence, schedule, remat, K);
          const Outcome z2 = run(2, sequence, schedule, remat, K);
          const Outcome z3 = run(3, sequence, schedule, remat, K);
          EXPECT_LE(z1.step, z0.step);
          EXPECT_LT(z1.peak, z0.peak);
          EXPECT_GE(z2.step, z1.step);
          EXPECT_LT(z2.peak, z1.peak);
          if (schedule == ScheduleKind::kInterleaved1F1B) {
            EXPECT_GT(z3.peak, z2.peak);
          } else {
            EXPECT_LT(z3.peak, z2.peak);
          }
          ++checked;
        }
        for (const int zero : {0, 1, 2}) {
          const Outcome whole = run(zero, false, schedule, remat, K);
          const Outcome split = run(zero, true, schedule, remat, K);
          EXPECT_LE(split.step, whole.step);
          EXPECT_LT(split.peak, whole.peak);
        }
      }
    }
  }
  EXPECT_EQ(checked, 28);
}

double best_of(const PlanReport& r) {
  return r.ranked.empty() ? 0.0 : r.ranked.front().samples_per_s;
}

// The planner's best, ZeRO and sequence parallelism searched, is at least
// the best of planning each ZeRO stage from 0 to 2 and each sequence split
// alone, and at most the best with ZeRO-3 too (planned where 1 and 2 do not
// fit), with memory ample and tight.
TEST(ZeroPlanner, BestPlanIsTheBestOfEveryStageAndSplitPlannedAlone) {
  for (const double gib : {80.0, 1.0, 0.6}) {
    SCOPED_TRACE(gib);
    PlanRequest req;
    req.max_micro_batches = 4;
    const PlanReport searched = run_planner(small_node(gib), req);
    double brute = 0.0;
    double with_three = 0.0;
    for (int zero = 0; zero <= 3; ++zero) {
      for (const bool sequence : {false, true}) {
        for (const int T : {1, 2, 4, 8}) {
          if (sequence && T == 1) continue;
          const Scenario sc = small_node(
              gib, {{"tensor_parallel", T}, {"zero", zero}, {"sequence_parallel", sequence}});
          const double best = best_of(run_planner(sc, req));
          with_three = std::max(with_three, best);
          if (zero < 3) brute = std::max(brute, best);
        }
      }
    }
    ASSERT_GT(brute, 0.0);
    EXPECT_GE(best_of(searched), brute);
    EXPECT_LE(best_of(searched), with_three);
  }
}

// Under a framework whose ZeRO-1 all-reduces the gradients whole
// (zero1_allreduce: more than ZeRO-0 moves), the search tries ZeRO-0 too and
// prunes none of stages 0 to 2 by another: its best is the best of each of
// them planned alone (ZeRO-3 is planned only where they do not fit).
TEST(ZeroPlanner, AZeroOneThatAllReducesOrdersNoStage) {
  const json framework = {{"framework", {{"profile", "ideal"}, {"zero1_allreduce", true}}}};
  PlanRequest req;
  req.max_micro_batches = 4;
  const PlanReport searched = run_planner(small_node(80.0, framework), req);
  double brute = 0.0;
  for (int zero = 0; zero <= 2; ++zero) {
    for (const int T : {1, 2, 4, 8}) {
      json training = framework;
      training.update({{"tensor_parallel", T}, {"zero", zero}});
      brute = std::max(brute, best_of(run_planner(small_node(80.0, training), req)));
    }
  }
  ASSERT_GT(brute, 0.0);
  EXPECT_DOUBLE_EQ(best_of(searched), brute);
  // ZeRO-0 was planned beside 1 and 2 (without the flag it is never tried).
  const auto planned = [&](int zero) {
    return std::any_of(searched.ranked.begin(), searched.ranked.end(),
                       [&](const PlanCandidate& c) { return c.zero == zero; });
  };
  EXPECT_TRUE(planned(0) && planned(1) && planned(2));
}

// Eight replicas of the whole model (T = 1, K = 1, one micro-batch of 4,
// remat off) at 0.9 GiB a device: ZeRO-2 keeps the whole weights and needs
// 1005 MiB, ZeRO-1 the whole gradients too (1.17 GiB); ZeRO-3 keeps the
// shard and two layers gathered and fits, under each of the three
// schedules, in the same search.
TEST(ZeroPlanner, ZeroThreeFitsWhereTwoDoesNot) {
  PlanRequest req;
  req.max_micro_batches = 4;
  const auto whole_model = [](const PlanCandidate& c) {
    return c.stages == 1 && c.data_parallel == 8 && c.remat == Remat::kNever &&
           c.micro_batches == 1;
  };
  const PlanReport searched = run_planner(small_node(0.9, {{"tensor_parallel", 1}}), req);
  int refused = 0;
  for (const PlanCandidate& c : searched.rejected) {
    if (!whole_model(c)) continue;
    EXPECT_LT(c.zero, 3) << c.rejected;
    EXPECT_GT(c.memory_needed, Bytes{1000} << 20) << c.rejected;
    ++refused;
  }
  EXPECT_EQ(refused, 6) << "ZeRO-1 and ZeRO-2 under gpipe, 1f1b and zb-h1";
  int fit = 0;
  for (const PlanCandidate& c : searched.ranked) fit += whole_model(c) && c.zero == 3 ? 1 : 0;
  EXPECT_EQ(fit, 3);
}

// ZeRO-1 stands for ZeRO-2 (and remat off for the other modes) only where
// memory did not shape its cut. GPT-3 175B on 16 stages of 64 replicas,
// 24 micro-batches, zb-v, remat on: ZeRO-1 fits only on a cut squeezed into
// memory, and ZeRO-2, on the cut of 6 blocks a device, is a third faster.
TEST(ZeroPlanner, ACutSqueezedIntoMemoryStandsForNoOther) {
  // Without a framework's fp32 gradients, which leave ZeRO-1 no cut at all.
  const Scenario sc =
      load_scenario(std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/gpt3-175b-1024.json",
                    {"training.framework=ideal", "cluster.preset=a100-80g"});
  PlanRequest req;
  req.stages = 16;
  req.micro_batches = 24;
  req.schedule = ScheduleKind::kZbV;
  req.remat = Remat::kAlways;
  const PlanReport r = run_planner(sc, req);
  ASSERT_FALSE(r.dominated.empty());  // ZeRO-3, where ZeRO-2 fits so
  for (const PlanCandidate& c : r.dominated) EXPECT_EQ(c.zero, 3) << c.rejected;
  const auto at = [&](int zero) {
    const auto c = std::find_if(r.ranked.begin(), r.ranked.end(),
                                [&](const PlanCandidate& p) { return p.zero == zero; });
    return c == r.ranked.end() ? nullptr : &*c;
  };
  ASSERT_NE(at(1), nullptr);
  ASSERT_NE(at(2), nullptr);
  EXPECT_FALSE(at(1)->cut_unbound);
  EXPECT_TRUE(at(2)->cut_unbound);
  EXPECT_GT(at(2)->samples_per_s, 1.25 * at(1)->samples_per_s);
}

// Where memory is tight, the planner turns to ZeRO-2 and says which stage
// each plan uses; the plan file records it.
TEST(ZeroPlanner, TightMemoryChoosesAStageThatFits) {
  PlanRequest req;
  req.max_micro_batches = 4;
  const PlanReport r = run_planner(small_node(0.6), req);
  ASSERT_FALSE(r.ranked.empty());
  const PlanCandidate& best = r.ranked.front();
  EXPECT_EQ(best.zero, best.scenario->training.zero);
  EXPECT_NE(best.label().find("ZeRO-"), std::string::npos);
  for (const PlanCandidate& c : r.ranked) {
    EXPECT_EQ(c.zero, c.data_parallel > 1 ? c.zero : 0);
    EXPECT_TRUE(c.zero != 0 || c.data_parallel == 1) << c.label();
  }
}

// The floor under a step is never above the step simulated, on every cut the
// planner simulated, under every schedule and remat mode, and the floor under
// every cut never above that of the cut. On two nodes under ZeRO-3, whose
// replicas gather each layer across InfiniBand, the gathers set the floor of
// most candidates; under ZeRO-2 and 3 the reduce-scatters after every
// backward, on the same link, raise it further for some.
TEST(StepFloor, IsNeverAboveTheSimulatedStep) {
  int checked = 0;
  int zero3 = 0;         // ZeRO-3 candidates with replicas, all on two nodes
  int gathers_set = 0;   // candidates whose floor the gathers raise
  int scatters_set = 0;  // ZeRO-2/3 candidates whose floor the reduce-scatters raise
  Scenario two_nodes = small_node(80.0, {{"tensor_parallel", 1}, {"zero", 3}});
  two_nodes.cluster.rank_order = RankOrder::kTpPpDp;  // the replicas in different nodes
  two_nodes.cluster.devices = 16;
  two_nodes.cluster.build_topology();
  for (const Scenario& sc : {small_node(80.0), small_node(1.0), two_nodes}) {
    PlanRequest req;
    req.max_micro_batches = 8;
    req.exact_top = 100000;  // simulate everything not dominated
    const PlanReport r = run_planner(sc, req);
    for (const PlanCandidate& c : r.ranked) {
      const testing::SimulatedCut sim = testing::simulated_cut(c);
      const PartitionProblem& p = sim.problem;
      const std::vector<StageRange>& cut = sim.cut;
      EXPECT_EQ(p.dense_grad_bytes.empty(), c.zero < 2 || c.data_parallel == 1) << c.label();
      PartitionProblem gathers_only = testing::without_reduce_scatters(p);
      const SimTime gathers_floor = step_floor(gathers_only, cut, c.stages);
      gathers_only.gathers.clear();
      const SimTime compute_floor = step_floor(gathers_only, cut, c.stages);
      const SimTime floor = step_floor(p, cut, c.stages);
      EXPECT_LE(floor, c.result.metrics.step_time) << c.label();
      EXPECT_LE(step_floor_any_cut(p, c.stages), floor) << c.label();
      EXPECT_GT(floor, c.result.metrics.step_time / 4) << c.label();  // not a trivial floor
      gathers_set += gathers_floor > compute_floor ? 1 : 0;
      scatters_set += floor > gathers_floor ? 1 : 0;
      zero3 += !p.gathers.empty() ? 1 : 0;
      ++checked;
    }
  }
  EXPECT_GT(checked, 200);
  EXPECT_GT(2 * gathers_set, zero3) << gathers_set << " of " << zero3;  // most
  EXPECT_GT(scatters_set, 0);
}

// A pipeline of two stages under ZeRO-3 over 2 replicas, one micro-batch:
// stage 0 a layer that computes long and holds one parameter, stage 1 three
// that compute little and gather much. Device 1's first op gathers its
// layers at once, waiting for nothing, while stage 0 computes, so its step
// is shorter than the fill and all of its gathers; the floor leaves those
// of its first op out and stays under the step, where counting them would
// not.
TEST(StepFloor, TheFirstGatherMayRunDuringTheFill) {
  Scenario sc = testing::uniform_scenario(4, 4, 1.0, 2, 1, false);
  sc.model.layers[0].fwd_flops = 4e6;
  sc.model.layers[0].bwd_flops = 8e6;
  sc.model.layers[0].params = 1;
  for (int l = 1; l < 4; ++l) sc.model.layers[static_cast<std::size_t>(l)].params = 250000;
  sc.training.bytes_per_param = 16.0;
  sc.training.zero = 3;
  const int K = 2;
  const int D = 2;
  const Scenario replica = replica_scenario(sc, K, D);
  SimConfig config;
  config.stages = K;
  config.micro_batches = 1;
  config.schedule = ScheduleKind::kGpipe;
  config.remat = Remat::kNever;
  config.stage_ranges = {{0, 0}, {1, 3}};
  config.data_parallel = data_parallel_ring(sc.cluster, K, D);
  config.record_timeline = false;
  const std::unique_ptr<CostModel> cost = make_cost_model(replica);
  const SimResult r = simulate(replica, config, *cost);
  PartitionProblem p =
      partition_problem(replica, *cost, K, 1, Remat::kNever, ScheduleKind::kGpipe, 1, nullptr);
  p.gathers = zero_gathers(replica, config.data_parallel);
  ASSERT_EQ(p.gathers.size(), 4u);
  const SimTime floor = step_floor(p, *config.stage_ranges, K);
  PartitionProblem without = p;
  without.gathers.clear();
  EXPECT_LT(step_floor(without, *config.stage_ranges, K), floor) << "the gathers set the floor";
  EXPECT_LE(floor, r.metrics.step_time);
  EXPECT_GT(floor + p.gathers[1] + p.gathers[2] + p.gathers[3], r.metrics.step_time)
      << "the first op's gathers overlap the fill";
  EXPECT_LE(step_floor_any_cut(p, K), floor);
}

// Three stages over 2 replicas under ZeRO-2 and 3: the first two forward at
// once and backward long, the last computes next to nothing and holds every
// parameter. Its link to the replicas, busy with its gathers and its
// reduce-scatters after each backward, is what its step waits for, the last
// reduce-scatter beside the others' long backwards (the drain). The floor
// counts that link's load from the fill, not the drain after it, and stays
// under every step.
TEST(StepFloor, TheLastReduceScatterRunsBesideTheDrain) {
  Scenario sc = testing::uniform_scenario(3, 6, 1e3, 8, 1, false);
  for (int l = 0; l < 2; ++l) sc.model.layers[static_cast<std::size_t>(l)].bwd_flops = 4e7;
  sc.model.layers[2].params = 20000000;
  sc.training.bytes_per_param = 16.0;
  const int K = 3, D = 2;
  int checked = 0;
  int raised = 0;  // floors the reduce-scatters raise
  for (const int zero : {2, 3}) {
    sc.training.zero = zero;
    for (const ScheduleKind kind : {ScheduleKind::kGpipe, ScheduleKind::k1F1B}) {
      for (const int M : {1, 2, 4}) {
        const Scenario replica = replica_scenario(sc, K, D);
        SimConfig config;
        config.stages = K;
        config.micro_batches = M;
        config.schedule = kind;
        config.remat = Remat::kNever;
        config.stage_ranges = {{0, 0}, {1, 1}, {2, 2}};
        config.data_parallel = data_parallel_ring(sc.cluster, K, D);
        config.record_timeline = false;
        const std::unique_ptr<CostModel> cost = make_cost_model(replica);
        const SimResult r = simulate(replica, config, *cost);
        PartitionProblem p =
            partition_problem(replica, *cost, K, M, Remat::kNever, kind, 1, nullptr);
        p.gathers = zero_gathers(replica, config.data_parallel);
        add_zero_reduce_scatters(p, replica, config.data_parallel);
        const SimTime floor = step_floor(p, *config.stage_ranges, K);
        EXPECT_LE(floor, r.metrics.step_time)
            << "ZeRO-" << zero << " " << to_string(kind) << " M=" << M;
        const SimTime without =
            step_floor(testing::without_reduce_scatters(p), *config.stage_ranges, K);
        raised += floor > without ? 1 : 0;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 12);
  EXPECT_GT(raised, 0);  // where the link, not the compute, sets the floor
}

// Leaving out what cannot beat the best 16 changes none of them.
TEST(StepFloor, CandidatesLeftOutCannotBeatTheBest) {
  PlanRequest bounded;
  bounded.max_micro_batches = 8;
  PlanRequest every = bounded;
  every.exact_top = 100000;
  const PlanReport a = run_planner(small_node(80.0), bounded);
  const PlanReport b = run_planner(small_node(80.0), every);
  EXPECT_FALSE(a.bounded.empty());
  EXPECT_TRUE(b.bounded.empty());
  ASSERT_GE(a.ranked.size(), 16u);
  for (std::size_t i = 0; i < 16; ++i) {
    EXPECT_EQ(a.ranked[i].label(), b.ranked[i].label()) << i;
    EXPECT_EQ(a.ranked[i].samples_per_s, b.ranked[i].samples_per_s) << i;
  }
  for (const PlanCandidate& c : a.bounded) {
    EXPECT_NE(c.rejected.find("not simulated"), std::string::npos);
  }
}

// Up to 9 layers of uneven forward, backward and recompute, on 1 to 4
// devices of one stage each or, under a chunked schedule, 2 or 3.
PartitionProblem random_floor_problem(std::mt19937_64& rng, ScheduleKind schedule, int& devices) {
  PartitionProblem p;
  const int v = !takes_chunks(schedule) ? 1
                : v_shaped(schedule)    ? 2
                                        : 2 + static_cast<int>(rng() % 2);
  devices = 1 + static_cast<int>(rng() % 4);
  if (v > 1 && devices * v > 9) devices = 1 + static_cast<int>(rng() % 3);
  const int L = std::uniform_int_distribution<int>(devices * v, 9)(rng);
  std::uniform_int_distribution<SimTime> time(1, 1000);
  for (int l = 0; l < L; ++l) {
    p.layers.push_back({time(rng), time(rng), time(rng), 10, 10});
  }
  p.cut_bytes.assign(static_cast<std::size_t>(L) + 1, 100);
  p.stages = devices * v;
  for (int s = 0; s < p.stages; ++s)
    p.stage_device.push_back(stage_device_of(schedule, s, devices));
  p.micro_batches = 1 + static_cast<int>(rng() % 12);
  p.remat = kAllRemats[rng() % std::size(kAllRemats)];
  p.backward_split = splits_backward(schedule);
  return p;
}

// The floor under every cut is the least of step_floor over every cut where
// each device runs one stage (GPipe, 1F1B, ZB-H1), to its bisection's
// precision, and below it under every schedule, ZeRO-3's gathers in a third
// of the problems: brute force over every cut of random problems.
TEST(StepFloor, AnyCutIsTheLeastOverEveryCut) {
  std::mt19937_64 rng(20261127);
  int tight = 0;
  int gathers_set = 0;  // trials whose floor the gathers raise
  for (int trial = 0; trial < 600; ++trial) {
    const ScheduleKind schedule = kAllSchedules[trial % std::size(kAllSchedules)];
    int devices = 1;
    PartitionProblem p = random_floor_problem(rng, schedule, devices);
    // ZeRO-3's gathers in a third of the trials, now and then the larger term.
    const bool gathers = trial % 3 == 2;
    if (gathers) {
      for (std::size_t l = 0; l < p.layers.size(); ++l) {
        p.gathers.push_back(static_cast<SimTime>(rng() % 3000));
      }
    }
    SimTime least = std::numeric_limits<SimTime>::max();
    std::vector<StageRange> cut;
    testing::for_each_cut(static_cast<int>(p.layers.size()), p.stages, cut,
                          [&](const std::vector<StageRange>& c) {
                            least = std::min(least, step_floor(p, c, devices));
                          });
    const SimTime any = step_floor_any_cut(p, devices);
    EXPECT_LE(any, least) << trial << " " << to_string(schedule);
    if (gathers) {
      PartitionProblem without = p;
      without.gathers.clear();
      gathers_set += any > step_floor_any_cut(without, devices) ? 1 : 0;
    }
    if (p.stages == devices && !gathers) {
      EXPECT_GE(any + (least >> 24) + 1, least) << trial << " " << to_string(schedule);
      ++tight;
    }
  }
  EXPECT_GT(tight, 100);
  EXPECT_GT(gathers_set, 100);  // 188 of the 200 with gathers: the term is exercised
}

// A small transformer whose blocks, embedding and head vary with `rng`, on a
// DGX A100 node of 8 GPUs.
Scenario random_small_node(std::mt19937_64& rng) {
  json doc = testing::docs::good_doc();
  const int d = 256 << (rng() % 3);
  doc["model"] = {{"family", "transformer"},
                  {"layers", 2 + static_cast<int>(rng() % 6)},
                  {"d_model", d},
                  {"heads", 8},
                  {"seq_len", 128 << (rng() % 3)},
                  {"vocab", 4096 << (rng() % 4)},
                  {"dtype", "bf16"}};
  doc["cluster"] = {{"preset", "dgx-a100"}, {"devices", 8}};
  doc["training"] = {{"global_batch", 48}, {"micro_batches", 4}, {"optimizer", "adam"}};
  return parse_scenario(doc, "node.json");
}

// A random cut of `layers` layers into `stages` of at least a layer each.
std::vector<StageRange> random_cut(std::mt19937_64& rng, int layers, int stages) {
  std::vector<int> ends(static_cast<std::size_t>(layers - 1));
  std::iota(ends.begin(), ends.end(), 0);
  std::shuffle(ends.begin(), ends.end(), rng);
  ends.resize(static_cast<std::size_t>(stages - 1));
  std::sort(ends.begin(), ends.end());
  ends.push_back(layers - 1);
  std::vector<StageRange> cut;
  for (const int last : ends) cut.push_back({cut.empty() ? 0 : cut.back().last_layer + 1, last});
  return cut;
}

// The floors under every cut and under one cut are never above the step
// simulated on that cut: random models, cuts, K and M, under every schedule
// and remat mode the planner tries.
TEST(StepFloor, IsNeverAboveTheSimulatedStepOfRandomCuts) {
  std::mt19937_64 rng(27);
  int checked = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const Scenario sc = random_small_node(rng);
    const int layers = static_cast<int>(sc.model.layers.size());
    for (const ScheduleKind schedule : kAllSchedules) {
      const int K = 1 << (rng() % 3);
      const int M = std::array{1, 2, 3, 4, 6, 8, 12}[rng() % 7];
      const int v = takes_chunks(schedule) ? 2 : 1;
      if (!schedule_shape_problem(schedule, K, M, v).empty() || K * v > layers) continue;
      const Remat remat = kAllRemats[rng() % std::size(kAllRemats)];
      const Scenario replica = replica_scenario(sc, K, 1);
      const std::unique_ptr<CostModel> cost = make_cost_model(replica);
      const PartitionProblem p =
          partition_problem(replica, *cost, K * v, M, remat, schedule, v, nullptr);
      SimConfig config;
      config.stages = K;
      config.micro_batches = M;
      config.schedule = schedule;
      config.chunks = v;
      config.remat = remat;
      config.record_timeline = false;
      config.stage_ranges = random_cut(rng, layers, K * v);
      const SimResult r = simulate(replica, config, *cost);
      const SimTime floor = step_floor(p, *config.stage_ranges, K);
      EXPECT_LE(floor, r.metrics.step_time) << trial << " " << to_string(schedule);
      EXPECT_LE(step_floor_any_cut(p, K), floor) << trial << " " << to_string(schedule);
      ++checked;
    }
  }
  EXPECT_GT(checked, 200);
}

}  // namespace
}  // namespace pipescope
