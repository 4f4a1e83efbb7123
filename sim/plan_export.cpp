// A plan in the forms other pipeline-parallel tools take. Each form was checked
// against the tool's source:
//   torchgpipe   torchgpipe/gpipe.py: GPipe(module: nn.Sequential, balance, *,
//                devices=None, chunks=1, checkpoint='except_last'|'always'|'never');
//   DeepSpeed    deepspeed/runtime/pipe/module.py: PipelineModule._partition_layers
//                sets self.parts (K+1 layer indices) from partition_method
//                ('parameters', 'uniform', 'type:REGEX') and calls
//                self._set_bounds(start=parts[stage], stop=parts[stage + 1]);
//   Megatron-LM  megatron/training/arguments.py and transformer_block.py:
//                --decoder-first/last-pipeline-num-layers with the remaining layers
//                split evenly over the middle stages; megatron/core/transformer/
//                pipeline_parallel_layer_layout.py: --pipeline-model-parallel-layout
//                ("E" embedding, "t" transformer layer, "L" loss, "|" between stages,
//                "x*n" repeats);
//   PyTorch      torch/distributed/pipelining/schedules.py: _Action.from_str parses
//                "{stage}{F|B|I|W}{micro-batch}"; PipelineScheduleMulti._load_csv reads
//                one row per rank, one action per cell, "" for an idle step, and
//                _step_microbatches pairs a send at step t with the neighbour's
//                receive at the same step, so the cells are time-aligned.

#include "sim/plan_export.h"

#include <algorithm>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "costmodels/check.h"
#include "sim/partition.h"
#include "sim/schedule.h"

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

