"""PipeScope's exports loaded by the tools they are for.

scripts/check-exports.sh makes a set of plans, exports each with
`pipescope export --to torchgpipe|deepspeed|megatron|torch-pipelining` into a
folder per plan, and calls this on those folders. Each export is handed to the
real tool on the CPU, in one process (the device mesh in one per rank):

  torchgpipe        GPipe(nn.Sequential(<stand-in layers>), balance=<export's>,
                    devices=['cpu'] * K, chunks=M, checkpoint=<export's>), one
                    forward and backward;
  deepspeed         the exported PlannedPipelineModule: its _partition_layers on
                    a K-stage PipeDataParallelTopology for every stage (stage
                    bounds as DeepSpeed's _set_bounds records them), then one
                    engine.train_batch on gloo with world size 1 (one stage: the
                    export's class with the plan's parts when K = 1, else its
                    stages joined into one), the exported checkpoint interval
                    and function and the exported batch settings;
  megatron          the flags into megatron-core's TransformerConfig (its
                    pipeline, virtual stage, layout and recompute checks), its
                    layer counts per rank and virtual stage against the plan,
                    its micro-batch calculator against the plan's M, and its
                    rank generator's pipeline and expert-parallel groups
                    against the plan's placement;
  megatron-lm       the same flags, beside a stand-in GPT's sizes (and
                    mixture, under expert parallelism), through
                    Megatron-LM's own parse_args and validate_args (its training
                    package, from the checkout MEGATRON_LM names), in a process
                    of its own with the environment the export asks for;
  torch-pipelining  the CSV loaded by _PipelineScheduleRuntime._load_csv (which
                    validates it and adds the send and receive actions) for every
                    rank, with stand-in stages, and its pipeline_order against the
                    file;
  torch-mesh        the device mesh module written beside the CSV, on D x K x T x C
                    processes (gloo, CPU): its pipescope_device_mesh("cpu") builds
                    the DeviceMesh, whose ranks must sit where PipeScope places
                    them; each pipeline rank builds its PipelineStages on
                    mesh["pp"] (wrapped by the module's data-parallel wrapper over
                    mesh["dp"]), loads the CSV and runs one step and one optimizer
                    step; for T > 1 the module's tensor-parallel styles split a
                    stand-in GPT over mesh["tp"], whose loss and gradients must be
                    the unsplit model's; for C > 1 mesh["cp"] holds each
                    sequence's ranks, the wrapper reduces over mesh["dp", "cp"]
                    and the module's context_parallel shards a sequence as the
                    plan splits it; for E > 1 mesh["edp", "ep"] are the replicas,
                    an all-to-all over mesh["ep"] reaches the plan's expert group,
                    and the wrapper given an expert module reduces its gradients
                    over mesh["edp"] alone, the rest over all D.

Prints one line per plan and tool, "accepted" or "rejected" with the tool's own
message, and exits 1 if any export was rejected. See docs/export-checks.md.
"""

import argparse
import ast
import contextlib
import importlib.metadata
import io
import json
import logging
import os
import platform
import re
import shlex
import socket
import sys
import traceback
import types
import warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.setdefault("DS_BUILD_OPS", "0")
os.environ.setdefault("OMP_NUM_THREADS", "1")

FORMATS = ("torchgpipe", "deepspeed", "megatron", "megatron-lm", "torch-pipelining",
           "torch-mesh")
FILES = {
    "torchgpipe": "torchgpipe.py",
    "deepspeed": "deepspeed.py",
    "megatron": "megatron.txt",
    # The same flags, through Megatron-LM's own argument parser.
    "megatron-lm": "megatron.txt",
    "torch-pipelining": "torch-pipelining.csv",
    # Written beside the CSV by `export --to torch-pipelining -o FILE.csv`.
    "torch-mesh": "torch-pipelining.mesh.py",
}
PACKAGES = ("torch", "deepspeed", "megatron-core", "torchgpipe")
# Stand-in layers: tiny, so a step takes milliseconds.
VOCAB, WIDTH, SEQ = 32, 16, 8


class Rejected(Exception):
    """The tool refused the export; the message is the tool's."""


class Skipped(Exception):
    """The tool is not there to check the export with."""


def one_line(text, limit=400):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def plural(n, word):
    return f"{n} {word}" if n == 1 else f"{n} {word}es" if word.endswith("h") else f"{n} {word}s"


def tool_error(exc):
    """The tool's own message: the exception's type and text."""
    return one_line(f"{type(exc).__name__}: {exc}")


