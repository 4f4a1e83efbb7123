"""PipeScope's CPU executor against PyTorch's torch.distributed.pipelining.

Trains the model of a PipeScope plan in PyTorch, cut where the plan cuts it,
with the plan's schedule and micro-batches, one process per pipeline stage
with one thread each, and runs `pipescope run` on the same plan; prints the
throughput of both and their loss curves. scripts/compare-pytorch.sh sets up
PyTorch and the plans and calls this; see docs/pytorch-comparison.md.

The PyTorch model is the executor's transformer family (exec/layers.h) layer
for layer. Its initial weights and its data are PipeScope's own: the
generators below reproduce libstdc++'s std::mt19937_64,
std::uniform_int_distribution and std::normal_distribution as the executor
draws them (exec/models.cpp, exec/layers.cpp, exec/data.cpp), so both sides
start from the same weights and see the same batches.
"""

import argparse
import datetime
import json
import math
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

# One thread per process, as a PipeScope stage has; set before torch loads.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
# The schedules PyTorch has a class for; the others run from the CSV that
# `pipescope export --to torch-pipelining` writes.
SCHEDULE_CLASSES = ("gpipe", "1f1b")
WARMUP_STEPS = 1  # `pipescope run` takes the median of steps 2..N
# How far the losses of steps 1 and 2 may differ between the two.
LOSS_TOLERANCE = 1e-4


class Failure(Exception):
    """An error to report in one line, without a traceback."""


# ---------------------------------------------------------------- libstdc++'s generators


class MT19937_64:
    """std::mt19937_64."""

    N, M = 312, 156
    UPPER, LOWER = 0xFFFFFFFF80000000, 0x7FFFFFFF
    MATRIX_A = 0xB5026F5AA96619E9

    def __init__(self, seed):
        mt = [seed & MASK64]
        for i in range(1, self.N):
            prev = mt[-1]
            mt.append((6364136223846793005 * (prev ^ (prev >> 62)) + i) & MASK64)
        self.mt = mt
        self.index = self.N

    def _twist(self):
        mt, n, m = self.mt, self.N, self.M
        upper, lower, a = self.UPPER, self.LOWER, self.MATRIX_A
        for i in range(n):
            y = (mt[i] & upper) | (mt[(i + 1) % n] & lower)
            mt[i] = mt[(i + m) % n] ^ (y >> 1) ^ (a if y & 1 else 0)
        self.index = 0

    def __call__(self):
        if self.index >= self.N:
            self._twist()
        y = self.mt[self.index]
        self.index += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        y ^= y >> 43
        return y


def uniform_int(rng, lo, hi):
    """std::uniform_int_distribution<int>(lo, hi)(rng): Lemire's method."""
    span = hi - lo + 1
    product = rng() * span
    low = product & MASK64
    if low < span:
        threshold = ((1 << 64) - span) % span
        while low < threshold:
            product = rng() * span
            low = product & MASK64
    return lo + (product >> 64)


def canonical(rng):
    """std::generate_canonical<double, 53>(rng)."""
    value = float(rng()) / 18446744073709551616.0
    return value if value < 1.0 else math.nextafter(1.0, 0.0)


class Normal:
    """std::normal_distribution<double>: Marsaglia's polar method, a pair at a time."""

    def __init__(self, mean, stddev):
        self.mean, self.stddev = mean, stddev
        self.saved = None

    def __call__(self, rng):
        if self.saved is not None:
            value, self.saved = self.saved, None
        else:
            while True:
                x = 2.0 * canonical(rng) - 1.0
                y = 2.0 * canonical(rng) - 1.0
                r2 = x * x + y * y
                if r2 <= 1.0 and r2 != 0.0:
                    break
            mult = math.sqrt(-2 * math.log(r2) / r2)
            self.saved = x * mult
            value = y * mult
        return value * self.stddev + self.mean


def layer_rng(seed, index):
    """The generator of layer `index` (exec/models.cpp): splitmix64 of the pair."""
    z = (seed + GOLDEN * (index + 1)) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return MT19937_64(z ^ (z >> 31))


def check_generators():
    """The C++ standard's check of mt19937_64: the 10000th value from seed 5489."""
    rng = MT19937_64(5489)
    for _ in range(9999):
        rng()
    if rng() != 9981545732273789042:
        raise Failure("the mt19937_64 reimplementation is wrong")


