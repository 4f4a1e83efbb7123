#pragma once
// Small scenario documents that tests break in one place each.

#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/scenario/scenario_io.h"

namespace pipescope::testing::docs {

using nlohmann::json;

// The message that reading `doc` as `file` raises, or "accepted".
inline std::string scenario_error(const json& doc, const std::string& file = "s.json") {
  try {
    parse_scenario(doc, file);
  } catch (const ScenarioError& e) {
    return e.what();
  }
  return "accepted";
}

inline const std::string kScenarios = std::string(PIPESCOPE_TEST_DATA_DIR) + "/scenarios/";

// A valid scenario that each error test breaks in one place.
inline json good_doc() {
  return json::parse(R"({
    "model": { "family": "transformer", "layers": 4, "d_model": 64, "heads": 4,
               "seq_len": 32, "vocab": 100 },
    "cluster": { "preset": "a100-80g", "devices": 2 },
    "training": { "global_batch": 32, "micro_batches": 4 }
  })");
}

inline json layer_list_doc() {
  json doc = good_doc();
  doc["model"] = json::parse(R"({ "family": "layers", "layers": [
      { "name": "a", "fwd_flops": 10, "params": 1, "out_bytes": 4, "stash_bytes": 4 },
      { "name": "b", "fwd_flops": 10, "params": 1, "out_bytes": 4, "stash_bytes": 4 },
      { "name": "c", "fwd_flops": 10, "params": 1, "out_bytes": 4, "stash_bytes": 4 } ]})");
  return doc;
}

inline json explicit_cluster_doc() {
  json doc = good_doc();
  doc["cluster"] = json::parse(R"({ "devices": 2,
      "device": { "peak_flops": 1e12, "memory_bytes": 1000000, "mem_bandwidth": 1e11 },
      "interconnect": { "topology": "ring", "bandwidth": 1e10, "latency_s": 1e-6 } })");
  return doc;
}

// The error that parsing `text` (labelled "bad.json") raises.
inline ScenarioError error_of_text(const std::string& text,
                                   const std::vector<std::string>& overrides = {}) {
  try {
    parse_scenario_text(text, "bad.json", overrides);
  } catch (const ScenarioError& e) {
    return e;
  }
  throw std::logic_error("the scenario was accepted");
}

inline ScenarioError error_of(const json& doc, const std::vector<std::string>& overrides = {}) {
  return error_of_text(doc.dump(), overrides);
}

inline ScenarioError error_of_file(const std::string& file) {
  try {
    load_scenario(file);
  } catch (const ScenarioError& e) {
    return e;
  }
  throw std::logic_error("the scenario was accepted");
}

}  // namespace pipescope::testing::docs
