// The planner, the sweep and the capacity search: each against the simulator it
// is built on, and the trade-off the planner exists for.

#include "sim/plan/planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/engine/device_partition.h"
#include "sim/engine/simulator.h"
#include "sim/plan/capacity.h"
#include "sim/plan/sweep.h"
#include "sim/scenario/scenario_io.h"
#include "sim_fixtures.h"

namespace pipescope {
namespace {

// The simulation of one of candidate c's replicas, as the planner runs it
// (all-reducing over the replicas' ring of `sc`'s cluster).
SimConfig config_of(const Scenario& sc, const PlanCandidate& c) {
  SimConfig config;
  config.stages = c.stages;
  config.micro_batches = c.micro_batches;
  config.schedule = c.schedule;
  config.chunks = c.chunks;
  config.remat = c.remat;
  config.data_parallel = data_parallel_ring(sc.cluster, c.stages, c.data_parallel);
  config.record_timeline = false;
  return config;
}

// 8 equal layers of 1000 FLOPs per sample on 4 exact devices, batch 16.
Scenario small() {
  Scenario sc = testing::uniform_scenario(8, 4, 1000.0, 16, 4, true);
  for (LayerSpec& l : sc.model.layers) {
    l.params = 100;
    l.stash_bytes = 1000;
    l.out_bytes = 10;
  }
  sc.training.bytes_per_param = 16;
  sc.training.zero_given = true;  // replicas keep everything (ZeRO 0): the planner keeps it
  return sc;
}

TEST(Planner, TriesEveryDivisorAndRanksByThroughput) {
  PlanRequest every;
  every.exact_top = 1000;  // simulate everything not dominated
  const PlanReport r = run_planner(small(), every);
  // K in {1, 2, 4}; D = 4 / K; M divides 16 / D; gpipe, 1f1b and zb-h1; remat
  // never, except-last and always, except-last not with M = 1 (where it is
  // never). Interleaved: K > 1, M a multiple of K, v in {2, 4} with K v <= 8
  // layers: K=2 M in {2, 4, 8} v in {2, 4}, K=4 M in {4, 8, 16} v = 2.
  // Looped BFS: K > 1, any M, the same v: K=2 M in {1, 2, 4, 8} v in {2, 4},
  // K=4 M in {1, 2, 4, 8, 16} v = 2. ZB-V: K > 1, v = 2, any M: as many again
  // as looped BFS's v = 2. Interleaved zero bubble: as looped BFS (M a multiple
  // of max(1, M / K) holds for every M here). DualPipeV: v = 2, M >= 2K: K=2 M
  // in {4, 8}, K=4 M in {8, 16}, three remat modes each.
  const auto remats = [](int divisors) { return 2 + 3 * (divisors - 1); };
  const std::size_t one_stage_a_device =
      3 * (remats(3) /* M | 4 */ + remats(4) /* M | 8 */ + remats(5) /* M | 16 */);
  const std::size_t interleaved = 3 * (3 * 2 + 3 * 1);
  const std::size_t looped_bfs = 2 * remats(4) + remats(5);
  const std::size_t zb_v = remats(4) + remats(5);
  const std::size_t interleaved_zb = looped_bfs;
  const std::size_t dualpipe_v = 4 * 3;
  const std::size_t expected =
      one_stage_a_device + interleaved + looped_bfs + zb_v + interleaved_zb + dualpipe_v;
  EXPECT_EQ(r.ranked.size() + r.rejected.size() + r.dominated.size(), expected);
  EXPECT_TRUE(r.rejected.empty());
  // Every shape fits without remat here, so only remat off is simulated; the
  // others, simulated by brute force, are never faster than it.
  EXPECT_EQ(r.dominated.size(), expected - r.ranked.size());
  for (const PlanCandidate& c : r.ranked) EXPECT_EQ(c.remat, Remat::kNever);
  for (const PlanCandidate& d : r.dominated) {
    SimConfig cfg = config_of(small(), d);
    const Scenario replica = replica_scenario(small(), d.stages, d.data_parallel);
    const SimResult slower = simulate(replica, cfg);
    cfg.remat = Remat::kNever;
    const SimResult off = simulate(replica, cfg);
    EXPECT_TRUE(slower.metrics.fits()) << d.label();
    EXPECT_GE(slower.metrics.step_time, off.metrics.step_time) << d.label();
  }
  for (std::size_t i = 1; i < r.ranked.size(); ++i) {
    EXPECT_GE(r.ranked[i - 1].samples_per_s, r.ranked[i].samples_per_s);
  }
  // Each ranked figure is D times the simulation of one replica, its gradient
  // all-reduce included.
  for (const PlanCandidate& c : r.ranked) {
    const SimResult sim =
        simulate(replica_scenario(small(), c.stages, c.data_parallel), config_of(small(), c));
    EXPECT_DOUBLE_EQ(c.samples_per_s, c.data_parallel * sim.metrics.samples_per_s) << c.label();
  }
  // Pure data parallelism (K=1, D=4) has no bubble but all-reduces all 3200
  // bytes of gradients after the backward, 4.8 us over 1 GB/s links; K=2, D=2
  // all-reduces half as much over half as many replicas, stage 1's while stage 0
  // still computes, and wins without recompute.
  EXPECT_EQ(r.ranked.front().stages, 2);
  EXPECT_EQ(r.ranked.front().data_parallel, 2);
  EXPECT_EQ(r.ranked.front().remat, Remat::kNever);
}

TEST(Planner, ChoosesMBetweenBubbleAndSmallOpInefficiency) {
  // One pipeline of 4 stages. Small micro-batches pay half_flops per op; large M
  // shrinks the bubble: the best M lies strictly inside the range.
  Scenario sc = small();
  sc.training.global_batch = 256;
  sc.cluster.device.efficiency = EfficiencyCurve{1.0, 20000.0};
  PlanRequest req;
  req.stages = 4;
  req.remat = Remat::kNever;
  const PlanReport r = run_planner(sc, req);
  ASSERT_FALSE(r.ranked.empty());
  const int best_m = r.ranked.front().micro_batches;
  EXPECT_GT(best_m, 1);
  EXPECT_LT(best_m, 256);
}

TEST(Planner, RejectsWhatDoesNotFitAndSaysWhy) {
  Scenario sc = small();
  // Weights alone: 8 layers x 100 x 16 B = 12,800 B; a stage of 2 layers holds
  // 3,200 B plus activations.
  sc.cluster.device.memory_bytes = 8000;
  PlanRequest req;
  req.stages = 4;
  const PlanReport r = run_planner(sc, req);
  ASSERT_FALSE(r.rejected.empty());
  ASSERT_FALSE(r.ranked.empty());
  for (const PlanCandidate& c : r.ranked) EXPECT_TRUE(c.result.metrics.fits()) << c.label();
  const PlanCandidate& worst = r.rejected.front();
  // A stage named in the cut that needs least, or, proven without a cut,
  // the least every cut needs.
  const bool named = worst.rejected.rfind(worst.label() + ": stage ", 0) == 0;
  const bool proven = worst.rejected.rfind(worst.label() + ": every cut needs at least ", 0) == 0;
  EXPECT_TRUE(named != proven) << worst.rejected;
  EXPECT_TRUE(proven) << "the layers' count settles it: " << worst.rejected;
  EXPECT_EQ(worst.memory_needed_at_least, proven);
  EXPECT_NE(worst.rejected.find(" needs "), std::string::npos) << worst.rejected;
  EXPECT_GT(worst.memory_needed, 8000);
  EXPECT_NE(worst.rejected.find(" of 7.81 KiB"), std::string::npos) << worst.rejected;
  sc.cluster.device.memory_bytes = 100;
  const PlanReport none = run_planner(sc, req);
  EXPECT_TRUE(none.ranked.empty());
  const PlanCandidate* closest = closest_rejected(none);
  ASSERT_NE(closest, nullptr);
  for (const PlanCandidate& c : none.rejected) EXPECT_LE(closest->memory_needed, c.memory_needed);
}

TEST(Planner, ImpossibleRequestsAreConfigErrors) {
  PlanRequest three;
  three.stages = 3;
  try {
    run_planner(small(), three);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "K=3 does not divide the 4 devices");
  }
  PlanRequest m;
  m.micro_batches = 3;
  EXPECT_THROW(run_planner(small(), m), ConfigError);
  PlanRequest big_m;
  big_m.micro_batches = 1024;
  big_m.max_micro_batches = 512;
  try {
    run_planner(small(), big_m);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "M=1024 is above the largest M tried (512); raise --max-micro-batches");
  }
  // Interleaving: K=4 with M=2 cannot; --chunks without it is refused.
  PlanRequest inter;
  inter.schedule = ScheduleKind::kInterleaved1F1B;
  inter.stages = 4;
  inter.micro_batches = 2;
  try {
    run_planner(small(), inter);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "no configuration of 4 devices with K=4 and M=2 can run interleaved-1f1b: it "
                 "needs M >= K and a multiple of its rounds, max(1, M / K) (what both PyTorch's "
                 "ScheduleInterleaved1F1B and Megatron-LM run) and K x v stages of at "
                 "least one layer each");
  }
  // Each chunked schedule names its own rule.
  for (const auto& [kind, rule] : std::vector<std::pair<ScheduleKind, std::string>>{
           {ScheduleKind::kDualPipeV,
            "M >= 2K, its stage count (as PyTorch's ScheduleDualPipeV) "
            "and "},
           {ScheduleKind::kInterleavedZb,
            "M to be a multiple of its rounds, max(1, M / K) (as PyTorch's "
            "ScheduleInterleavedZeroBubble) and "},
           {ScheduleKind::kLoopedBfs, ""}}) {
    PlanRequest r = inter;
    r.schedule = kind;
    r.chunks = 3;  // 4 x 3 stages: more than the model's layers
    if (kind == ScheduleKind::kDualPipeV) r.chunks.reset();
    try {
      run_planner(small(), r);
      ADD_FAILURE() << to_string(kind) << " planned";
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()),
                "no configuration of 4 devices with K=4 and M=" + std::to_string(*r.micro_batches) +
                    " can run " + std::string(to_string(kind)) + ": it needs " + rule +
                    "K x v stages of at least one layer each");
    }
  }
  // On one device, asked for, it runs as simulate runs it.
  inter.stages = 1;
  inter.micro_batches = 2;
  PlanRequest one = inter;
  one.devices = 1;
  const PlanReport single = run_planner(small(), one);
  ASSERT_FALSE(single.ranked.empty());
  EXPECT_EQ(single.ranked[0].schedule, ScheduleKind::kInterleaved1F1B);
  EXPECT_EQ(single.ranked[0].stages, 1);
  PlanRequest chunks_alone;
  chunks_alone.chunks = 2;
  try {
    run_planner(small(), chunks_alone);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "--chunks 2 needs a --schedule that runs several chunks per device "
                 "(interleaved-1f1b, looped-bfs, zb-v, interleaved-zb, dualpipe-v)");
  }
  PlanRequest fixed;
  fixed.schedule = ScheduleKind::kInterleaved1F1B;
  fixed.chunks = 2;
  fixed.stages = 2;
  const PlanReport r = run_planner(small(), fixed);
  ASSERT_FALSE(r.ranked.empty());
  for (const PlanCandidate& c : r.ranked) {
    EXPECT_EQ(c.chunks, 2);
    EXPECT_EQ(c.micro_batches % 2, 0);
    EXPECT_EQ(c.result.stage_costs.size(), 4u);
  }
  PlanRequest too_many;
  too_many.devices = 8;
  EXPECT_THROW(run_planner(small(), too_many), ConfigError);
  Scenario wide = small();
  wide.cluster.devices = 16;
  PlanRequest sixteen;
  sixteen.stages = 16;
  try {
    run_planner(wide, sixteen);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "K=16 is more stages than the model's 8 layers");
  }
}

