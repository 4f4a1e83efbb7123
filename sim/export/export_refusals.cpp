#include "sim/export/export_refusals.h"

#include <stdexcept>
#include <string>

#include "costmodels/check.h"
#include "sim/engine/schedule.h"
#include "sim/scenario/scenario.h"

namespace pipescope {
namespace {

// A custom schedule runs its own action lists, which only torch-pipelining takes.
void check_custom_schedule(const Plan& plan, ExportFormat format) {
  if (plan.schedule == ScheduleKind::kCustom && format != ExportFormat::kTorchPipelining) {
    throw std::invalid_argument(
        "cannot export a custom-schedule plan to " + std::string(to_string(format)) +
        ": it runs its own schedule; export it to torch-pipelining, which runs per-rank "
        "action lists");
  }
}

// The ZeRO stages each framework cannot run: DeepSpeed's pipeline engine stops at
// stage 1, Megatron-LM's distributed optimizer and PyTorch pipelining shard the
// optimizer state only, and torchgpipe's export shards nothing.
void check_zero_stage(const Plan& plan, ExportFormat format) {
  // The export is a PipelineModule, which DeepSpeed runs on its pipeline
  // engine even with one stage.
  if (plan.zero >= 2 && format == ExportFormat::kDeepSpeed) {
    throw std::invalid_argument(
        "cannot export this plan to deepspeed: its pipeline engine, which runs the exported "
        "PipelineModule even with one stage, refuses ZeRO stage " +
        std::to_string(plan.zero) + "; plan with training.zero 1 or 0");
  }
  if (plan.zero == 2 && format == ExportFormat::kMegatron) {
    throw std::invalid_argument(
        "cannot export this plan to megatron: its distributed optimizer shards the optimizer "
        "state (ZeRO stage 1), not the gradients; plan with training.zero 1");
  }
  if (plan.zero == 3 && format == ExportFormat::kMegatron) {
    throw std::invalid_argument(
        "cannot export this plan to megatron: Megatron-LM has no ZeRO stage 3; its distributed "
        "optimizer shards the optimizer state (ZeRO stage 1), not the gradients or the weights; "
        "plan with training.zero 1");
  }
  if (plan.zero == 2 && format == ExportFormat::kTorchPipelining) {
    throw std::invalid_argument(
        "cannot export this plan to torch-pipelining: PyTorch pipelining keeps a stage's "
        "gradients whole until the step's last backward (it turns FSDP's gradient "
        "reduce-scatter off for the other micro-batches), so they are not sharded as ZeRO "
        "stage 2 shards them; plan with training.zero 1");
  }
  if (plan.zero == 3 && format == ExportFormat::kTorchPipelining) {
    throw std::invalid_argument(
        "cannot export this plan to torch-pipelining: PyTorch pipelining keeps a stage's "
        "weights gathered and its gradients whole from the first backward to the step's last "
        "(it turns FSDP's resharding and gradient reduce-scatter after backward off for the "
        "other micro-batches), so it does not gather and reduce-scatter for every micro-batch "
        "as ZeRO stage 3 does; plan with training.zero 1");
  }
  if (plan.zero > 0 && format == ExportFormat::kTorchGpipe) {
    throw std::invalid_argument(
        "cannot export this plan to torchgpipe: it shards the optimizer "
        "over the replicas (ZeRO stage " +
        std::to_string(plan.zero) +
        "), which this export does not express; export it to deepspeed, "
        "megatron or torch-pipelining");
  }
}

// Tensor parallelism, which only Megatron-LM and torch-pipelining express.
void check_tensor_parallel(const Plan& plan, ExportFormat format) {
  if (plan.tensor_parallel > 1 && format != ExportFormat::kMegatron &&
      format != ExportFormat::kTorchPipelining) {
    throw std::invalid_argument(
        "cannot export this plan to " + std::string(to_string(format)) +
        ": it splits every layer over T=" + std::to_string(plan.tensor_parallel) +
        " devices (tensor parallelism), which this export does not express; export it to "
        "megatron or torch-pipelining");
  }
}

// Context parallelism, which Megatron-LM's export and PyTorch's device mesh
// (beside the pipelining CSV) express.
void check_context_parallel(const Plan& plan, ExportFormat format) {
  if (plan.context_parallel > 1 && format != ExportFormat::kMegatron &&
      format != ExportFormat::kTorchPipelining) {
    throw std::invalid_argument(
        "cannot export this plan to " + std::string(to_string(format)) +
        ": it splits each sequence over C=" + std::to_string(plan.context_parallel) +
        " devices (context parallelism), which this export does not express; export it to "
        "megatron or torch-pipelining");
  }
  // PyTorch's context_parallel rotates keys and values (a ring, or all of
  // them gathered); it has no all-to-all of heads.
  if (plan.context_parallel > 1 && format == ExportFormat::kTorchPipelining &&
      plan.cp_comm_type == ContextExchange::kAllToAll) {
    throw std::invalid_argument(
        "cannot export this plan to torch-pipelining: its C=" +
        std::to_string(plan.context_parallel) +
        " devices trade sequence for heads by all-to-alls (cp_comm_type a2a), which PyTorch's "
        "context_parallel does not run; export it to megatron (--cp-comm-type a2a), or plan "
        "with training.cp_comm_type p2p or all_gather");
  }
}

// Expert parallelism, which Megatron-LM's export expresses, and PyTorch's
// device mesh as dimensions of the replicas without context parallelism.
void check_expert_parallel(const Plan& plan, ExportFormat format) {
  const bool mesh = format == ExportFormat::kTorchPipelining && plan.context_parallel == 1;
  if (plan.expert_parallel > 1 && format != ExportFormat::kMegatron && !mesh) {
    throw std::invalid_argument(
        "cannot export this plan to " + std::string(to_string(format)) +
        ": it spreads the experts over E=" + std::to_string(plan.expert_parallel) +
        (format == ExportFormat::kTorchPipelining
             ? " of the D x C devices (expert parallelism beside context parallelism), which "
               "the device mesh does not lay out; export it to megatron"
             : " replicas (expert parallelism), which this export does not express; export it "
               "to megatron" +
                   std::string(plan.context_parallel == 1 ? " or torch-pipelining" : "")));
  }
  // DeepEP's dispatch, which only megatron-core's flex dispatcher runs.
  if (plan.moe_dispatcher == MoeDispatcher::kDeepEp && format != ExportFormat::kMegatron) {
    throw std::invalid_argument("cannot export this plan to " + std::string(to_string(format)) +
                                ": its experts exchange tokens by DeepEP, which this export does "
                                "not run; export it to megatron");
  }
  // Whole experts beside T (megatron-core's parallel folding): its expert
  // tensor parallelism, which only Megatron-LM's export states.
  const int fold = plan.split().expert_fold();
  if (fold > 1 && format != ExportFormat::kMegatron) {
    throw std::invalid_argument(
        "cannot export this plan to " + std::string(to_string(format)) +
        ": it keeps each expert whole beside T=" + std::to_string(plan.tensor_parallel) +
        " (expert tensor parallelism 1), which this export does not express; export it to "
        "megatron");
  }
  // Megatron-LM's --use-tp-pp-dp-mapping orders the experts' ranks
  // tp-ep-pp-dp (tp their expert tensor parallelism), which keeps the
  // pipeline's groups only where the experts' data parallelism,
  // D x C x fold / E, is the whole D (megatron-core's
  // initialize_model_parallel asserts it): with a pipeline, E = C x fold
  // (the experts over each replica's C shares and, whole, its T; E = 1
  // without either).
  if (plan.expert_parallel > 1 && format == ExportFormat::kMegatron && plan.stages > 1 &&
      plan.rank_order == RankOrder::kTpPpDp &&
      plan.expert_parallel != plan.context_parallel * fold) {
    const std::string whole = fold > 1 ? " x T" : "";
    throw std::invalid_argument(
        "cannot export this plan to megatron: it spreads the experts over E=" +
        std::to_string(plan.expert_parallel) +
        " replicas with the replicas outermost (rank order tp-pp-dp), which megatron-core "
        "refuses beside a pipeline (its --use-tp-pp-dp-mapping needs the experts' data "
        "parallelism, D x C" +
        whole + " / E, to be the whole D); plan with cluster.rank_order tp-dp-pp" +
        (fold > 1 ? ", or with E = C x T = " + std::to_string(plan.context_parallel * fold)
         : plan.context_parallel > 1 ? std::string(", or with E = C")
                                     : std::string()));
  }
}

// Where the plan's stages sit on the devices: torchgpipe and DeepSpeed run one
// stage per device, and Megatron-LM places virtual stage s on rank s mod K, not
// in a V.
void check_stage_placement(const Plan& plan, ExportFormat format) {
  if (plan.chunks > 1 &&
      (format == ExportFormat::kTorchGpipe || format == ExportFormat::kDeepSpeed)) {
    throw std::invalid_argument(
        "cannot export " + std::string(to_string(plan.schedule).front() == 'i' ? "an " : "a ") +
        std::string(to_string(plan.schedule)) + " plan to " + std::string(to_string(format)) +
        ": it runs one stage per device; export it to " +
        (v_shaped(plan.schedule) ? "torch-pipelining" : "megatron or torch-pipelining") +
        ", or plan with another --schedule");
  }
  if (v_shaped(plan.schedule) && format == ExportFormat::kMegatron) {
    const std::string name(to_string(plan.schedule));
    throw std::invalid_argument("cannot export a " + name +
                                " plan to megatron: Megatron-LM places virtual stage s on rank s "
                                "mod K, not in " +
                                name + "'s V; export it to torch-pipelining");
  }
}

// Selective remat, which only Megatron-LM runs.
void check_selective_remat(const Plan& plan, ExportFormat format) {
  if (plan.remat == Remat::kSelective && format != ExportFormat::kMegatron) {
    throw std::invalid_argument(
        "cannot export this plan to " + std::string(to_string(format)) +
        ": it recomputes attention's core alone (remat selective), which only Megatron-LM's "
        "--recompute-granularity selective runs; export it to megatron, or plan with another "
        "--remat");
  }
}

// A chunked plan's shape, which Megatron-LM's interleaved 1F1B must accept.
void check_megatron_interleaving(const Plan& plan, ExportFormat format) {
  if (plan.chunks > 1 && format == ExportFormat::kMegatron) {
    // Megatron-LM runs every chunked plan as its interleaved 1F1B.
    const std::string problem = schedule_shape_problem(ScheduleKind::kInterleaved1F1B, plan.stages,
                                                       plan.micro_batches, plan.chunks);
    if (!problem.empty()) {
      throw std::invalid_argument("cannot export this " + std::string(to_string(plan.schedule)) +
                                  " plan to megatron: Megatron-LM runs it as interleaved 1F1B, "
                                  "and " +
                                  problem +
                                  "; plan with such an M, or export it to torch-pipelining");
    }
  }
}

}  // namespace

// The checks run in this order: the first refusal is the one the user sees.
void check_exportable(const Plan& plan, ExportFormat format) {
  PS_CHECK(
      !plan.stage_plans.empty() && plan.model_stages() == static_cast<int>(plan.stage_plans.size()),
      "a plan has one entry per stage");
  check_custom_schedule(plan, format);
  check_zero_stage(plan, format);
  check_tensor_parallel(plan, format);
  check_context_parallel(plan, format);
  check_expert_parallel(plan, format);
  check_stage_placement(plan, format);
  check_selective_remat(plan, format);
  check_megatron_interleaving(plan, format);
}

}  // namespace pipescope