# ---------------------------------------------------------------- the model


def model_shape(spec):
    """The transformer's sizes from a plan's model spec."""
    if spec.get("family") != "transformer":
        raise Failure("the plan's model is of family '%s'; this comparison runs the "
                      "transformer family" % spec.get("family"))
    if spec.get("tied_embeddings"):
        raise Failure("tied embeddings: the executor does not run them")
    if spec.get("dtype", "fp32") != "fp32":
        raise Failure("the executor trains in fp32, the plan says %s" % spec["dtype"])
    d = int(spec["d_model"])
    heads = int(spec["heads"])
    if spec.get("experts"):
        raise Failure("a mixture of experts: the executor does not run one")
    if spec.get("head_dim") and int(spec["head_dim"]) * heads != d:
        raise Failure("heads %s wide, not d_model / heads: the executor does not run them"
                      % spec["head_dim"])
    if spec.get("sliding_window") and int(spec["sliding_window"]) < int(spec["seq_len"]):
        raise Failure("a sliding window: the executor attends over the whole sequence")
    kv_heads = int(spec.get("kv_heads") or heads)
    return {
        "layers": int(spec["layers"]),
        "d_model": d,
        "heads": heads,
        "kv_heads": kv_heads,
        "d_ff": int(spec.get("d_ff") or 4 * d),
        "seq_len": int(spec["seq_len"]),
        "vocab": int(spec["vocab"]),
        "learned_positions": spec.get("positions", "sinusoidal") == "learned",
    }


def expected_params(m):
    """The parameter count exec/layers.h states for each layer, summed."""
    h, f, v, s = m["d_model"], m["d_ff"], m["vocab"], m["seq_len"]
    dkv = h // m["heads"] * m["kv_heads"]
    embed = v * h + (s * h if m["learned_positions"] else 0)
    block = 2 * h * h + 2 * h * dkv + 2 * dkv + 2 * h * f + f + 7 * h
    head = v * h + 2 * h
    return embed + m["layers"] * block + head


def sinusoid(seq_len, d):
    """The fixed position table of EmbeddingMath, computed in double as there."""
    rows = []
    for t in range(seq_len):
        row = []
        for i in range(d):
            angle = t * math.pow(10000.0, -float(i - i % 2) / float(d))
            row.append(math.sin(angle) if i % 2 == 0 else math.cos(angle))
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float64).to(torch.float32)


class Embedding(nn.Module):
    """Token table plus positions (sinusoidal, or a learned table)."""

    def __init__(self, m):
        super().__init__()
        self.token = nn.Embedding(m["vocab"], m["d_model"])
        if m["learned_positions"]:
            self.position = nn.Parameter(torch.zeros(m["seq_len"], m["d_model"]))
        else:
            self.position = None
            self.register_buffer("sinusoid", sinusoid(m["seq_len"], m["d_model"]))

    def forward(self, ids):
        table = self.position if self.position is not None else self.sinusoid
        return self.token(ids) + table[: ids.shape[1]]


class Block(nn.Module):
    """Pre-LayerNorm decoder block: causal attention on a fused QKV with bias,
    then an MLP with tanh-GeLU; no dropout."""

    def __init__(self, m):
        super().__init__()
        h = m["d_model"]
        self.heads, self.kv_heads = m["heads"], m["kv_heads"]
        self.head_dim = h // self.heads
        self.kv_width = self.head_dim * self.kv_heads
        self.ln1 = nn.LayerNorm(h, eps=1e-5)
        self.qkv = nn.Linear(h, h + 2 * self.kv_width)
        self.proj = nn.Linear(h, h)
        self.ln2 = nn.LayerNorm(h, eps=1e-5)
        self.fc1 = nn.Linear(h, m["d_ff"])
        self.fc2 = nn.Linear(m["d_ff"], h)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split([h, self.kv_width, self.kv_width], dim=-1)
        q = q.view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = k.view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        if self.kv_heads != self.heads:
            group = self.heads // self.kv_heads
            k = k.repeat_interleave(group, dim=1)
            v = v.repeat_interleave(group, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, h))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class Head(nn.Module):
    """Final LayerNorm and the LM projection without bias; returns the logits
    (the loss function takes the cross-entropy)."""

    def __init__(self, m):
        super().__init__()
        self.ln = nn.LayerNorm(m["d_model"], eps=1e-5)
        self.proj = nn.Linear(m["d_model"], m["vocab"], bias=False)

    def forward(self, x):
        return self.proj(self.ln(x))


