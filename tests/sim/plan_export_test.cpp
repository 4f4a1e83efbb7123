// Exports of a plan: golden files for each form, and checks that every form's
// numbers agree with the plan for cuts the golden plan does not cover.

#include "sim/export/plan_export.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/base/format.h"
#include "sim/engine/simulator.h"
#include "sim/formats/plan_io.h"
#include "sim/plan/planner.h"
#include "sim/scenario/scenario_io.h"

#include "export_fixtures.h"
#include "golden.h"
#include "scenario_docs.h"
#include "sim_fixtures.h"

namespace pipescope {
namespace {

using testing::expect_golden;
using testing::golden_plan;
using testing::interleaved_plan;
using testing::kGolden;
using testing::plan_with;
using testing::read_text;

namespace fs = std::filesystem;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The rest of the first line that starts with `prefix`, or "(none)".
std::string after(const std::string& text, const std::string& prefix) {
  for (const std::string& line : lines_of(text)) {
    if (line.rfind(prefix, 0) == 0) return line.substr(prefix.size());
  }
  return "(none)";
}

// "[3, 2, 2]" -> {3, 2, 2}.
std::vector<int> ints_of(std::string list) {
  for (char& c : list) {
    if (c == '[' || c == ']' || c == ',') c = ' ';
  }
  std::istringstream in(list);
  std::vector<int> out;
  for (int v = 0; in >> v;) out.push_back(v);
  return out;
}

// Megatron flags as name -> value ("" for a flag without one).
std::map<std::string, std::string> flags_of(const std::string& text) {
  std::map<std::string, std::string> out;
  for (std::string line : lines_of(text)) {
    if (line.empty() || line[0] == '#') continue;
    if (line.size() >= 2 && line.substr(line.size() - 2) == " \\") line.resize(line.size() - 2);
    const std::size_t space = line.find(' ');
    out[line.substr(0, space)] = space == std::string::npos ? "" : line.substr(space + 1);
  }
  return out;
}

std::vector<std::vector<std::string>> csv_of(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  for (const std::string& line : lines_of(text)) {
    std::vector<std::string> cells;
    std::size_t start = 0;
    for (;;) {
      const std::size_t comma = line.find(',', start);
      cells.push_back(line.substr(start, comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    rows.push_back(cells);
  }
  return rows;
}

TEST(PlanExport, FormatNames) {
  for (const ExportFormat f : {ExportFormat::kTorchGpipe, ExportFormat::kDeepSpeed,
                               ExportFormat::kMegatron, ExportFormat::kTorchPipelining}) {
    EXPECT_EQ(parse_export_format(to_string(f)), f);
  }
  EXPECT_EQ(to_string(ExportFormat::kTorchPipelining), "torch-pipelining");
  EXPECT_FALSE(parse_export_format("pipedream").has_value());
}

// A plan of 8 A100s (all-to-all) as D=2 replicas of K=2 stages of T=2
// tensor-parallel devices, from a simulated 1F1B step of a 4-block GPT, with the
// given ZeRO stage and sequence parallelism. `whole` is the scenario of all 8.
struct ThreeDimensions {
  Scenario whole;
  Plan plan;
};
ThreeDimensions three_d_plan(int zero, bool sequence_parallel) {
  nlohmann::json doc = testing::docs::good_doc();
  doc["cluster"]["devices"] = 8;
  doc["cluster"]["rank_order"] = "tp-pp-dp";  // the replicas outermost: dims dp, pp, tp
  doc["training"]["tensor_parallel"] = 2;
  doc["training"]["sequence_parallel"] = sequence_parallel;
  doc["training"]["zero"] = zero;
  const Scenario sc = parse_scenario(doc, "3d.json");
  SimConfig cfg;
  cfg.stages = 2;
  cfg.schedule = ScheduleKind::k1F1B;
  cfg.data_parallel = data_parallel_ring(sc.cluster, 2, 2);
  const Scenario replica = replica_scenario(sc, 2, 2);
  return {sc, make_plan(replica, simulate(replica, cfg), 2, "optimal")};
}

TEST(PlanExport, GoldenFiles) {
  const Plan p = golden_plan();
  expect_golden("plan.torchgpipe.py", export_plan(p, ExportFormat::kTorchGpipe));
  expect_golden("plan.deepspeed.py", export_plan(p, ExportFormat::kDeepSpeed));
  expect_golden("plan.megatron.txt", export_plan(p, ExportFormat::kMegatron));
  expect_golden("plan.torch-pipelining.csv", export_plan(p, ExportFormat::kTorchPipelining));
  expect_golden("plan.mesh.py", export_torch_device_mesh(p));
  // T=2 x K=2 x D=2 with sequence parallelism and ZeRO stage 1, cut by hand.
  Plan three_d = plan_with({3, 3}, 4, 2, Remat::kAlways,
                           {"embed", "block0", "block1", "block2", "block3", "head"});
  three_d.schedule = ScheduleKind::k1F1B;
  three_d.tensor_parallel = 2;
  three_d.sequence_parallel = true;
  three_d.zero = 1;
  three_d.devices = 8;
  expect_golden("plan-3d.mesh.py", export_torch_device_mesh(three_d));
}

TEST(PlanExport, TorchGpipeBalanceIsTheCut) {
  for (const Plan& p : {golden_plan(), plan_with({1, 4, 2, 5}, 8, 2, Remat::kNever)}) {
    const std::string text = export_plan(p, ExportFormat::kTorchGpipe);
    const std::vector<int> balance = ints_of(after(text, "balance = "));
    ASSERT_EQ(balance.size(), static_cast<std::size_t>(p.stages));
    EXPECT_EQ(std::accumulate(balance.begin(), balance.end(), 0), p.layer_count);
    for (std::size_t s = 0; s < balance.size(); ++s) {
      EXPECT_EQ(balance[s], p.stage_plans[s].layers.layer_count());
    }
    EXPECT_EQ(after(text, "model = GPipe(model, balance=balance, chunks="),
              std::to_string(p.micro_batches) + ", checkpoint='" +
                  (p.remat == Remat::kAlways       ? "always"
                   : p.remat == Remat::kExceptLast ? "except_last"
                                                   : "never") +
                  "')");
  }
}

TEST(PlanExport, DeepSpeedPartsAreTheBoundaries) {
  for (const Plan& p : {golden_plan(), plan_with({1, 4, 2, 5}, 8, 2, Remat::kNever)}) {
    const std::string text = export_plan(p, ExportFormat::kDeepSpeed);
    const std::vector<int> parts = ints_of(after(text, "PIPESCOPE_PARTS = "));
    ASSERT_EQ(parts.size(), static_cast<std::size_t>(p.stages) + 1);
    EXPECT_EQ(parts.front(), 0);
    EXPECT_EQ(parts.back(), p.layer_count);
    for (std::size_t s = 0; s < p.stage_plans.size(); ++s) {
      EXPECT_EQ(parts[s], p.stage_plans[s].layers.first_layer);
      EXPECT_EQ(parts[s + 1], p.stage_plans[s].layers.last_layer + 1);
    }
    // DeepSpeed's train_batch_size = micro-batch x accumulation steps x replicas.
    EXPECT_EQ(after(text, "    \"train_batch_size\": "), std::to_string(p.global_batch) + ",");
    EXPECT_EQ(after(text, "    \"train_micro_batch_size_per_gpu\": "),
              std::to_string(p.micro_batch_size) + ",");
    EXPECT_EQ(after(text, "    \"gradient_accumulation_steps\": "),
              std::to_string(p.micro_batches) + ",");
    EXPECT_EQ(p.global_batch, p.micro_batch_size * p.micro_batches * p.data_parallel);
  }
}

TEST(PlanExport, MegatronUnevenFirstAndLast) {
  // Golden cut 3 / 2 / 2 with 'embed' first and 'head' last: 2 / 2 / 1 transformer layers.
  const std::map<std::string, std::string> f =
      flags_of(export_plan(golden_plan(), ExportFormat::kMegatron));
  EXPECT_EQ(f.at("--pipeline-model-parallel-size"), "3");
  EXPECT_EQ(f.at("--num-layers"), "5");
  EXPECT_EQ(f.at("--decoder-first-pipeline-num-layers"), "2");
  EXPECT_EQ(f.at("--decoder-last-pipeline-num-layers"), "1");
  EXPECT_EQ(f.count("--pipeline-model-parallel-layout"), 0u);
  EXPECT_EQ(f.at("--micro-batch-size"), "2");
  EXPECT_EQ(f.at("--global-batch-size"), "8");
  EXPECT_EQ(f.at("--recompute-granularity"), "full");
  EXPECT_EQ(f.at("--recompute-method"), "uniform");
  EXPECT_EQ(f.at("--recompute-num-layers"), "1");  // gcd(2, 2, 1)
}

TEST(PlanExport, RematExceptLast) {
  const Plan p = plan_with({3, 2, 2, 3}, 4, 1, Remat::kExceptLast,
                           {"embed", "b", "c", "d", "e", "f", "g", "h", "i", "head"});
  const std::string gpipe = export_plan(p, ExportFormat::kTorchGpipe);
  EXPECT_NE(gpipe.find("checkpoint='except_last')"), std::string::npos);
  EXPECT_NE(gpipe.find("remat except-last."), std::string::npos);
  // DeepSpeed and Megatron-LM recompute every micro-batch: the export says so.
  const std::string ds = export_plan(p, ExportFormat::kDeepSpeed);
  EXPECT_NE(ds.find("activation_checkpoint_interval 3"), std::string::npos);
  EXPECT_NE(ds.find("remat except-last runs as remat on"), std::string::npos);
  const std::string mg = export_plan(p, ExportFormat::kMegatron);
  EXPECT_EQ(flags_of(mg).at("--recompute-granularity"), "full");
  EXPECT_NE(mg.find("remat except-last runs as remat on"), std::string::npos);
  EXPECT_EQ(export_plan(plan_with({3, 2, 2, 3}, 4, 1, Remat::kAlways,
                                  {"embed", "b", "c", "d", "e", "f", "g", "h", "i", "head"}),
                        ExportFormat::kMegatron)
                .find("except-last"),
            std::string::npos);
}

TEST(PlanExport, MegatronEvenCutNeedsNoUnevenFlags) {
  const std::string text =
      export_plan(plan_with({3, 2, 2, 3}, 4, 2, Remat::kAlways,
                            {"embed", "b", "c", "d", "e", "f", "g", "h", "i", "head"}),
                  ExportFormat::kMegatron);
  const std::map<std::string, std::string> f = flags_of(text);
  EXPECT_EQ(f.at("--num-layers"), "8");
  EXPECT_EQ(f.count("--decoder-first-pipeline-num-layers"), 0u);
  EXPECT_EQ(f.count("--pipeline-model-parallel-layout"), 0u);
  EXPECT_EQ(f.at("--global-batch-size"), "24");    // 3 x M 4 x D 2
  EXPECT_EQ(f.at("--recompute-num-layers"), "2");  // whole stages, as GPipe
  EXPECT_NE(text.find("# Run on K x D = 8 GPUs"), std::string::npos);
}

TEST(PlanExport, MegatronUnevenMiddleNeedsTheLayout) {
  // No 'embed' or 'head' names: every layer is a transformer layer, 1 / 3 / 1 / 2.
  const std::string text =
      export_plan(plan_with({1, 3, 1, 2}, 4, 1, Remat::kNever), ExportFormat::kMegatron);
  const std::map<std::string, std::string> f = flags_of(text);
  EXPECT_EQ(f.at("--num-layers"), "7");
  EXPECT_EQ(f.at("--pipeline-model-parallel-layout"), "'Et|t*3|t|t*2L'");
  EXPECT_EQ(f.count("--decoder-first-pipeline-num-layers"), 0u);
  EXPECT_EQ(f.count("--recompute-granularity"), 0u);  // remat off
  EXPECT_NE(text.find("cannot express it"), std::string::npos);
  // A first stage holding only the embedding also needs the layout.
  const std::map<std::string, std::string> g = flags_of(
      export_plan(plan_with({1, 2, 2}, 4, 1, Remat::kAlways, {"embed", "a", "b", "c", "head"}),
                  ExportFormat::kMegatron));
  EXPECT_EQ(g.at("--pipeline-model-parallel-layout"), "'E|t*2|tL'");
  EXPECT_EQ(g.at("--num-layers"), "3");
}

// Megatron-LM's uniform recompute checkpoints groups of --recompute-num-layers
// layers of a stage; with even stages a group is a stage, the plan's remat.
TEST(PlanExport, MegatronRecomputeFlagsPerRematMode) {
  const std::vector<std::string> names{"embed", "b", "c", "d", "e", "f", "g", "h", "i", "head"};
  for (const Remat remat : kScheduleRemats) {
    SCOPED_TRACE(std::string(to_string(remat)));
    const std::string text =
        export_plan(plan_with({3, 2, 2, 3}, 4, 1, remat, names), ExportFormat::kMegatron);
    const std::map<std::string, std::string> f = flags_of(text);
    if (remat == Remat::kNever) {
      EXPECT_EQ(f.count("--recompute-granularity"), 0u);
      EXPECT_EQ(f.count("--recompute-method"), 0u);
      EXPECT_EQ(f.count("--recompute-num-layers"), 0u);
      continue;
    }
    EXPECT_EQ(f.at("--recompute-granularity"), "full");
    EXPECT_EQ(f.at("--recompute-method"), "uniform");
    EXPECT_EQ(f.at("--recompute-num-layers"), "2");  // 2 / 2 / 2 / 2 transformer layers
    EXPECT_NE(text.find("Each stage is one group"), std::string::npos) << text;
    // Except-last cannot be said: the export names what runs instead and its cost.
    EXPECT_EQ(text.find("remat except-last runs as remat on,\n# one recompute more per stage and "
                        "step than the plan predicts (") != std::string::npos,
              remat == Remat::kExceptLast)
        << text;
  }
}

TEST(PlanExport, MegatronUnevenStagesRecomputeInGroupsOfTheirGcd) {
  // No 'embed' or 'head': 4 / 6 / 2 transformer layers, groups of 2.
  const std::string text =
      export_plan(plan_with({4, 6, 2}, 4, 1, Remat::kAlways), ExportFormat::kMegatron);
  const std::map<std::string, std::string> f = flags_of(text);
  EXPECT_EQ(f.at("--recompute-method"), "uniform");
  EXPECT_EQ(f.at("--recompute-num-layers"), "2");
  EXPECT_NE(text.find("Megatron-LM keeps 2 / 3 / 1 inputs per micro-batch"), std::string::npos)
      << text;
  // Golden cut 2 / 2 / 1: groups of one layer.
  const std::string golden = export_plan(golden_plan(), ExportFormat::kMegatron);
  EXPECT_EQ(flags_of(golden).at("--recompute-num-layers"), "1");
  EXPECT_NE(golden.find("Megatron-LM keeps 2 / 2 / 1 inputs per micro-batch"), std::string::npos)
      << golden;
}

// Megatron-LM's checkpoints cover its transformer block, not the embedding nor
// the output layer and loss, which the plan's remat recomputes: the export says
// which of them the plan has and where.
TEST(PlanExport, MegatronRecomputeLeavesTheEndsOut) {
  const auto note = [](std::vector<std::string> names) {
    const std::string text = export_plan(plan_with({2, 2}, 4, 1, Remat::kAlways, std::move(names)),
                                         ExportFormat::kMegatron);
    const std::size_t at = text.find("# Megatron-LM recomputes transformer layers only");
    return at == std::string::npos ? std::string() : text.substr(at, text.find("\n--", at) - at);
  };
  EXPECT_EQ(note({"a", "b", "c", "d"}), "");
  EXPECT_EQ(note({"embed", "b", "c", "head"}),
            "# Megatron-LM recomputes transformer layers only, where the plan's remat also\n"
            "# recomputes the embedding and the output layer with its loss: Megatron-LM keeps "
            "their\n# activations, so the first and last stages hold more and recompute less than "
            "the plan says.");
  EXPECT_NE(note({"embed", "b", "c", "d"})
                .find("recomputes the embedding: Megatron-LM keeps "
                      "their\n# activations, so the first stage holds"),
            std::string::npos);
  EXPECT_NE(note({"a", "b", "c", "head"})
                .find("the output layer with its loss: Megatron-LM keeps their\n# activations, so "
                      "the last stage holds"),
            std::string::npos);
  // Without remat there is nothing to recompute.
  EXPECT_EQ(export_plan(plan_with({2, 2}, 4, 1, Remat::kNever, {"embed", "b", "c", "head"}),
                        ExportFormat::kMegatron)
                .find("transformer layers only"),
            std::string::npos);
}

// Even virtual stages take --num-virtual-stages-per-pipeline-rank; uneven ones
// take the layout, which fixes the virtual stages itself and which Megatron-LM
// refuses beside that flag.
TEST(PlanExport, MegatronInterleavedGivesTheVirtualStagesOnce) {
  const std::map<std::string, std::string> even =
      flags_of(export_plan(interleaved_plan({2, 2, 2, 2}), ExportFormat::kMegatron));
  EXPECT_EQ(even.at("--pipeline-model-parallel-size"), "2");
  EXPECT_EQ(even.at("--num-virtual-stages-per-pipeline-rank"), "2");
  EXPECT_EQ(even.count("--pipeline-model-parallel-layout"), 0u);
  const std::string text = export_plan(interleaved_plan({1, 3, 1, 2}), ExportFormat::kMegatron);
  const std::map<std::string, std::string> uneven = flags_of(text);
  EXPECT_EQ(uneven.at("--pipeline-model-parallel-layout"), "'Et|t*3|t|t*2L'");
  EXPECT_EQ(uneven.count("--num-virtual-stages-per-pipeline-rank"), 0u);
  EXPECT_NE(text.find("# The layout's 4 stages over 2 ranks fix the 2 virtual stages per rank."),
            std::string::npos)
      << text;
}

// With remat, DeepSpeed's non-reentrant checkpoint, named as DeepSpeed 0.19
// exposes it (an attribute of the package: `from deepspeed.checkpointing import`
// fails); without remat, no checkpoint function at all.
TEST(PlanExport, DeepSpeedCheckpointsWithTheNonReentrantFunction) {
  const std::string with =
      export_plan(plan_with({2, 2}, 4, 1, Remat::kAlways), ExportFormat::kDeepSpeed);
  EXPECT_NE(
      with.find("activation_checkpoint_func=deepspeed.checkpointing.non_reentrant_checkpoint"),
      std::string::npos)
      << with;
  EXPECT_EQ(with.find("from deepspeed.checkpointing import"), std::string::npos) << with;
  const std::string without =
      export_plan(plan_with({2, 2}, 4, 1, Remat::kNever), ExportFormat::kDeepSpeed);
  EXPECT_EQ(without.find("activation_checkpoint_func"), std::string::npos) << without;
}

TEST(PlanExport, MegatronRejectsAModelWithoutTransformerLayers) {
  const Plan p = plan_with({1, 1}, 2, 1, Remat::kAlways, {"embed", "head"});
  EXPECT_THROW(export_plan(p, ExportFormat::kMegatron), std::invalid_argument);
}

// Checks a PyTorch pipelining CSV against `p`: one row per rank, GPipe's order on
// each rank, every action after the one it receives from.
void check_pipelining_csv(const Plan& p) {
  SCOPED_TRACE("K=" + std::to_string(p.stages) + " M=" + std::to_string(p.micro_batches));
  const auto rows = csv_of(export_plan(p, ExportFormat::kTorchPipelining));
  ASSERT_EQ(rows.size(), static_cast<std::size_t>(p.stages));
  const int M = p.micro_batches;
  std::map<std::string, std::size_t> column;  // action -> step
  for (std::size_t r = 0; r < rows.size(); ++r) {
    std::vector<std::string> order;
    for (std::size_t c = 0; c < rows[r].size(); ++c) {
      if (rows[r][c].empty()) continue;
      order.push_back(rows[r][c]);
      column[rows[r][c]] = c;
    }
    EXPECT_FALSE(rows[r].back().empty()) << "row " << r << " ends with an idle cell";
    std::vector<std::string> expected;
    const std::string s = std::to_string(r);
    for (int m = 0; m < M; ++m) expected.push_back(s + "F" + std::to_string(m));
    for (int m = M - 1; m >= 0; --m) expected.push_back(s + "B" + std::to_string(m));
    EXPECT_EQ(order, expected) << "rank " << r;
  }
  for (int st = 1; st < p.stages; ++st) {
    for (int m = 0; m < M; ++m) {
      const std::string mb = std::to_string(m);
      EXPECT_GT(column[std::to_string(st) + "F" + mb], column[std::to_string(st - 1) + "F" + mb]);
      EXPECT_GT(column[std::to_string(st - 1) + "B" + mb], column[std::to_string(st) + "B" + mb]);
    }
  }
}

TEST(PlanExport, TorchPipeliningCsvIsGpipeTimeAligned) {
  check_pipelining_csv(golden_plan());
  check_pipelining_csv(plan_with({2, 1, 1, 3, 1}, 6, 1, Remat::kNever));
  check_pipelining_csv(plan_with({4}, 3, 2, Remat::kAlways));
  // The golden plan's first rank: four forwards, idle while the pipeline drains
  // forward and fills backward, then four backwards.
  EXPECT_EQ(csv_of(export_plan(golden_plan(), ExportFormat::kTorchPipelining))[0],
            (std::vector<std::string>{"0F0", "0F1", "0F2", "0F3", "", "", "", "", "0B3", "0B2",
                                      "0B1", "0B0"}));
}

// The value of `NAME = VALUE` in a Python export, "(none)" without one.
std::string python_value(const std::string& text, const std::string& name) {
  return after(text, name + " = ");
}

// A rank's coordinates (dp, pp, tp) in a mesh of `shape`, row-major as
// init_device_mesh lays ranks out, and back.
int rank_at(const std::vector<int>& shape, int dp, int pp, int tp) {
  return (dp * shape[1] + pp) * shape[2] + tp;
}

// T=2 x K=2 x D=2: the mesh's shape and names, each pipeline rank's stages, M,
// the tensor-parallel styles with sequence parallelism and ZeRO stage 1's
// fully_shard over "dp".
TEST(PlanExport, TorchDeviceMeshOfAThreeDimensionalPlan) {
  const Plan p = three_d_plan(1, true).plan;
  ASSERT_EQ(p.tensor_parallel, 2);
  ASSERT_EQ(p.stages, 2);
  ASSERT_EQ(p.data_parallel, 2);
  ASSERT_EQ(p.devices, 8);
  const std::string mesh = export_torch_device_mesh(p);
  EXPECT_EQ(python_value(mesh, "MESH_SHAPE"), "(2, 2, 2)");
  EXPECT_EQ(python_value(mesh, "MESH_DIM_NAMES"), "(\"dp\", \"pp\", \"tp\")");
  EXPECT_EQ(python_value(mesh, "NUM_STAGES"), "2");
  EXPECT_EQ(python_value(mesh, "STAGE_INDICES"), "((0,), (1,))");
  EXPECT_EQ(python_value(mesh, "N_MICROBATCHES"), std::to_string(p.micro_batches));
  EXPECT_NE(mesh.find("    return init_device_mesh(device_type, MESH_SHAPE, "
                      "mesh_dim_names=MESH_DIM_NAMES)\n"),
            std::string::npos)
      << mesh;
  // Megatron-LM's split with sequence parallelism: sequence-sharded (Shard(1))
  // activations between the split projections, layer norms along the sequence.
  EXPECT_EQ(python_value(mesh, "TP_EMBEDDING"),
            "RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1))");
  EXPECT_EQ(python_value(mesh, "TP_COLUMN"), "ColwiseParallel(input_layouts=Shard(1))");
  EXPECT_EQ(python_value(mesh, "TP_ROW"), "RowwiseParallel(output_layouts=Shard(1))");
  EXPECT_EQ(python_value(mesh, "TP_NORM"), "SequenceParallel()");
  EXPECT_EQ(python_value(mesh, "TP_HEAD"),
            "ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), "
            "use_local_output=False)");
  EXPECT_NE(mesh.find("    return fully_shard(module, mesh=mesh[\"dp\"], "
                      "reshard_after_forward=False)\n"),
            std::string::npos)
      << mesh;
  EXPECT_EQ(mesh.find("DistributedDataParallel("), std::string::npos);
  // Every line is Python: a comment, code, or blank.
  for (const std::string& line : lines_of(mesh)) {
    EXPECT_TRUE(line.empty() || line[0] == '#' || line.find(" = ") != std::string::npos ||
                line.rfind("from ", 0) == 0 || line.rfind("def ", 0) == 0 ||
                line.rfind("    ", 0) == 0)
        << line;
  }
}

// Without sequence parallelism the projections take and give whole activations
// and the layer norms are not split; without ZeRO the replicas keep everything
// whole: FSDP's replicate under tensor parallelism, DistributedDataParallel
// without it.
TEST(PlanExport, TorchDeviceMeshWithoutSequenceParallelismOrZero) {
  const Plan p = three_d_plan(0, false).plan;
  const std::string mesh = export_torch_device_mesh(p);
  EXPECT_EQ(python_value(mesh, "TP_EMBEDDING"), "RowwiseParallel(input_layouts=Replicate())");
  EXPECT_EQ(python_value(mesh, "TP_COLUMN"), "ColwiseParallel()");
  EXPECT_EQ(python_value(mesh, "TP_ROW"), "RowwiseParallel()");
  EXPECT_EQ(python_value(mesh, "TP_NORM"), "(none)");
  EXPECT_EQ(python_value(mesh, "TP_HEAD"),
            "ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)");
  EXPECT_NE(mesh.find("    return replicate(module, mesh=mesh[\"dp\"])\n"), std::string::npos)
      << mesh;
  EXPECT_EQ(mesh.find("fully_shard"), std::string::npos);

  Plan one = p;  // the same pipeline without tensor parallelism
  one.tensor_parallel = 1;
  one.devices = 4;
  const std::string ddp = export_torch_device_mesh(one);
  EXPECT_EQ(python_value(ddp, "MESH_SHAPE"), "(2, 2, 1)");
  EXPECT_EQ(python_value(ddp, "TP_COLUMN"), "(none)");
  EXPECT_NE(ddp.find("    return DistributedDataParallel(module, device_mesh=mesh[\"dp\"])\n"),
            std::string::npos)
      << ddp;
  // One replica: no data-parallel wrapper; ZeRO over it shards nothing.
  const std::string single = export_torch_device_mesh(golden_plan());
  EXPECT_EQ(python_value(single, "MESH_SHAPE"), "(1, 3, 1)");
  EXPECT_EQ(single.find("def pipescope_data_parallel"), std::string::npos);
  Plan zero_one = golden_plan();
  zero_one.zero = 1;
  EXPECT_NE(export_torch_device_mesh(zero_one).find("ZeRO stage 1 over D=1 replica shards nothing"),
            std::string::npos);
}

// The mesh's order is the simulator's placement: a replica's first device is
// where the data-parallel ring goes (data_parallel_ring: group K), the next
// stage's where the pipeline sends (group 1), and a stage's T devices are its
// group's (Cluster: physical devices g T .. g T + T - 1). On all-to-all links
// a route's link names its physical ends, so the routes must be the same links.
TEST(PlanExport, TorchDeviceMeshOrdersRanksAsTheSimulatorPlacesThem) {
  const ThreeDimensions t = three_d_plan(1, true);
  const Cluster& c = t.whole.cluster;
  ASSERT_EQ(c.interconnect.topology, TopologyKind::kAllToAll);
  ASSERT_EQ(c.tensor_parallel, 2);
  std::string tuple = python_value(export_torch_device_mesh(t.plan), "MESH_SHAPE");
  for (char& ch : tuple) {
    if (ch == '(' || ch == ')') ch = ' ';
  }
  const std::vector<int> shape = ints_of(tuple);
  ASSERT_EQ(shape, (std::vector<int>{2, 2, 2}));
  const int K = t.plan.stages;
  const auto link = [](const std::vector<Hop>& route) {
    return route.empty() ? std::int64_t{-1} : route.front().link;
  };
  // Replica 1's stage 0: the data-parallel ring's hop from replica 0's stage 0.
  EXPECT_EQ(link(c.route(0, K)), link(c.physical_route(0, rank_at(shape, 1, 0, 0))));
  // Stage 1 of replica 0: the pipeline's hop from stage 0.
  EXPECT_EQ(link(c.route(0, 1)), link(c.physical_route(0, rank_at(shape, 0, 1, 0))));
  // Replica 1's stage 1 is group K + 1.
  EXPECT_EQ(link(c.route(0, K + 1)), link(c.physical_route(0, rank_at(shape, 1, 1, 0))));
  // A stage's tensor-parallel ranks are its group's physical devices.
  for (int g = 0; g < 2 * K; ++g) {
    for (int tp = 0; tp < c.tensor_parallel; ++tp) {
      EXPECT_EQ(rank_at(shape, g / K, g % K, tp), g * c.tensor_parallel + tp);
    }
  }
}

// The interleaved and V-shaped placements: pipeline rank d lists the stages the
// plan puts on device d, the CSV's row d.
TEST(PlanExport, TorchDeviceMeshListsEachRanksStages) {
  Plan loop = plan_with({1, 1, 1, 1, 1, 1}, 6, 1, Remat::kNever);
  loop.stages = 3;
  loop.devices = 3;
  loop.chunks = 2;
  loop.schedule = ScheduleKind::kInterleaved1F1B;
  for (std::size_t s = 0; s < 6; ++s) loop.stage_plans[s].device = static_cast<int>(s % 3);
  EXPECT_EQ(python_value(export_torch_device_mesh(loop), "STAGE_INDICES"),
            "((0, 3), (1, 4), (2, 5))");
  Plan v = loop;
  v.schedule = ScheduleKind::kZbV;
  for (std::size_t s = 0; s < 6; ++s) {
    v.stage_plans[s].device = s < 3 ? static_cast<int>(s) : static_cast<int>(5 - s);
  }
  EXPECT_EQ(python_value(export_torch_device_mesh(v), "STAGE_INDICES"), "((0, 5), (1, 4), (2, 3))");
  EXPECT_EQ(
      python_value(export_torch_device_mesh(plan_with({4}, 3, 2, Remat::kAlways)), "STAGE_INDICES"),
      "((0,),)");
}

// The 3-D plan goes to torch-pipelining and Megatron-LM; torchgpipe and DeepSpeed
// refuse its tensor parallelism by name, and ZeRO stage 2 is refused where the
// framework does not shard gradients: PyTorch pipelining keeps them whole through
// the step, Megatron-LM's distributed optimizer shards only the optimizer state.
TEST(PlanExport, ThreeDimensionalPlansAndTheirRefusals) {
  const Plan p = three_d_plan(1, true).plan;
  EXPECT_EQ(csv_of(export_plan(p, ExportFormat::kTorchPipelining)).size(), 2u);
  const std::map<std::string, std::string> megatron =
      flags_of(export_plan(p, ExportFormat::kMegatron));
  EXPECT_EQ(megatron.at("--tensor-model-parallel-size"), "2");
  EXPECT_EQ(megatron.count("--sequence-parallel"), 1u);
  EXPECT_EQ(megatron.count("--use-distributed-optimizer"), 1u);
  const auto refusal = [](const Plan& plan, ExportFormat f) {
    try {
      if (f == ExportFormat::kTorchPipelining) {
        export_torch_device_mesh(plan);
      } else {
        export_plan(plan, f);
      }
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  const Plan no_zero = three_d_plan(0, false).plan;
  for (const ExportFormat f : {ExportFormat::kTorchGpipe, ExportFormat::kDeepSpeed}) {
    EXPECT_EQ(refusal(no_zero, f),
              "cannot export this plan to " + std::string(to_string(f)) +
                  ": it splits every layer over T=2 devices (tensor parallelism), "
                  "which this export does not express; export it to megatron or "
                  "torch-pipelining");
  }
  Plan zero_one = p;
  zero_one.tensor_parallel = 1;
  zero_one.devices = 4;
  EXPECT_EQ(refusal(zero_one, ExportFormat::kTorchGpipe),
            "cannot export this plan to torchgpipe: it shards the optimizer over the replicas "
            "(ZeRO stage 1), which this export does not express; export it to deepspeed, "
            "megatron or torch-pipelining");
  const Plan two = three_d_plan(2, true).plan;
  ASSERT_EQ(two.zero, 2);
  const std::string torch =
      "cannot export this plan to torch-pipelining: PyTorch pipelining keeps a stage's "
      "gradients whole until the step's last backward (it turns FSDP's gradient "
      "reduce-scatter off for the other micro-batches), so they are not sharded as ZeRO "
      "stage 2 shards them; plan with training.zero 1";
  EXPECT_EQ(refusal(two, ExportFormat::kTorchPipelining), torch);
  try {
    export_plan(two, ExportFormat::kTorchPipelining);
    ADD_FAILURE() << "the CSV of a ZeRO stage 2 plan was exported";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), torch);
  }
  EXPECT_NE(refusal(two, ExportFormat::kMegatron).find("not the gradients"), std::string::npos);
}

TEST(PlanExport, TorchDeviceMeshGoesBesideTheCsv) {
  EXPECT_EQ(torch_device_mesh_path("out/plan.csv"), "out/plan.mesh.py");
  EXPECT_EQ(torch_device_mesh_path("plan.csv.gz"), "plan.mesh.py");
  EXPECT_EQ(torch_device_mesh_path("schedule"), "schedule.mesh.py");
  EXPECT_EQ(torch_device_mesh_path(".csv"), ".csv.mesh.py");
}

}  // namespace
}  // namespace pipescope
