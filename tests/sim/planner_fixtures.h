#pragma once
// The planner's tests' scenarios: where memory decides (a small transformer
// on one node, its device memory set by the test) and a small mixture of
// experts; and every cut of a few layers.

#include <functional>
#include <vector>

#include <nlohmann/json.hpp>

#include "scenario_docs.h"
#include "sim/engine/partition.h"
#include "sim/scenario/scenario_io.h"

namespace pipescope::testing {

// A mixture of 8 experts (top 2) of 4 blocks on two DGX A100 nodes.
inline constexpr const char* kMoeScenario = R"({
  "model": {"family": "transformer", "layers": 4, "d_model": 64, "heads": 4, "seq_len": 32,
            "vocab": 100, "experts": 8, "experts_per_token": 2},
  "cluster": {"preset": "dgx-a100", "devices": 16},
  "training": {"global_batch": 64, "micro_batches": 4, "optimizer": "adam"}
})";

// A transformer of 8 blocks of 1024 on one DGX A100 node of 8 GPUs, whose
// device memory `gib` makes memory matter; `training` adds training fields,
// `model` model fields (a mixture's experts).
inline Scenario small_node(double gib, const nlohmann::json& training = nlohmann::json::object(),
                           const nlohmann::json& model = nlohmann::json::object()) {
  nlohmann::json doc = docs::good_doc();
  doc["model"] = {{"family", "transformer"}, {"layers", 8},   {"d_model", 1024}, {"heads", 16},
                  {"seq_len", 512},          {"vocab", 8192}, {"dtype", "bf16"}};
  doc["model"].update(model);
  doc["cluster"] = {{"preset", "dgx-a100"}, {"devices", 8}};
  // No framework's costs (training.framework ideal): these tests are about
  // the ZeRO stages' memory and collectives, on a model small enough for its
  // kernels to be shorter than a framework's launches.
  doc["training"] = {
      {"global_batch", 32}, {"micro_batches", 4}, {"optimizer", "adam"}, {"framework", "ideal"}};
  doc["training"].update(training);
  Scenario sc = parse_scenario(doc, "node.json");
  sc.cluster.device.memory_bytes = static_cast<Bytes>(gib * (1 << 30));
  return sc;
}

// Every cut of `layers` layers into `stages` stages of at least a layer each.
inline void for_each_cut(int layers, int stages, std::vector<StageRange>& cut,
                         const std::function<void(const std::vector<StageRange>&)>& visit) {
  const int first = cut.empty() ? 0 : cut.back().last_layer + 1;
  if (static_cast<int>(cut.size()) == stages - 1) {
    cut.push_back({first, layers - 1});
    visit(cut);
    cut.pop_back();
    return;
  }
  const int left = stages - static_cast<int>(cut.size()) - 1;  // stages after this one
  for (int last = first; last < layers - left; ++last) {
    cut.push_back({first, last});
    for_each_cut(layers, stages, cut, visit);
    cut.pop_back();
  }
}

}  // namespace pipescope::testing
