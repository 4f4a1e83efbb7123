# torchgpipe (github.com/kakaobrain/torchgpipe) from a PipeScope plan for
# model 'toy7' (hash 0123456789abcdef, 7 layers): K=3 stages x D=1 replicas,
# M=4 micro-batches of 2 (global batch 8), schedule gpipe, remat on.
# torchgpipe runs GPipe, the plan's schedule: the plan's step time and memory hold there.
# `model` must be an nn.Sequential whose 7 children are the plan's layers, in order;
# balance[s] of them go to the s-th device given to GPipe (default cuda:0, cuda:1, ...):
#   stage 0: layers 0-2: embed, block0, block1
#   stage 1: layers 3-4: block2, block3
#   stage 2: layers 5-6: block4, head
# Feed each replica mini-batches of 8 samples; GPipe splits them into `chunks` micro-batches.
# checkpoint='always' recomputes each micro-batch's forward in the backward pass as
# GPipe's rematerialization does; 'except_last' all but the last micro-batch's
# (remat except-last); 'never' keeps every activation (remat off).
from torchgpipe import GPipe

balance = [3, 2, 2]
model = GPipe(model, balance=balance, chunks=4, checkpoint='always')
