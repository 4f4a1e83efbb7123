# PyTorch's DeviceMesh (torch.distributed.device_mesh) for the pipelining schedule
# CSV beside this file, from a PipeScope plan for
# model 'toy7' (hash 0123456789abcdef, 7 layers): K=3 stages x D=1 replicas,
# M=4 micro-batches of 2 (global batch 8), schedule gpipe, remat on.
#
# D x K x T = 3 ranks, placed as the plan places them (tp-pp-dp): rank (r K + d) T + t is
# replica r, pipeline rank d (row d of the CSV) and tensor-parallel rank t, so a
# stage's T ranks are neighbours (in a node) and the replicas outermost. That is the
# row-major order in which init_device_mesh lays out MESH_SHAPE. Start 3 processes
# (e.g. torchrun --nproc-per-node ...) and on each: mesh = pipescope_device_mesh()
# (NCCL on GPUs; pipescope_device_mesh("cpu") with gloo).
from torch.distributed.device_mesh import init_device_mesh

MESH_SHAPE = (1, 3, 1)
MESH_DIM_NAMES = ("dp", "pp", "tp")


def pipescope_device_mesh(device_type="cuda"):
    return init_device_mesh(device_type, MESH_SHAPE, mesh_dim_names=MESH_DIM_NAMES)


# Pipeline over mesh["pp"]: pipeline rank d = mesh["pp"].get_local_rank() builds, for
# each stage s in STAGE_INDICES[d], PipelineStage(<stage s's layers>, s, NUM_STAGES,
# device, group=mesh["pp"].get_group()), and runs them with
# _PipelineScheduleRuntime(stages, N_MICROBATCHES, loss_fn=...) after
# ._load_csv(<the CSV>). A micro-batch is 2 samples. The stages:
#   stage 0: layers 0-2: embed, block0, block1
#   stage 1: layers 3-4: block2, block3
#   stage 2: layers 5-6: block4, head
# The CSV runs the plan's GPipe order: every forward, then the backwards from
# the last micro-batch to the first. PyTorch's own ScheduleGPipe runs its
# backwards in forward order (micro-batch 0 first); load the CSV to run the
# plan's.
NUM_STAGES = 3
STAGE_INDICES = ((0,), (1,), (2,))
N_MICROBATCHES = 4
