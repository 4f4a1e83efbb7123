// How stages exchange tensors (cluster.p2p, cluster.p2p_split): the scenario
// fields and their errors, and plan files that record them
// and refuse a scenario that exchanges otherwise. The engine's blocking sends
// are timed by hand in transfer_test.cpp, the split cuts in
// tensor_parallel_test.cpp.

#include <gtest/gtest.h>

#include <string>

#include "scenario_docs.h"
#include "sim/plan.h"
#include "sim/plan_io.h"
#include "sim/scenario_io.h"
#include "sim/simulator.h"

namespace pipescope {
namespace {

std::string scenario_error(const nlohmann::json& doc) {
  try {
    parse_scenario(doc, "s.json");
  } catch (const ScenarioError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(P2pMode, ParsesAndNamesItsModes) {
  EXPECT_EQ(parse_p2p_mode("overlapped"), P2pMode::kOverlapped);
  EXPECT_EQ(parse_p2p_mode("blocking"), P2pMode::kBlocking);
  EXPECT_FALSE(parse_p2p_mode("async").has_value());
  EXPECT_EQ(to_string(P2pMode::kBlocking), "blocking");
  nlohmann::json doc = testing::docs::good_doc();
  const Scenario plain = parse_scenario(doc, "s.json");
  EXPECT_EQ(plain.cluster.p2p, P2pMode::kOverlapped);  // the defaults
  EXPECT_FALSE(plain.cluster.p2p_split);
  doc["cluster"]["p2p"] = "blocking";
  doc["cluster"]["p2p_split"] = true;
  const Scenario megatron = parse_scenario(doc, "s.json");
  EXPECT_EQ(megatron.cluster.p2p, P2pMode::kBlocking);
  EXPECT_TRUE(megatron.cluster.p2p_split);
}

TEST(P2pMode, ScenarioErrorsNameTheField) {
  nlohmann::json doc = testing::docs::good_doc();
  doc["cluster"]["p2p"] = "async";
  EXPECT_EQ(scenario_error(doc),
            "s.json: cluster.p2p: unknown point-to-point mode 'async' (expected one of: "
            "overlapped, blocking)");
  doc["cluster"]["p2p"] = 1;
  EXPECT_NE(scenario_error(doc).find("s.json: cluster.p2p: "), std::string::npos);
  doc["cluster"].erase("p2p");
  doc["cluster"]["p2p_split"] = "yes";
  EXPECT_NE(scenario_error(doc).find("s.json: cluster.p2p_split: "), std::string::npos);
}

// Two stages of the sample scenario on dgx-h100 groups of T = 2.
nlohmann::json two_group_doc() {
  nlohmann::json doc = testing::docs::good_doc();
  doc["cluster"] = {{"preset", "dgx-h100"}, {"devices", 4}};
  doc["training"]["tensor_parallel"] = 2;
  return doc;
}

Plan two_stage_plan(const nlohmann::json& doc) {
  const Scenario sc = parse_scenario(doc, "p.json");
  SimConfig cfg;
  cfg.stages = 2;
  return make_plan(sc, simulate(sc, cfg), 1, "optimal");
}

std::string mismatch(const Plan& p, const nlohmann::json& scenario) {
  try {
    check_plan_matches(p, parse_scenario(scenario, "s.json"), "p.json");
  } catch (const ScenarioError& e) {
    return e.what();
  }
  return "matches";
}

TEST(P2pMode, PlanFilesRecordItAndRefuseAnotherScenarios) {
  nlohmann::json doc = two_group_doc();
  doc["cluster"]["p2p"] = "blocking";
  doc["cluster"]["p2p_split"] = true;
  const Plan p = two_stage_plan(doc);
  EXPECT_EQ(p.p2p, P2pMode::kBlocking);
  EXPECT_TRUE(p.p2p_split);
  nlohmann::json file = plan_to_json(p);
  EXPECT_EQ(file["cluster"]["p2p"], "blocking");
  EXPECT_EQ(file["cluster"]["p2p_split"], true);
  const Plan back = plan_from_json(file, "p.json");
  EXPECT_EQ(back.p2p, P2pMode::kBlocking);
  EXPECT_TRUE(back.p2p_split);
  file["cluster"].erase("p2p");  // plans written before the modes
  file["cluster"].erase("p2p_split");
  EXPECT_EQ(plan_from_json(file, "p.json").p2p, P2pMode::kOverlapped);
  EXPECT_FALSE(plan_from_json(file, "p.json").p2p_split);

  EXPECT_EQ(mismatch(p, doc), "matches");
  nlohmann::json other = doc;
  other["cluster"].erase("p2p");
  EXPECT_EQ(mismatch(p, other),
            "p.json: cluster.p2p: this plan's stages exchange tensors blocking, the scenario's "
            "overlapped (--set cluster.p2p=blocking runs the plan's)");
  other = doc;
  other["cluster"]["p2p_split"] = false;
  EXPECT_EQ(mismatch(p, other),
            "p.json: cluster.p2p_split: this plan's devices send their cuts 1/T from each "
            "device, the scenario's whole (--set cluster.p2p_split=true runs the plan's)");
}

TEST(P2pMode, OneStageExchangesNothing) {
  // A plan of one stage sends no tensors: any mode runs it.
  nlohmann::json doc = two_group_doc();
  const Scenario sc = parse_scenario(doc, "p.json");
  SimConfig cfg;
  cfg.stages = 1;
  const Plan p = make_plan(sc, simulate(sc, cfg), 1, "optimal");
  doc["cluster"]["p2p"] = "blocking";
  doc["cluster"]["p2p_split"] = true;
  EXPECT_EQ(mismatch(p, doc), "matches");
}

}  // namespace
}  // namespace pipescope