def build_layer(m, index):
    """Layer `index` of the executor's list: embed, block0.., head."""
    if index == 0:
        return Embedding(m)
    if index <= m["layers"]:
        return Block(m)
    return Head(m)


def normal_values(rng, normal, rows, cols):
    """rows x cols values drawn row by row, as MathLayer draws them, in fp32."""
    values = [normal(rng) for _ in range(rows * cols)]
    return torch.tensor(values, dtype=torch.float64).to(torch.float32).view(rows, cols)


def pipescope_init(layer, m, index, seed):
    """Sets `layer` to the executor's initial values of layer `index`: weights
    N(0, 0.02) from the layer's own generator in the order of its
    param_shapes(), biases 0, LayerNorm gains 1. The executor's weights are
    (in, out), nn.Linear's (out, in)."""
    rng = layer_rng(seed, index)
    normal = Normal(0.0, 0.02)
    h = m["d_model"]
    with torch.no_grad():
        if isinstance(layer, Embedding):
            layer.token.weight.copy_(normal_values(rng, normal, m["vocab"], h))
            if layer.position is not None:
                layer.position.copy_(normal_values(rng, normal, m["seq_len"], h))
            return
        if isinstance(layer, Block):
            linears = (layer.qkv, layer.proj, layer.fc1, layer.fc2)
            norms = (layer.ln1, layer.ln2)
        else:
            linears = (layer.proj,)
            norms = (layer.ln,)
        for linear in linears:
            out_features, in_features = linear.weight.shape
            linear.weight.copy_(normal_values(rng, normal, in_features, out_features).t())
            if linear.bias is not None:
                linear.bias.zero_()
        for norm in norms:
            norm.weight.fill_(1.0)
            norm.bias.zero_()


def initial_state(m, seed):
    """Every layer's initial parameters (a state dict per layer)."""
    states = []
    for index in range(m["layers"] + 2):
        layer = build_layer(m, index)
        pipescope_init(layer, m, index, seed)
        states.append(layer.state_dict())
    return states


def synthetic_batches(m, global_batch, steps, seed):
    """The executor's language-model data (exec/data.cpp): per step and sample
    a random first token, then x[t] = (3 x[t-1] + 1) mod V. Returns
    (steps, batch, seq_len + 1) token ids; inputs are [..., :-1], targets
    [..., 1:]."""
    v, s = m["vocab"], m["seq_len"]
    out = []
    for step in range(steps):
        batch = []
        for sample in range(global_batch):
            rng = MT19937_64((seed * GOLDEN + step * 1000003 + sample) & MASK64)
            x = [uniform_int(rng, 0, v - 1)]
            for _ in range(s):
                x.append((3 * x[-1] + 1) % v)
            batch.append(x)
        out.append(batch)
    return torch.tensor(out, dtype=torch.long)


# ---------------------------------------------------------------- the PyTorch run


class StageModule(nn.Module):
    """A stage's layers in order. Under remat the stage keeps only its input
    and recomputes its forward before the backward (the executor's remat);
    `except-last` leaves the last micro-batch of a step out."""

    def __init__(self, layers, remat_mode, micro_batches):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.remat_mode = remat_mode
        self.micro_batches = micro_batches
        self.calls = 0

    def run(self, x):
        for layer in self.layers:
            x = layer(x)
        return x

    def forward(self, x):
        micro_batch = self.calls % self.micro_batches
        self.calls += 1
        remat = self.remat_mode == "always" or (
            self.remat_mode == "except-last" and micro_batch != self.micro_batches - 1)
        if remat and torch.is_grad_enabled():
            return checkpoint(self.run, x, use_reentrant=False)
        return self.run(x)