@contextlib.contextmanager
def quiet():
    """Keeps the tools' banners and logs out of the result lines."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        yield


# ---------------------------------------------------------------- plans


class Plan:
    """What the checks need from a plan file (docs/file-formats.md, "Plans")."""

    def __init__(self, path):
        with open(path) as f:
            p = json.load(f)
        self.K, self.D, self.M = p["K"], p["D"], p["M"]
        self.T = p.get("T", 1)
        self.E = p.get("E", 1)
        # 1 where the experts are whole beside T (expert tensor parallelism 1).
        self.etp = 1 if p.get("expert_tensor_parallel") == 1 else self.T
        self.moe_dispatcher = p.get("moe_dispatcher", "alltoall")
        self.C = p.get("C", 1)
        self.cp_comm_type = p.get("cp_comm_type", "p2p")
        self.rank_order = p["cluster"].get("rank_order", "tp-pp-dp")
        self.p2p = p["cluster"].get("p2p", "overlapped")
        self.sequence_parallel = p.get("sequence_parallel", False)
        self.zero = p.get("zero", 0)
        self.chunks = p.get("chunks", 1)
        self.schedule = p["schedule"]
        self.remat = p.get("remat_mode", "always" if p["remat"] else "never")
        self.micro_batch_size = p["micro_batch_size"]
        self.global_batch = p["global_batch"]
        self.names = p["model"]["layer_names"]
        self.sizes = [s["last_layer"] - s["first_layer"] + 1 for s in p["stages"]]
        self.devices = [s["device"] for s in p["stages"]]
        self.parts = [0]
        for n in self.sizes:
            self.parts.append(self.parts[-1] + n)

    @property
    def embed_first(self):
        return bool(self.names) and self.names[0] == "embed"

    @property
    def head_last(self):
        return len(self.names) >= 2 and self.names[-1] == "head"

    def transformer_layers(self):
        """Layers per model stage as Megatron-LM counts them: no embedding, no head."""
        t = list(self.sizes)
        if self.embed_first:
            t[0] -= 1
        if self.head_last:
            t[-1] -= 1
        return t


def recut(source, target, sizes):
    """A plan file with the same setting and another cut (K·v stage sizes)."""
    with open(source) as f:
        p = json.load(f)
    sizes = [int(n) for n in sizes.split(",")]
    if len(sizes) != len(p["stages"]) or sum(sizes) != p["model"]["layers"]:
        sys.exit(f"check_exports.py: {sizes} is not a cut of {p['model']['layers']} layers "
                 f"into {len(p['stages'])} stages")
    first = 0
    for stage, n in zip(p["stages"], sizes):
        stage["first_layer"], stage["last_layer"] = first, first + n - 1
        first += n
    with open(target, "w") as f:
        json.dump(p, f, indent=1)


# ---------------------------------------------------------------- stand-in layers


def stand_in_layers(plan):
    """One tiny module per plan layer: an Embedding for 'embed', a Linear to the
    vocabulary for 'head', a Linear and tanh for every other layer."""
    import torch.nn as nn

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(WIDTH, VOCAB)

        def forward(self, x):
            return self.lin(x).reshape(-1, VOCAB)

    layers = []
    for i, name in enumerate(plan.names):
        if i == 0 and plan.embed_first:
            layers.append(nn.Embedding(VOCAB, WIDTH))
        elif i == len(plan.names) - 1 and plan.head_last:
            layers.append(Head())
        else:
            layers.append(nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh()))
    return layers


def batch(plan, samples):
    """Inputs and labels for `samples` sequences."""
    import torch

    gen = torch.Generator().manual_seed(samples)
    if plan.embed_first:
        x = torch.randint(0, VOCAB, (samples, SEQ), generator=gen)
    else:
        x = torch.randn(samples, SEQ, WIDTH, generator=gen)
    return x, torch.randint(0, VOCAB, (samples, SEQ), generator=gen)


def loss_of(plan):
    import torch.nn.functional as F

    def loss_fn(out, labels):
        if plan.head_last:
            return F.cross_entropy(out, labels.reshape(-1))
        return out.float().pow(2).mean()

    return loss_fn


# ---------------------------------------------------------------- torchgpipe


def gpipe_call(text):
    """balance and the GPipe(...) keywords from the export, as Python literals."""
    balance, keywords = None, None
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [
            "balance"
        ]:
            balance = ast.literal_eval(node.value)
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "GPipe":
            keywords = {k.arg: k.value for k in node.keywords}
    if balance is None or keywords is None:
        raise Rejected("the export has no `balance = [...]` and GPipe(...) call")
    return balance, {k: ast.literal_eval(v) for k, v in keywords.items() if k != "balance"}


def check_torchgpipe(plan, text):
    import torch.nn as nn
    from torchgpipe import GPipe

    balance, kw = gpipe_call(text)
    try:
        model = GPipe(nn.Sequential(*stand_in_layers(plan)), balance=balance,
                      devices=["cpu"] * len(balance), **kw)
        x, y = batch(plan, plan.global_batch // plan.D)
        loss = loss_of(plan)(model(x), y)
        loss.backward()
    except Exception as e:  # the tool's refusal, in its words
        raise Rejected(tool_error(e)) from e
    got = [len(p) for p in model.partitions]
    if got != plan.sizes:
        raise Rejected(f"GPipe built partitions of {got} layers, the plan cuts {plan.sizes}")
    return (f"GPipe balance={balance} chunks={kw.get('chunks')} "
            f"checkpoint='{kw.get('checkpoint')}' on {len(balance)} x cpu; "
            f"one forward/backward, loss {float(loss):.3f}")


# ---------------------------------------------------------------- DeepSpeed


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_deepspeed():
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(free_port()))
    import deepspeed

    with quiet():
        deepspeed.init_distributed(dist_backend="gloo")
    for name in ("DeepSpeed", "deepspeed"):
        logging.getLogger(name).setLevel(logging.ERROR)


def model_call(text):
    """The keywords of the commented `model = PlannedPipelineModule(...)` line."""
    lines = [ln[2:] for ln in text.splitlines() if ln.startswith("# ")]
    call = "model = PlannedPipelineModule("
    start = next((i for i, ln in enumerate(lines) if ln.startswith(call)), None)
    if start is None:
        raise Rejected("the export has no `model = PlannedPipelineModule(...)` line")
    source, depth = "", 0
    for ln in lines[start:]:
        source += ln + "\n"
        depth += ln.count("(") - ln.count(")")
        if depth == 0:
            break
    call = ast.parse(source).body[0].value
    return {k.arg: k.value for k in call.keywords}


def ds_partition(namespace, plan):
    """The export's _partition_layers for each of K stages, on a K-stage topology,
    without K processes: parts and the bounds DeepSpeed's _set_bounds records."""
    from deepspeed.pipe import PipelineModule
    from deepspeed.runtime.pipe.topology import PipeDataParallelTopology

    cls = namespace["PlannedPipelineModule"]
    topo = PipeDataParallelTopology(num_pp=plan.K, num_dp=1)
    for stage in range(plan.K):
        fake = types.SimpleNamespace(_topo=topo, global_rank=topo.get_rank(pipe=stage, data=0),
                                     _layer_specs=[None] * len(plan.names), num_stages=plan.K)
        fake._set_bounds = lambda start=None, stop=None, f=fake: PipelineModule._set_bounds(
            f, start, stop)
        try:
            cls._partition_layers(fake)
        except Exception as e:
            raise Rejected(tool_error(e)) from e
        want = (plan.parts[stage], plan.parts[stage + 1])
        if fake.parts != plan.parts or (fake._local_start, fake._local_stop) != want:
            raise Rejected(f"stage {stage}: parts {fake.parts}, bounds "
                           f"{fake._local_start}..{fake._local_stop}, the plan {plan.parts}")


def ds_train(namespace, plan, kw):
    import deepspeed
    import torch

    interval = ast.literal_eval(kw["activation_checkpoint_interval"])
    func = kw.get("activation_checkpoint_func")
    ckpt = eval(compile(ast.Expression(func), "<export>", "eval"), {"deepspeed": deepspeed}) \
        if func is not None else deepspeed.checkpointing.checkpoint
    if plan.K > 1:
        # One process runs one stage: the plan's stages joined into one.
        namespace["PIPESCOPE_PARTS"] = [0, plan.parts[-1]]
    config = dict(namespace["DEEPSPEED_CONFIG"])
    config["train_batch_size"] //= plan.D  # one replica here
    # ZeRO's optimizers are DeepSpeed's tested ones: Adam, here torch's.
    config["optimizer"] = ({"type": "Adam", "params": {"lr": 0.01, "torch_adam": True}}
                           if "zero_optimization" in config else
                           {"type": "SGD", "params": {"lr": 0.01}})
    try:
        with quiet():
            module = namespace["PlannedPipelineModule"](
                layers=stand_in_layers(plan), num_stages=1, loss_fn=loss_of(plan),
                activation_checkpoint_interval=interval, activation_checkpoint_func=ckpt)
            engine, _, _, _ = deepspeed.initialize(model=module,
                                                   model_parameters=module.parameters(),
                                                   config=config)
            mb = config["train_micro_batch_size_per_gpu"]
            data = iter([batch(plan, mb) for _ in range(config["gradient_accumulation_steps"])])
            loss = engine.train_batch(data)
            zero = engine.zero_optimization_stage()
    except Exception as e:
        raise Rejected(tool_error(e)) from e
    finally:
        torch.distributed.barrier()
    name = "non_reentrant_checkpoint" if ckpt is deepspeed.checkpointing.non_reentrant_checkpoint \
        else getattr(ckpt, "__name__", str(ckpt))
    if zero != plan.zero:
        raise Rejected(f"the engine runs ZeRO stage {zero}, the plan {plan.zero}")
    return float(loss), interval, name, config


def ds_zero_config(config, plan):
    """The export's zero_optimization section through DeepSpeed's own config class."""
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    section = config.get("zero_optimization")
    if section is None:
        return ""
    try:
        parsed = DeepSpeedZeroConfig(**section)
    except Exception as e:
        raise Rejected(tool_error(e)) from e
    if int(parsed.stage) != plan.zero:
        raise Rejected(f"DeepSpeedZeroConfig reads stage {int(parsed.stage)}, the plan {plan.zero}")
    return f"; DeepSpeedZeroConfig stage {int(parsed.stage)}, the engine's ZeRO stage {plan.zero}"


def ds_rank_order(plan, text):
    """DeepSpeed's pipelines under the topology the export names (its default,
    PipeModelDataParallelTopology, when it names none) must be the plan's."""
    from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology, ProcessTopology

    named = re.search(r"topology=ProcessTopology\(axes=(\[[^]]*\]), dims=(\[[^]]*\])\)", text)
    if named:
        topo = ProcessTopology(axes=ast.literal_eval(named.group(1)),
                               dims=ast.literal_eval(named.group(2)))
    else:
        topo = PipeModelDataParallelTopology(num_pp=plan.K, num_mp=plan.T, num_dp=plan.D)
    same_pipelines(topo.get_axis_comm_lists("pipe"), plan, "DeepSpeed's topology")
    return "ProcessTopology" if named else "the default topology"