// A GPT-style model of `blocks` blocks (d_model 2304, 24 heads, sequence 1024,
// vocabulary 51200, bf16, Adam) on one node of 8 A100-80G, batch 24.
Scenario gpt_on_8_a100s(int blocks) {
  return parse_scenario(nlohmann::json::parse(R"({
    "model": { "family": "transformer", "layers": )" +
                                              std::to_string(blocks) + R"(,
               "d_model": 2304, "heads": 24, "seq_len": 1024, "vocab": 51200, "dtype": "bf16" },
    "cluster": { "preset": "a100-80g", "devices": 8 },
    "training": { "global_batch": 24, "micro_batches": 24, "optimizer": "adam",
                  "schedule": "interleaved-1f1b", "chunks": 2, "remat": false } })"),
                        "gpt.json");
}

// Interleaved 1F1B runs the cut, of the slowest-stage optimum, the
// busiest-device optimum and the least-variance cut, that simulates fastest.
// With 22 blocks (24 layers, the LM head as heavy as almost two blocks, in 16
// stages) the slowest-stage optimum leaves the devices' loads uneven; the
// device-balanced cut is 4 % faster.
TEST(Planner, InterleavingRunsTheFastestOfItsCandidateCuts) {
  const Scenario sc = gpt_on_8_a100s(22);
  const AnalyticCostModel cost(sc.cluster.device, sc.model.dtype, sc.training.bytes_per_param);
  SimConfig config;
  config.stages = 8;
  config.record_timeline = false;
  const SimResult chosen = simulate(sc, config, cost);
  const PartitionProblem p =
      partition_problem(sc, cost, 16, 24, Remat::kNever, ScheduleKind::kInterleaved1F1B, 2);
  const auto step_with = [&](const std::vector<StageRange>& cut) {
    SimConfig c = config;
    c.stage_ranges = cut;
    return simulate(sc, c, cost).metrics.step_time;
  };
  const SimTime stage_optimal = step_with(partition_optimal(p).stages);
  const SimTime device_optimal =
      step_with(partition_devices(p, 8, sc.cluster.device.memory_bytes).stages);
  const SimTime least_variance = step_with(partition_min_variance(p));
  EXPECT_EQ(chosen.metrics.step_time, std::min({stage_optimal, device_optimal, least_variance}));
  EXPECT_LT(device_optimal, stage_optimal);
  EXPECT_LT(chosen.metrics.step_time, stage_optimal);
}

