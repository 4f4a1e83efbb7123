"""Writes each schedule that torch.distributed.pipelining ships as PyTorch's own
per-rank action CSV, for PipeScope's import tests (tests/data/pytorch-<version>/).

    python scripts/write_pytorch_schedules.py OUT_DIR K M

Run it with a Python that has PyTorch (e.g. the environment that
scripts/compare-pytorch.sh makes). The schedules are built for K ranks and M
micro-batches without a process group: each rank's stages are stand-ins that
carry only what the schedules read to order their actions (stage index, stage
count, rank, group size). The multi-stage schedules (two stages per rank) are
written by their own _dump_csv, in its compute-only form (<name>.csv) and with
communication (<name>-comms.csv, its default); GPipe and 1F1B, which have no
_dump_csv, as csv.writer writes their _get_pipeline_order(), as _dump_csv does.
"""

import csv
import os
import sys
import warnings

warnings.filterwarnings("ignore")
import torch  # noqa: E402
import torch.distributed.pipelining.schedules as schedules  # noqa: E402

SINGLE = ["ScheduleGPipe", "Schedule1F1B"]
MULTI = ["ScheduleInterleaved1F1B", "ScheduleLoopedBFS", "ScheduleInterleavedZeroBubble",
         "ScheduleZBVZeroBubble", "ScheduleDualPipeV"]
V_SHAPED = {"ScheduleZBVZeroBubble", "ScheduleDualPipeV"}


class Stage:
    """What a schedule reads of a stage to order its actions."""

    def __init__(self, index, num_stages, group_size, rank):
        self.stage_index = index
        self.num_stages = num_stages
        self.group_size = group_size
        self.group_rank = rank
        self.is_first = index == 0
        self.is_last = index == num_stages - 1
        self.stage_index_to_group_rank = {}
        self.submod = None


def rank0_stages(name, ranks):
    """Rank 0's two stages: in a loop (0, K) or in a V (0, 2K-1)."""
    second = 2 * ranks - 1 if name in V_SHAPED else ranks
    return [Stage(i, 2 * ranks, ranks, 0) for i in (0, second)]


def main(out, ranks, micro_batches):
    os.makedirs(out, exist_ok=True)
    loss = lambda output, target: output  # noqa: E731 (never called)
    for name in SINGLE:
        order = getattr(schedules, name)(Stage(0, ranks, ranks, 0), micro_batches,
                                         loss_fn=loss)._get_pipeline_order()
        with open(os.path.join(out, name + ".csv"), "w", newline="") as f:
            writer = csv.writer(f)
            for rank in order:
                writer.writerow(order[rank])
    for name in MULTI:
        schedule = getattr(schedules, name)(rank0_stages(name, ranks), micro_batches,
                                            loss_fn=loss)
        schedule._dump_csv(os.path.join(out, name + ".csv"), format="compute_only")
        schedule._dump_csv(os.path.join(out, name + "-comms.csv"), format="compute_comms")
    print("torch", torch.__version__, "->", out)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