def loss_fn(logits, targets):
    """Mean cross-entropy over the micro-batch's tokens; with the schedule's
    scale_grads the gradients are those of the mini-batch's mean."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def torch_worker(rank, job):
    """One pipeline rank: its stages, the schedule, `steps` Adam steps."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

    torch.set_num_threads(1)
    if job["pin"]:
        os.sched_setaffinity(0, {job["cores"][rank % len(job["cores"])]})
    world = job["ranks"]
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % job["port"],
                            rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=job["timeout"]))
    try:
        m = job["model"]
        states = torch.load(job["init_file"])
        data = torch.load(job["data_file"])
        n_stages = len(job["stages"])
        mbs = job["micro_batch_size"]
        stages = []
        params = []
        for index, st in enumerate(job["stages"]):
            if st["device"] != rank:
                continue
            layers = []
            for li in range(st["first_layer"], st["last_layer"] + 1):
                layer = build_layer(m, li)
                layer.load_state_dict(states[li])
                layers.append(layer)
            module = StageModule(layers, job["remat_mode"], job["micro_batches"])
            params += list(module.parameters())
            # Shapes stated up front: the stages then exchange no metadata
            # (which would need numpy, which torch does not install).
            s, h = m["seq_len"], m["d_model"]
            first, last = index == 0, index == n_stages - 1
            # (The examples' requires_grad says which tensors carry gradients.)
            x = (torch.zeros(mbs, s, dtype=torch.long) if first
                 else torch.zeros(mbs, s, h, requires_grad=True))
            y = torch.zeros(mbs, s, m["vocab"] if last else h, requires_grad=True)
            stages.append(PipelineStage(
                module, index, n_stages, torch.device("cpu"),
                input_args=(x,), output_args=(y,),
                input_grads=(None,) if first else (torch.zeros(mbs, s, h),),
                output_grads=None if last else (torch.zeros(mbs, s, h),)))
        if not stages:
            raise Failure("rank %d runs no stage" % rank)
        opt = torch.optim.Adam(params, lr=job["lr"], betas=(0.9, 0.999), eps=1e-8)
        M = job["micro_batches"]
        if job["schedule"] == "gpipe" and len(stages) == 1:
            sched = ScheduleGPipe(stages[0], M, loss_fn=loss_fn, scale_grads=True)
        elif job["schedule"] == "1f1b" and len(stages) == 1:
            sched = Schedule1F1B(stages[0], M, loss_fn=loss_fn, scale_grads=True)
        else:
            sched = _PipelineScheduleRuntime(stages, M, loss_fn=loss_fn, scale_grads=True)
            sched._load_csv(job["csv"], format="compute_only")
        first = any(st.is_first for st in stages)
        last = any(st.is_last for st in stages)
        times, losses = [], []
        for step in range(job["steps"]):
            batch = data[step]
            args = (batch[:, :-1],) if first else ()
            kwargs = {"target": batch[:, 1:], "losses": []} if last else {}
            dist.barrier()
            t0 = time.perf_counter()
            sched.step(*args, **kwargs)
            opt.step()
            opt.zero_grad(set_to_none=False)
            dist.barrier()
            times.append(time.perf_counter() - t0)
            if last:
                losses.append(statistics.fmean(float(x) for x in kwargs["losses"]))
        result = {"rank": rank, "times": times, "losses": losses if last else None,
                  "params": sum(p.numel() for p in params)}
        with open(os.path.join(job["out_dir"], "rank%d.json" % rank), "w") as f:
            json.dump(result, f)
    finally:
        dist.destroy_process_group()


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_torch(plan, run, work, steps, lr, init_file, data_file, timeout):
    """One PyTorch run of the plan: returns the median step time after the
    warm-up, every step's time and loss, and the parameters the ranks hold."""
    out_dir = tempfile.mkdtemp(dir=work)
    cores = sorted(os.sched_getaffinity(0))
    job = {
        "ranks": plan["K"],
        "port": free_port(),
        "timeout": timeout,
        "model": run["model"],
        "stages": plan["stages"],
        "micro_batches": plan["M"],
        "micro_batch_size": plan["micro_batch_size"],
        "remat_mode": plan.get("remat_mode", "never"),
        "schedule": plan["schedule"],
        "csv": run.get("csv"),
        "steps": steps,
        "lr": lr,
        "init_file": init_file,
        "data_file": data_file,
        "out_dir": out_dir,
        "pin": len(cores) >= plan["K"],
        "cores": cores,
    }
    mp.spawn(torch_worker, args=(job,), nprocs=plan["K"], join=True)
    ranks = []
    for r in range(plan["K"]):
        with open(os.path.join(out_dir, "rank%d.json" % r)) as f:
            ranks.append(json.load(f))
    # A step ends at the barrier after it, so every rank measures about the
    # same time; the slowest rank's figure stands for the step.
    times = [max(r["times"][i] for r in ranks) for i in range(steps)]
    losses = next(r["losses"] for r in ranks if r["losses"] is not None)
    return {
        "step_time_s": statistics.median(times[WARMUP_STEPS:]),
        "step_times_s": times,
        "losses": losses,
        "params": sum(r["params"] for r in ranks),
    }


