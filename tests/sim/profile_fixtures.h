#pragma once
// What the profile tests share: a profile of the uniform scenario's layers,
// and the scenario and profile of a split backward.

#include "costmodels/profile.h"
#include "sim/formats/profile_io.h"
#include "sim/scenario/scenario.h"
#include "sim_fixtures.h"

namespace pipescope::testing {

// One entry for the uniform scenario's layers ("l0", "l1", ... share it): per
// sample 100 ns forward, 200 ns backward, 100 ns recompute, measured at 1 and 4.
inline Profile uniform_profile(const Scenario& sc, int cores) {
  Profile p;
  p.machine = "test machine";
  p.cores = cores;
  p.model_name = sc.model.name;
  LayerProfile e;
  e.signature = layer_signature(sc.model.layers[0]);
  e.example = sc.model.layers[0].name;
  e.batch_sizes = {1, 4};
  // A forward costs the same whether it keeps its stash (the recompute's
  // figure) or not; ForwardThatKeepsItsStashCostsTheRecompute tells them apart.
  e.forward = {100, 400};
  e.backward = {200, 800};
  e.recompute = {100, 400};
  p.layers.push_back(e);
  p.optimizer = "sgd";
  p.optimizer_overhead = 0;
  p.optimizer_ns_per_param = 0.0;
  p.transport_latency_s = 0.0;
  p.transport_bandwidth = 1e9;
  return p;
}

// Four layers with parameters (a layer without them has no W) on two devices,
// and a profile whose split backward costs more than the whole: B 150 and
// 700 ns, W 90 and 300 ns at 1 and 4 samples, against a backward of 200 and
// 800 ns.
inline Scenario split_scenario() {
  Scenario sc = testing::uniform_scenario(4, 2, 1000.0, 8, 4, false);
  for (LayerSpec& l : sc.model.layers) l.params = 1;
  return sc;
}

inline Profile split_profile(const Scenario& sc) {
  Profile p = uniform_profile(sc, 2);
  p.layers[0].weight = {90, 300};
  p.layers[0].input = {150, 700};
  return p;
}

}  // namespace pipescope::testing
