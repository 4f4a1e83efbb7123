// A plan in the forms other pipeline-parallel tools take. Each form was checked
// against the tool's source:
//   torchgpipe   its GPipe class: GPipe(module: nn.Sequential, balance, *,
//                devices=None, chunks=1, checkpoint='except_last'|'always'|'never');
//   DeepSpeed    its pipeline module: PipelineModule._partition_layers
//                sets self.parts (K+1 layer indices) from partition_method
//                ('parameters', 'uniform', 'type:REGEX') and calls
//                self._set_bounds(start=parts[stage], stop=parts[stage + 1]);
//   Megatron-LM  its arguments and TransformerBlock:
//                --decoder-first/last-pipeline-num-layers with the remaining layers
//                split evenly over the middle stages; megatron-core's
//                PipelineParallelLayerLayout: --pipeline-model-parallel-layout
//                ("E" embedding, "t" transformer layer, "L" loss, "|" between stages,
//                "x*n" repeats);
//   PyTorch      torch.distributed.pipelining's schedules: _Action.from_str parses
//                "{stage}{F|B|I|W}{micro-batch}"; PipelineScheduleMulti._load_csv reads
//                one row per rank, one action per cell, "" for an idle step, and
//                _step_microbatches pairs a send at step t with the neighbour's
//                receive at the same step, so the cells are time-aligned;
//                its pipeline stage: backward_maybe_with_nosync
//                turns an FSDP module's gradient reduce-scatter off for every
//                backward, perform_reduce_grad reduces once after the last: the
//                gradients stay whole through the step (ZeRO stage 1, not 2).

#include "sim/export/plan_export.h"

#include <algorithm>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "costmodels/check.h"
#include "sim/base/format.h"
#include "sim/engine/partition.h"
#include "sim/engine/schedule.h"
#include "sim/engine/simulator.h"
#include "sim/export/export_refusals.h"
#include "sim/export/framework_runs.h"
#include "sim/export/torch_pipelining_export.h"
#include "sim/plan/planner.h"