// The planner's first pass cuts candidates of several chunks with a short
// exhaustive search (here none at all); its best candidates are cut again as
// `simulate` cuts them, so their steps are simulate's. GPipe's Transformer on
// 8 TPU v3 cores: 50 layers.
TEST(Planner, BestChunkedCandidatesStepAsSimulateSteps) {
  const Scenario sc =
      load_scenario(std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/gpipe/transformer-tpuv3.json");
  PlanRequest req;
  req.threads = 1;
  req.screening_nodes = 0;
  const PlanReport report = run_planner(sc, req);
  int checked = 0;
  for (std::size_t i = 0; i < report.ranked.size() && checked < 8; ++i) {
    const PlanCandidate& c = report.ranked[i];
    if (c.chunks == 1) continue;
    const Scenario replica = replica_scenario(*c.scenario, c.stages, c.data_parallel);
    SCOPED_TRACE(c.label());
    EXPECT_EQ(c.result.metrics.step_time,
              simulate(replica, config_of(*c.scenario, c)).metrics.step_time);
    ++checked;
  }
  EXPECT_EQ(checked, 8);
}

// Where chunks are faster, the planner ranks them first: 50 blocks on 8 GPUs,
// M = 24 (at least 2K - 1), no remat. ZB-V's V leaves only the start-up idle
// and ranks first; the interleaved runs rank ahead of every schedule with one
// stage a device, best with 2 chunks a device (with 4, 52 layers in 32
// virtual stages of one or two blocks leave half the devices a block more
// than the others), and the zero-bubble interleaving, whose W fill the cool-down,
// beats Megatron's. DualPipeV, with nothing to overlap on a dense model, has
// twice ZB-V's bubble and ranks after it.
TEST(Planner, PicksChunksWhereTheyAreFaster) {
  const Scenario sc = gpt_on_8_a100s(50);
  PlanRequest req;
  req.stages = 8;
  req.micro_batches = 24;
  req.remat = Remat::kNever;
  const PlanReport report = run_planner(sc, req);
  ASSERT_FALSE(report.ranked.empty());
  EXPECT_EQ(report.ranked.front().schedule, ScheduleKind::kZbV);
  EXPECT_EQ(report.ranked.front().chunks, 2);
  const auto inter = std::find_if(
      report.ranked.begin(), report.ranked.end(),
      [](const PlanCandidate& c) { return c.schedule == ScheduleKind::kInterleaved1F1B; });
  ASSERT_NE(inter, report.ranked.end());
  EXPECT_EQ(inter->chunks, 2);
  for (const PlanCandidate& c : report.ranked) {
    if (!takes_chunks(c.schedule)) {
      EXPECT_GT(inter->samples_per_s, c.samples_per_s) << to_string(c.schedule);
    }
  }
  const auto best_of = [&](ScheduleKind kind) {
    return std::find_if(report.ranked.begin(), report.ranked.end(),
                        [kind](const PlanCandidate& c) { return c.schedule == kind; });
  };
  const auto izb = best_of(ScheduleKind::kInterleavedZb);
  const auto dpv = best_of(ScheduleKind::kDualPipeV);
  ASSERT_NE(izb, report.ranked.end());
  ASSERT_NE(dpv, report.ranked.end());
  EXPECT_EQ(izb->chunks, 2);
  EXPECT_GT(izb->samples_per_s, inter->samples_per_s);
  EXPECT_LT(dpv->samples_per_s, report.ranked.front().samples_per_s);
}

TEST(Sweep, OnePointPerPairInRowMajorOrder) {
  SweepRequest req;
  req.stages = {1, 2};
  req.micro_batches = {4, 3};
  const std::vector<SweepPoint> points = run_sweep(small(), req);
  ASSERT_EQ(points.size(), 4u);
  EXPECT_EQ(points[1].stages, 1);
  EXPECT_EQ(points[1].micro_batches, 3);
  EXPECT_EQ(points[1].error, "M=3 does not divide the global batch of 16");
  SimConfig cfg;
  cfg.stages = 2;
  cfg.micro_batches = 4;
  cfg.record_timeline = false;
  const SimResult direct = simulate(small(), cfg);
  EXPECT_EQ(points[2].step_time_s, direct.metrics.step_time_s());
  EXPECT_EQ(points[2].bubble_fraction, direct.metrics.bubble_fraction);
  const std::string csv = sweep_csv(points);
  EXPECT_EQ(csv.substr(0, csv.find('\n')),
            "K,M,step_time_s,samples_per_s,bubble_fraction,mfu,peak_memory_bytes,fits,error");
  EXPECT_NE(csv.find("\n1,3,0,0,0,0,0,,\"M=3 does not divide the global batch of 16\"\n"),
            std::string::npos)
      << csv;
}

nlohmann::json transformer_doc() {
  return nlohmann::json::parse(R"({
    "model": { "family": "transformer", "layers": 4, "d_model": 1024, "heads": 16,
               "seq_len": 512, "vocab": 32000 },
    "cluster": { "preset": "v100-nvlink", "devices": 4 },
    "training": { "global_batch": 16, "micro_batches": 4, "optimizer": "adam" }
  })");
}

