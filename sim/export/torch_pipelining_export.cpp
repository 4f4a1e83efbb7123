#include "sim/export/torch_pipelining_export.h"

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "costmodels/check.h"
#include "sim/engine/schedule.h"
#include "sim/export/plan_export.h"

namespace pipescope {
namespace {

// Whether `w` is the W of `b`, a B that runs with it as one whole backward.
bool weight_of(const Op& b, const Op& w) {
  return b.kind == OpKind::kBackward && b.whole && w.kind == OpKind::kWeight &&
         w.stage == b.stage && w.micro_batch == b.micro_batch;
}

// A rank's actions: one op, or the ops of an overlapped pair (Op::paired, up to
// the first op that is not), which PyTorch runs as one OVERLAP_F_B action, or a
// whole backward (Op::whole, a B and its W), PyTorch's B.
std::vector<std::vector<Op>> action_cells(const std::vector<Op>& device_ops) {
  std::vector<std::vector<Op>> cells;
  bool in_pair = false;
  for (const Op& op : device_ops) {
    if (op.kind != OpKind::kForward && op.kind != OpKind::kBackward && op.kind != OpKind::kWeight) {
      continue;
    }
    const bool joins =
        !cells.empty() && cells.back().size() == 1 && weight_of(cells.back().back(), op);
    if (!in_pair && !joins) cells.emplace_back();
    cells.back().push_back(op);
    in_pair = op.paired;
  }
  return cells;
}

// A cell's text: "0F1", "2I3" (a split backward's input gradient), "2W3",
// "2B3" (a B and its W, one whole backward); a pair "(0F7;7B3)OVERLAP_F_B".
std::string cell_text(const std::vector<Op>& cell, bool split) {
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < cell.size(); ++i) {
    const Op& op = cell[i];
    const bool whole = i + 1 < cell.size() && weight_of(op, cell[i + 1]);
    const char* action = op.kind == OpKind::kForward  ? "F"
                         : op.kind == OpKind::kWeight ? "W"
                         : split && !whole            ? "I"
                                                      : "B";
    parts.push_back(std::to_string(op.stage) + action + std::to_string(op.micro_batch));
    if (whole) ++i;
  }
  if (parts.size() == 1) return parts[0];
  std::string out = "(";
  for (std::size_t i = 0; i < parts.size(); ++i) out += (i ? ";" : "") + parts[i];
  return out + ")OVERLAP_F_B";
}

// Each rank runs its actions in the schedule's order, one per step, as soon as
// their inputs arrived in an earlier step (F(s,m) after F(s-1,m), B(s,m) after
// B(s+1,m)); a rank that must wait leaves the cell empty. Recompute and
// optimizer steps are not actions (PyTorch recomputes inside a stage's
// backward, with checkpointing).
std::vector<std::vector<std::string>> aligned_actions(const Plan& p) {
  const Schedule sched = p.schedule_ops();
  const auto K = static_cast<std::size_t>(sched.stages);  // model stages, K x v
  const auto M = static_cast<std::size_t>(p.micro_batches);
  const auto ranks = static_cast<std::size_t>(sched.devices());  // one per device
  std::vector<std::vector<std::vector<Op>>> cells(ranks);
  std::size_t remaining = 0;
  for (std::size_t d = 0; d < ranks; ++d) {
    cells[d] = action_cells(sched.device_ops[d]);
    remaining += cells[d].size();
  }
  constexpr long kNotYet = -1;
  std::vector<long> f_step(K * M, kNotYet), b_step(K * M, kNotYet);
  const auto at = [&](int stage, int mb) {
    return static_cast<std::size_t>(stage) * M + static_cast<std::size_t>(mb);
  };
  const auto ready = [&](const Op& op, long step) {
    const bool fwd = op.kind == OpKind::kForward;
    const int from = fwd ? op.stage - 1 : op.stage + 1;
    if (op.kind == OpKind::kWeight || from < 0 || from >= sched.stages) return true;
    const long done = (fwd ? f_step : b_step)[at(from, op.micro_batch)];
    return done != kNotYet && done < step;
  };
  std::vector<std::size_t> next(ranks, 0);
  std::vector<std::vector<std::string>> rows(ranks);
  for (long step = 0; remaining > 0; ++step) {
    bool progressed = false;
    for (std::size_t r = 0; r < ranks; ++r) {
      if (next[r] == cells[r].size()) continue;
      const std::vector<Op>& cell = cells[r][next[r]];
      if (!std::all_of(cell.begin(), cell.end(), [&](const Op& op) { return ready(op, step); })) {
        rows[r].emplace_back();
        continue;
      }
      for (const Op& op : cell) {
        if (op.kind == OpKind::kWeight) continue;
        (op.kind == OpKind::kForward ? f_step : b_step)[at(op.stage, op.micro_batch)] = step;
      }
      rows[r].push_back(cell_text(cell, sched.split));
      ++next[r];
      --remaining;
      progressed = true;
    }
    // A step where no rank can act repeats forever: only actions run before it count.
    PS_CHECK(progressed, "the schedule deadlocks");
  }
  return rows;
}

// "(0, 4)", "(3,)": a Python tuple.
std::string python_tuple(const std::vector<int>& v) {
  std::string out = "(";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + (v.size() == 1 ? ",)" : ")");
}

// Pipeline rank d's stages, in order: the CSV's row d runs them.
std::vector<std::vector<int>> stages_by_rank(const Plan& p) {
  std::vector<std::vector<int>> out(static_cast<std::size_t>(p.stages));
  for (std::size_t s = 0; s < p.stage_plans.size(); ++s) {
    const int d = p.stage_plans[s].device;
    PS_CHECK(d >= 0 && d < p.stages, "a stage runs on one of the pipeline's devices");
    out[static_cast<std::size_t>(d)].push_back(static_cast<int>(s));
  }
  return out;
}

// Megatron-LM's split (docs/models.md, "Tensor parallelism") in PyTorch's styles.
// With sequence parallelism the activations between the split projections are
// sharded along the sequence (Shard(1)): the column-split projections all-gather
// it, the row-split ones reduce-scatter into it, and the layer norms run on it.
void tensor_parallel_section(std::ostream& o, const Plan& p) {
  const bool sp = p.sequence_parallel;
  o << "\n\n# Tensor parallelism over mesh[\"tp\"]: T=" << p.tensor_parallel
    << " ranks split every layer as Megatron-LM\n# does"
    << (sp ? ", with sequence parallelism (the activations outside the split\n# projections "
             "sharded along the sequence, dimension 1)"
           : "")
    << ". Give a stage's modules these styles:\n"
    << "#   parallelize_module(stage_module, mesh[\"tp\"], {\"<module>\": TP_..., ...})\n"
    << "# before the data-parallel wrapper; each rank then runs heads / T attention heads.\n"
    << (sp ? "# A stage sends the next its sequence shard (the local tensor, s / T tokens).\n" : "")
    << "from torch.distributed.tensor import Replicate, Shard\n"
    << "from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel"
    << (sp ? ",\n                                               SequenceParallel" : "") << ")\n\n"
    << "# The token embedding, split by vocabulary rows.\n"
    << "TP_EMBEDDING = RowwiseParallel(input_layouts=Replicate()"
    << (sp ? ", output_layouts=Shard(1)" : "") << ")\n"
    << "# The QKV and MLP up projections, split by columns (attention by heads).\n"
    << "TP_COLUMN = ColwiseParallel(" << (sp ? "input_layouts=Shard(1)" : "") << ")\n"
    << "# The attention output and MLP down projections, split by rows.\n"
    << "TP_ROW = RowwiseParallel(" << (sp ? "output_layouts=Shard(1)" : "") << ")\n";
  if (sp) {
    o << "# The layer norms (and the dropouts and residuals between them), along the sequence.\n"
      << "TP_NORM = SequenceParallel()\n";
  }
  o << "# The output layer, split by vocabulary: compute the loss on its sharded logits\n"
    << "# inside torch.distributed.tensor.parallel.loss_parallel().\n"
    << "TP_HEAD = ColwiseParallel(" << (sp ? "input_layouts=Shard(1), " : "")
    << "output_layouts=Shard(-1), use_local_output=False)\n";
}

// The mesh the replicas reduce their gradients over: mesh["dp"], or under
// context parallelism the D x C ranks that hold the same weights (Megatron-LM's
// data-and-context-parallel group), mesh["dp", "cp"] flattened; under expert
// parallelism the replicas are the "edp" x "ep" dimensions, flattened.
std::string reduction_mesh(const Plan& p) {
  if (p.context_parallel > 1) return "mesh[\"dp\", \"cp\"]._flatten(\"dp_cp\")";
  if (p.expert_parallel > 1) return "mesh[\"edp\", \"ep\"]._flatten(\"dp\")";
  return "mesh[\"dp\"]";
}

// The wrapper's lines for a mixture's experts under E > 1: each expert
// module the caller names is wrapped first over mesh["edp"], the D / E
// replicas that hold the same experts, so that the wrapper of the whole
// module over all D leaves their parameters to it (FSDP's nested groups).
std::string expert_wrappers(const Plan& p, const std::string& wrap) {
  if (p.expert_parallel <= 1) return "";
  return "    for expert in experts:\n        " + wrap + "(expert, mesh=mesh[\"edp\"]" +
         (p.zero == 1 ? ", reshard_after_forward=False" : "") + ")\n";
}

// D replicas over mesh["dp"] (with C > 1, D x C over the flattened "dp_cp"):
// PyTorch pipelining reduces a stage's gradients once, after the step's last
// backward, for DistributedDataParallel and FSDP modules alike (the pipeline
// stage's backward_maybe_with_nosync).
void data_parallel_section(std::ostream& o, const Plan& p) {
  const int D = p.data_parallel, C = p.context_parallel;
  const std::string over = reduction_mesh(p);
  if (C > 1) {
    o << "\n\n# Data parallelism over D=" << D << (D == 1 ? " replica" : " replicas") << ", each "
      << p.global_batch / D << " samples a step, and the C=" << C
      << " context-parallel ranks of each,\n"
      << "# which hold the same weights: their gradients reduce over the D x C = " << D * C
      << " ranks of\n# mesh[\"dp\", \"cp\"], flattened.\n";
  } else if (p.expert_parallel > 1) {
    o << "\n\n# Data parallelism over mesh[\"edp\", \"ep\"], flattened: D=" << D
      << " replicas, each " << p.global_batch / D << " samples a step.\n";
  } else {
    o << "\n\n# Data parallelism over mesh[\"dp\"]: D=" << D << " replicas, each "
      << p.global_batch / D << " samples a step.\n";
  }
  o << "# Wrap every stage's module with pipescope_data_parallel("
    << (p.expert_parallel > 1 ? "module, mesh, experts" : "module, mesh") << ") before\n"
    << "# building its PipelineStage; PyTorch pipelining reduces its gradients once, after\n"
    << "# the step's last backward.\n";
  const std::string share = C > 1 ? "(D x C)" : "D";
  const int E = p.expert_parallel;
  const std::string args = E > 1 ? "module, mesh, experts=()" : "module, mesh";
  if (E > 1) {
    o << "# Under expert parallelism each mixture layer's routed experts on a rank are 1/" << E
      << " of\n# them, held alike by the D/E=" << D / E
      << " replicas of mesh[\"edp\"]: pass the stage's expert modules as\n"
      << "# `experts`, whose gradients then reduce over mesh[\"edp\"] alone, the rest over "
         "all D.\n";
  }
  if (p.zero == 1) {
    o << "# ZeRO stage 1: fully_shard shards the weights, gradients and optimizer state over\n"
      << "# the " << (C > 1 ? "D x C ranks" : "replicas")
      << " at rest; under pipelining each stage gathers its weights once a step\n"
      << "# and keeps them, and its gradients, whole until the last backward, then\n"
      << "# reduce-scatters the gradients and steps the optimizer on its 1/" << share << " shard"
      << (p.expert_parallel > 1 ? " (of the experts'\n# parameters 1/(D/E), over mesh[\"edp\"])"
                                : "")
      << ".\n"
      << "# reshard_after_forward=False keeps the weights from being gathered again for each\n"
      << "# micro-batch's backward.\n"
      << "from torch.distributed.fsdp import fully_shard\n\n\n"
      << "def pipescope_data_parallel(" << args << "):\n"
      << expert_wrappers(p, "fully_shard") << "    return fully_shard(module, mesh=" << over
      << ", reshard_after_forward=False)\n";
  } else if (p.tensor_parallel > 1 || E > 1) {
    o << "# Every replica keeps its weights, gradients and optimizer state whole (no ZeRO).\n"
      << (p.tensor_parallel > 1
              ? "# FSDP's replicate all-reduces the tensor-parallel (DTensor) gradients, which\n"
                "# DistributedDataParallel leaves unset; it is a PyTorch internal\n"
              : "# FSDP's replicate, unlike DistributedDataParallel, leaves the parameters of\n"
                "# modules it wrapped before to their own group; it is a PyTorch internal\n")
      << "# (torch/distributed/_composable/replicate_with_fsdp.py).\n"
      << "from torch.distributed._composable.replicate_with_fsdp import replicate\n\n\n"
      << "def pipescope_data_parallel(" << args << "):\n"
      << expert_wrappers(p, "replicate") << "    return replicate(module, mesh=" << over << ")\n";
  } else {
    o << "# Every replica keeps its weights, gradients and optimizer state whole (no ZeRO).\n"
      << "from torch.nn.parallel import DistributedDataParallel\n\n\n"
      << "def pipescope_data_parallel(module, mesh):\n"
      << "    return DistributedDataParallel(module, device_mesh=" << over << ")\n";
  }
}

// C ranks a sequence over mesh["cp"]: PyTorch's context_parallel shards the
// buffers it is given along their sequence dimension, two of 2 C chunks a rank
// (its load balance for causal attention, as the plan's model splits the
// tokens), and runs scaled_dot_product_attention as ring attention.
void context_parallel_section(std::ostream& o, const Plan& p) {
  const int C = p.context_parallel;
  o << "\n\n# Context parallelism over mesh[\"cp\"]: each sequence splits over C=" << C
    << " ranks, two of\n"
    << "# 2C chunks each (the causal load balance), and scaled_dot_product_attention\n"
    << (p.cp_comm_type == ContextExchange::kAllGather
            ? "# all-gathers the keys and values before it, as the plan's cost model prices it.\n"
            : "# passes the keys and values round the ring, as the plan's cost model prices it.\n")
    << "# Run each step's schedule inside pipescope_context_parallel(mesh, buffers, seq_dims)\n"
    << "# with the step's whole-sequence tensors (tokens, labels, rotary tables) and the\n"
    << "# dimension of each that is the sequence: it shards them in place for the step.\n"
    << "# The attention must be scaled_dot_product_attention with is_causal=True.\n"
    << "from torch.distributed.tensor.experimental import context_parallel\n"
    << "from torch.distributed.tensor.experimental._attention import set_rotate_method\n\n\n"
    << "def pipescope_context_parallel(mesh, buffers, seq_dims):\n"
    << (p.cp_comm_type == ContextExchange::kAllGather
            ? "    set_rotate_method(\"allgather\")  # the keys and values gathered at once\n"
            : "    set_rotate_method(\"alltoall\")  # the ring, not an all-gather of the keys and "
              "values\n")
    << "    return context_parallel(mesh[\"cp\"], buffers=buffers, buffer_seq_dims=seq_dims,\n"
    << "                            no_restore_buffers=set(buffers))\n";
}

}  // namespace