// "layers 0-2: embed, block0, block1"; long stages show their first and last names.
std::string describe_layers(const Plan& plan, const StageRange& r) {
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
std::string summary(const Plan& p) {
  return "# model '" + printable(p.model_name) + "' (hash " + p.model_hash + ", " +
         str(p.layer_count) + " layers): K=" + str(p.stages) +
         " stages x D=" + str(p.data_parallel) + " replicas,\n# M=" + str(p.micro_batches) +
         " micro-batches of " + str(p.micro_batch_size) + " (global batch " + str(p.global_batch) +
         "), schedule " + std::string(to_string(p.schedule)) +
         (p.chunks > 1 ? " with " + str(p.chunks) + " chunks per device" : "") + ", remat " +
         std::string(remat_label(p.remat)) + ".\n" +
         (p.fits ? "" : "# WARNING: the plan predicts more memory than a device has.\n");
}

std::string python_list(const std::vector<int>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + str(v[i]);
  return out + "]";
}

std::vector<int> balance_of(const Plan& p) {
  return sizes_of(p.stage_ranges());
}

int largest_stage(const Plan& p) {
  const std::vector<int> b = balance_of(p);
  return b.empty() ? 0 : *std::max_element(b.begin(), b.end());
}

std::string export_torchgpipe(const Plan& p) {
  std::ostringstream o;
  o << "# torchgpipe (github.com/kakaobrain/torchgpipe) from a PipeScope plan for\n"
    << summary(p) << "# `model` must be an nn.Sequential whose " << p.layer_count
    << " children are the plan's layers, in order;\n"
    << "# balance[s] of them go to the s-th device given to GPipe (default cuda:0, cuda:1, ...):\n";
  for (std::size_t s = 0; s < p.stage_plans.size(); ++s) {
    o << "#   stage " << s << ": " << describe_layers(p, p.stage_plans[s].layers) << "\n";
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
    << "from torchgpipe import GPipe\n\n"
    << "balance = " << python_list(balance_of(p)) << "\n"
    << "model = GPipe(model, balance=balance, chunks=" << p.micro_batches << ", checkpoint='"
    << (p.remat == Remat::kAlways       ? "always"
        : p.remat == Remat::kExceptLast ? "except_last"
                                        : "never")
    << "')\n";
  return o.str();
}

std::string export_deepspeed(const Plan& p) {
  const std::vector<int> parts = boundaries_of(p.stage_ranges());
  std::ostringstream o;
  o << "# DeepSpeed pipeline parallelism (deepspeed.pipe.PipelineModule) from a PipeScope plan "
       "for\n"
    << summary(p) << "#\n"
    << "# PipelineModule's partition_method ('parameters', 'uniform', 'type:REGEX') cannot\n"
    << "# state an arbitrary cut. PipelineModule keeps its cut in `parts`, K+1 layer indices\n"
    << "# (stage s holds layers parts[s] .. parts[s+1]-1), set by _partition_layers(). What to\n"
    << "# do: build PlannedPipelineModule below instead of PipelineModule, with `layers` the\n"
    << "# plan's " << p.layer_count
    << " layers in order, and use DEEPSPEED_CONFIG's batch settings in your\n"
    << "# DeepSpeed config. _partition_layers and _set_bounds are DeepSpeed internals (see\n"
    << "# deepspeed/runtime/pipe/module.py); the class checks the stage and layer counts.\n"
    << "# DeepSpeed runs its own 1F1B-style schedule, not GPipe's: the same bubble, fewer\n"
    << "# activations alive at once than the plan's memory prediction assumes.\n";
  for (std::size_t s = 0; s < p.stage_plans.size(); ++s) {
    o << "#   stage " << s << ": " << describe_layers(p, p.stage_plans[s].layers) << "\n";
  }
  const int interval = p.remat != Remat::kNever ? largest_stage(p) : 0;
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
    << (p.remat != Remat::kNever ? ": one checkpoint around each stage's forward (GPipe's remat)"
                                 : ": no activation checkpointing (remat off)")
    << ".\n"
    << (p.remat == Remat::kExceptLast
            ? "# DeepSpeed checkpoints every micro-batch: remat except-last runs as remat on,\n"
              "# one recompute more per stage than the plan predicts.\n"
            : "")
    << (p.remat != Remat::kNever
            ? "# Non-reentrant checkpointing: DeepSpeed's default (reentrant) checkpoint fails in\n"
              "# the first backward when a span starts at a layer whose input is integer token\n"
              "# ids (the embedding). (deepspeed.checkpointing is an attribute of the package,\n"
              "# not a module to import from.)\n"
              "# import deepspeed\n"
            : "")
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
    << "}\n";
  return o.str();
}

// Transformer layers per stage as Megatron-LM counts them: its embedding sits on the
// first stage and its output layer and loss on the last, outside --num-layers.
std::vector<int> megatron_layers(const Plan& p) {
  std::vector<int> t = balance_of(p);
  const auto named = [&](std::size_t i, const char* n) {
    return i < p.layer_names.size() && p.layer_names[i] == n;
  };
  if (!t.empty() && named(0, "embed")) --t.front();
  if (!t.empty() && p.layer_count >= 2 && named(p.layer_names.size() - 1, "head")) --t.back();
  return t;
}

std::string layout_stage(int transformer_layers) {
  if (transformer_layers == 0) return "";
  if (transformer_layers == 1) return "t";
  return "t*" + str(transformer_layers);
}

std::string export_megatron(const Plan& p) {
  const std::vector<int> t = megatron_layers(p);
  const int total = std::accumulate(t.begin(), t.end(), 0);
  if (total == 0) {
    throw std::invalid_argument(
        "cannot export to Megatron-LM: the model has no layers besides 'embed' and 'head', "
        "and Megatron-LM needs at least one transformer layer");
  }
  const std::size_t k = t.size();
  const bool even = std::all_of(t.begin(), t.end(), [&](int n) { return n == t[0]; });
  const bool middle_even =
      k >= 2 && std::all_of(t.begin() + 1, t.end() - 1, [&](int n) { return n == t[1]; });
  const bool ends_nonempty = t.front() > 0 && t.back() > 0;
  std::string cut;
  for (std::size_t s = 0; s < k; ++s) cut += (s ? " / " : "") + str(t[s]);

  std::vector<std::string> flags{"--pipeline-model-parallel-size " + str(p.stages),
                                 "--num-layers " + str(total)};
  std::ostringstream o;
  o << "# Megatron-LM flags from a PipeScope plan for\n"
    << summary(p)
    << "# Megatron-LM builds a GPT: its embedding sits on the first stage, its output layer\n"
    << "# and loss on the last. The plan's layers named 'embed' (first) and 'head' (last)\n"
    << "# are those; every other layer is one transformer layer (--num-layers " << total << ").\n"
    << "# Run on K x D = " << p.devices << " GPUs; Megatron-LM then accumulates global / "
    << "(micro x D) = " << p.micro_batches << " micro-batches.\n"
    << (p.chunks > 1
            ? "# Megatron-LM runs the plan's interleaved 1F1B: its " + str(p.model_stages()) +
                  " virtual stages in order, stage s on rank s mod " + str(p.stages) + ".\n"
            : std::string("# Megatron-LM runs 1F1B (PipeDream-Flush), not GPipe: the same "
                          "bubble, fewer\n# activations alive at once than the plan's memory "
                          "prediction assumes.\n"));
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
  flags.push_back("--micro-batch-size " + str(p.micro_batch_size));
  flags.push_back("--global-batch-size " + str(p.global_batch));
  if (p.remat != Remat::kNever) {
    int chunk = 0;
    for (const int n : t) chunk = std::gcd(chunk, n);
    o << "# Remat: recompute chunks of " << chunk
      << " transformer layer(s) from each chunk's input; " << chunk << " is the gcd\n"
      << "# of the stages' counts, so no chunk crosses a stage end (with even stages a chunk\n"
      << "# is a whole stage, as in GPipe).\n";
    if (p.remat == Remat::kExceptLast) {
      o << "# Megatron-LM recomputes every micro-batch: remat except-last runs as remat on,\n"
        << "# one recompute more per stage than the plan predicts.\n";
    }
    flags.push_back("--recompute-granularity full");
    flags.push_back("--recompute-method uniform");
    flags.push_back("--recompute-num-layers " + str(chunk));
  }
  for (std::size_t i = 0; i < flags.size(); ++i) {
    o << flags[i] << (i + 1 < flags.size() ? " \\\n" : "\n");
  }
  return o.str();
}

// Each rank runs its forward and backward actions in the schedule's order, one per
// step, as soon as its input arrived in an earlier step (F(s,m) after F(s-1,m),
// B(s,m) after B(s+1,m)); a rank that must wait leaves the cell empty. A split
// backward is PyTorch's I (input gradient) and W (weight gradient), else B.
std::vector<std::vector<std::string>> aligned_actions(const Plan& p) {
  const Schedule sched = p.schedule_ops();
  const auto K = static_cast<std::size_t>(sched.stages);  // model stages, K x v
  const auto M = static_cast<std::size_t>(p.micro_batches);
  // One rank per device of the pipeline; recompute and optimizer steps are not
  // actions (PyTorch recomputes inside a stage's backward, with checkpointing).
  const auto ranks = static_cast<std::size_t>(sched.devices());
  std::vector<std::vector<Op>> ops(ranks);
  for (std::size_t d = 0; d < ranks; ++d) {
    for (const Op& op : sched.device_ops[d]) {
      if (op.kind == OpKind::kForward || op.kind == OpKind::kBackward ||
          op.kind == OpKind::kWeight) {
        ops[d].push_back(op);
      }
    }
  }
  constexpr long kNotYet = -1;
  std::vector<long> f_step(K * M, kNotYet), b_step(K * M, kNotYet);
  const auto at = [&](int stage, int mb) {
    return static_cast<std::size_t>(stage) * M + static_cast<std::size_t>(mb);
  };
  std::vector<std::size_t> next(ranks, 0);
  std::vector<std::vector<std::string>> rows(ranks);
  std::size_t remaining = 0;
  for (const auto& r : ops) remaining += r.size();
  for (long step = 0; remaining > 0; ++step) {
    bool progressed = false;
    for (std::size_t r = 0; r < ranks; ++r) {
      if (next[r] == ops[r].size()) continue;
      const Op& op = ops[r][next[r]];
      const bool fwd = op.kind == OpKind::kForward;
      const int from = fwd ? op.stage - 1 : op.stage + 1;
      const bool ready = op.kind == OpKind::kWeight || from < 0 || from >= sched.stages ||
                         ((fwd ? f_step : b_step)[at(from, op.micro_batch)] != kNotYet &&
                          (fwd ? f_step : b_step)[at(from, op.micro_batch)] < step);
      if (!ready) {
        rows[r].emplace_back();
        continue;
      }
      const char* action = fwd ? "F" : op.kind == OpKind::kWeight ? "W" : sched.split ? "I" : "B";
      if (op.kind != OpKind::kWeight) (fwd ? f_step : b_step)[at(op.stage, op.micro_batch)] = step;
      rows[r].push_back(str(op.stage) + action + str(op.micro_batch));
      ++next[r];
      --remaining;
      progressed = true;
    }
    // A step where no rank can act repeats forever: only actions run before it count.
    PS_CHECK(progressed, "the schedule deadlocks");
  }
  return rows;
}

std::string export_torch_pipelining(const Plan& p) {
  std::string out;
  for (const std::vector<std::string>& row : aligned_actions(p)) {
    for (std::size_t i = 0; i < row.size(); ++i) out += (i ? "," : "") + row[i];
    out += "\n";
  }
  return out;
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

std::string export_plan(const Plan& plan, ExportFormat format) {
  PS_CHECK(
      !plan.stage_plans.empty() && plan.model_stages() == static_cast<int>(plan.stage_plans.size()),
      "a plan has one entry per stage");
  if (plan.schedule == ScheduleKind::kCustom && format != ExportFormat::kTorchPipelining) {
    throw std::invalid_argument(
        "cannot export a custom-schedule plan to " + std::string(to_string(format)) +
        ": it runs its own schedule; export it to torch-pipelining, which runs per-rank "
        "action lists");
  }
  if (plan.chunks > 1 &&
      (format == ExportFormat::kTorchGpipe || format == ExportFormat::kDeepSpeed)) {
    throw std::invalid_argument(
        "cannot export an interleaved-1f1b plan to " + std::string(to_string(format)) +
        ": it runs one stage per device; export it to megatron or torch-pipelining, or plan "
        "with another --schedule");
  }
  if (plan.schedule == ScheduleKind::kZbV && format == ExportFormat::kMegatron) {
    throw std::invalid_argument(
        "cannot export a zb-v plan to megatron: Megatron-LM places virtual stage s on rank s "
        "mod K, not in zb-v's V; export it to torch-pipelining");
  }
  switch (format) {
    case ExportFormat::kTorchGpipe:
      return export_torchgpipe(plan);
    case ExportFormat::kDeepSpeed:
      return export_deepspeed(plan);
    case ExportFormat::kMegatron:
      return export_megatron(plan);
    case ExportFormat::kTorchPipelining:
      return export_torch_pipelining(plan);
  }
  fail_check("format is known", __FILE__, __LINE__, "unknown export format");
}

}  // namespace pipescope
