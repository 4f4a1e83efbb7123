#pragma once
// A plan built in code, and the helpers of the plan reader's tests.

#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "sim/engine/simulator.h"
#include "sim/formats/plan_io.h"
#include "sim/plan/plan.h"
#include "sim/plan/planner.h"
#include "sim/scenario/scenario_io.h"

namespace pipescope::testing {

// Seven named layers cut 3 / 2 / 2 over K=3 stages, M=4 micro-batches of 2.
inline Plan sample_plan() {
  Plan p;
  p.scenario_name = "golden";
  p.model_name = "toy7";
  p.model_hash = "0123456789abcdef";
  p.layer_count = 7;
  p.layer_names = {"embed", "block0", "block1", "block2", "block3", "block4", "head"};
  p.cluster_name = "exact";
  p.devices = 3;
  p.memory_capacity = Bytes{16} << 30;
  p.stages = 3;
  p.data_parallel = 1;
  p.micro_batches = 4;
  p.global_batch = 8;
  p.micro_batch_size = 2;
  p.schedule = ScheduleKind::kGpipe;
  p.remat = Remat::kAlways;
  p.partition_method = "optimal";
  // Each device's peak split into weights, gradients, optimizer state and
  // activations, adding up to it.
  p.stage_plans = {
      {{0, 2}, 0, 0.003, 0.006, 0.003, 1'000'000, MemorySplit{200'000, 200'000, 400'000, 200'000}},
      {{3, 4}, 1, 0.0025, 0.005, 0.0025, 900'000, MemorySplit{100'000, 100'000, 200'000, 500'000}},
      {{5, 6},
       2,
       0.0035,
       0.007,
       0.0035,
       1'100'000,
       MemorySplit{150'000, 150'000, 300'000, 500'000}}};
  p.step_time_s = 0.1015;
  p.throughput_samples_per_s = 78.817733990147786;
  p.bubble_fraction = 1.0 / 3.0;
  p.fits = true;
  return p;
}

// The plan of `whole` on K stages x D replicas from its simulated 1F1B step,
// the experts (training.expert_parallel) over the replicas' ring.
inline Plan simulated_plan(const Scenario& whole, int K, int D) {
  SimConfig cfg;
  cfg.stages = K;
  cfg.schedule = ScheduleKind::k1F1B;
  cfg.data_parallel = data_parallel_ring(whole.cluster, K, D, whole.training.expert_parallel);
  const Scenario replica = replica_scenario(whole, K, D);
  return make_plan(replica, simulate(replica, cfg), D, "optimal");
}

// A file in the temporary folder named after the running test.
inline std::filesystem::path temp_path(const std::string& name) {
  return std::filesystem::temp_directory_path() /
         (std::string("pipescope_plan_io_") +
          ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" + name);
}

// The message that reading `doc` as "p.json" raises.
inline std::string error_of(const nlohmann::json& doc) {
  try {
    plan_from_json(doc, "p.json");
  } catch (const ScenarioError& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace pipescope::testing