def check_deepspeed(plan, text):
    namespace = {}
    try:
        exec(compile(text, "deepspeed-export", "exec"), namespace)
    except Exception as e:
        raise Rejected(tool_error(e)) from e
    ds_partition(namespace, plan)
    kw = model_call(text)
    stages = ast.literal_eval(kw["num_stages"])
    if stages != plan.K:
        raise Rejected(f"num_stages={stages}, the plan has K={plan.K}")
    zero = ds_zero_config(namespace["DEEPSPEED_CONFIG"], plan)
    ranks = ds_rank_order(plan, text) if plan.K * plan.D > 1 else None
    loss, interval, ckpt, config = ds_train(namespace, plan, kw)
    ran = "the plan's one stage" if plan.K == 1 else f"the {plan.K} stages joined into one"
    return (f"parts {plan.parts} on a {plan.K}-stage topology; train_batch on gloo, 1 process, "
            f"{ran}, interval {interval}" + (f" with {ckpt}" if interval else "") +
            f", {config['gradient_accumulation_steps']} micro-batches of "
            f"{config['train_micro_batch_size_per_gpu']}: loss {loss:.3f}" + zero
            + (f"; ranks {plan.rank_order} by {ranks}" if ranks else ""))


# ---------------------------------------------------------------- Megatron-LM

MEGATRON_FLAGS = {
    "--tensor-model-parallel-size": ("tensor_model_parallel_size", int),
    "--expert-model-parallel-size": ("expert_model_parallel_size", int),
    "--expert-tensor-parallel-size": ("expert_tensor_parallel_size", int),
    "--moe-token-dispatcher-type": ("moe_token_dispatcher_type", str),
    "--pipeline-model-parallel-size": ("pipeline_model_parallel_size", int),
    "--context-parallel-size": ("context_parallel_size", int),
    "--cp-comm-type": ("cp_comm_type", str),
    "--num-layers": ("num_layers", int),
    "--decoder-first-pipeline-num-layers": ("num_layers_in_first_pipeline_stage", int),
    "--decoder-last-pipeline-num-layers": ("num_layers_in_last_pipeline_stage", int),
    "--pipeline-model-parallel-layout": ("pipeline_model_parallel_layout", str),
    "--num-virtual-stages-per-pipeline-rank": ("virtual_pipeline_model_parallel_size", int),
    "--recompute-granularity": ("recompute_granularity", str),
    "--recompute-method": ("recompute_method", str),
    "--recompute-num-layers": ("recompute_num_layers", int),
    "--micro-batch-size": ("micro_batch_size", int),
    "--global-batch-size": ("global_batch_size", int),
    "--microbatch-group-size-per-virtual-pipeline-stage": ("microbatch_group_size_per_vp_stage",
                                                           int),
}
# Flags without a value: TransformerConfig's sequence_parallel; the distributed
# optimizer is a field of megatron-core's OptimizerConfig and
# DistributedDataParallelConfig (what --use-distributed-optimizer sets in
# Megatron-LM's training loop).
MEGATRON_SWITCHES = {
    "--sequence-parallel": "sequence_parallel",
    "--use-distributed-optimizer": "use_distributed_optimizer",
    "--use-tp-pp-dp-mapping": "use_tp_pp_dp_mapping",
    "--overlap-p2p-communication-warmup-flush": "overlap_p2p_comm_warmup_flush",
    "--moe-enable-deepep": "moe_enable_deepep",
}
# Flags that turn a field off: Megatron-LM's --no-overlap-p2p-communication
# (overlap_p2p_comm, on by default in Megatron-LM's arguments for the
# interleaved schedule; megatron-core's own default is off).
MEGATRON_OFF_SWITCHES = {
    "--no-overlap-p2p-communication": "overlap_p2p_comm",
}


def megatron_flags(text):
    words = shlex.split(" ".join(ln.rstrip("\\") for ln in text.splitlines()
                                 if not ln.startswith("#")))
    args = {}
    i = 0
    while i < len(words):
        flag = words[i]
        if flag in MEGATRON_SWITCHES:
            args[MEGATRON_SWITCHES[flag]] = True
            i += 1
            continue
        if flag in MEGATRON_OFF_SWITCHES:
            args[MEGATRON_OFF_SWITCHES[flag]] = False
            i += 1
            continue
        if flag not in MEGATRON_FLAGS or i + 1 >= len(words):
            raise Rejected(f"unexpected argument {flag!r}: not a flag this check maps to "
                           "megatron-core's configuration")
        field, kind = MEGATRON_FLAGS[flag]
        args[field] = kind(words[i + 1])
        i += 2
    return args


def megatron_distributed_optimizer():
    """megatron-core's configurations with the distributed optimizer on."""
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig

    ddp = DistributedDataParallelConfig(use_distributed_optimizer=True)
    opt = OptimizerConfig(optimizer="adam", lr=1e-4, bf16=True, use_distributed_optimizer=True)
    if not (ddp.use_distributed_optimizer and opt.use_distributed_optimizer):
        raise Rejected("megatron-core's configurations dropped use_distributed_optimizer")


def megatron_training_note():
    if os.environ.get("MEGATRON_LM"):
        return None
    return ("MEGATRON_LM names no Megatron-LM checkout: its argument parser and validate_args "
            "(megatron.training, not in the megatron-core package) were not run")


# ---------------------------------------------------------------- Megatron-LM's arguments

# What a model needs beside the export's flags for Megatron-LM's parse_args and
# validate_args: a stand-in GPT's sizes (heads a multiple of T), its
# tokenizer and data, the run's length. None of it bears on the pipeline.
def megatron_lm_model_flags(plan):
    heads = 4 * plan.T
    return (["--hidden-size", str(16 * heads), "--num-attention-heads", str(heads),
             "--seq-length", str(SEQ), "--max-position-embeddings", str(SEQ), "--bf16",
             "--tokenizer-type", "NullTokenizer", "--vocab-size", str(VOCAB), "--mock-data",
             "--lr", "1e-4", "--train-iters", "1"]
            + ["--" + k.replace("_", "-") + ("" if v is None else "=" + str(v))
               for k, v in stand_in_mixture(plan, 16 * heads, "megatron-lm").items()])


# The mixture's own shape, which the export leaves to the run as it leaves
# the model's sizes: a stand-in of 2E experts, top-2, for a plan of E > 1,
# without biases (megatron-core takes experts with biases only at expert
# tensor parallelism 1, and the experts split over T, Megatron-LM's default).
# Megatron-LM's flags (megatron-lm) or megatron-core's fields.
def stand_in_mixture(plan, hidden, tool):
    if plan.E == 1:
        return {}
    if tool == "megatron-lm":
        return {"num_experts": 2 * plan.E, "moe_router_topk": 2, "moe_ffn_hidden_size": 4 * hidden,
                "disable_bias_linear": None}
    return {"num_moe_experts": 2 * plan.E, "moe_router_topk": 2, "moe_ffn_hidden_size": 4 * hidden,
            "add_bias_linear": False}


def megatron_lm_validate(root, flags_file, world, environ):
    """In a process of its own, with Megatron-LM's checkout at `root` first on the
    path: its parse_args on the export's flags (plus the stand-in model's) and
    validate_args. Prints what it set, or raises with Megatron-LM's message."""
    sys.path.insert(0, root)
    # megatron/training/__init__.py imports the whole training loop (datasets,
    # tokenizers, checkpoints); the argument parser needs only what its
    # utils module takes from the package.
    training = types.ModuleType("megatron.training")
    training.__path__ = [os.path.join(root, "megatron", "training")]
    for name in ("get_args", "get_timers", "get_adlr_autoresume"):
        setattr(training, name, lambda *a, **k: None)
    sys.modules["megatron.training"] = training
    os.environ.update(WORLD_SIZE=str(world), RANK="0", LOCAL_RANK="0", **environ)
    with open(flags_file) as f:
        words = f.read().split("\0")
    import torch
    from megatron.training import arguments

    # validate_args asks the GPU's architecture; there is none here: the
    # plans are for A100s (compute capability 8.0).
    torch.cuda.get_device_capability = lambda *a, **k: (8, 0)
    arguments.get_device_arch_version = lambda: 8
    sys.argv = ["pretrain_gpt.py"] + words
    with quiet():
        args = arguments.parse_args()
        arguments.validate_args(args, {})
    print(json.dumps({"pp": args.pipeline_model_parallel_size,
                      "vpp": args.virtual_pipeline_model_parallel_size,
                      "tp": args.tensor_model_parallel_size,
                      "dp": args.data_parallel_size,
                      "ep": args.expert_model_parallel_size,
                      "cp": args.context_parallel_size,
                      "overlap_p2p_comm": getattr(args, "overlap_p2p_comm", None),
                      "group": getattr(args, "microbatch_group_size_per_vp_stage", None)}))


