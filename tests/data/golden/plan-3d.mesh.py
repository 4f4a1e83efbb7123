# PyTorch's DeviceMesh (torch.distributed.device_mesh) for the pipelining schedule
# CSV beside this file, from a PipeScope plan for
# model 'toy7' (hash 0123456789abcdef, 6 layers): K=2 stages x D=2 replicas x T=2 tensor-parallel devices (sequence parallel),
# M=4 micro-batches of 3 (global batch 24), schedule 1f1b, remat on.
#
# D x K x T = 8 ranks, placed as the plan places them (tp-pp-dp): rank (r K + d) T + t is
# replica r, pipeline rank d (row d of the CSV) and tensor-parallel rank t, so a
# stage's T ranks are neighbours (in a node) and the replicas outermost. That is the
# row-major order in which init_device_mesh lays out MESH_SHAPE. Start 8 processes
# (e.g. torchrun --nproc-per-node ...) and on each: mesh = pipescope_device_mesh()
# (NCCL on GPUs; pipescope_device_mesh("cpu") with gloo).
from torch.distributed.device_mesh import init_device_mesh

MESH_SHAPE = (2, 2, 2)
MESH_DIM_NAMES = ("dp", "pp", "tp")


def pipescope_device_mesh(device_type="cuda"):
    return init_device_mesh(device_type, MESH_SHAPE, mesh_dim_names=MESH_DIM_NAMES)


# Pipeline over mesh["pp"]: pipeline rank d = mesh["pp"].get_local_rank() builds, for
# each stage s in STAGE_INDICES[d], PipelineStage(<stage s's layers>, s, NUM_STAGES,
# device, group=mesh["pp"].get_group()), and runs them with
# _PipelineScheduleRuntime(stages, N_MICROBATCHES, loss_fn=...) after
# ._load_csv(<the CSV>). A micro-batch is 3 samples. The stages:
#   stage 0: layers 0-2: embed, block0, block1
#   stage 1: layers 3-5: block2, block3, head
NUM_STAGES = 2
STAGE_INDICES = ((0,), (1,))
N_MICROBATCHES = 4


# Tensor parallelism over mesh["tp"]: T=2 ranks split every layer as Megatron-LM
# does, with sequence parallelism (the activations outside the split
# projections sharded along the sequence, dimension 1). Give a stage's modules these styles:
#   parallelize_module(stage_module, mesh["tp"], {"<module>": TP_..., ...})
# before the data-parallel wrapper; each rank then runs heads / T attention heads.
# A stage sends the next its sequence shard (the local tensor, s / T tokens).
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                               SequenceParallel)

# The token embedding, split by vocabulary rows.
TP_EMBEDDING = RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1))
# The QKV and MLP up projections, split by columns (attention by heads).
TP_COLUMN = ColwiseParallel(input_layouts=Shard(1))
# The attention output and MLP down projections, split by rows.
TP_ROW = RowwiseParallel(output_layouts=Shard(1))
# The layer norms (and the dropouts and residuals between them), along the sequence.
TP_NORM = SequenceParallel()
# The output layer, split by vocabulary: compute the loss on its sharded logits
# inside torch.distributed.tensor.parallel.loss_parallel().
TP_HEAD = ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False)


# Data parallelism over mesh["dp"]: D=2 replicas, each 12 samples a step.
# Wrap every stage's module with pipescope_data_parallel(module, mesh) before
# building its PipelineStage; PyTorch pipelining reduces its gradients once, after
# the step's last backward.
# ZeRO stage 1: fully_shard shards the weights, gradients and optimizer state over
# the replicas at rest; under pipelining each stage gathers its weights once a step
# and keeps them, and its gradients, whole until the last backward, then
# reduce-scatters the gradients and steps the optimizer on its 1/D shard.
# reshard_after_forward=False keeps the weights from being gathered again for each
# micro-batch's backward.
from torch.distributed.fsdp import fully_shard


def pipescope_data_parallel(module, mesh):
    return fully_shard(module, mesh=mesh["dp"], reshard_after_forward=False)