// The least peak memory any cut into K stages reaches (M = 4, remat on).
std::int64_t peak_with_layers(const nlohmann::json& doc, std::int64_t layers, int K) {
  nlohmann::json d = doc;
  d["model"]["layers"] = layers;
  const Scenario sc = parse_scenario(d, "t.json");
  const AnalyticCostModel cost(sc.cluster.device, sc.model.dtype, sc.training.bytes_per_param);
  return min_peak_memory(partition_problem(sc, cost, K, 4, Remat::kAlways));
}

bool fits_with_layers(const nlohmann::json& doc, int layers, int K) {
  return peak_with_layers(doc, layers, K) <=
         parse_scenario(doc, "t.json").cluster.device.memory_bytes;
}

TEST(Capacity, LargestLayerCountThatFits) {
  const nlohmann::json doc = transformer_doc();
  CapacityRequest req;
  req.stages = 4;
  const CapacityResult r = find_capacity(doc, "t.json", req);
  ASSERT_TRUE(r.fits);
  EXPECT_EQ(r.param, "model.layers");
  EXPECT_GT(r.max_value, 10);
  EXPECT_TRUE(fits_with_layers(doc, static_cast<int>(r.max_value), 4));
  EXPECT_FALSE(fits_with_layers(doc, static_cast<int>(r.max_value) + 1, 4));
  nlohmann::json at = doc;
  at["model"]["layers"] = r.max_value;
  EXPECT_EQ(r.params, parse_scenario(at, "t.json").model.total_params());
  // Four stages hold about four times the layers of one.
  req.stages = 1;
  const CapacityResult one = find_capacity(doc, "t.json", req);
  EXPECT_GT(r.max_value, 3 * one.max_value);
}