def check_megatron_lm(plan, text):
    """The export's flags through Megatron-LM's own parse_args and validate_args
    (its training package, from the MEGATRON_LM checkout), in the environment
    the export asks for."""
    root = os.environ.get("MEGATRON_LM")
    if not root:
        raise Skipped("MEGATRON_LM names no Megatron-LM checkout")
    words = shlex.split(" ".join(ln.rstrip("\\") for ln in text.splitlines()
                                 if not ln.startswith("#")))
    environ = {}
    if "CUDA_DEVICE_MAX_CONNECTIONS=1" in text:
        environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    import subprocess
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".args", delete=False) as f:
        f.write("\0".join(words + megatron_lm_model_flags(plan)))
    try:
        r = subprocess.run([sys.executable, "-W", "ignore", __file__, "--megatron-lm-validate",
                            root, f.name, str(plan.K * plan.D * plan.T * plan.C),
                            json.dumps(environ)],
                           capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    if r.returncode != 0:
        lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
        raise Rejected(one_line(lines[-1] if lines else f"exit status {r.returncode}"))
    got = json.loads(r.stdout.strip().splitlines()[-1])
    if (got["pp"] != plan.K or got["tp"] != plan.T or got["dp"] != plan.D or got["ep"] != plan.E
            or got["cp"] != plan.C):
        raise Rejected(f"validate_args set pp={got['pp']} tp={got['tp']} dp={got['dp']} "
                       f"ep={got['ep']} cp={got['cp']}, the plan K={plan.K} T={plan.T} "
                       f"D={plan.D} E={plan.E} C={plan.C}")
    vpp = got["vpp"] or 1
    if vpp != plan.chunks:
        raise Rejected(f"validate_args set {vpp} virtual stages a rank, the plan {plan.chunks}")
    return ("parse_args and validate_args: " + f"pp={got['pp']} tp={got['tp']} dp={got['dp']}"
            + (f" ep={got['ep']} (with a stand-in mixture of {2 * plan.E} experts)"
               if plan.E > 1 else "")
            + (f" cp={got['cp']}" if plan.C > 1 else "")
            + (f" vpp={vpp} overlap_p2p_comm={got['overlap_p2p_comm']} micro-batch groups of "
               + (f"{got['group']}" if got["group"] else f"{got['pp']} (the default, K)")
               if vpp > 1 else "")
            + (" (CUDA_DEVICE_MAX_CONNECTIONS=1, as the export says)" if environ else ""))


def megatron_counts(config, plan):
    """Transformer layers megatron-core builds on each model stage, in plan order."""
    from megatron.core import parallel_state
    from megatron.core.transformer.enums import LayerType
    from megatron.core.transformer.transformer_block import get_num_layers_to_build

    v = config.virtual_pipeline_model_parallel_size
    layout = config.pipeline_model_parallel_layout
    counts = []
    parallel_state.set_virtual_pipeline_model_parallel_world_size(v)
    try:
        for s in range(plan.K * plan.chunks):
            rank, vp = s % plan.K, (s // plan.K if v else None)
            if layout is not None:
                counts.append(layout.get_num_layers_to_build(LayerType.decoder, vp_stage=vp,
                                                             pp_rank=rank))
            else:
                counts.append(get_num_layers_to_build(config, vp_stage=vp, pp_rank=rank))
    finally:
        parallel_state.set_virtual_pipeline_model_parallel_world_size(None)
    if layout is not None:
        ends = (layout.layout[0][0][0], layout.layout[plan.K - 1][-1][-1])
        if ends != (LayerType.embedding, LayerType.loss):
            raise Rejected(f"the layout puts {ends[0].name} first and {ends[1].name} last")
    return counts


def megatron_micro_batches(args, plan):
    from megatron.core import num_microbatches_calculator as nmc

    nmc.init_num_microbatches_calculator(
        rank=0, rampup_batch_size=None, global_batch_size=args["global_batch_size"],
        micro_batch_size=args["micro_batch_size"], data_parallel_size=plan.D,
        decrease_batch_size_if_needed=False)
    try:
        return nmc.get_num_microbatches()
    finally:
        nmc.destroy_num_microbatches_calculator()


def megatron_rank_order(args, plan):
    """megatron-core's pipeline groups under the order the flags give (Megatron-LM
    sets tp-cp-ep-pp-dp for --use-tp-pp-dp-mapping, else tp-cp-ep-dp-pp) must be
    the plan's placement."""
    from megatron.core.parallel_state import RankGenerator

    order = "tp-pp-dp" if args.get("use_tp_pp_dp_mapping") else "tp-dp-pp"
    if plan.C > 1:
        order = "tp-cp-" + order[3:]
    gen = RankGenerator(tp=plan.T, ep=1, dp=plan.D, pp=plan.K, cp=plan.C, order=order)
    same_pipelines(gen.get_ranks("pp"), plan, f"megatron-core's {order}")
    if plan.C > 1:
        same_context_groups(gen.get_ranks("cp"), plan, f"megatron-core's {order}")
    if plan.E > 1:
        # The experts' ranks as initialize_model_parallel makes them: expert
        # tensor parallelism (T, Megatron-LM's default, or 1 for whole
        # experts), E, their data parallelism (the D x C x T / (E x ETP) that
        # hold the same experts) and the pipeline, in the same order.
        full = "tp-cp-ep-pp-dp" if order.endswith("dp") else "tp-cp-ep-dp-pp"
        expert_dp = plan.D * plan.C * plan.T // (plan.E * plan.etp)
        experts = RankGenerator(tp=plan.etp, ep=plan.E, dp=expert_dp, pp=plan.K, cp=1,
                                order=full)
        # What initialize_model_parallel asserts of the two layouts.
        if experts.get_ranks("pp") != gen.get_ranks("pp") or (
                not order.endswith("pp") and plan.K > 1 and expert_dp != plan.D):
            raise Rejected(f"megatron-core's {full} expert ranks cut across the pipelines "
                           f"{gen.get_ranks('pp')}: initialize_model_parallel refuses them")
        same_expert_groups(experts.get_ranks("ep"), plan, f"megatron-core's {order}")
    return order


def check_megatron(plan, text):
    import torch
    from megatron.core.transformer.transformer_config import TransformerConfig

    args = megatron_flags(text)
    fields = {k: v for k, v in args.items()
              if k not in ("micro_batch_size", "global_batch_size", "use_distributed_optimizer",
                           "use_tp_pp_dp_mapping")}
    if args.get("tensor_model_parallel_size", 1) != plan.T:
        raise Rejected(f"tensor_model_parallel_size {args.get('tensor_model_parallel_size', 1)}, "
                       f"the plan T={plan.T}")
    if args.get("sequence_parallel", False) != plan.sequence_parallel:
        raise Rejected("sequence_parallel is not the plan's")
    if args.get("context_parallel_size", 1) != plan.C:
        raise Rejected(f"context_parallel_size {args.get('context_parallel_size', 1)}, "
                       f"the plan C={plan.C}")
    if plan.C > 1 and args.get("cp_comm_type", "p2p") != plan.cp_comm_type:
        raise Rejected(f"cp_comm_type {args.get('cp_comm_type', 'p2p')}, the plan's "
                       f"{plan.cp_comm_type}")
    # Megatron-LM overlaps the interleaved schedule's exchanges in its steady
    # state unless told not to, and in its warm-up and cool-down too when told
    # so; its non-interleaved schedule cannot (megatron-core raises).
    overlap = args.get("overlap_p2p_comm", True) if plan.chunks > 1 else False
    flush = args.get("overlap_p2p_comm_warmup_flush", False)
    mode = "blocking" if not overlap else "overlapped" if flush else "overlapped-steady"
    # Megatron-LM takes blocking sends with virtual stages only on more than 2
    # stages; on 2 the export leaves them overlapped and says so.
    k2_blocking = (plan.K == 2 and plan.p2p == "blocking" and mode == "overlapped-steady"
                   and "only on\n# more than 2 pipeline stages" in text)
    if plan.K > 1 and plan.chunks > 1 and mode != plan.p2p and not k2_blocking:
        raise Rejected(f"overlap_p2p_comm {overlap}, overlap_p2p_comm_warmup_flush {flush}: "
                       f"sends {mode}, the plan's {plan.p2p}")
    if plan.chunks == 1 and ("overlap_p2p_comm" in args or flush):
        raise Rejected("a p2p overlap flag on a non-interleaved plan")
    if flush:
        # What Megatron-LM's arguments set beside it (batch_p2p_comm is not
        # overlap_p2p_comm), which megatron-core's config checks.
        fields.update(overlap_p2p_comm=True, batch_p2p_comm=False)
    if args.get("expert_model_parallel_size", 1) != plan.E:
        raise Rejected(f"expert_model_parallel_size {args.get('expert_model_parallel_size', 1)}, "
                       f"the plan E={plan.E}")
    if args.get("expert_tensor_parallel_size", plan.T) != plan.etp:
        raise Rejected(f"expert_tensor_parallel_size {args.get('expert_tensor_parallel_size')}, "
                       f"the plan's {plan.etp}")
    deepep = plan.moe_dispatcher == "deepep"
    if plan.E > 1 and (args.get("moe_enable_deepep", False) != deepep or
                       args.get("moe_token_dispatcher_type") != ("flex" if deepep else "alltoall")):
        raise Rejected(f"moe_token_dispatcher_type {args.get('moe_token_dispatcher_type')} "
                       f"(moe_enable_deepep {args.get('moe_enable_deepep', False)}), the plan's "
                       f"{plan.moe_dispatcher}")
    if args.get("use_distributed_optimizer", False) != (plan.zero == 1):
        raise Rejected(f"use_distributed_optimizer is not the plan's (ZeRO stage {plan.zero})")
    heads = 4 * plan.T  # a multiple of T, as megatron-core checks
    try:
        with quiet():
            config = TransformerConfig(hidden_size=16 * heads, num_attention_heads=heads,
                                       pipeline_dtype=torch.bfloat16, **fields,
                                       **stand_in_mixture(plan, 16 * heads, "megatron-core"))
            counts = megatron_counts(config, plan)
            micro = megatron_micro_batches(args, plan)
            order = megatron_rank_order(args, plan)
            if args.get("use_distributed_optimizer"):
                megatron_distributed_optimizer()
    except Rejected:
        raise
    except Exception as e:
        raise Rejected(tool_error(e)) from e
    if counts != plan.transformer_layers():
        raise Rejected(f"megatron-core builds {counts} transformer layers per stage, "
                       f"the plan {plan.transformer_layers()}")
    if micro != plan.M:
        raise Rejected(f"megatron-core counts {micro} micro-batches, the plan M={plan.M}")
    v = config.virtual_pipeline_model_parallel_size
    how = "layout" if config.pipeline_model_parallel_layout is not None else \
        "first/last" if "num_layers_in_first_pipeline_stage" in fields else "even"
    recompute = (f"recompute {config.recompute_granularity}/{config.recompute_method}/"
                 f"{config.recompute_num_layers}" if config.recompute_granularity else
                 "no recompute")
    tp = (f" tp={config.tensor_model_parallel_size}"
          + (" sequence-parallel" if config.sequence_parallel else "")
          if config.tensor_model_parallel_size > 1 else "")
    dist_opt = ("; OptimizerConfig and DistributedDataParallelConfig take "
                "use_distributed_optimizer" if args.get("use_distributed_optimizer") else "")
    sends = (f"; sends {mode}" + (" (the plan's blocking, which Megatron-LM refuses on 2 "
                                  "stages, as the export says)" if k2_blocking else "")
             if plan.K > 1 and plan.chunks > 1 else "")
    return (f"TransformerConfig{tp} pp={config.pipeline_model_parallel_size}"
            + (f" vpp={v}" if v else "") + f" ({how}), {recompute}; layers per stage "
            f"{counts}; {micro} micro-batches; ranks {order}"
            + (f", experts over E={plan.E} replicas ({config.moe_token_dispatcher_type} "
               f"dispatch; expert groups as the plan's)" if plan.E > 1 else "")
            + sends + dist_opt)


# ---------------------------------------------------------------- torch.distributed.pipelining


class StandInStage:
    """What a schedule's constructor and _load_csv read from a pipeline stage."""

    def __init__(self, index, stages, ranks, rank):
        import torch.nn as nn

        self.stage_index, self.num_stages = index, stages
        self.group_size, self.group_rank = ranks, rank
        self.is_first, self.is_last = index == 0, index == stages - 1
        self.stage_index_to_group_rank = {}
        self.submod = nn.Identity()


def read_csv(path):
    import csv

    with open(path, newline="") as f:
        return [row for row in csv.reader(f)]


# PyTorch's class for each PipeScope schedule with several stages a rank.
PYTORCH_CLASSES = {
    "interleaved-1f1b": "ScheduleInterleaved1F1B",
    "looped-bfs": "ScheduleLoopedBFS",
    "zb-v": "ScheduleZBVZeroBubble",
    "interleaved-zb": "ScheduleInterleavedZeroBubble",
    "dualpipe-v": "ScheduleDualPipeV",
}


def check_torch_pipelining(plan, path):
    from torch.distributed.pipelining import schedules

    rows = read_csv(path)
    stages = plan.K * plan.chunks
    same_as_class = None
    name = PYTORCH_CLASSES.get(plan.schedule, "ScheduleInterleaved1F1B")
    for rank in range(plan.K):
        # Each rank's stages where the plan places them (a loop or a V).
        mine = [StandInStage(s, stages, plan.K, rank) for s in range(stages)
                if plan.devices[s] == rank]
        try:
            with quiet():
                sched = schedules._PipelineScheduleRuntime(mine, n_microbatches=plan.M,
                                                           loss_fn=loss_of(plan))
                sched._load_csv(path)
        except Exception as e:
            raise Rejected(tool_error(e)) from e
        got = [[str(a) if a is not None else "" for a in sched.pipeline_order[r]]
               for r in sorted(sched.pipeline_order)]
        if got != rows:
            raise Rejected(f"rank {rank}: _load_csv read another schedule than the file holds")
        if plan.chunks > 1:
            with quiet():
                ref = getattr(schedules, name)(mine, n_microbatches=plan.M,
                                               loss_fn=loss_of(plan))
            ours = [str(a) for a in sched.pipeline_order[rank] if a is not None]
            theirs = [str(a) for a in ref.pipeline_order[rank] if a is not None]
            same_as_class = (same_as_class is not False) and ours == theirs
    comms = sum(len(v) for v in sched.pipeline_order_with_comms.values())
    note = ""
    if same_as_class is not None:
        note = (f"; each rank's order is {name}'s" if same_as_class else
                f"; the order differs from {name}'s own (a valid schedule all the same)")
    return (f"_PipelineScheduleRuntime._load_csv: {plural(plan.K, 'rank')}, "
            f"{plural(stages, 'stage')}, {plural(plan.M, 'micro-batch')}, {comms} actions with "
            f"sends and receives{note}")


# ---------------------------------------------------------------- torch.distributed.device_mesh

MESH_TIMEOUT_S = 300


def same_pipelines(groups, plan, tool):
    """Each of a tool's pipeline groups must be the ranks the plan puts a
    pipeline on, stage by stage."""
    for group in groups:
        r, _, t = mesh_coordinates(plan, group[0])
        want = [plan_rank(plan, r, d, t) for d in range(plan.K)]
        if list(group) != want:
            raise Rejected(f"{tool} puts a pipeline on ranks {list(group)}, the plan "
                           f"({plan.rank_order}) on {want}")


def same_expert_groups(groups, plan, tool):
    """Each of a tool's expert-parallel groups must be the E replicas the plan
    spreads the experts over (replicas E k to E k + E - 1, docs/models.md), or
    under context parallelism the E slots of the D x C (slot j share j % C of
    replica j / C), at one pipeline rank and tensor-parallel rank."""
    for group in groups:
        r, d, local = mesh_coordinates(plan, group[0])
        c, t = divmod(local, plan.T)
        slot = r * plan.C + c
        first = slot - slot % plan.E
        want = [plan_rank(plan, (first + i) // plan.C, d, (first + i) % plan.C * plan.T + t)
                for i in range(plan.E)]
        if sorted(group) != sorted(want):
            raise Rejected(f"{tool} groups the experts on ranks {list(group)}, the plan "
                           f"({plan.rank_order}) on {want}")


def same_context_groups(groups, plan, tool):
    """Each of a tool's context-parallel groups must be the C ranks of one group
    of T x C that share a tensor-parallel rank t: c T + t for c < C."""
    for group in groups:
        r, d, local = mesh_coordinates(plan, group[0])
        want = [plan_rank(plan, r, d, c * plan.T + local % plan.T) for c in range(plan.C)]
        if list(group) != want:
            raise Rejected(f"{tool} splits a sequence over ranks {list(group)}, the plan "
                           f"({plan.rank_order}) over {want}")


def plan_rank(plan, r, d, t):
    """The rank PipeScope places replica r's pipeline rank d, rank t of its group
    of T x C on (costmodels/cluster.h, RankOrder): (r K + d) T C + t under
    tp-pp-dp, (d D + r) T C + t under tp-dp-pp; t = c T + (tensor-parallel rank)
    under context parallelism."""
    group = d * plan.D + r if plan.rank_order == "tp-dp-pp" else r * plan.K + d
    return group * plan.T * plan.C + t


def mesh_coordinates(plan, rank):
    """Replica r, pipeline rank d and rank t within the group of T x C of `rank`."""
    group, t = divmod(rank, plan.T * plan.C)
    if plan.rank_order == "tp-dp-pp":
        return group % plan.D, group // plan.D, t
    return group // plan.K, group % plan.K, t


class TPStandIn:
    """A stand-in GPT with Megatron-LM's pieces: embedding, a block (layer norm,
    column-split up projection, row-split down projection, residual), a final
    layer norm and the output layer."""

    @staticmethod
    def build():
        import torch.nn as nn
        import torch.nn.functional as F

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.embed = nn.Embedding(VOCAB, WIDTH)
                self.norm = nn.LayerNorm(WIDTH)
                self.up = nn.Linear(WIDTH, 2 * WIDTH)
                self.down = nn.Linear(2 * WIDTH, WIDTH)
                self.final_norm = nn.LayerNorm(WIDTH)
                self.head = nn.Linear(WIDTH, VOCAB)

            def forward(self, x):
                h = self.embed(x)
                h = h + self.down(F.gelu(self.up(self.norm(h))))
                return self.head(self.final_norm(h))

        return Model()


def tp_loss(model, x, y, parallel):
    import torch.nn.functional as F
    from torch.distributed.tensor.parallel import loss_parallel

    out = model(x)
    if not parallel:
        loss = F.cross_entropy(out.flatten(0, 1), y.flatten())
        loss.backward()
        return float(loss)
    with loss_parallel():
        loss = F.cross_entropy(out.flatten(0, 1), y.flatten())
        loss.backward()
    return float(loss.full_tensor() if hasattr(loss, "full_tensor") else loss)


def full(t):
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def mesh_tensor_parallel(ns, mesh, plan):
    """The export's styles on a stand-in GPT over mesh["tp"]: the loss and every
    gradient must be the unsplit model's; then its data-parallel wrapper over
    mesh["dp"] and an optimizer step on the split model."""
    import torch
    from torch.distributed.tensor.parallel import parallelize_module

    torch.manual_seed(0)
    ref = TPStandIn.build()
    model = TPStandIn.build()
    model.load_state_dict(ref.state_dict())
    gen = torch.Generator().manual_seed(7)
    x = torch.randint(0, VOCAB, (2, SEQ), generator=gen)
    y = torch.randint(0, VOCAB, (2, SEQ), generator=gen)
    styles = {"embed": ns["TP_EMBEDDING"], "up": ns["TP_COLUMN"], "down": ns["TP_ROW"],
              "head": ns["TP_HEAD"]}
    if "TP_NORM" in ns:
        styles.update(norm=ns["TP_NORM"], final_norm=ns["TP_NORM"])
    parallelize_module(model, mesh["tp"], styles)
    want = tp_loss(ref, x, y, False)
    got = tp_loss(model, x, y, True)
    if abs(got - want) > 1e-5:
        raise Rejected(f"the split model's loss {got:.6f}, the unsplit one's {want:.6f}")
    grads = dict(ref.named_parameters())
    for name, p in model.named_parameters():
        if not torch.allclose(full(p.grad), grads[name].grad, atol=1e-5):
            raise Rejected(f"the split model's gradient of {name} is not the unsplit one's")
    model.zero_grad()
    if "pipescope_data_parallel" in ns:
        model = ns["pipescope_data_parallel"](model, mesh)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    tp_loss(model, x, y, True)
    opt.step()
    return (f"{len(styles)} modules split over mesh['tp'], loss and gradients the unsplit "
            f"model's ({want:.4f})")


def stage_module(plan, layers, s):
    import torch.nn as nn

    return nn.Sequential(*layers[plan.parts[s]:plan.parts[s + 1]])


def mesh_pipeline(ns, mesh, plan, csv_path):
    """Each stage of this pipeline rank as a PipelineStage on mesh["pp"], wrapped by
    the export's data-parallel wrapper; the CSV loaded; one step on a batch of this
    replica's own; one optimizer step. Returns the loss (last stages) and the
    optimizer state's share of the parameters this rank holds."""
    import torch
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

    dp, pp = mesh["dp"].get_local_rank(), mesh["pp"].get_local_rank()
    torch.manual_seed(0)  # every replica starts from the same weights
    layers = stand_in_layers(plan)
    mbs, n = plan.micro_batch_size, ns["NUM_STAGES"]
    stages, params, whole = [], [], 0
    for s in ns["STAGE_INDICES"][pp]:
        module = stage_module(plan, layers, s)
        whole += sum(p.numel() for p in module.parameters())
        if "pipescope_data_parallel" in ns:
            module = ns["pipescope_data_parallel"](module, mesh)
        params += list(module.parameters())
        first, last = s == 0, s == n - 1
        x = (torch.zeros(mbs, SEQ, dtype=torch.long) if first and plan.embed_first
             else torch.zeros(mbs, SEQ, WIDTH, requires_grad=not first))
        y = (torch.zeros(mbs * SEQ, VOCAB, requires_grad=True) if last and plan.head_last
             else torch.zeros(mbs, SEQ, WIDTH, requires_grad=True))
        stages.append(PipelineStage(
            module, s, n, torch.device("cpu"), group=mesh["pp"].get_group(),
            input_args=(x,), output_args=(y,),
            input_grads=(None,) if first else (torch.zeros(mbs, SEQ, WIDTH),),
            output_grads=None if last else (torch.zeros(mbs, SEQ, WIDTH),)))
    sched = _PipelineScheduleRuntime(stages, ns["N_MICROBATCHES"], loss_fn=loss_of(plan),
                                     scale_grads=True)
    sched._load_csv(csv_path)
    opt = torch.optim.Adam(params, lr=0.01)
    x, y = batch(plan, mbs * ns["N_MICROBATCHES"] + dp)  # each replica its own data
    x, y = x[:mbs * ns["N_MICROBATCHES"]], y[:mbs * ns["N_MICROBATCHES"]]
    is_first = any(st.is_first for st in stages)
    is_last = any(st.is_last for st in stages)
    losses = []
    sched.step(*((x,) if is_first else ()),
               **({"target": y, "losses": losses} if is_last else {}))
    opt.step()
    held = sum(full_local(opt.state[p]["exp_avg"]).numel() for p in params if p in opt.state)
    checksum = float(sum(full(p.detach()).double().sum() for p in params))
    loss = sum(float(v) for v in losses) / len(losses) if losses else None
    return loss, held, whole, checksum


def full_local(t):
    return t.to_local() if hasattr(t, "to_local") else t


def mesh_names(plan):
    """The mesh's dimensions, row-major, the outermost first; "cp" under context
    parallelism; the replicas' "dp" as "edp" and "ep" under expert parallelism
    (replica r = g E + e)."""
    dp = ("edp", "ep") if plan.E > 1 else ("dp",)
    outer = ("pp",) + dp if plan.rank_order == "tp-dp-pp" else dp + ("pp",)
    return outer + (("cp",) if plan.C > 1 else ()) + ("tp",)


def mesh_sizes(plan):
    return {"dp": plan.D, "edp": plan.D // plan.E, "ep": plan.E, "pp": plan.K, "cp": plan.C,
            "tp": plan.T}


def mesh_experts(ns, mesh, plan, r):
    """Under expert parallelism: an all-to-all over mesh["ep"] reaches the E
    replicas of r's group, and the export's wrapper given an expert module
    reduces its gradients over mesh["edp"] alone and the rest over all D: after
    a step on inputs of each replica's own the dense weights are equal on every
    replica, the expert's on the replicas of mesh["edp"] and not across
    mesh["ep"]."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    ep = mesh["ep"]
    send = torch.full((plan.E,), float(dist.get_rank()))
    got = torch.empty(plan.E)
    dist.all_to_all_single(got, send, group=ep.get_group())
    if got.tolist() != [float(x) for x in ep.mesh.tolist()]:
        raise Rejected(f"an all-to-all over mesh['ep'] brought {got.tolist()}, the plan's "
                       f"expert group is {ep.mesh.tolist()}")

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.dense = nn.Linear(4, 4)
            self.expert = nn.Linear(4, 4)

        def forward(self, x):
            return self.expert(self.dense(x))

    torch.manual_seed(0)
    block = Block()
    model = ns["pipescope_data_parallel"](block, mesh, experts=[block.expert])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.full((2, 4), float(r + 1))).square().sum().backward()
    opt.step()
    sums = {name: float(full(p).detach().sum()) for name, p in model.named_parameters()}
    dense = sum(v for k, v in sums.items() if "expert" not in k)
    expert = sum(v for k, v in sums.items() if "expert" in k)

    def gathered(value, group, size):
        out = [None] * size
        dist.all_gather_object(out, value, group=group.get_group())
        return out

    def equal(values):
        return max(values) - min(values) <= 1e-6 * max(1.0, abs(max(values)))

    dp = mesh["edp", "ep"]._flatten("dp")
    if not equal(gathered(dense, dp, plan.D)):
        raise Rejected("the dense weights differ over the replicas after the step")
    if not equal(gathered(expert, mesh["edp"], plan.D // plan.E)):
        raise Rejected("the expert's weights differ over mesh['edp'] after the step")
    if equal(gathered(expert, ep, plan.E)):
        raise Rejected("the expert's weights are equal over mesh['ep'] after a step on each "
                       "replica's own inputs: its gradients were reduced over all D")
    return (f"an all-to-all over mesh['ep'] reaches the {plan.E} replicas of the group; an "
            f"expert wrapped over mesh['edp'] reduces over its {plan.D // plan.E}, the rest over "
            f"all {plan.D}")


def mesh_context_parallel(ns, mesh, plan, c):
    """The export's pipescope_context_parallel on a whole sequence: inside it,
    this rank's share must be chunks c and 2C - 1 - c of 2C (the causal load
    balance the plan's model assumes). PyTorch's ring attention itself runs on
    CUDA's attention kernels only, not on the CPU."""
    import torch

    seq = 4 * plan.C
    tokens = torch.arange(2 * seq).reshape(2, seq)
    labels = tokens + 1000
    chunk = seq // (2 * plan.C)
    want = torch.cat([tokens[:, c * chunk:(c + 1) * chunk],
                      tokens[:, (2 * plan.C - 1 - c) * chunk:(2 * plan.C - c) * chunk]], dim=1)
    with ns["pipescope_context_parallel"](mesh, [tokens, labels], [1, 1]):
        got = tokens.clone()
        got_labels = labels.clone()
    if not torch.equal(got, want) or not torch.equal(got_labels, want + 1000):
        raise Rejected(f"context-parallel rank {c} holds tokens {got[0].tolist()} of "
                       f"{list(range(seq))}, the plan's share {want[0].tolist()}")
    return f"each rank's share chunks c and 2C-1-c of 2C ({want[0].tolist()} on cp rank {c})"


def mesh_worker(rank, job):
    import datetime

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    plan = Plan(job["plan"])
    result = {"rank": rank}
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{job['port']}", rank=rank,
                            world_size=job["world"],
                            timeout=datetime.timedelta(seconds=MESH_TIMEOUT_S))
    try:
        with quiet():
            ns = {}
            with open(job["mesh"]) as f:
                exec(compile(f.read(), "torch-mesh-export", "exec"), ns)
            mesh = ns["pipescope_device_mesh"]("cpu")
            coord = tuple(mesh.get_coordinate())
            names = mesh_names(plan)
            sizes = mesh_sizes(plan)
            if (tuple(mesh.mesh.shape) != tuple(sizes[n] for n in names)
                    or tuple(mesh.mesh_dim_names) != names):
                raise Rejected(f"the mesh is {tuple(mesh.mesh.shape)} named "
                               f"{mesh.mesh_dim_names}, the plan ({plan.rank_order}) "
                               f"{names} = {tuple(sizes[n] for n in names)}")
            r, d, local = mesh_coordinates(plan, rank)
            c, t = divmod(local, plan.T)
            at = {"dp": r, "edp": r // plan.E, "ep": r % plan.E, "pp": d, "cp": c, "tp": t}
            want = tuple(at[n] for n in names)
            if coord != want:
                raise Rejected(f"rank {rank} is at {names} = {coord} in the mesh; "
                               f"PipeScope places it at {want}")
            groups = {"tp": [plan_rank(plan, r, d, c * plan.T + i) for i in range(plan.T)],
                      "pp": [plan_rank(plan, r, i, local) for i in range(plan.K)]}
            if plan.E > 1:
                first = r - r % plan.E
                groups["ep"] = [plan_rank(plan, first + i, d, local) for i in range(plan.E)]
                groups["edp"] = [plan_rank(plan, r % plan.E + i * plan.E, d, local)
                                 for i in range(plan.D // plan.E)]
            else:
                groups["dp"] = [plan_rank(plan, i, d, local) for i in range(plan.D)]
            if plan.C > 1:
                groups["cp"] = [plan_rank(plan, r, d, i * plan.T + t) for i in range(plan.C)]
            for name, ranks in groups.items():
                if mesh[name].mesh.tolist() != ranks:
                    raise Rejected(f"mesh['{name}'] holds ranks "
                                   f"{mesh[name].mesh.tolist()}, PipeScope's {name} group {ranks}")
            if plan.C > 1:
                result["cp"] = mesh_context_parallel(ns, mesh, plan, c)
            if plan.E > 1:
                same_expert_groups([mesh["ep"].mesh.tolist()], plan, "mesh['ep']")
                result["ep"] = mesh_experts(ns, mesh, plan, r)
            loss, held, whole, checksum = mesh_pipeline(ns, mesh, plan, job["csv"])
            result.update(loss=loss, held=held, whole=whole)
            # The weights after the step: equal on every rank that holds them
            # (the replicas, and under context parallelism their C ranks) where
            # the gradients were reduced over them.
            same = (mesh["dp", "cp"]._flatten("dp_cp") if plan.C > 1 else
                    mesh["edp", "ep"]._flatten("dp") if plan.E > 1 else mesh["dp"])
            sums = [None] * (plan.D * plan.C)
            dist.all_gather_object(sums, checksum, group=same.get_group())
            if len(sums) > 1 and max(sums) - min(sums) > 1e-6 * max(1.0, abs(max(sums))):
                raise Rejected(f"the weights differ after the step over {same.mesh.tolist()} "
                               f"({sums}): the gradients were not reduced over them")
            if plan.T > 1:
                result["tp"] = mesh_tensor_parallel(ns, mesh, plan)
        result["ok"] = True
    except Rejected as e:
        result.update(ok=False, error=str(e))
    except Exception as e:  # the tool's refusal, in its words
        result.update(ok=False, error=tool_error(e))
    finally:
        with open(os.path.join(job["out"], f"rank{rank}.json"), "w") as f:
            json.dump(result, f)
        dist.destroy_process_group()


def check_torch_mesh(plan, folder):
    """The device mesh export on D x K x T x C processes; see the module's docstring."""
    import tempfile

    import torch.multiprocessing as mp

    world = plan.D * plan.K * plan.T * plan.C
    out = tempfile.mkdtemp()
    job = {"plan": os.path.join(folder, "plan.json"), "mesh": os.path.join(folder, FILES["torch-mesh"]),
           "csv": os.path.join(folder, FILES["torch-pipelining"]), "world": world,
           "port": free_port(), "out": out}
    # Forked, so that the processes need not import torch again; before any
    # other check has started threads or a process group here.
    mp.start_processes(mesh_worker, args=(job,), nprocs=world, join=True, start_method="fork")
    results = []
    for rank in range(world):
        with open(os.path.join(out, f"rank{rank}.json")) as f:
            results.append(json.load(f))
    failed = [r for r in results if not r["ok"]]
    if failed:
        raise Rejected(f"rank {failed[0]['rank']}: {failed[0]['error']}")
    loss = next(r["loss"] for r in results if r["loss"] is not None)
    share = max(r["held"] / r["whole"] for r in results if r["whole"])
    holders = plan.D * plan.C  # the ranks that hold the same weights
    if plan.zero == 1 and holders > 1 and share > 1.0 / holders + 0.05:
        raise Rejected(f"a rank holds {share:.2f} of its optimizer state under ZeRO stage 1 "
                       f"over D x C={holders}")
    if plan.zero == 0 and share != 1.0:
        raise Rejected(f"a rank holds {share:.2f} of its optimizer state without ZeRO")
    over = ("mesh['dp', 'cp'] flattened" if plan.C > 1 else
            "mesh['edp', 'ep'] flattened" if plan.E > 1 else "mesh['dp']")
    wrapper = ("no data-parallel wrapper" if holders == 1 else
               f"fully_shard over {over}" if plan.zero == 1 else
               f"replicate over {over}" if plan.T > 1 or plan.E > 1 else
               f"DistributedDataParallel over {over}")
    tp = next((r["tp"] for r in results if "tp" in r), None)
    cp = next((r["cp"] for r in results if "cp" in r), None)
    ep = next((r["ep"] for r in results if "ep" in r), None)
    names = mesh_names(plan)
    sizes = mesh_sizes(plan)
    return (f"init_device_mesh('cpu', {tuple(sizes[n] for n in names)}, {names}) on "
            f"{world} gloo process{'es' if world != 1 else ''}: every rank where PipeScope places it; "
            f"PipelineStages on mesh['pp'] with {wrapper}, the CSV loaded and run one step "
            f"(loss {loss:.3f}), Adam state {share:.2f} of each rank's weights"
            + (", equal on the ranks that hold them after the step" if holders > 1 else "")
            + (f"; TP styles: {tp}" if tp else "")
            + (f"; context_parallel: {cp}" if cp else "")
            + (f"; experts: {ep}" if ep else ""))


# ---------------------------------------------------------------- main

CHECKS = {
    "torchgpipe": check_torchgpipe,
    "deepspeed": check_deepspeed,
    "megatron": check_megatron,
    "megatron-lm": check_megatron_lm,
    "torch-pipelining": None,
    "torch-mesh": None,
}


def run_check(tool, plan, folder):
    # The mesh goes beside the CSV: refused with it.
    refused = os.path.join(folder, FILES["torch-pipelining" if tool == "torch-mesh" else tool]
                           + ".refused")
    if os.path.exists(refused):
        with open(refused) as f:
            return "not exported", one_line(f.read())
    path = os.path.join(folder, FILES[tool])
    try:
        if tool == "torch-pipelining":
            return "accepted", check_torch_pipelining(plan, path)
        if tool == "torch-mesh":
            return "accepted", check_torch_mesh(plan, folder)
        with open(path) as f:
            return "accepted", CHECKS[tool](plan, f.read())
    except Rejected as e:
        return "rejected", str(e)
    except Skipped as e:
        return "not checked", str(e)
    except Exception as e:  # a failure of this check, not of the tool
        traceback.print_exc(file=sys.stderr)
        return "error", tool_error(e)


def versions():
    out = [f"python {platform.python_version()}"]
    for name in PACKAGES:
        try:
            out.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            out.append(f"{name} (not installed)")
    return ", ".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", action="append", default=[], metavar="NAME=FOLDER",
                    help="a plan folder: plan.json and its exports (repeatable)")
    ap.add_argument("--recut", nargs=3, metavar=("PLAN", "OUT", "SIZES"),
                    help="write PLAN with its stages cut to SIZES (comma-separated) to OUT")
    ap.add_argument("--megatron-lm-validate", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.megatron_lm_validate:
        root, flags, world, environ = args.megatron_lm_validate
        megatron_lm_validate(root, flags, int(world), json.loads(environ))
        return 0
    if args.recut:
        recut(*args.recut)
        return 0
    print(f"Versions: {versions()}")
    with quiet():
        import megatron.core  # noqa: F401  (its import warns about optional packages)
    note = megatron_training_note()
    if note:
        print(f"Note: {note}")
    cases = [case.split("=", 1) for case in args.case]
    # The device meshes first: their processes are forked from this one, which
    # must not hold threads or a process group yet.
    meshes = {name: run_check("torch-mesh", Plan(os.path.join(folder, "plan.json")), folder)
              for name, folder in cases}
    init_deepspeed()
    counts = {}
    width = max([len(name) for name, _ in cases] + [4])
    for name, folder in cases:
        plan = Plan(os.path.join(folder, "plan.json"))
        for tool in FORMATS:
            status, message = (meshes[name] if tool == "torch-mesh" else
                               run_check(tool, plan, folder))
            counts[status] = counts.get(status, 0) + 1
            print(f"{name:<{width}}  {tool:<16}  {status}: {message}", flush=True)
    summary = ", ".join(f"{counts.get(s, 0)} {s}" for s in
                        ("accepted", "rejected", "not exported", "not checked", "error"))
    print(f"{summary}")
    return 1 if counts.get("rejected") or counts.get("error") else 0


if __name__ == "__main__":
    sys.exit(main())
