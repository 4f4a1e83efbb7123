// Exports of a plan: golden files for each form, and checks that every form's
// numbers agree with the plan for cuts the golden plan does not cover. Plans
// of three dimensions and PyTorch's device mesh: torch_device_mesh_test.cpp.

#include "sim/export/plan_export.h"

#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/formats/plan_io.h"

#include "export_fixtures.h"
#include "export_text.h"
#include "golden.h"

namespace pipescope {
namespace {

using testing::after;
using testing::csv_of;
using testing::expect_golden;
using testing::flags_of;
using testing::golden_plan;
using testing::interleaved_plan;
using testing::ints_of;
using testing::plan_with;

TEST(PlanExport, FormatNames) {
  for (const ExportFormat f : {ExportFormat::kTorchGpipe, ExportFormat::kDeepSpeed,
                               ExportFormat::kMegatron, ExportFormat::kTorchPipelining}) {
    EXPECT_EQ(parse_export_format(to_string(f)), f);
  }
  EXPECT_EQ(to_string(ExportFormat::kTorchPipelining), "torch-pipelining");
  EXPECT_FALSE(parse_export_format("pipedream").has_value());
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

}  // namespace
}  // namespace pipescope
