#pragma once
// Runs whose every op time is known, for the compare tests (compare_test.cpp,
// tensor_parallel_compare_test.cpp): a profile of round figures, a plan of a
// model, and the simulator's own timeline passed off as a measurement.

#include <memory>

#include "costmodels/model.h"
#include "costmodels/profile.h"
#include "exec/compare.h"
#include "exec/runtime.h"
#include "sim/engine/simulator.h"
#include "sim/plan/plan.h"
#include "sim/scenario/model_json.h"

namespace pipescope::exec::compare_helpers {

// Every layer of the model: 1 ms forward, 2 ms backward, 1.5 ms recompute per
// sample; free transport; 2 cores.
inline std::shared_ptr<const Profile> known_profile(const ModelSpec& m, int cores) {
  auto p = std::make_shared<Profile>();
  p->machine = "known";
  p->cores = cores;
  for (const LayerSpec& l : m.layers) {
    if (p->find(l) != nullptr) continue;
    LayerProfile e;
    e.signature = layer_signature(l);
    e.example = l.name;
    e.batch_sizes = {1};
    e.forward = {1000000};
    e.backward = {2000000};
    e.recompute = {1500000};
    p->layers.push_back(e);
  }
  p->optimizer = "adam";
  p->transport_latency_s = 0.0;
  p->transport_bandwidth = 1e30;
  return p;
}

// K stages over the model's layers (the last takes what does not divide), M
// micro-batches of 2 samples, T tensor ranks a stage (`m` one rank's share).
inline Plan plan_of(const ModelSpec& m, int K, int M, Remat remat, int T = 1) {
  Plan p;
  p.scenario_name = "known";
  p.model_name = m.name;
  p.model_hash = model_hash(m);
  p.layer_count = static_cast<int>(m.layers.size());
  p.stages = K;
  p.devices = K * T;
  p.tensor_parallel = T;
  p.micro_batches = M;
  p.micro_batch_size = 2;
  p.global_batch = 2 * M;
  p.remat = remat;
  p.optimizer = Optimizer::kAdam;
  const int layers = static_cast<int>(m.layers.size());
  const int per = layers / K;
  for (int s = 0; s < K; ++s) {
    PlanStage st;
    st.layers = {s * per, s + 1 == K ? layers - 1 : s * per + per - 1};
    st.device = s;
    p.stage_plans.push_back(st);
  }
  return p;
}

// The simulator's step as if it had been measured.
inline StepResult as_measured(const SimResult& r, double scale, double cpu_share) {
  StepResult s;
  s.timeline = r.timeline;
  for (TimelineEvent& e : s.timeline.events) {
    e.start = static_cast<SimTime>(static_cast<double>(e.start) * scale);
    e.end = static_cast<SimTime>(static_cast<double>(e.end) * scale);
    if (e.lane == Lane::kCompute) {
      e.cpu_time = static_cast<SimTime>(static_cast<double>(e.end - e.start) * cpu_share);
    }
  }
  s.step_time = static_cast<SimTime>(static_cast<double>(r.metrics.step_time) * scale);
  return s;
}

// The plan simulated as compare_run simulates it, with its timeline, which
// as_measured replays.
inline SimResult predicted(const Scenario& sc, const Plan& plan) {
  SimConfig c = cpu_sim_config(plan, sc);
  c.record_timeline = true;
  return simulate(sc, c);
}

}  // namespace pipescope::exec::compare_helpers