# ---------------------------------------------------------------- the PipeScope run


def run_pipescope(pipescope, plan_file, steps, lr, seed):
    cmd = [pipescope, "run", plan_file, "--steps", str(steps), "--lr", repr(lr),
           "--seed", str(seed), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise Failure("`%s` failed (exit %d): %s" % (" ".join(cmd), proc.returncode,
                                                     proc.stderr.strip()))
    out = json.loads(proc.stdout)
    return {"step_time_s": out["measured_step_time_s"], "losses": out["losses"]}


def pipescope_param_count(pipescope, plan_file):
    """The parameter count `pipescope run` prints ("208 k params"), as printed."""
    cmd = [pipescope, "run", plan_file, "--steps", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise Failure("`%s` failed (exit %d): %s" % (" ".join(cmd), proc.returncode,
                                                     proc.stderr.strip()))
    match = re.search(r"([0-9.]+) ?([kMBT]?) params", proc.stdout)
    if not match:
        raise Failure("`%s` printed no parameter count" % " ".join(cmd))
    return match.group(1) + (" " + match.group(2) if match.group(2) else "")


def count_matches(printed, count):
    """Whether `count` is the count PipeScope printed to three significant
    digits ("208 k")."""
    number, _, unit = printed.partition(" ")
    value = float(number) * {"": 1, "k": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}[unit]
    digits = len(number.replace(".", "").lstrip("0")) or 1
    last_digit = 10 ** (math.floor(math.log10(value)) - digits + 1) if value > 0 else 1
    return abs(count - value) <= last_digit / 2


# ---------------------------------------------------------------- the report


def machine():
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count()}


def load_average():
    """The 1-minute load average: other work on the machine slows both sides."""
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def markdown_table(rows):
    lines = [
        "| schedule | M | PyTorch step | PyTorch samples/s | PipeScope step "
        "| PipeScope samples/s | PipeScope / PyTorch |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append("| %s | %d | %.1f ms | %.0f | %.1f ms | %.0f | %.2f |" % (
            r["schedule"], r["M"], r["torch_step_s"] * 1e3, r["torch_samples_per_s"],
            r["pipescope_step_s"] * 1e3, r["pipescope_samples_per_s"], r["ratio"]))
    return "\n".join(lines)


def loss_table(rows, steps, every):
    shown = sorted(set(list(range(0, steps, every)) + [steps - 1]))
    head = "| step |" + "".join(" %s PyTorch | %s PipeScope |" % (r["schedule"], r["schedule"])
                                for r in rows)
    lines = [head, "| ---: |" + " ---: | ---: |" * len(rows)]
    for i in shown:
        cells = "".join(" %.4f | %.4f |" % (r["torch_losses"][i], r["pipescope_losses"][i])
                        for r in rows)
        lines.append("| %d |%s" % (i + 1, cells))
    return "\n".join(lines)