std::string torch_device_mesh(const Plan& p) {
  const int D = p.data_parallel;
  const int K = p.stages;
  const int T = p.tensor_parallel;
  const int C = p.context_parallel;
  PS_CHECK(p.devices == D * K * T * C, "a plan runs on K x D x T x C devices");
  const int E = p.expert_parallel;
  PS_CHECK(E == 1 || C == 1, "the mesh has an ep dimension without context parallelism");
  const bool stages_outer = p.rank_order == RankOrder::kTpDpPp;
  const std::string group = stages_outer ? "(d D + r)" : "(r K + d)";
  // Under expert parallelism the replicas' dimension is two, replica
  // r = g E + e: its group of E consecutive replicas (Megatron-LM's expert
  // groups) and its place in it.
  const std::string dp_shape =
      E > 1 ? std::to_string(D / E) + ", " + std::to_string(E) : std::to_string(D);
  const std::string dp_names = E > 1 ? "\"edp\", \"ep\"" : "\"dp\"";
  std::ostringstream o;
  o << "# PyTorch's DeviceMesh (torch.distributed.device_mesh) for the pipelining schedule\n"
    << "# CSV beside this file, from a PipeScope plan for\n"
    << export_summary(p) << "#\n"
    << (C > 1 ? "# D x K x C x T = " : "# D x K x T = ") << p.devices
    << " ranks, placed as the plan places them (" << to_string(p.rank_order) << "): rank "
    << (C > 1 ? "(" + group + " C + c) T + t" : group + " T + t") << " is\n"
    << "# replica r, pipeline rank d (row d of the CSV)"
    << (C > 1 ? ", context-parallel rank c" : "") << " and tensor-parallel rank t, so a\n"
    << "# stage's " << (C > 1 ? "T x C" : "T") << " ranks are neighbours (in a node) and the "
    << (stages_outer ? "stages" : "replicas") << " outermost. That is the\n"
    << "# row-major order in which init_device_mesh lays out MESH_SHAPE. Start " << p.devices
    << " processes\n"
    << "# (e.g. torchrun --nproc-per-node ...) and on each: mesh = pipescope_device_mesh()\n"
    << "# (NCCL on GPUs; pipescope_device_mesh(\"cpu\") with gloo).\n"
    << (E > 1 ? "# The replicas are two dimensions, r = g E + e: mesh[\"ep\"] the E=" +
                    std::to_string(E) +
                    " consecutive\n# replicas that exchange a mixture's "
                    "tokens by all-to-all (each holding 1/E of its\n# routed experts; "
                    "EP_GROUP = mesh[\"ep\"].get_group() is that group), mesh[\"edp\"] the\n"
                    "# D/E replicas that hold the same experts.\n"
              : "")
    << "from torch.distributed.device_mesh import init_device_mesh\n\n"
    << "MESH_SHAPE = ("
    << (stages_outer ? std::to_string(K) + ", " + dp_shape : dp_shape + ", " + std::to_string(K))
    << ", " << (C > 1 ? std::to_string(C) + ", " : "") << T << ")\n"
    << "MESH_DIM_NAMES = (" << (stages_outer ? "\"pp\", " + dp_names : dp_names + ", \"pp\"")
    << ", " << (C > 1 ? "\"cp\", " : "") << "\"tp\")\n\n\n"
    << "def pipescope_device_mesh(device_type=\"cuda\"):\n"
    << "    return init_device_mesh(device_type, MESH_SHAPE, mesh_dim_names=MESH_DIM_NAMES)\n"
    << "\n\n# Pipeline over mesh[\"pp\"]: pipeline rank d = mesh[\"pp\"].get_local_rank() "
       "builds, for\n"
    << "# each stage s in STAGE_INDICES[d], PipelineStage(<stage s's layers>, s, NUM_STAGES,\n"
    << "# device, group=mesh[\"pp\"].get_group()), and runs them with\n"
    << "# _PipelineScheduleRuntime(stages, N_MICROBATCHES, loss_fn=...) after\n"
    << "# ._load_csv(<the CSV>). A micro-batch is " << p.micro_batch_size
    << (p.micro_batch_size == 1 ? " sample" : " samples") << ". The stages:\n";
  for (std::size_t s = 0; s < p.stage_plans.size(); ++s) {
    o << "#   stage " << s << ": " << describe_stage_layers(p, p.stage_plans[s].layers) << "\n";
  }
  if (p.schedule == ScheduleKind::kGpipe) {
    o << "# The CSV runs the plan's GPipe order: every forward, then the backwards from\n"
      << "# the last micro-batch to the first. PyTorch's own ScheduleGPipe runs its\n"
      << "# backwards in forward order (micro-batch 0 first); load the CSV to run the\n"
      << "# plan's.\n";
  }
  o << "NUM_STAGES = " << p.stage_plans.size() << "\n"
    << "STAGE_INDICES = (";
  const std::vector<std::vector<int>> ranks = stages_by_rank(p);
  for (std::size_t d = 0; d < ranks.size(); ++d) {
    o << (d ? ", " : "") << python_tuple(ranks[d]);
  }
  o << (ranks.size() == 1 ? ",)" : ")") << "\n"
    << "N_MICROBATCHES = " << p.micro_batches << "\n";
  if (T > 1) tensor_parallel_section(o, p);
  if (C > 1) context_parallel_section(o, p);
  if (D > 1 || C > 1) {
    data_parallel_section(o, p);
  } else if (p.zero > 0) {
    o << "\n# ZeRO stage " << p.zero << " over D=1 replica shards nothing: no data-parallel "
      << "wrapper.\n";
  }
  return o.str();
}

std::string export_torch_pipelining(const Plan& p) {
  std::string out;
  for (const std::vector<std::string>& row : aligned_actions(p)) {
    for (std::size_t i = 0; i < row.size(); ++i) out += (i ? "," : "") + row[i];
    out += "\n";
  }
  return out;
}

}  // namespace pipescope
