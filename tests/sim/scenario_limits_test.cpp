// Magnitudes that would overflow 64-bit sizes or the nanosecond clock are
// rejected at load with the field named, instead of surfacing as wrong results.

#include "sim/scenario/scenario_limits.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "scenario_docs.h"
#include "sim/scenario/scenario_io.h"

namespace pipescope {
namespace {

using nlohmann::json;

json layers_doc() {
  return json::parse(R"({
    "model": { "family": "layers", "layers": [
      { "name": "a", "fwd_flops": 10, "params": 1, "out_bytes": 4, "stash_bytes": 4 },
      { "name": "b", "fwd_flops": 10, "params": 1, "out_bytes": 4, "stash_bytes": 4 } ]},
    "cluster": { "preset": "a100-80g", "devices": 2 },
    "training": { "global_batch": 32, "micro_batches": 4 }
  })");
}

json transformer_doc() {
  return json::parse(R"({
    "model": { "family": "transformer", "layers": 4, "d_model": 64, "heads": 4,
               "seq_len": 32, "vocab": 100 },
    "cluster": { "preset": "a100-80g", "devices": 2 },
    "training": { "global_batch": 32 }
  })");
}

std::string error_of(const json& doc) {
  return testing::docs::scenario_error(doc, "big.json");
}

TEST(ScenarioLimits, ActivationsOfTheBatchMustFit) {
  json doc = layers_doc();
  doc["model"]["layers"][1]["stash_bytes"] = 9e16;  // x 32 samples > 2^60
  EXPECT_EQ(error_of(doc),
            "big.json: model.layers[1].stash_bytes: the activations of the whole batch of 32 do "
            "not fit in 64-bit sizes (9e+16 bytes per sample up to this layer)");
  doc["model"]["layers"][1]["stash_bytes"] = 1e15;  // 3.2e16 for the batch: fine
  EXPECT_EQ(error_of(doc), "accepted");
}

TEST(ScenarioLimits, StepMustFitTheClock) {
  json doc = layers_doc();
  doc["model"]["layers"][0]["fwd_flops"] = 1e40;
  const std::string e = error_of(doc);
  EXPECT_EQ(e.rfind("big.json: model.layers[0].fwd_flops: a training step could take up to ", 0),
            0u)
      << e;
}

TEST(ScenarioLimits, ParametersAndStateMustFit) {
  json doc = layers_doc();
  doc["model"]["layers"][0]["params"] = 1e17;  // x 16 bytes (Adam) > 2^60
  EXPECT_EQ(error_of(doc),
            "big.json: model: the parameters with their gradients and optimizer state (1.6e+18 "
            "bytes) do not fit in 64-bit sizes");
}

TEST(ScenarioLimits, FamilyDimensionsThatOverflowNameTheModel) {
  json doc = transformer_doc();
  // Each dimension within its own bound, their product beyond 64 bits.
  doc["model"]["seq_len"] = 1 << 24;
  doc["model"]["d_model"] = 1 << 20;
  doc["model"]["heads"] = 1 << 20;
  EXPECT_EQ(error_of(doc),
            "big.json: model: the bytes one block stashes per sample come to 2.66e+21, too many "
            "for 64-bit sizes");
}

TEST(ScenarioLimits, ModelDimensionsAreBoundedAtTheirField) {
  json doc = transformer_doc();
  doc["model"]["d_model"] = 2000000000;
  EXPECT_EQ(error_of(doc),
            "big.json: model.d_model: expected a positive integer no larger than 1048576, got "
            "2000000000");
  doc = transformer_doc();
  doc["model"]["seq_len"] = (1 << 24) + 1;
  EXPECT_EQ(error_of(doc),
            "big.json: model.seq_len: expected a positive integer no larger than 16777216, got "
            "16777217");
}

TEST(ScenarioLimits, LayerCountIsBounded) {
  json doc = transformer_doc();
  doc["model"]["layers"] = 2000000000;
  EXPECT_EQ(error_of(doc),
            "big.json: model.layers: expected a positive integer no larger than 16384, got "
            "2000000000");
  doc["model"]["layers"] = 16385;
  EXPECT_EQ(error_of(doc),
            "big.json: model.layers: expected a positive integer no larger than 16384, got 16385");
  doc["model"]["layers"] = 16384;
  EXPECT_EQ(error_of(doc), "accepted");
}

TEST(ScenarioLimits, LargestGpipeModelLoads) {
  // GPipe's Pipeline-128: 1663 layers, 83.9B parameters, on 128 TPU v3 cores.
  json doc = transformer_doc();
  doc["model"] = json::parse(R"({ "family": "transformer", "layers": 1663, "d_model": 2048,
      "d_ff": 8192, "heads": 32, "seq_len": 1024, "vocab": 32000 })");
  doc["cluster"] = json::parse(R"({ "preset": "tpu-v3", "devices": 128 })");
  EXPECT_EQ(error_of(doc), "accepted");
}

}  // namespace
}  // namespace pipescope