// One stage: memory grows by the same amount with every layer, so the finer
// capacity is max_value plus the fraction of one more layer's memory that fits.
TEST(Capacity, FractionalCapacityInterpolatesTheNextLayer) {
  const nlohmann::json doc = transformer_doc();
  CapacityRequest req;
  req.stages = 1;
  const CapacityResult r = find_capacity(doc, "t.json", req);
  ASSERT_TRUE(r.fits);
  const auto peak = [&](std::int64_t layers) { return peak_with_layers(doc, layers, 1); };
  EXPECT_EQ(r.peak_memory_bytes, peak(r.max_value));
  EXPECT_EQ(r.next_peak_memory_bytes, peak(r.max_value + 1));
  EXPECT_EQ(r.memory_bytes, 16LL << 30);  // v100-nvlink
  const double expected = static_cast<double>(r.max_value) +
                          static_cast<double>(r.memory_bytes - r.peak_memory_bytes) /
                              static_cast<double>(r.next_peak_memory_bytes - r.peak_memory_bytes);
  EXPECT_DOUBLE_EQ(r.fractional_value, expected);
  EXPECT_GE(r.fractional_value, static_cast<double>(r.max_value));
  EXPECT_LT(r.fractional_value, static_cast<double>(r.max_value + 1));
}