def load_plan(path):
    try:
        with open(path) as f:
            plan = json.load(f)
    except (OSError, ValueError) as e:
        raise Failure("cannot read plan %s: %s" % (path, e))
    if plan.get("format") != "pipescope-plan":
        raise Failure("%s is not a PipeScope plan" % path)
    if plan.get("D", 1) != 1:
        raise Failure("%s has data-parallel replicas (D=%s); compare a plan with D=1"
                      % (path, plan["D"]))
    return plan


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Compare PipeScope's CPU executor with torch.distributed.pipelining "
                    "on the same plans. Normally called by scripts/compare-pytorch.sh.")
    p.add_argument("--pipescope", required=True, help="the pipescope binary")
    p.add_argument("--plan", action="append", required=True, metavar="FILE[:CSV]",
                   help="a plan; with :CSV the schedule CSV (`pipescope export --to "
                        "torch-pipelining`) that PyTorch runs for schedules other "
                        "than gpipe and 1f1b (repeatable)")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--commit", default="unknown",
                   help="the commit of the checkout the binary was built from")
    p.add_argument("--loss-every", type=int, default=5, help="show every Nth step's loss")
    p.add_argument("--timeout", type=int, default=300,
                   help="seconds a PyTorch rank waits for another before giving up")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    args = p.parse_args(argv)
    if args.steps < WARMUP_STEPS + 2:
        p.error("--steps must be at least %d" % (WARMUP_STEPS + 2))
    if args.repeat < 1 or args.loss_every < 1:
        p.error("--repeat and --loss-every must be positive")
    return args


def log(message):
    print(message, file=sys.stderr, flush=True)


