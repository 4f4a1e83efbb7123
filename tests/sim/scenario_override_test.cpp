// --set PATH=VALUE: how an override finds its field, what it writes, and
// the mistakes it refuses.

#include "sim/scenario/scenario_io.h"

#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "scenario_docs.h"

namespace pipescope {
namespace {

using nlohmann::json;
using namespace testing::docs;

TEST(ScenarioOverride, Number) {
  const Scenario s = parse_scenario_text(good_doc().dump(), "o.json",
                                         {"model.layers=6", "training.global_batch=64"});
  EXPECT_EQ(s.model.layers.size(), 8u);  // embedding + 6 blocks + head
  EXPECT_EQ(s.training.global_batch, 64);
}

TEST(ScenarioOverride, StringWithAndWithoutQuotes) {
  const Scenario s = parse_scenario_text(good_doc().dump(), "o.json",
                                         {"model.dtype=bf16", "training.optimizer=\"sgd\""});
  EXPECT_EQ(s.model.dtype, DType::kBf16);
  EXPECT_EQ(s.training.optimizer, Optimizer::kSgd);
}

TEST(ScenarioOverride, NestedArrayIndex) {
  const Scenario s = parse_scenario_text(layer_list_doc().dump(), "o.json",
                                         {"model.layers.1.fwd_flops=123", "model.layers.2.name=z"});
  EXPECT_EQ(s.model.layers[1].fwd_flops, 123.0);
  EXPECT_EQ(s.model.layers[2].name, "z");
}

TEST(ScenarioOverride, PathAsErrorsPrintIt) {
  const Scenario s =
      parse_scenario_text(layer_list_doc().dump(), "o.json", {"model.layers[1].fwd_flops=321"});
  EXPECT_EQ(s.model.layers[1].fwd_flops, 321.0);
}

// A framework named by its profile takes a field as the object form would,
// and keeps the profile's other fields.
TEST(ScenarioOverride, FieldOfAFrameworkNamedByItsProfile) {
  json doc = good_doc();
  doc["training"]["framework"] = "megatron-lm-2022";
  const Scenario named = parse_scenario_text(doc.dump(), "o.json", {});
  ASSERT_TRUE(named.training.framework.tp_backward_overlap);
  const Scenario s =
      parse_scenario_text(doc.dump(), "o.json", {"training.framework.tp_backward_overlap=false"});
  EXPECT_EQ(s.training.framework.name, "megatron-lm-2022");
  EXPECT_FALSE(s.training.framework.tp_backward_overlap);
  EXPECT_EQ(s.training.framework.p2p_split, named.training.framework.p2p_split);
  EXPECT_EQ(s.training.framework.host_launch_s, named.training.framework.host_launch_s);
}

TEST(ScenarioOverride, NewKeyIsRejectedByValidation) {
  const ScenarioError e = error_of(good_doc(), {"training.foo=1"});
  EXPECT_EQ(e.json_path(), "training.foo");
}

TEST(ScenarioOverride, MissingParent) {
  const ScenarioError e = error_of(good_doc(), {"model.foo.bar=3"});
  EXPECT_STREQ(e.what(), "bad.json: --set model.foo.bar=3: 'model.foo' does not exist");
  EXPECT_EQ(e.file(), "bad.json");
  EXPECT_EQ(e.json_path(), "model.foo.bar");
}

TEST(ScenarioOverride, IndexOutOfRange) {
  const ScenarioError e = error_of(layer_list_doc(), {"model.layers.3.name=x"});
  EXPECT_STREQ(e.what(), "bad.json: --set model.layers.3.name=x: 'model.layers.3' does not exist");
  EXPECT_EQ(e.json_path(), "model.layers.3.name");
}

TEST(ScenarioOverride, ScalarParent) {
  const ScenarioError e = error_of(good_doc(), {"model.family.x=1"});
  EXPECT_STREQ(e.what(),
               "bad.json: --set model.family.x=1: 'model.family' is not an object or an array");
  EXPECT_EQ(e.json_path(), "model.family.x");
}

TEST(ScenarioOverride, MissingEquals) {
  const ScenarioError e = error_of(good_doc(), {"model.layers"});
  EXPECT_STREQ(e.what(), "bad.json: --set model.layers: expected PATH=VALUE");
  EXPECT_EQ(e.json_path(), "");
}

TEST(ScenarioOverride, EmptyPath) {
  const ScenarioError e = error_of(good_doc(), {"=3"});
  EXPECT_STREQ(e.what(), "bad.json: --set =3: the path before '=' is empty");
  EXPECT_EQ(e.json_path(), "");
}

TEST(ScenarioOverride, EmptySegment) {
  const ScenarioError e = error_of(good_doc(), {"model..layers=3"});
  EXPECT_STREQ(e.what(), "bad.json: --set model..layers=3: the path has an empty segment");
  EXPECT_EQ(e.json_path(), "model..layers");
}

// A --set value that is JSON follows a file's rules: a key said twice is
// refused, naming the option and the key, rather than one of the two kept.
TEST(ScenarioOverride, DuplicateKeyInTheValueIsRefused) {
  ScenarioError e =
      error_of(explicit_cluster_doc(), {R"(cluster.device.efficiency={"max": 0.5, "max": 0.9, )"
                                        R"("half_flops": 0})"});
  EXPECT_STREQ(e.what(),
               "bad.json: --set cluster.device.efficiency={\"max\": 0.5, \"max\": 0.9, "
               "\"half_flops\": 0}: in the value at 'max': the key appears twice in its object");
  EXPECT_EQ(e.json_path(), "cluster.device.efficiency");
  e = error_of(good_doc(), {"training=" + std::string(100, '[') + std::string(100, ']')});
  EXPECT_NE(std::string(e.what()).find("nest deeper than 64 levels"), std::string::npos)
      << e.what();
  // Not JSON: still a string, as before.
  EXPECT_EQ(parse_scenario_text(good_doc().dump(), "o.json", {"name={\"a\""}).name, "{\"a\"");
}

}  // namespace
}  // namespace pipescope
