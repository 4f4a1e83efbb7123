// Exports of plans with tensor parallelism and ZeRO: PyTorch's device mesh
// beside the pipelining CSV (its shape, names, each rank's stages, the
// tensor-parallel styles, fully_shard), Megatron-LM's flags, and the exports
// that refuse such plans by name.

#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/engine/simulator.h"
#include "sim/export/plan_export.h"
#include "sim/plan/planner.h"
#include "sim/scenario/scenario_io.h"

#include "export_fixtures.h"
#include "export_text.h"
#include "scenario_docs.h"

namespace pipescope {
namespace {

using testing::after;
using testing::csv_of;
using testing::flags_of;
using testing::golden_plan;
using testing::ints_of;
using testing::lines_of;
using testing::plan_with;

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
