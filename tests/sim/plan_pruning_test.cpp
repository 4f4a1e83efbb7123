// The rules by which the planner decides a candidate without building its
// own problem: the weights' share that no cut keeps under, ZeRO-1 refused
// where ZeRO-2 is proven not to fit, and a higher ZeRO stage bounded by a
// lower one's floor; and the memory-only problem that proof reads. Each
// against the partitioner or the floor run on the candidate itself.

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "costmodels/model.h"
#include "floor_fixtures.h"
#include "planner_fixtures.h"
#include "sim/engine/device_partition.h"
#include "sim/engine/partition.h"
#include "sim/engine/schedule.h"
#include "sim/engine/simulator.h"
#include "sim/plan/planner.h"
#include "sim/plan/step_floor.h"

namespace pipescope {
namespace {

using testing::small_node;

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Three layers of 100, 200 and 300 parameters at 16 bytes each (ZeRO-0):
// 9,600 bytes, less a byte a layer for the stages' rounding, over 2 devices.
TEST(LeastWeightShare, IsTheDevicesShareOfTheWeightsLessTheRounding) {
  Scenario sc = small_node(80.0, {{"zero", 0}});
  sc.model.layers.resize(3);
  for (int l = 0; l < 3; ++l) {
    sc.model.layers[static_cast<std::size_t>(l)].params = 100 * (l + 1);
    sc.model.layers[static_cast<std::size_t>(l)].expert_params = 0;
  }
  sc.training.bytes_per_param = 16.0;
  EXPECT_EQ(least_weight_share(sc, 2), (9600 - 3 + 1) / 2);
  EXPECT_EQ(least_weight_share(sc, 1), 9600 - 3);
}

// On every cut of the small transformer's weights alone (no stash, no
// input kept), at every ZeRO stage, K and remat, some stage needs at least
// the share (stage_memory, the partitioner's price of a stage); on one
// device, within a byte a layer of what the whole model needs.
TEST(LeastWeightShare, NoCutKeepsEveryStageUnderIt) {
  int checked = 0;
  for (const int zero : {0, 1, 2, 3}) {
    for (const int K : {1, 2, 4}) {
      for (const Remat remat : {Remat::kNever, Remat::kAlways}) {
        const Scenario replica = replica_scenario(small_node(80.0, {{"zero", zero}}), K, 8 / K);
        const std::unique_ptr<CostModel> cost = make_cost_model(replica);
        PartitionProblem p = partition_problem(replica, *cost, K, 4, remat);
        for (LayerCost& l : p.layers) l.stash_bytes = 0;
        std::fill(p.cut_bytes.begin(), p.cut_bytes.end(), Bytes{0});
        const Bytes share = least_weight_share(replica, K);
        const auto L = static_cast<Bytes>(p.layers.size());
        std::vector<StageRange> cut;
        testing::for_each_cut(static_cast<int>(L), K, cut, [&](const auto& stages) {
          Bytes fullest = 0;
          for (const StageRange& s : stages) {
            fullest = std::max(fullest, stage_memory(p, s.first_layer, s.last_layer));
          }
          EXPECT_GE(fullest, share) << "ZeRO-" << zero << " K=" << K;
          // ZeRO-3's gathered layers come on top.
          if (K == 1 && zero < 3) {
            EXPECT_LE(fullest, share + L) << "ZeRO-" << zero;
          }
          ++checked;
        });
      }
    }
  }
  EXPECT_EQ(checked, 4 * 2 * (1 + 9 + 84));  // 10 layers: 1, C(9,1), C(9,3) cuts
}

// memory_problem is partition_problem's memory, field for field, and the
// proof that no cut fits reads the same from both, over the schedules,
// remat modes, ZeRO stages and memory of the small transformer (a mixture's
// experts included, at E = 2).
TEST(MemoryProblem, IsThePartitionProblemsMemory) {
  int proofs = 0;
  int compared = 0;
  for (const int E : {1, 2}) {
    for (const int zero : {1, 2, 3}) {
      if (E > 1 && zero == 3) continue;  // not modelled beside expert parallelism
      const nlohmann::json experts = {{"experts", 4}, {"experts_per_token", 2}};
      const Scenario whole = small_node(0.6, {{"zero", zero}, {"expert_parallel", E}},
                                        E > 1 ? experts : nlohmann::json::object());
      for (const ScheduleKind schedule :
           {ScheduleKind::kGpipe, ScheduleKind::k1F1B, ScheduleKind::kZbH1,
            ScheduleKind::kInterleaved1F1B, ScheduleKind::kZbV}) {
        const int v = takes_chunks(schedule) ? 2 : 1;
        for (const Remat remat : kAllRemats) {
          for (const int M : {1, 4, 8}) {
            if (!schedule_shape_problem(schedule, 2, M, v).empty()) continue;
            const Scenario replica = replica_scenario(whole, 2, 4);
            const std::unique_ptr<CostModel> cost = make_cost_model(replica);
            const PartitionProblem full =
                partition_problem(replica, *cost, 2 * v, M, remat, schedule, v);
            const PartitionProblem memory = memory_problem(replica, 2 * v, M, remat, schedule, v);
            ASSERT_EQ(memory.layers.size(), full.layers.size());
            for (std::size_t l = 0; l < full.layers.size(); ++l) {
              EXPECT_EQ(memory.layers[l].params, full.layers[l].params);
              EXPECT_EQ(memory.layers[l].stash_bytes, full.layers[l].stash_bytes);
              EXPECT_EQ(memory.layers[l].forward, 0);
            }
            EXPECT_EQ(memory.cut_bytes, full.cut_bytes);
            EXPECT_EQ(memory.stage_held, full.stage_held);
            EXPECT_EQ(memory.order_held, full.order_held);
            EXPECT_EQ(memory.in_flight, full.in_flight);
            EXPECT_EQ(memory.bytes_per_param, full.bytes_per_param);
            EXPECT_EQ(memory.stage_device, full.stage_device);
            EXPECT_EQ(memory.memory_capacity, full.memory_capacity);
            EXPECT_EQ(memory.backward_split, full.backward_split);
            EXPECT_EQ(memory.forwards_first, full.forwards_first);
            EXPECT_EQ(memory.checkpoint, full.checkpoint);
            EXPECT_EQ(memory.cut_split, full.cut_split);
            EXPECT_EQ(memory.micro_batches, full.micro_batches);
            EXPECT_EQ(memory.remat, full.remat);
            EXPECT_EQ(memory.gathered_bytes_per_param, full.gathered_bytes_per_param);
            const Bytes capacity = replica.cluster.device.memory_bytes;
            const std::optional<PartitionResult> a = no_cut_fits(full, 2, capacity);
            const std::optional<PartitionResult> b = no_cut_fits(memory, 2, capacity);
            ASSERT_EQ(a.has_value(), b.has_value());
            if (a) {
              EXPECT_EQ(a->memory_needed, b->memory_needed);
              ++proofs;
            }
            ++compared;
          }
        }
      }
    }
  }
  EXPECT_GE(compared, 5 * 4 * 4 * 2);  // M = 1 runs no interleaving
  EXPECT_GT(proofs, 20);
}

// Where the planner refuses a candidate by a rule and not by its own
// problem, the partitioner given that problem finds no cut either.
void expect_no_cut(const PlanCandidate& c) {
  const testing::SimulatedCut sc = testing::simulated_cut(c);
  const PartitionResult r =
      partition_devices(sc.problem, c.stages, sc.replica.cluster.device.memory_bytes);
  EXPECT_TRUE(r.stages.empty()) << c.rejected;
  if (r.memory_needed) {
    EXPECT_LE(c.memory_needed, *r.memory_needed) << c.rejected;
  }
}

// At 0.6 GiB the small transformer's weights, gradients and Adam state
// leave K = 1 at ZeRO-1 no room whatever its M, and ZeRO-2 is proven not to
// fit for many shapes whose ZeRO-1 is then refused unbuilt; some plans fit.
// The same of a mixture of 4 experts over E = 2, whose experts' weights the
// rules weigh as the bytes a device keeps of them.
TEST(PlanPruning, WhatTheRulesRefuseNoCutFits) {
  PlanRequest req;
  req.max_micro_batches = 8;
  req.tensor_parallel = 1;
  const nlohmann::json experts = {{"experts", 4}, {"experts_per_token", 2}};
  for (const Scenario& sc : {small_node(0.6), small_node(0.9, {{"expert_parallel", 2}}, experts)}) {
    SCOPED_TRACE(sc.training.expert_parallel);
    const PlanReport r = run_planner(sc, req);
    int by_weights = 0;
    int as_sharded = 0;
    for (const PlanCandidate& c : r.rejected) {
      if (has(c.rejected, "alone")) {
        ++by_weights;
        EXPECT_TRUE(c.memory_by_rule);
        expect_no_cut(c);
      }
      if (has(c.rejected, "as at ZeRO-2")) {
        ++as_sharded;
        EXPECT_EQ(c.zero, 1) << c.rejected;
        EXPECT_TRUE(c.memory_by_rule);
        expect_no_cut(c);
      }
    }
    EXPECT_GT(by_weights, 0);
    EXPECT_GT(as_sharded, 0);
    ASSERT_FALSE(r.ranked.empty());
    // The closest of what does not fit is one refused by its own proof.
    const PlanCandidate* closest = closest_rejected(r);
    ASSERT_NE(closest, nullptr);
    EXPECT_FALSE(closest->memory_by_rule) << closest->rejected;
  }
}

// A candidate bounded on every cut reaches no more than its ceiling by its
// own floor under every cut: where a lower ZeRO stage's floor bounded it,
// its own (the reduce-scatters and gathers added) is no lower.
TEST(PlanPruning, ACeilingOnEveryCutHoldsForTheCandidateItself) {
  PlanRequest req;
  req.max_micro_batches = 8;
  int checked = 0;
  int by_lower = 0;  // left out by a lower ZeRO stage's floor
  for (const double gib : {80.0, 2.0}) {
    const PlanReport r = run_planner(small_node(gib), req);
    for (const PlanCandidate& c : r.bounded) {
      if (!c.ceiling_any_cut) continue;
      const testing::SimulatedCut sc = testing::simulated_cut(c);
      const double own = static_cast<double>(c.scenario->training.global_batch) /
                         simtime_to_seconds(step_floor_any_cut(sc.problem, c.stages));
      EXPECT_LE(own, c.ceiling * (1.0 + 1e-9)) << c.rejected;
      if (has(c.rejected, " at ZeRO-")) ++by_lower;
      ++checked;
    }
  }
  EXPECT_GT(checked, 100);
  EXPECT_GT(by_lower, 0);
}

}  // namespace
}  // namespace pipescope