namespace pipescope {
namespace {

std::string str(std::int64_t v) {
  return std::to_string(v);
}

// Layer names go into comments: keep each on its line.
std::string printable(const std::string& name) {
  std::string out = name;
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return out;
}

}  // namespace

// "layers 0-2: embed, block0, block1"; long stages show their first and last names.
std::string describe_stage_layers(const Plan& plan, const StageRange& r) {
  std::string out = r.layer_count() == 1
                        ? "layer " + str(r.first_layer) + ": "
                        : "layers " + str(r.first_layer) + "-" + str(r.last_layer) + ": ";
  const auto name = [&](int i) {
    const auto u = static_cast<std::size_t>(i);
    return u < plan.layer_names.size() ? printable(plan.layer_names[u]) : "#" + str(i);
  };
  if (r.layer_count() <= 6) {
    for (int i = r.first_layer; i <= r.last_layer; ++i) {
      out += (i == r.first_layer ? "" : ", ") + name(i);
    }
  } else {
    out += name(r.first_layer) + ", " + name(r.first_layer + 1) + ", ..., " + name(r.last_layer);
  }
  return out;
}

// Two comment lines naming the plan.
std::string export_summary(const Plan& p) {
  return "# model '" + printable(p.model_name) + "' (hash " + p.model_hash + ", " +
         str(p.layer_count) + " layers): K=" + str(p.stages) +
         " stages x D=" + str(p.data_parallel) + " replicas" +
         (p.tensor_parallel > 1 ? " x T=" + str(p.tensor_parallel) + " tensor-parallel devices" +
                                      (p.sequence_parallel ? " (sequence parallel)" : "")
                                : "") +
         (p.context_parallel > 1 ? " x C=" + str(p.context_parallel) + " context-parallel devices"
                                 : "") +
         ",\n# M=" + str(p.micro_batches) + " micro-batches of " + str(p.micro_batch_size) +
         " (global batch " + str(p.global_batch) + "), schedule " +
         std::string(to_string(p.schedule)) +
         (p.chunks > 1 ? " with " + str(p.chunks) + " chunks per device" : "") + ", remat " +
         std::string(remat_label(p.remat)) + std::string(checkpoint_label(p.remat, p.checkpoint)) +
         ".\n" + (p.fits ? "" : "# WARNING: the plan predicts more memory than a device has.\n");
}

namespace {

std::string python_list(const std::vector<int>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + str(v[i]);
  return out + "]";
}

std::vector<int> balance_of(const Plan& p) {
  return sizes_of(p.stage_ranges());
}

// Whether the plan's remat keeps every layer's input (training.checkpoint layer).
bool layer_checkpoints(const Plan& p) {
  return rebuilds_layer_by_layer(p.remat, p.checkpoint);
}

int largest_stage(const Plan& p) {
  const std::vector<int> b = balance_of(p);
  return b.empty() ? 0 : *std::max_element(b.begin(), b.end());
}

// DeepSpeed lays ranks out as its axes pipe, data, model (the last fastest):
// the plan's tp-dp-pp. Under tp-pp-dp with replicas, the topology to pass.
std::string deepspeed_topology_note(const Plan& p) {
  if (p.data_parallel == 1 || p.rank_order == RankOrder::kTpDpPp) return "";
  return "# The plan places each replica's K stages on consecutive ranks (tp-pp-dp), where\n"
         "# DeepSpeed's default topology puts a stage's replicas side by side; pass\n"
         "# topology=ProcessTopology(axes=[\"data\", \"pipe\", \"model\"], dims=[" +
         str(p.data_parallel) + ", " + str(p.stages) + ", " + str(p.tensor_parallel) +
         "])\n"
         "# (deepspeed.runtime.pipe.topology) instead of num_stages.\n";
}

std::string export_torchgpipe(const Plan& p, const std::string& runs) {
  std::ostringstream o;
  o << "# torchgpipe (github.com/kakaobrain/torchgpipe) from a PipeScope plan for\n"
    << export_summary(p) << runs << "# `model` must be an nn.Sequential whose " << p.layer_count
    << " children are the plan's layers, in order;\n"
    << "# balance[s] of them go to the s-th device given to GPipe (default cuda:0, cuda:1, ...):\n";
  for (std::size_t s = 0; s < p.stage_plans.size(); ++s) {
    o << "#   stage " << s << ": " << describe_stage_layers(p, p.stage_plans[s].layers) << "\n";
  }
  o << "# Feed each replica mini-batches of " << p.global_batch / p.data_parallel
    << " samples; GPipe splits them into `chunks` micro-batches.\n";
  if (p.data_parallel > 1) {
    o << "# D=" << p.data_parallel
      << " replicas: one GPipe per replica on its own K devices, gradients averaged\n"
      << "# across replicas (e.g. torch.distributed all-reduce) before the optimizer step.\n";
  }
  o << "# checkpoint='always' recomputes each micro-batch's forward in the backward pass as\n"
    << "# GPipe's rematerialization does; 'except_last' all but the last micro-batch's\n"
    << "# (remat except-last); 'never' keeps every activation (remat off).\n"
    << (layer_checkpoints(p)
            ? "# torchgpipe checkpoints a whole partition: it keeps each stage's input where the\n"
              "# plan keeps every layer's (training.checkpoint layer), and its recompute holds\n"
              "# the whole stage's activations where the plan holds the largest layer's: more\n"
              "# memory at the recompute than the plan says, fewer stored inputs.\n"
            : "")
    << "from torchgpipe import GPipe\n\n"
    << "balance = " << python_list(balance_of(p)) << "\n"
    << "model = GPipe(model, balance=balance, chunks=" << p.micro_batches << ", checkpoint='"
    << (p.remat == Remat::kAlways       ? "always"
        : p.remat == Remat::kExceptLast ? "except_last"
                                        : "never")
    << "')\n";
  return o.str();
}

std::string export_deepspeed(const Plan& p, const std::string& runs) {
  const std::vector<int> parts = boundaries_of(p.stage_ranges());
  std::ostringstream o;
  o << "# DeepSpeed pipeline parallelism (deepspeed.pipe.PipelineModule) from a PipeScope plan "
       "for\n"
    << export_summary(p) << runs << "#\n"
    << "# PipelineModule's partition_method ('parameters', 'uniform', 'type:REGEX') cannot\n"
    << "# state an arbitrary cut. PipelineModule keeps its cut in `parts`, K+1 layer indices\n"
    << "# (stage s holds layers parts[s] .. parts[s+1]-1), set by _partition_layers(). What to\n"
    << "# do: build PlannedPipelineModule below instead of PipelineModule, with `layers` the\n"
    << "# plan's " << p.layer_count
    << " layers in order, and use DEEPSPEED_CONFIG's batch settings in your\n"
    << "# DeepSpeed config. _partition_layers and _set_bounds are DeepSpeed internals (see\n"
    << "# deepspeed/runtime/pipe/module.py); the class checks the stage and layer counts.\n";
  for (std::size_t s = 0; s < p.stage_plans.size(); ++s) {
    o << "#   stage " << s << ": " << describe_stage_layers(p, p.stage_plans[s].layers) << "\n";
  }
  const int interval = p.remat == Remat::kNever ? 0 : layer_checkpoints(p) ? 1 : largest_stage(p);
  o << "from deepspeed.pipe import PipelineModule\n\n"
    << "PIPESCOPE_PARTS = " << python_list(parts) << "\n\n\n"
    << "class PlannedPipelineModule(PipelineModule):\n"
    << "    def _partition_layers(self, method=\"uniform\"):\n"
    << "        stages = self._topo.get_dim(\"pipe\")\n"
    << "        if stages != len(PIPESCOPE_PARTS) - 1 or len(self._layer_specs) != "
       "PIPESCOPE_PARTS[-1]:\n"
    << "            raise ValueError(\"the PipeScope plan cuts " << p.layer_count << " layers into "
    << p.stages << " stages\")\n"
    << "        self.parts = list(PIPESCOPE_PARTS)\n"
    << "        stage_id = self._topo.get_coord(self.global_rank).pipe\n"
    << "        self._set_bounds(start=self.parts[stage_id], stop=self.parts[stage_id + 1])\n\n\n"
    << "# activation_checkpoint_interval " << interval
    << (p.remat == Remat::kNever ? ": no activation checkpointing (remat off)"
        : layer_checkpoints(p)
            ? ": one checkpoint around each layer (training.checkpoint layer), each rerun\n"
              "# in the backward one at a time"
            : ": one checkpoint around each stage's forward (GPipe's remat)")
    << ".\n"
    << except_last_note(p, ExportFormat::kDeepSpeed)
    << (p.remat != Remat::kNever
            ? "# Non-reentrant checkpointing: DeepSpeed's default (reentrant) checkpoint fails in\n"
              "# the first backward when a span starts at a layer whose input is integer token\n"
              "# ids (the embedding). (deepspeed.checkpointing is an attribute of the package,\n"
              "# not a module to import from.)\n"
              "# import deepspeed\n"
            : "")
    << deepspeed_topology_note(p)
    << "# model = PlannedPipelineModule(layers=layers, num_stages=" << p.stages
    << ", loss_fn=loss_fn,\n"
    << "#                               activation_checkpoint_interval=" << interval
    << (p.remat != Remat::kNever
            ? ",\n#                               "
              "activation_checkpoint_func=deepspeed.checkpointing.non_reentrant_checkpoint"
            : "")
    << ")\n"
    << "DEEPSPEED_CONFIG = {\n"
    << "    \"train_batch_size\": " << p.global_batch << ",\n"
    << "    \"train_micro_batch_size_per_gpu\": " << p.micro_batch_size << ",\n"
    << "    \"gradient_accumulation_steps\": " << p.micro_batches << ",\n"
    << (p.zero > 0 ? "    \"zero_optimization\": {\"stage\": " + str(p.zero) + "},\n" : "")
    << "}\n";
  return o.str();
}

// Transformer layers per stage as Megatron-LM counts them: its embedding sits on the
// first stage and its output layer and loss on the last, outside --num-layers.
// Whether the plan's first layer is Megatron-LM's embedding and its last the
// output layer with the loss.
struct GptEnds {
  bool embed = false;
  bool head = false;
};
GptEnds gpt_ends(const Plan& p) {
  const auto named = [&](std::size_t i, const char* n) {
    return i < p.layer_names.size() && p.layer_names[i] == n;
  };
  return {named(0, "embed"), p.layer_count >= 2 && named(p.layer_names.size() - 1, "head")};
}

std::vector<int> megatron_layers(const Plan& p) {
  std::vector<int> t = balance_of(p);
  const GptEnds ends = gpt_ends(p);
  if (!t.empty() && ends.embed) --t.front();
  if (!t.empty() && ends.head) --t.back();
  return t;
}

std::string layout_stage(int transformer_layers) {
  if (transformer_layers == 0) return "";
  if (transformer_layers == 1) return "t";
  return "t*" + str(transformer_layers);
}

// --recompute-num-layers N: Megatron-LM's uniform method checkpoints the input of
// layers [l, l + N) of a stage for l = 0, N, 2N, ... below its layer count, and
// runs each group's layers by index with no clamp at the stage's end
// (megatron-core's TransformerBlock._checkpointed_forward): N must divide every stage's count, and
// the gcd is the largest N that does. With even stages a group is a whole stage, as in GPipe.
int recompute_group(const std::vector<int>& transformer_layers) {
  int n = 0;
  for (const int t : transformer_layers) n = std::gcd(n, t);
  return n;
}

// Megatron-LM checkpoints inside its transformer block only: what that leaves
// out of the plan's remat.
std::string megatron_ends_note(GptEnds e) {
  if (!e.embed && !e.head) return "";
  const std::string what = e.embed && e.head ? "the embedding and the output layer with its loss"
                           : e.embed         ? "the embedding"
                                             : "the output layer with its loss";
  const std::string where = e.embed && e.head ? "the first and last stages hold"
                            : e.embed         ? "the first stage holds"
                                              : "the last stage holds";
  return "# Megatron-LM recomputes transformer layers only, where the plan's remat also\n"
         "# recomputes " +
         what + ": Megatron-LM keeps their\n# activations, so " + where +
         " more and recompute less than the plan says.\n";
}

// What the recompute flags do, set against the plan's remat: the plan keeps one
// input per stage and micro-batch and recomputes the whole stage, or, under
// layer checkpoints, as Megatron-LM does with groups of one layer.
std::string megatron_remat_note(const Plan& p, const std::vector<int>& t, int group) {
  const std::string rest =
      megatron_ends_note(gpt_ends(p)) + except_last_note(p, ExportFormat::kMegatron);
  if (layer_checkpoints(p)) {
    return "# Remat layer by layer (training.checkpoint layer): --recompute-num-layers 1 keeps\n"
           "# each transformer layer's input and reruns one layer at a time in the backward, as\n"
           "# the plan does.\n" +
           rest;
  }
  std::string kept;
  bool whole_stages = true;
  for (std::size_t s = 0; s < t.size(); ++s) {
    kept += (s ? " / " : "") + str(t[s] / group);
    whole_stages = whole_stages && t[s] / group <= 1;
  }
  const std::string out =
      "# Remat: Megatron-LM checkpoints the input of each group of --recompute-num-layers\n"
      "# transformer layers of a stage and runs a group's layers by index, without stopping\n"
      "# at the stage's end: the group must divide every stage's count; " +
      str(group) + " is their gcd.\n" +
      (whole_stages ? "# Each stage is one group: its input is kept and the whole stage "
                      "recomputed, as\n# the plan's remat does.\n"
                    : "# The plan keeps one input per stage and micro-batch and recomputes the "
                      "whole stage;\n# Megatron-LM keeps " +
                          kept + " inputs per micro-batch and recomputes " + str(group) +
                          " layer(s) at a\n# time: more stored inputs, a smaller recompute "
                          "working set.\n");
  return out + rest;
}

// The flags that set Megatron-LM's parallelism: the pipeline and its --num-layers,
// tensor, sequence, context and expert parallelism, the distributed optimizer
// and the rank order.
std::vector<std::string> megatron_parallel_flags(const Plan& p, int total) {
  std::vector<std::string> flags{"--pipeline-model-parallel-size " + str(p.stages),
                                 "--num-layers " + str(total)};
  if (p.tensor_parallel > 1) {
    flags.insert(flags.begin(), "--tensor-model-parallel-size " + str(p.tensor_parallel));
  }
  if (p.sequence_parallel) flags.push_back("--sequence-parallel");
  // The plan times the ring exchange of keys and values (p2p, the default
  // --cp-comm-type), their all-gather, each device holding two of 2C chunks
  // of the sequence, or the all-to-alls of heads (a2a).
  if (p.context_parallel > 1) {
    flags.push_back("--context-parallel-size " + str(p.context_parallel));
    if (p.cp_comm_type != ContextExchange::kP2p) {
      flags.push_back("--cp-comm-type " + std::string(to_string(p.cp_comm_type)));
    }
  }
  // The plan times the all-to-all dispatcher (sim/engine/expert_parallel.h),
  // not megatron-core's default all-gather one.
  // With DeepEP megatron-core's flex dispatcher runs its kernels.
  if (p.expert_parallel > 1) {
    flags.push_back("--expert-model-parallel-size " + str(p.expert_parallel));
    if (p.moe_dispatcher == MoeDispatcher::kDeepEp) {
      flags.push_back("--moe-token-dispatcher-type flex");
      flags.push_back("--moe-enable-deepep");
    } else {
      flags.push_back("--moe-token-dispatcher-type alltoall");
    }
  }
  // Whole experts beside T (megatron-core's default is T).
  if (p.split().expert_fold() > 1) flags.push_back("--expert-tensor-parallel-size 1");
  // Megatron-LM's distributed optimizer shards the optimizer's state (its fp32
  // main weights and slots) over the data-parallel ranks: ZeRO stage 1.
  if (p.zero > 0) flags.push_back("--use-distributed-optimizer");
  // Megatron-LM lays ranks out tp-cp-ep-dp-pp (the plan's tp-dp-pp); this flag
  // gives tp-cp-ep-pp-dp, the plan's tp-pp-dp. One replica: the same ranks.
  if (p.data_parallel > 1 && p.rank_order == RankOrder::kTpPpDp) {
    flags.push_back("--use-tp-pp-dp-mapping");
  }
  return flags;
}

// What megatron_schedule_flags decided, which the notes explain: whether the
// plan has virtual stages on more than one rank, whether its sends must block,
// and, for an M that K does not divide, the micro-batches of a round.
struct MegatronInterleaving {
  bool interleaved = false;
  bool no_overlap = false;
  int per_round = 0;
  bool grouped = false;
};

// Adds to `flags` how Megatron-LM's interleaved schedule is to overlap its
// exchanges and group its micro-batches as the plan does.
MegatronInterleaving megatron_schedule_flags(const Plan& p, std::vector<std::string>& flags) {
  // Megatron-LM overlaps the interleaved schedule's exchanges in its steady
  // state by default; a plan whose sends block throughout asks it not to, a
  // plan that overlaps them throughout asks it to overlap the warm-up and the
  // cool-down too (framework_sends).
  const bool interleaved = p.chunks > 1 && p.stages > 1;
  const bool no_overlap =
      interleaved && framework_sends(ExportFormat::kMegatron, p).mode == P2pMode::kBlocking;
  if (no_overlap) flags.push_back("--no-overlap-p2p-communication");
  if (interleaved && p.p2p == P2pMode::kOverlapped) {
    flags.push_back("--overlap-p2p-communication-warmup-flush");
  }
  // M that K does not divide: the plan's rounds, which Megatron-LM's default
  // groups of K cannot hold.
  const int per_round = interleaved_round_size(p.stages, p.micro_batches);
  const bool grouped = interleaved && p.micro_batches % p.stages != 0;
  if (grouped) {
    flags.push_back("--microbatch-group-size-per-virtual-pipeline-stage " + str(per_round));
  }
  return {interleaved, no_overlap, per_round, grouped};
}

// The comment lines that open the export: the plan, how its layers map onto
// Megatron-LM's GPT, the GPUs it runs on, and where its virtual stages go.
void write_megatron_header(std::ostringstream& o, const Plan& p, int total,
                           const std::string& runs) {
  o << "# Megatron-LM flags from a PipeScope plan for\n"
    << export_summary(p)
    << "# Megatron-LM builds a GPT: its embedding sits on the first stage, its output layer\n"
    << "# and loss on the last. The plan's layers named 'embed' (first) and 'head' (last)\n"
    << "# are those; every other layer is one transformer layer (--num-layers " << total << ").\n"
    << "# Run on K x D" << (p.tensor_parallel > 1 ? " x T" : "")
    << (p.context_parallel > 1 ? " x C" : "") << " = " << p.devices
    << " GPUs; Megatron-LM then accumulates global / "
    << "(micro x D) = " << p.micro_batches << " micro-batches.\n"
    << runs
    << (p.chunks > 1
            ? "# Its " + str(p.model_stages()) +
                  " virtual stages run in order, stage s on rank s mod " + str(p.stages) + ".\n"
            : "");
}

// The cut: even stages need no flag, uneven first and last stages their own
// flags, any other cut the full layout (its note and its flag).
void write_megatron_cut(std::ostringstream& o, const Plan& p, const std::vector<int>& t,
                        std::vector<std::string>& flags) {
  const std::size_t k = t.size();
  const bool even = std::all_of(t.begin(), t.end(), [&](int n) { return n == t[0]; });
  const bool middle_even =
      k >= 2 && std::all_of(t.begin() + 1, t.end() - 1, [&](int n) { return n == t[1]; });
  const bool ends_nonempty = t.front() > 0 && t.back() > 0;
  std::string cut;
  for (std::size_t s = 0; s < k; ++s) cut += (s ? " / " : "") + str(t[s]);
  if (even) {
    o << "# Cut: " << cut << " transformer layers, even: no uneven-stage flags needed.\n";
    if (p.chunks > 1) flags.push_back("--num-virtual-stages-per-pipeline-rank " + str(p.chunks));
  } else if (ends_nonempty && middle_even && p.chunks == 1) {
    o << "# Cut: " << cut << " transformer layers: even middle stages, uneven first and last.\n";
    flags.push_back("--decoder-first-pipeline-num-layers " + str(t.front()));
    flags.push_back("--decoder-last-pipeline-num-layers " + str(t.back()));
  } else {
    // --decoder-first/last-pipeline-num-layers split the rest evenly over the middle
    // stages (and want layers on the first and last): this cut needs the full layout.
    std::string layout = "E";
    for (std::size_t s = 0; s < k; ++s) layout += (s ? "|" : "") + layout_stage(t[s]);
    layout += "L";
    o << "# Cut: " << cut << " transformer layers. --decoder-first/last-pipeline-num-layers\n"
      << "# cannot express it (they split the rest evenly over the middle stages), so it is\n"
      << "# given as --pipeline-model-parallel-layout, which older Megatron-LM releases lack.\n";
    if (p.chunks > 1) {
      // Megatron-LM refuses --num-virtual-stages-per-pipeline-rank beside a layout.
      o << "# The layout's " << k << " stages over " << p.stages << " ranks fix the " << p.chunks
        << " virtual stages per rank.\n";
    }
    flags.push_back("--pipeline-model-parallel-layout '" + layout + "'");
  }
}

// The recompute flags for the plan's remat, with the note that sets them against it.
void write_megatron_remat(std::ostringstream& o, const Plan& p, const std::vector<int>& t,
                          std::vector<std::string>& flags) {
  if (p.remat == Remat::kSelective) {
    o << "# Remat selective: Megatron-LM recomputes each transformer layer's attention core\n"
      << "# (scores, softmax, dropout) in the backward, as the plan does.\n";
    flags.push_back("--recompute-granularity selective");
  } else if (p.remat != Remat::kNever) {
    const int group = layer_checkpoints(p) ? 1 : recompute_group(t);
    o << megatron_remat_note(p, t, group);
    flags.push_back("--recompute-granularity full");
    flags.push_back("--recompute-method uniform");
    flags.push_back("--recompute-num-layers " + str(group));
  }
}

// Notes on the interleaved schedule's exchanges and micro-batch groups.
void write_megatron_schedule_notes(std::ostringstream& o, const Plan& p,
                                   const MegatronInterleaving& s) {
  if (s.no_overlap) {
    o << "# The plan's stages wait for each send (cluster.p2p blocking), which Megatron-LM's\n"
      << "# interleaved schedule does only with --no-overlap-p2p-communication.\n";
  } else if (s.interleaved && p.p2p == P2pMode::kBlocking) {
    o << "# Megatron-LM accepts --no-overlap-p2p-communication with virtual stages only on\n"
      << "# more than 2 pipeline stages (validate_args): on " << p.stages
      << " it overlaps the steady state's sends.\n";
  }
  if (s.grouped) {
    o << "# M=" << p.micro_batches << " is not a multiple of K=" << p.stages
      << ": each virtual stage runs groups of " << s.per_round
      << " micro-batches, as the plan does\n"
      << "# (--microbatch-group-size-per-virtual-pipeline-stage, megatron-core core_r0.10 and\n"
      << "# later; earlier releases refuse such M).\n";
  }
}

// Megatron-LM's flags for the plan, after the comment lines that explain them:
// each part adds its notes and its flags in the order the export prints them.
std::string export_megatron(const Plan& p, const std::string& runs) {
  const std::vector<int> t = megatron_layers(p);
  const int total = std::accumulate(t.begin(), t.end(), 0);
  if (total == 0) {
    throw std::invalid_argument(
        "cannot export to Megatron-LM: the model has no layers besides 'embed' and 'head', "
        "and Megatron-LM needs at least one transformer layer");
  }
  std::vector<std::string> flags = megatron_parallel_flags(p, total);
  const MegatronInterleaving interleaving = megatron_schedule_flags(p, flags);
  std::ostringstream o;
  write_megatron_header(o, p, total, runs);
  write_megatron_cut(o, p, t, flags);
  flags.push_back("--micro-batch-size " + str(p.micro_batch_size));
  flags.push_back("--global-batch-size " + str(p.global_batch));
  write_megatron_remat(o, p, t, flags);
  write_megatron_schedule_notes(o, p, interleaving);
  if (p.tensor_parallel > 1 || p.context_parallel > 1) {
    // Megatron-LM's validate_args asserts it for either (its communication
    // must run in the order the kernels are queued).
    o << "# With " << (p.tensor_parallel > 1 ? "T" : "C") << " > 1 Megatron-LM's "
      << (p.tensor_parallel > 1 ? "tensor" : "context") << "-parallel layers need "
      << "CUDA_DEVICE_MAX_CONNECTIONS=1\n"
      << "# in the environment of every rank (export it before launching).\n";
  }
  if (p.expert_parallel > 1) {
    o << "# The experts spread over E=" << p.expert_parallel
      << (p.context_parallel > 1 ? " of the D x C devices (megatron-core's expert groups\n"
                                   "# take the context-parallel ranks first)"
                                 : " of the D replicas")
      << "; the mixture's own shape (--num-experts,\n"
      << "# --moe-router-topk, --moe-ffn-hidden-size, ...) is the run's, as --hidden-size is.\n";
  }
  for (std::size_t i = 0; i < flags.size(); ++i) {
    o << flags[i] << (i + 1 < flags.size() ? " \\\n" : "\n");
  }
  return o.str();
}

}  // namespace

std::string_view to_string(ExportFormat f) {
  switch (f) {
    case ExportFormat::kTorchGpipe:
      return "torchgpipe";
    case ExportFormat::kDeepSpeed:
      return "deepspeed";
    case ExportFormat::kMegatron:
      return "megatron";
    case ExportFormat::kTorchPipelining:
      return "torch-pipelining";
  }
  return "unknown";
}

std::optional<ExportFormat> parse_export_format(std::string_view name) {
  for (const ExportFormat f : {ExportFormat::kTorchGpipe, ExportFormat::kDeepSpeed,
                               ExportFormat::kMegatron, ExportFormat::kTorchPipelining}) {
    if (name == to_string(f)) return f;
  }
  return std::nullopt;
}

std::string export_plan(const Plan& plan, ExportFormat format, const Scenario* scenario) {
  check_exportable(plan, format);
  switch (format) {
    case ExportFormat::kTorchGpipe:
      return export_torchgpipe(
          plan, schedule_note(plan, format, scenario) + sends_note(plan, format, scenario));
    case ExportFormat::kDeepSpeed:
      return export_deepspeed(
          plan, schedule_note(plan, format, scenario) + sends_note(plan, format, scenario));
    case ExportFormat::kMegatron:
      return export_megatron(
          plan, schedule_note(plan, format, scenario) + sends_note(plan, format, scenario));
    case ExportFormat::kTorchPipelining:
      return export_torch_pipelining(plan);
  }
  fail_check("format is known", __FILE__, __LINE__, "unknown export format");
}

std::string export_torch_device_mesh(const Plan& plan) {
  check_exportable(plan, ExportFormat::kTorchPipelining);
  return torch_device_mesh(plan);
}

std::string torch_device_mesh_path(const std::string& csv_path) {
  std::string stem = csv_path;
  for (const std::string_view ext : {std::string_view(".gz"), std::string_view(".csv")}) {
    if (stem.size() > ext.size() && stem.ends_with(ext)) stem.resize(stem.size() - ext.size());
  }
  return stem + ".mesh.py";
}

}  // namespace pipescope