def main(argv):
    args = parse_args(argv)
    check_generators()
    work = tempfile.mkdtemp(prefix="compare-pytorch-")
    plans = []
    for item in args.plan:
        path, csv = item, ""
        if item.endswith(".csv") and ":" in item:
            path, _, csv = item.rpartition(":")
        plan = load_plan(path)
        if plan["schedule"] not in SCHEDULE_CLASSES and not csv:
            raise Failure("%s: schedule %s needs its CSV (PLAN:CSV)" % (path, plan["schedule"]))
        plans.append((path, csv or None, plan))

    model = model_shape(plans[0][2]["model"]["spec"])
    for path, _, plan in plans:
        if model_shape(plan["model"]["spec"]) != model:
            raise Failure("%s is a plan of another model than %s" % (path, plans[0][0]))
        if plan["global_batch"] != plans[0][2]["global_batch"]:
            raise Failure("%s has another global batch than %s" % (path, plans[0][0]))
    global_batch = plans[0][2]["global_batch"]

    # The parameter count: PipeScope's, the family's formula, PyTorch's.
    printed = pipescope_param_count(args.pipescope, plans[0][0])
    expected = expected_params(model)
    full = nn.ModuleList(build_layer(model, i) for i in range(model["layers"] + 2))
    count = sum(p.numel() for p in full.parameters())
    if count != expected or not count_matches(printed, count):
        raise Failure("the PyTorch model has %d parameters; the executor's layers have %d "
                      "and `pipescope run` prints %s: the models differ"
                      % (count, expected, printed))

    info = {
        "date": datetime.date.today().isoformat(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "pipescope_commit": args.commit,
        "pipescope": args.pipescope,
        "pipescope_built": datetime.datetime.fromtimestamp(
            os.stat(args.pipescope).st_mtime).strftime("%Y-%m-%d %H:%M"),
        **machine(),
        "load_average_before": load_average(),
        "params": count,
        "global_batch": global_batch,
        "steps": args.steps,
        "repeat": args.repeat,
        "lr": args.lr,
        "seed": args.seed,
    }
    names = ["embed"] + ["block%d" % i for i in range(model["layers"])] + ["head"]
    if not args.json:
        print("Python %s, torch %s, pipescope %s (%s, built %s)"
              % (info["python"], info["torch"], args.commit, args.pipescope,
                 info["pipescope_built"]))
        print("CPU: %s, %d cores, load average %s; %s"
              % (info["cpu"], info["cores"], info["load_average_before"], info["date"]))
        print("Model: %d blocks, d_model %d, %d heads, seq %d, vocab %d: %d parameters "
              "(pipescope run: %s); batch %d, Adam lr %g, seed %d"
              % (model["layers"], model["d_model"], model["heads"], model["seq_len"],
                 model["vocab"], count, printed, global_batch, args.lr, args.seed))
        for path, csv, plan in plans:
            cut = ", ".join("%s-%s" % (names[s["first_layer"]], names[s["last_layer"]])
                            for s in plan["stages"])
            print("Plan %s: K=%d, M=%d, remat %s, stages %s; PyTorch runs %s"
                  % (plan["schedule"], plan["K"], plan["M"], plan.get("remat_mode", "never"),
                     cut, "the exported CSV" if csv else "its schedule class"))
        sys.stdout.flush()

    log("Drawing PipeScope's initial weights and data (seed %d)" % args.seed)
    init_file = os.path.join(work, "init.pt")
    data_file = os.path.join(work, "data.pt")
    torch.save(initial_state(model, args.seed), init_file)
    torch.save(synthetic_batches(model, global_batch, args.steps, args.seed), data_file)

    # The two sides take turns, so that a change in the machine's speed
    # during the comparison falls on both.
    results = {path: {"torch": [], "pipescope": []} for path, _, _ in plans}
    for r in range(args.repeat):
        for path, csv, plan in plans:
            what = "round %d/%d, %s M=%d" % (r + 1, args.repeat, plan["schedule"], plan["M"])
            log("%s: pipescope run" % what)
            results[path]["pipescope"].append(
                run_pipescope(args.pipescope, path, args.steps, args.lr, args.seed))
            log("%s: PyTorch" % what)
            run = {"model": model, "csv": csv}
            t = run_torch(plan, run, work, args.steps, args.lr, init_file, data_file,
                          args.timeout)
            if t["params"] != count:
                raise Failure("the PyTorch stages hold %d parameters, not %d"
                              % (t["params"], count))
            results[path]["torch"].append(t)

    info["load_average_after"] = load_average()
    rows = []
    for path, csv, plan in plans:
        torch_step = statistics.median(t["step_time_s"] for t in results[path]["torch"])
        ps_step = statistics.median(p["step_time_s"] for p in results[path]["pipescope"])
        torch_losses = results[path]["torch"][0]["losses"]
        ps_losses = results[path]["pipescope"][0]["losses"]
        rows.append({
            "plan": path,
            "schedule": plan["schedule"],
            "K": plan["K"],
            "M": plan["M"],
            "remat": plan.get("remat_mode", "never"),
            "stages": [[s["first_layer"], s["last_layer"]] for s in plan["stages"]],
            "torch_step_s": torch_step,
            "torch_samples_per_s": global_batch / torch_step,
            "torch_step_s_per_round": [t["step_time_s"] for t in results[path]["torch"]],
            "pipescope_step_s": ps_step,
            "pipescope_samples_per_s": global_batch / ps_step,
            "pipescope_step_s_per_round": [p["step_time_s"] for p in results[path]["pipescope"]],
            "ratio": torch_step / ps_step,
            "torch_losses": torch_losses,
            "pipescope_losses": ps_losses,
            "first_loss_difference": abs(torch_losses[0] - ps_losses[0]),
            "max_loss_difference": max(abs(a - b) for a, b in zip(torch_losses, ps_losses)),
        })

    # Same weights and data: the first losses agree to rounding (step 1
    # checks the forward, step 2 the gradients and Adam). Later ones drift
    # apart as rounding differences grow.
    for r in rows:
        for i in range(2):
            diff = abs(r["torch_losses"][i] - r["pipescope_losses"][i])
            if diff > LOSS_TOLERANCE:
                raise Failure("%s: the losses of step %d differ by %.2g (PyTorch %.6f, "
                              "PipeScope %.6f): the two models or their training differ"
                              % (r["schedule"], i + 1, diff, r["torch_losses"][i],
                                 r["pipescope_losses"][i]))

    if args.json:
        json.dump({**info, "results": rows}, sys.stdout, indent=2)
        print()
        return
    print()
    print("Step time: median of steps %d-%d, the median of %d rounds; samples/s = batch %d "
          "/ step time. Load average at the end: %s."
          % (WARMUP_STEPS + 1, args.steps, args.repeat, global_batch,
             info["load_average_after"]))
    print()
    print(markdown_table(rows))
    print()
    print("Loss (mean cross-entropy over the batch's tokens; both start from the same "
          "weights and see the same data):")
    print()
    print(loss_table(rows, args.steps, args.loss_every))
    print()
    for r in rows:
        print("%s: loss difference %.1e at step 1, at most %.1e over %d steps"
              % (r["schedule"], r["first_loss_difference"], r["max_loss_difference"],
                 args.steps))


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except Failure as e:
        print("compare_pytorch.py: error: %s" % e, file=sys.stderr)
        sys.exit(1)
