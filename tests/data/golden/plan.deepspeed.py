# DeepSpeed pipeline parallelism (deepspeed.pipe.PipelineModule) from a PipeScope plan for
# model 'toy7' (hash 0123456789abcdef, 7 layers): K=3 stages x D=1 replicas,
# M=4 micro-batches of 2 (global batch 8), schedule gpipe, remat on.
# DeepSpeed runs 1F1B, not GPipe: the step time and peak memory there are not
# the plan's; export with the plan's scenario (--scenario FILE) to see them simulated.
# DeepSpeed waits for every send between stages, where the plan
# overlaps its sends between stages with compute (cluster.p2p overlapped);
# plan with --set cluster.p2p=blocking for the step time there.
#
# PipelineModule's partition_method ('parameters', 'uniform', 'type:REGEX') cannot
# state an arbitrary cut. PipelineModule keeps its cut in `parts`, K+1 layer indices
# (stage s holds layers parts[s] .. parts[s+1]-1), set by _partition_layers(). What to
# do: build PlannedPipelineModule below instead of PipelineModule, with `layers` the
# plan's 7 layers in order, and use DEEPSPEED_CONFIG's batch settings in your
# DeepSpeed config. _partition_layers and _set_bounds are DeepSpeed internals (see
# deepspeed/runtime/pipe/module.py); the class checks the stage and layer counts.
#   stage 0: layers 0-2: embed, block0, block1
#   stage 1: layers 3-4: block2, block3
#   stage 2: layers 5-6: block4, head
from deepspeed.pipe import PipelineModule

PIPESCOPE_PARTS = [0, 3, 5, 7]


class PlannedPipelineModule(PipelineModule):
    def _partition_layers(self, method="uniform"):
        stages = self._topo.get_dim("pipe")
        if stages != len(PIPESCOPE_PARTS) - 1 or len(self._layer_specs) != PIPESCOPE_PARTS[-1]:
            raise ValueError("the PipeScope plan cuts 7 layers into 3 stages")
        self.parts = list(PIPESCOPE_PARTS)
        stage_id = self._topo.get_coord(self.global_rank).pipe
        self._set_bounds(start=self.parts[stage_id], stop=self.parts[stage_id + 1])


# activation_checkpoint_interval 3: one checkpoint around each stage's forward (GPipe's remat).
# Non-reentrant checkpointing: DeepSpeed's default (reentrant) checkpoint fails in
# the first backward when a span starts at a layer whose input is integer token
# ids (the embedding). (deepspeed.checkpointing is an attribute of the package,
# not a module to import from.)
# import deepspeed
# model = PlannedPipelineModule(layers=layers, num_stages=3, loss_fn=loss_fn,
#                               activation_checkpoint_interval=3,
#                               activation_checkpoint_func=deepspeed.checkpointing.non_reentrant_checkpoint)
DEEPSPEED_CONFIG = {
    "train_batch_size": 8,
    "train_micro_batch_size_per_gpu": 2,
    "gradient_accumulation_steps": 4,
}
