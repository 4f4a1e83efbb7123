// The cut a run states (training.balance, training.megatron): Megatron-LM's
// layout grammar and splits mapped onto PipeScope's layers, the scenario's
// errors, and the simulator running exactly that cut.

#include <gtest/gtest.h>

#include <regex>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "scenario_docs.h"
#include "sim/engine/partition.h"
#include "sim/engine/simulator.h"
#include "sim/export/plan_export.h"
#include "sim/plan/plan.h"
#include "sim/plan/planner.h"
#include "sim/scenario/scenario_io.h"
#include "sim/scenario/stated_cut.h"

namespace pipescope {
namespace {

using nlohmann::json;
using Stages = std::vector<std::string>;
using testing::docs::scenario_error;

// What `fn` throws as std::invalid_argument, or "no error".
template <typename Fn>
std::string invalid(Fn&& fn) {
  try {
    fn();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no error";
}

// A transformer of `blocks` blocks (blocks + 2 layers) on `devices` A100s.
json gpt_doc(int blocks, int devices) {
  json doc = testing::docs::good_doc();
  doc["model"]["layers"] = blocks;
  doc["cluster"]["devices"] = devices;
  return doc;
}

std::vector<StageRange> cut_of(const SimResult& r) {
  std::vector<StageRange> out;
  for (const StageCost& c : r.stage_costs) out.push_back(c.layers);
  return out;
}

SimResult simulated(const json& doc, SimConfig config = {}) {
  config.record_timeline = false;
  return simulate(parse_scenario(doc, "s.json"), config);
}

TEST(MegatronLayout, UnrollsGroupsThenLetters) {
  EXPECT_EQ(expand_megatron_layout("Et*2|(tt|)*2,ttL"), (Stages{"Ett", "tt", "tt", "ttL"}));
  // Megatron-LM's docstring example: "Ettt|(tt|)*29,m|L".
  const Stages megatron = expand_megatron_layout("Ettt|(tt|)*29,m|L");
  ASSERT_EQ(megatron.size(), 32u);
  EXPECT_EQ(megatron[0], "Ettt");
  EXPECT_EQ(megatron[29], "tt");
  EXPECT_EQ(megatron[30], "m");
  EXPECT_EQ(megatron[31], "L");
  // Its --help example, with an empty stage.
  EXPECT_EQ(expand_megatron_layout("E|(t|)*3,m|m||L"),
            (Stages{"E", "t", "t", "t", "m", "m", "", "L"}));
  // Commas are cosmetic anywhere, counts have several digits, a group's copies
  // keep their own repeats, and a count of 0 drops what it repeats.
  EXPECT_EQ(expand_megatron_layout("E,t,t|t,tL"), (Stages{"Ett", "ttL"}));
  EXPECT_EQ(expand_megatron_layout("Et*12|L"), (Stages{"E" + std::string(12, 't'), "L"}));
  EXPECT_EQ(expand_megatron_layout("E|(t*2|)*2L"), (Stages{"E", "tt", "tt", "L"}));
  EXPECT_EQ(expand_megatron_layout("Et*0|tL"), (Stages{"E", "tL"}));
}

TEST(MegatronLayout, RefusesWhatMegatronCannotParse) {
  EXPECT_EQ(invalid([] { expand_megatron_layout("Ett|tx|L"); }),
            "unexpected 'x' in stage 1; expected E (embedding), t (transformer layer), L (loss), "
            "m (MTP layer), | between stages, (X)*n and x*n repeats, commas");
  // Nested groups, a group without a count, a count without a letter, a space.
  for (const char* bad : {"E|((t|)*2)*2L", "E|(tt)|L", "*2EtL", "E |tL"}) {
    EXPECT_NE(invalid([&] { expand_megatron_layout(bad); }).find("unexpected"), std::string::npos)
        << bad;
  }
  EXPECT_EQ(invalid([] { expand_megatron_layout("E(|tt)*2|L"); }), "no error");
  EXPECT_EQ(invalid([] { expand_megatron_layout("Et*99999999999|L"); }),
            "the layout unrolls to more than 1048576 characters");
}

TEST(MegatronLayout, MapsEachLetterToOneLayer) {
  EXPECT_EQ(megatron_layout_balance({"Ett", "tt", "tt", "ttL"}, 8), (std::vector<int>{3, 2, 2, 3}));
  EXPECT_EQ(megatron_layout_balance({"E", "tttt", "L"}, 4), (std::vector<int>{1, 4, 1}));
  EXPECT_EQ(megatron_layout_balance({"EttL"}, 2), (std::vector<int>{4}));
  EXPECT_EQ(invalid([] {
              megatron_layout_balance({"Ett", "tm", "L"}, 3);
            }),
            "stage 1 holds 'm', a multi-token-prediction layer, which PipeScope does not model; "
            "drop the m's to simulate the rest");
  EXPECT_EQ(invalid([] {
              megatron_layout_balance({"Ett", "ttL"}, 5);
            }),
            "the layout has 4 t's, the model 5 transformer layers (model.layers)");
  EXPECT_EQ(invalid([] {
              megatron_layout_balance({"Ett", "", "ttL"}, 4);
            }),
            "stage 1 of 3 is empty, and PipeScope's stages hold at least one layer");
  EXPECT_EQ(invalid([] {
              megatron_layout_balance({"tEt", "ttL"}, 4);
            }),
            "expected E (the embedding) first and L (the loss) last, as Megatron-LM does");
  EXPECT_EQ(invalid([] {
              megatron_layout_balance({"Ett", "EttL"}, 4);
            }),
            "expected one E and one L, as Megatron-LM does, got 2 E and 1 L");
}

TEST(MegatronSplit, EvenUnevenAccountedAndVirtual) {
  const MegatronSplit even;
  // 8 layers, 2 a rank; the embedding joins the first stage, the head the last.
  EXPECT_EQ(megatron_split_balance(even, 8, 4, 1), (std::vector<int>{3, 2, 2, 3}));
  // Two virtual stages a rank: stage c K + r is rank r's chunk c.
  EXPECT_EQ(megatron_split_balance(even, 8, 2, 2), (std::vector<int>{3, 2, 2, 3}));
  MegatronSplit uneven;
  uneven.first_rank_layers = 1;
  uneven.last_rank_layers = 3;
  EXPECT_EQ(megatron_split_balance(uneven, 10, 4, 1), (std::vector<int>{2, 3, 3, 4}));
  MegatronSplit ends;
  ends.first_rank_layers = 2;
  ends.last_rank_layers = 2;
  EXPECT_EQ(megatron_split_balance(ends, 12, 3, 2), (std::vector<int>{2, 4, 1, 1, 4, 2}));
  MegatronSplit first_only;
  first_only.first_rank_layers = 4;
  EXPECT_EQ(megatron_split_balance(first_only, 10, 4, 1), (std::vector<int>{5, 2, 2, 3}));
  MegatronSplit accounted;
  accounted.account_for_embedding = true;
  accounted.account_for_loss = true;
  // 6 layers + 2 accounted = 2 a rank; the embedding and the head take a place each.
  EXPECT_EQ(megatron_split_balance(accounted, 6, 4, 1), (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(megatron_split_balance(accounted, 10, 3, 2), (std::vector<int>{2, 2, 2, 2, 2, 2}));
}

TEST(MegatronSplit, RefusesWhatMegatronRefuses) {
  EXPECT_EQ(invalid([] { megatron_split_balance({}, 8, 3, 1); }),
            "Megatron-LM splits the 8 transformer layers evenly over the pipeline ranks, and K=3 "
            "does not divide 8; give decoder_first_pipeline_num_layers and "
            "decoder_last_pipeline_num_layers, or a pipeline_model_parallel_layout");
  MegatronSplit uneven;
  uneven.first_rank_layers = 1;
  uneven.last_rank_layers = 2;
  EXPECT_EQ(invalid([&] { megatron_split_balance(uneven, 10, 4, 1); }),
            "Megatron-LM splits the 7 transformer layers left after the first and last ranks "
            "evenly over the 2 other rank(s) of K=4, and they do not split so");
  EXPECT_EQ(invalid([&] { megatron_split_balance(uneven, 3, 2, 1); }), "no error");
  EXPECT_NE(invalid([&] { megatron_split_balance(uneven, 4, 2, 1); }), "no error");
  EXPECT_NE(invalid([&] { megatron_split_balance(uneven, 10, 1, 1); }), "no error");
  EXPECT_EQ(invalid([&] { megatron_split_balance(uneven, 3, 2, 2); }),
            "rank 0's 1 layers do not split evenly over its 2 virtual stages (chunks), as "
            "Megatron-LM requires");
}

TEST(StatedCutScenario, BalanceIsReadAndAddsUpToTheLayers) {
  json doc = gpt_doc(4, 2);
  doc["training"]["balance"] = {2, 4};
  const Scenario sc = parse_scenario(doc, "s.json");
  ASSERT_TRUE(sc.training.cut.has_value());
  EXPECT_EQ(sc.training.cut->balance, (std::vector<int>{2, 4}));
  EXPECT_EQ(sc.training.cut->field, "training.balance");
  doc["training"]["balance"] = {2, 3};
  EXPECT_EQ(scenario_error(doc),
            "s.json: training.balance: the entries add up to 5 layers; expected the model's 6 (the "
            "embedding, 4 blocks and the head)");
  doc["training"]["balance"] = {3, 0, 3};
  EXPECT_EQ(scenario_error(doc),
            "s.json: training.balance: entry 2 of 3 is 0; expected whole numbers of at least 1, "
            "the layers of each model stage");
  doc["training"]["balance"] = {3, -1, 4};
  EXPECT_EQ(scenario_error(doc),
            "s.json: training.balance: entry 2 of 3 is -1; expected whole numbers of at least 1, "
            "the layers of each model stage");
  doc["training"]["balance"] = json::array();
  EXPECT_EQ(scenario_error(doc),
            "s.json: training.balance: expected whole numbers of at least 1, the layers of each "
            "model stage, got []");
  doc["training"]["balance"] = "3,3";
  EXPECT_EQ(scenario_error(doc), "s.json: training.balance: expected an array, got string");
}

TEST(StatedCutScenario, MegatronFormsAreCheckedAsMegatronChecksThem) {
  json doc = gpt_doc(4, 2);
  doc["training"]["megatron"] = {{"pipeline_model_parallel_layout", "Et*2|t*2L"}};
  const Scenario sc = parse_scenario(doc, "s.json");
  ASSERT_TRUE(sc.training.cut.has_value());
  EXPECT_EQ(sc.training.cut->balance, (std::vector<int>{3, 3}));
  EXPECT_EQ(sc.training.cut->field, "training.megatron.pipeline_model_parallel_layout");

  doc["training"]["megatron"]["pipeline_model_parallel_layout"] = "Et*2|t*3L";
  EXPECT_EQ(scenario_error(doc),
            "s.json: training.megatron.pipeline_model_parallel_layout: the layout has 5 t's, the "
            "model 4 transformer layers (model.layers)");
  doc["training"]["megatron"]["pipeline_model_parallel_layout"] = "Et*2|t*2mL";
  EXPECT_NE(scenario_error(doc).find("multi-token-prediction"), std::string::npos);
  doc["training"]["megatron"]["pipeline_model_parallel_layout"] = "Et*2|(t*2L";
  EXPECT_NE(scenario_error(doc).find("pipeline_model_parallel_layout: unexpected '('"),
            std::string::npos);
  doc["training"]["megatron"] = {{"pipeline_model_parallel_layout", "Ett|ttL"},
                                 {"decoder_first_pipeline_num_layers", 2}};
  EXPECT_EQ(scenario_error(doc),
            "s.json: training.megatron.pipeline_model_parallel_layout: Megatron-LM takes a layout "
            "alone, without decoder_first/last_pipeline_num_layers or "
            "account_for_embedding/loss_in_pipeline_split");
  doc["training"]["megatron"] = {{"decoder_last_pipeline_num_layers", 2},
                                 {"account_for_loss_in_pipeline_split", true}};
  EXPECT_EQ(scenario_error(doc),
            "s.json: training.megatron.decoder_last_pipeline_num_layers: Megatron-LM refuses "
            "decoder_first/last_pipeline_num_layers together with "
            "account_for_embedding/loss_in_pipeline_split");
  doc["training"]["megatron"] = {{"decoder_first_pipeline_num_layers", 0}};
  EXPECT_EQ(scenario_error(doc),
            "s.json: training.megatron.decoder_first_pipeline_num_layers: expected a positive "
            "integer, got 0");
  doc["training"]["megatron"] = {{"num_layers", 4}};
  EXPECT_NE(scenario_error(doc).find("training.megatron.num_layers: unknown key 'num_layers'"),
            std::string::npos)
      << scenario_error(doc);
  doc["training"]["megatron"] = json::object();
  doc["training"]["balance"] = {3, 3};
  EXPECT_EQ(scenario_error(doc),
            "s.json: training.megatron: training.balance states the cut too; give one of them");

  json mlp = testing::docs::layer_list_doc();
  mlp["training"]["megatron"] = json::object();
  EXPECT_EQ(scenario_error(mlp),
            "s.json: training.megatron: Megatron-LM's split is a GPT's (embedding, transformer "
            "layers, loss): it needs model.family transformer, got layers; give training.balance "
            "instead");
}

TEST(StatedCutSimulation, ABalanceIsTheCutSimulated) {
  json doc = gpt_doc(8, 4);
  doc["training"]["balance"] = {2, 3, 1, 4};
  const SimResult r = simulated(doc);
  EXPECT_EQ(cut_of(r), ranges_from_sizes({2, 3, 1, 4}));
  // The same cut given as stage ranges: the same step.
  json free = gpt_doc(8, 4);
  SimConfig given;
  given.stage_ranges = ranges_from_sizes({2, 3, 1, 4});
  EXPECT_EQ(simulated(free, given).metrics.step_time, r.metrics.step_time);
}

TEST(StatedCutSimulation, TheOptimalCutsBalanceGivesTheSameStep) {
  for (const char* schedule : {"1f1b", "interleaved-1f1b", "zb-v"}) {
    json doc = gpt_doc(14, 4);
    doc["training"]["schedule"] = schedule;
    const SimResult free = simulated(doc);
    std::vector<int> balance;
    for (const StageRange& s : cut_of(free)) balance.push_back(s.layer_count());
    doc["training"]["balance"] = balance;
    const SimResult given = simulated(doc);
    EXPECT_EQ(cut_of(given), cut_of(free)) << schedule;
    EXPECT_EQ(given.metrics.step_time, free.metrics.step_time) << schedule;
  }
}

TEST(StatedCutSimulation, ALayoutWithRepeatsIsTheSameCutAsItsBalance) {
  json layout = gpt_doc(8, 2);
  layout["training"]["schedule"] = "interleaved-1f1b";
  layout["training"]["chunks"] = 2;
  json balance = layout;
  layout["training"]["megatron"] = {{"pipeline_model_parallel_layout", "Et*2|(tt|)*2,t*2L"}};
  balance["training"]["balance"] = {3, 2, 2, 3};
  const SimResult a = simulated(layout);
  const SimResult b = simulated(balance);
  EXPECT_EQ(cut_of(a), ranges_from_sizes({3, 2, 2, 3}));
  EXPECT_EQ(cut_of(a), cut_of(b));
  EXPECT_EQ(a.metrics.step_time, b.metrics.step_time);
}

TEST(StatedCutSimulation, MegatronsSplitIsCutAtKAndTheChunks) {
  json doc = gpt_doc(10, 4);
  doc["training"]["megatron"] = {{"decoder_first_pipeline_num_layers", 1},
                                 {"decoder_last_pipeline_num_layers", 3}};
  EXPECT_EQ(cut_of(simulated(doc)), ranges_from_sizes({2, 3, 3, 4}));
  doc["training"]["megatron"] = json::object();  // Megatron-LM's even split
  SimConfig two;
  two.stages = 2;
  EXPECT_EQ(cut_of(simulated(doc, two)), ranges_from_sizes({6, 6}));
  try {
    simulated(doc);  // K=4 does not divide 10
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.scenario_field(), "training.megatron");
    EXPECT_NE(std::string(e.what()).find("K=4 does not divide 10"), std::string::npos) << e.what();
  }
}

TEST(StatedCutSimulation, AnotherStageCountIsAnErrorNamingTheField) {
  json doc = gpt_doc(8, 4);
  doc["training"]["balance"] = {5, 5};
  try {
    simulated(doc);
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.scenario_field(), "training.balance");
    EXPECT_EQ(std::string(e.what()),
              "expected 4 entries, one per model stage (K=4), each at least 1 and adding up to "
              "the model's 10 layers; got 2");
  }
  doc["training"].erase("balance");
  doc["training"]["megatron"] = {{"pipeline_model_parallel_layout", "Et|(tt|)*3tL"}};
  SimConfig two;
  two.stages = 2;
  try {
    simulated(doc, two);
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.scenario_field(), "training.megatron.pipeline_model_parallel_layout");
    EXPECT_EQ(std::string(e.what()), "the layout has 5 stages; the run has K=2 model stages");
  }
  doc["training"]["megatron"]["pipeline_model_parallel_layout"] = "Et|(tt|)*2,t*3L";
  try {
    simulated(doc, two);
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "the layout has 4 stages; the run has K=2 model stages; Megatron-LM runs it on K=2 "
              "ranks as 2 virtual stages each (--chunks 2 with an interleaved schedule)");
  }
}

// A plan made from a given cut carries it: simulated (whatever cut the
// scenario states) and exported, it is that cut.
TEST(StatedCutSimulation, APlanKeepsTheGivenCut) {
  json doc = gpt_doc(8, 4);
  doc["training"]["balance"] = {2, 3, 1, 4};
  const Scenario sc = parse_scenario(doc, "s.json");
  SimConfig config;
  config.record_timeline = false;
  const Plan plan = make_plan(sc, simulate(sc, config), 1, "given");
  EXPECT_EQ(plan.stage_ranges(), ranges_from_sizes({2, 3, 1, 4}));

  json other = doc;
  other["training"]["balance"] = {4, 2, 2, 2};
  const PlanSimulation run = plan_simulation(parse_scenario(other, "s.json"), plan);
  EXPECT_EQ(cut_of(simulate(run.scenario, run.config)), ranges_from_sizes({2, 3, 1, 4}));

  // Megatron-LM's export gives the cut as a layout that reads back as the same cut.
  const std::string flags = export_plan(plan, ExportFormat::kMegatron);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(flags, m, std::regex("--pipeline-model-parallel-layout '([^']*)'")))
      << flags;
  EXPECT_EQ(megatron_layout_balance(expand_megatron_layout(m[1].str()), 8),
            (std::vector<int>{2, 3, 1, 4}));
}

}  // namespace
}  // namespace pipescope