TEST(Capacity, TinyModelsStopAtTheLayerLimit) {
  nlohmann::json doc = transformer_doc();
  doc["model"]["d_model"] = 16;
  doc["model"]["heads"] = 1;
  doc["model"]["seq_len"] = 4;
  doc["model"]["vocab"] = 10;
  CapacityRequest req;
  req.stages = 2;
  const CapacityResult r = find_capacity(doc, "t.json", req);
  EXPECT_TRUE(r.fits);
  EXPECT_TRUE(r.limited);
  EXPECT_EQ(r.max_value, kCapacityLayerLimit - 2);  // + embedding and head
  req.stages = 8;
  EXPECT_THROW(find_capacity(doc, "t.json", req), ConfigError);  // 4 devices
}

TEST(Capacity, NothingFitsAndBadFields) {
  nlohmann::json doc = transformer_doc();
  doc["model"]["d_model"] = 65536;
  doc["model"]["heads"] = 16;
  CapacityRequest req;
  req.stages = 1;
  const CapacityResult r = find_capacity(doc, "t.json", req);
  EXPECT_FALSE(r.fits);
  EXPECT_EQ(r.max_value, 0);
  req.param = "cluster.preset";
  req.stages = 1;
  try {
    find_capacity(transformer_doc(), "t.json", req);
    FAIL() << "expected ScenarioError";
  } catch (const ScenarioError& e) {
    EXPECT_STREQ(e.what(),
                 "t.json: cluster.preset: capacity grows an integer field; this one holds a "
                 "string");
  }
  req.param = "model.dtype";
  try {
    find_capacity(transformer_doc(), "t.json", req);
    FAIL() << "expected ScenarioError";
  } catch (const ScenarioError& e) {
    EXPECT_STREQ(e.what(),
                 "t.json: model.dtype: capacity grows an integer field of the scenario; this one "
                 "is missing");
  }
}

// request.adjust (capacity's --cost-model) reaches the scenario as given and
// every probed one, and cannot change what fits: memory decides.
TEST(Capacity, AdjustReachesEveryProbedScenario) {
  const nlohmann::json doc = transformer_doc();
  CapacityRequest req;
  req.stages = 4;
  const CapacityResult plain = find_capacity(doc, "t.json", req);
  ASSERT_TRUE(plain.fits);
  std::vector<std::size_t> layers;  // of each scenario adjusted
  req.adjust = [&](Scenario& sc) {
    layers.push_back(sc.model.layers.size());
    sc.cluster.cost_model = CostModelKind::kAnalytic;
  };
  const CapacityResult adjusted = find_capacity(doc, "t.json", req);
  EXPECT_EQ(adjusted.max_value, plain.max_value);
  EXPECT_EQ(adjusted.peak_memory_bytes, plain.peak_memory_bytes);
  EXPECT_EQ(adjusted.probes, plain.probes);
  // The scenario as given (4 blocks, embedding and head), then one per probe.
  ASSERT_EQ(static_cast<std::int64_t>(layers.size()), plain.probes + 1);
  EXPECT_EQ(layers.front(), 6u);
  EXPECT_EQ(layers[1], 4u);  // the first probe: 2 blocks, the least for K = 4
  EXPECT_EQ(layers[2], 6u);  // then doubling
  EXPECT_EQ(layers[3], 10u);
}

// An adjustment that fails on a probed value (a profile without the layers of
// that model) is an error naming the value, not "does not fit".
TEST(Capacity, AdjustErrorsNameTheProbedValue) {
  const nlohmann::json doc = transformer_doc();
  CapacityRequest req;
  req.stages = 4;
  req.adjust = [](Scenario& sc) {
    if (sc.model.layers.size() > 12) {
      throw ScenarioError("prof.json", "layers", "has no measurement for layer 'block12'");
    }
  };
  try {
    find_capacity(doc, "t.json", req);
    FAIL() << "expected ScenarioError";
  } catch (const ScenarioError& e) {
    // Probes 2, 4, 8, then 16 blocks: the first of more than 12 layers.
    EXPECT_STREQ(e.what(),
                 "prof.json: layers: has no measurement for layer 'block12' (at model.layers = "
                 "16, a value capacity probed)");
  }
  req.adjust = [](Scenario& sc) {
    if (sc.model.layers.size() > 12) throw std::invalid_argument("no kernel table");
  };
  try {
    find_capacity(doc, "t.json", req);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "no kernel table (at model.layers = 16, a value capacity probed)");
  }
  // On the scenario as given, the error is the adjustment's own.
  req.adjust = [](Scenario&) { throw std::invalid_argument("no kernel table"); };
  try {
    find_capacity(doc, "t.json", req);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "no kernel table");
  }
}

}  // namespace
}  // namespace pipescope
