"""`compare plan`: which backend for a cluster that is not here. The step of every framework's planned
configurations (each adapter's `plan_knobs`) on a hardware profile reshaped to the user's cluster, with the memory
each holds per GPU, and a recommendation with its margin.

Runs in: the parent. The model's pricing (costmodel.py) is used as it is; what this module adds is the target's
compute and network, each assumption stated where it is made:

- compute: FLOPs of one sample's forward and backward (counted by torch's FlopCounterMode on the workload's own
  model, or 6 x parameters x tokens for a transformer given by its size) over the profile's peak for the dtype
  times an assumed utilisation; low, middle and high are calibration.UTILISATION. Forward is 1/3 of it, backward
  2/3 (twice the forward's FLOPs), and each layer's gradient is ready once backward has done that layer's share,
  in proportion to its parameters. The optimizer step reads and writes its state at the device's memory bandwidth.
  No framework overhead is carried over (none was measured on the target);
- network: the profile's bus bandwidth inside a node; across nodes, the node's NICs at NIC_EFFICIENCY of their
  line rate when --nic-gbps is given, else the profile's own measured figure;
- memory: model states (parameters, gradients, optimizer state), as each adapter counts them
  (`model_state_bytes`) and as DeepSpeed's estimators do, plus the activations one GPU's batch keeps for backward
  (Activations: counted by autograd on the meta device for a workload, Korthikanti et al.'s count for a
  transformer given by its size), the same under every data-parallel backend.

The ranges are over the assumed utilisation, not confidence intervals: nothing on the target was measured.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from harness.model import VERSION
from harness.model import costmodel as cm
from harness.model.calibration import UTILISATION

NIC_EFFICIENCY = 0.96
"""All-reduce bus bandwidth per NIC over its line rate: 24 GB/s of a 200 Gb/s (25 GB/s) HDR NIC, "what we see
ourselves in general on perfect setups" (sjeaugey, NVIDIA, nccl-tests#160; the a100-sxm-hdr200 profile's
source)."""
DTYPES = ("bf16", "fp16", "fp32")
OPTIMIZERS = {"adamw": 8.0, "sgd": 4.0}
"""Optimizer state bytes per parameter in fp32: AdamW's two moments, SGD's momentum buffer."""
OPTIMIZER_TRAFFIC = {"adamw": 28.0, "sgd": 20.0}
"""Bytes per parameter an fp32 optimizer step reads and writes (AdamW: parameter, gradient and both moments read,
parameter and moments written; SGD with momentum: parameter, gradient, buffer read, parameter and buffer
written)."""
SEQ_LEN = 2048
"""Tokens per sample of a transformer given by --params (--seq-len)."""
HEAD_DIM = 128
"""A transformer given by --hidden has hidden / HEAD_DIM attention heads (GPT-3's and Llama's head size)."""
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


class BadPlan(ValueError):
    """Inputs `compare plan` cannot price; the message is one line naming the problem and the valid choices."""


@dataclass
class Activations:
    """What one sample's forward leaves for backward (activations), beside the model states."""

    float_elements: float
    """Floating-point elements, held at the step's dtype."""
    other_bytes: float
    """Everything else (integer indices, boolean and dropout masks)."""
    source: str

    def bytes(self, dtype: str, batch: int) -> float:
        return batch * (self.float_elements * DTYPE_BYTES[dtype] + self.other_bytes)


def saved_for_backward(model, run) -> tuple[float, float]:
    """(floating-point elements, other bytes) that autograd saves for backward while `run()` executes: each tensor
    once (a tensor saved by two ops, or a view of it, is one), the model's parameters and buffers and their views
    left out (they are model states)."""
    import torch

    params = {id(p) for p in model.parameters()} | {id(b) for b in model.buffers()}  # BatchNorm's running stats
    kept: dict[int, tuple[bool, float]] = {}

    def pack(t):
        base = t if t._base is None else t._base
        if id(t) not in params and id(base) not in params:
            kept[id(base)] = (base.is_floating_point(), base.numel() * (1 if base.is_floating_point() else
                                                                         base.element_size()))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        run()
    return (sum(n for floating, n in kept.values() if floating),
            sum(n for floating, n in kept.values() if not floating))


@dataclass
class Shape:
    """What the plan needs of a model."""

    name: str
    params: float
    tensors: list[float]
    """Parameters per gradient tensor, in forward order."""
    largest: dict[str, float]
    """{"module": parameters of the largest module (DeepSpeed's largest_layer_params), "unit": of the largest
    shard unit (what FSDP gathers at once)}."""
    flops_per_sample: float
    optimizer: str
    source: str
    default_batch: int
    """Per-GPU batch when none is given: the workload's global batch, or 8 sequences."""
    activations: Activations | None = None
    """None: not known (a transformer given without --hidden)."""


def gpu_choices() -> dict[str, str]:
    """--gpu value -> hardware profile: each profile's name, and its first word (h100, a100, ...) where that is
    unique; only profiles with a peak for some precision (a GPU)."""
    names = [n for n in cm.profiles() if not cm.profile_problem(n) and cm.load_profile(n).peak_tflops]
    short: dict[str, list[str]] = {}
    for n in names:
        short.setdefault(n.split("-")[0], []).append(n)
    out = {k: v[0] for k, v in short.items() if len(v) == 1}
    out.update({n: n for n in names})
    return out


def memory_gb(profile: str) -> float | None:
    """The profile's device memory (its `memory_GB`), or None."""
    return json.loads((cm.PROFILES_DIR / f"{profile}.json").read_text(encoding="utf-8")).get("memory_GB")


class Bound(NamedTuple):
    low: float
    high: float
    why: str
    """Where the bounds come from: what real models and clusters have (a size outside them is a typo, and the cost
    model prices only what it was written for)."""


BOUNDS = {
    "--params": Bound(1e6, 1e13, "from 10^6 (TinyStories-1M, Eldan & Li 2023, the smallest published language "
                                 "model) to 10^13, about six times the largest published (Switch-C, 1.6 x 10^12)"),
    "--layers": Bound(1, 1_000, "up to DeepNet's 1,000 blocks (Wang et al. 2022), the deepest transformer trained"),
    "--hidden": Bound(64, 65_536, "from TinyStories-1M's 64 to 65,536, three times the widest published "
                                  "(MT-NLG 530B's 20,480)"),
    "--seq-len": Bound(1, 10_000_000, "up to ten million tokens, the longest context published (Llama 4 Scout)"),
    "--batch": Bound(1, 65_536, "per GPU, up to 65,536, the largest global batch published (BERT with LAMB, You et "
                                "al. 2020)"),
    "--gpu-memory-gb": Bound(1, 1_024, "up to 1,024, over three times the largest GPU memory (288 GB)"),
    "--nic-gbps": Bound(1, 3_200, "up to 3,200 Gb/s, twice the fastest NIC announced (1.6 Tb/s)"),
    "--nics-per-node": Bound(1, 32, "up to 32, four times the eight compute NICs of a DGX node"),
}
"""What `compare plan` prices. Cluster sizes are bounded by costmodel.PREDICT_TO."""


def within(name: str, value: float | None) -> None:
    """BadPlan naming the bound and where it comes from when `value` (given, not None) is outside BOUNDS[name]."""
    if value is None:
        return
    b = BOUNDS[name]
    if not (math.isfinite(value) and b.low <= value <= b.high):
        got = str(value) if isinstance(value, int) else _count(value)  # an integer as the user typed it
        raise BadPlan(f"{name} must be from {_count(b.low)} to {_count(b.high)} ({b.why}), got {got}")


def _count(v: float) -> str:
    """1,000,000 and 65,536 as they are; 1e13 and 1e200 (as a user types them) from 10^7 on."""
    return f"{v:,.0f}" if abs(v) < 1e7 else re.sub(r"e\+0*", "e", f"{v:g}")


def transformer(params: float, layers: int, hidden: int | None, seq_len: int, optimizer: str) -> Shape:
    """A decoder-only transformer given by its size: `layers` blocks of 12 h^2 parameters (attention 4 h^2 in
    two tensors of 3 h^2 and h^2, MLP 8 h^2 in two of 4 h^2) and the rest as the embedding, the first tensor; with
    no --hidden, `layers` equal tensors. FLOPs per sample (a sequence): 6 x parameters x tokens, plus attention's
    12 x layers x hidden x tokens^2 when the hidden size is known (Narayanan et al. 2021, eq. 3, without
    recomputation)."""
    for name, value in (("--params", params), ("--layers", layers), ("--hidden", hidden), ("--seq-len", seq_len)):
        within(name, value)
    if hidden:
        block = 12 * hidden**2
        embed = params - layers * block
        if embed < 0:
            raise BadPlan(f"--params {params:.3g} is fewer than --layers {layers} blocks of 12 x --hidden^2 = "
                          f"{layers * block:.3g} parameters; give a larger --params or smaller --layers/--hidden")
        per_layer = [3 * hidden**2, hidden**2, 4 * hidden**2, 4 * hidden**2]
        tensors = ([embed] if embed else []) + per_layer * layers
        largest = {"module": max(embed, 4 * hidden**2), "unit": max(embed, block)}
        flops = 6 * params * seq_len + 12 * layers * hidden * seq_len**2
        desc = f"{layers} layers, hidden {hidden}"
        heads = max(1, hidden // HEAD_DIM)
        acts = Activations(layers * (16 * seq_len * hidden + 2 * heads * seq_len**2),
                           layers * (2 * seq_len * hidden + heads * seq_len**2),
                           f"per block 34 s h + 5 a s^2 bytes at 16 bits (Korthikanti et al. 2022: no recomputation, "
                           f"no FlashAttention, which drops the s^2 terms; {heads} heads of {HEAD_DIM} assumed), "
                           f"s = {seq_len}")
    else:
        tensors = [params / layers] * layers
        largest = {"module": params / layers, "unit": params / layers}
        flops = 6 * params * seq_len
        desc = f"{layers} layers"
        acts = None
    return Shape(f"transformer ({desc})", params, tensors, largest, flops, optimizer,
                 f"FLOPs per sequence of {seq_len} tokens: 6 x parameters x tokens"
                 + (" + 12 x layers x hidden x tokens^2" if hidden else ""), 8, acts)


def of_workload(name: str, options: dict[str, Any] | None, optimizer: str | None) -> Shape:
    """The workload's own model, built on the CPU: its parameters tensor by tensor (in registration order), its
    largest module and shard unit, its optimizer (SGD with momentum or Adam/AdamW) unless `optimizer` is given,
    and the FLOPs of one forward and backward counted by torch on two samples of its data."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    import workloads

    w = workloads.get(name, options)
    reason = w.unavailable()
    if reason:
        raise BadPlan(f"workload {name} cannot be planned here: {reason}")
    try:
        with torch.device("meta"):  # nothing allocated: a model larger than this machine can still be planned
            model = w.build_model()
    except (RuntimeError, OverflowError, ValueError) as exc:  # e.g. a tensor larger than any address space
        given = ", ".join(f"{k}={v}" for k, v in (options or {}).items()) or "its defaults"
        raise BadPlan(f"workload {name} ({given}) cannot be built: {' '.join(str(exc).split())}; choose smaller "
                      f"workload options") from None
    tensors = [float(p.numel()) for p in model.parameters()]
    module = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    units = w.shard_units(model) or [model]
    unit = max(sum(p.numel() for p in u.parameters()) for u in units)
    if optimizer is None:
        opt = w.make_optimizer(model, w.lr(w.global_batch))
        optimizer = "adamw" if isinstance(opt, (torch.optim.Adam, torch.optim.AdamW)) else "sgd"
    data = w.materialize("cpu", w.global_batch)
    x, y = (t.to("meta") for t in data.batch(torch.arange(2), "cpu"))
    counter = FlopCounterMode(display=False)
    with counter:
        loss = []
        floats, other = saved_for_backward(model, lambda: loss.append(w.loss(model(x), y)))
        loss[0].backward()
    acts = Activations(floats / len(x), other / len(x),
                       "what autograd saved for backward in one forward on the meta device, parameters left out; "
                       "floating-point tensors at the step's dtype, though autocast keeps some in fp32")
    return Shape(name, sum(tensors), tensors, {"module": float(module), "unit": float(unit)},
                 counter.get_total_flops() / len(x), optimizer,
                 "FLOPs of one forward and backward counted by torch's FlopCounterMode on the workload's model",
                 w.global_batch, acts)


@dataclass
class Cluster:
    profile: str
    nodes: int
    gpus_per_node: int
    dtype: str
    nic_gbps: float | None = None
    nics_per_node: int = 1
    memory_gb: float | None = None

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def fabric(self) -> cm.Fabric:
        """The profile with this cluster's node size and, given --nic-gbps, its network."""
        f = cm.load_profile(self.profile)
        f = dataclasses.replace(f, devices_per_node=self.gpus_per_node)
        if self.nic_gbps is not None:
            f = dataclasses.replace(f, inter_busbw_Bps=self.nics_per_node * self.nic_gbps / 8 * 1e9 * NIC_EFFICIENCY)
        return f


def cluster(gpu: str, nodes: int, gpus_per_node: int | None, dtype: str, nic_gbps: float | None = None,
            nics_per_node: int = 1, memory: float | None = None) -> Cluster:
    """The cluster of --gpu (a profile's name or its short name; BadPlan listing them otherwise), with the
    profile's GPUs per node unless given."""
    choices = gpu_choices()
    if gpu not in choices:
        raise BadPlan(f"unknown --gpu {gpu}; choose from {', '.join(choices)}")
    profile = choices[gpu]
    per_node = gpus_per_node if gpus_per_node is not None else cm.load_profile(profile).devices_per_node
    return Cluster(profile, nodes, per_node, dtype, nic_gbps, nics_per_node, memory)


def check(cluster: Cluster, batch: int | None, global_batch: int | None) -> int | None:
    """The per-GPU batch (None: not given), or BadPlan naming what cannot be priced."""
    for what, v in (("--nodes", cluster.nodes), ("--gpus-per-node", cluster.gpus_per_node)):
        if v < 1:
            raise BadPlan(f"{what} must be at least 1, got {v}")
    within("--nics-per-node", cluster.nics_per_node)
    within("--nic-gbps", cluster.nic_gbps)
    within("--gpu-memory-gb", cluster.memory_gb)
    within("--batch", batch)
    if cluster.gpus > cm.PREDICT_TO[1]:
        raise BadPlan(f"{cluster.nodes} nodes x {cluster.gpus_per_node} GPUs is {cluster.gpus:,} GPUs; past "
                      f"{cm.PREDICT_TO[1]:,} a one-step model has nothing to say")
    f = cm.load_profile(cluster.profile)
    if cluster.gpus_per_node > f.devices_per_node:
        raise BadPlan(f"--gpus-per-node {cluster.gpus_per_node} is more than the {f.devices_per_node} GPUs a node of "
                      f"{cluster.profile} connects (its intra-node bandwidth is for that many); give at most "
                      f"{f.devices_per_node}")
    if cluster.dtype not in DTYPES:
        raise BadPlan(f"unknown --dtype {cluster.dtype}; choose from {', '.join(DTYPES)}")
    if not f.peak_tflops.get(cluster.dtype):
        have = ", ".join(k for k in f.peak_tflops if k in DTYPES)
        raise BadPlan(f"{cluster.profile} ({f.device}) has no {cluster.dtype} peak in its profile; choose "
                      f"--dtype from {have}")
    if batch is not None and global_batch is not None:
        raise BadPlan("give --batch (per GPU) or --global-batch, not both")
    if global_batch is not None:
        if global_batch < 1 or global_batch % cluster.gpus:
            raise BadPlan(f"--global-batch {global_batch} cannot be split evenly over {cluster.gpus} GPUs "
                          f"({cluster.nodes} nodes x {cluster.gpus_per_node}); give a multiple of {cluster.gpus}")
        per_gpu = global_batch // cluster.gpus
        b = BOUNDS["--batch"]
        if per_gpu > b.high:
            raise BadPlan(f"--global-batch {global_batch} is {per_gpu:,} per GPU; the batch per GPU must be at most "
                          f"{b.high:,g} ({b.why})")
        return per_gpu
    return batch


def compute(shape: Shape, fabric: cm.Fabric, dtype: str, batch: int, utilisation: float,
            grad_bytes: float) -> cm.Compute:
    """One GPU's step compute at `utilisation` of the peak (see the module's docstring)."""
    total = shape.flops_per_sample * batch / (fabric.peak_tflops[dtype] * 1e12 * utilisation)
    bandwidth = 2 * fabric.copy_Bps if fabric.copy_Bps else None
    opt = shape.params * OPTIMIZER_TRAFFIC[shape.optimizer] / bandwidth if bandwidth else 0.0
    layers = [(t * grad_bytes, t) for t in shape.tensors]
    return cm.Compute(total / 3, 2 * total / 3, opt, cm.layered_grads(layers, 2 * total / 3), 0.0, fabric.copy_Bps)


def _label(name: str, knobs: dict[str, Any]) -> str:
    return name + "".join(f":{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in knobs.items())


@dataclass
class Plan:
    shape: Shape
    cluster: Cluster
    batch: int
    rows: list[dict[str, Any]] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    recommendation: dict[str, Any] | None = None


def make(shape: Shape, cluster: Cluster, batch: int) -> Plan:
    """Every adapter's planned rows priced at each assumed utilisation, and the recommendation."""
    import adapters

    fabric = cluster.fabric()
    capacity = cluster.memory_gb if cluster.memory_gb is not None else memory_gb(cluster.profile)
    plan = Plan(shape, cluster, batch)
    n = cluster.gpus
    activations = shape.activations.bytes(cluster.dtype, batch) if shape.activations else None
    for name in adapters.names():
        cls = adapters.get(name)
        knob_sets = cls.plan_knobs(cluster.dtype)
        if isinstance(knob_sets, str):
            plan.skipped[name] = knob_sets
            continue
        for knobs in knob_sets:
            adapter = cls(knobs, "cuda")
            schedule = adapter.comm_schedule()
            steps = []
            for u in UTILISATION:
                c = compute(shape, fabric, cluster.dtype, batch, u, adapter.gradient_bytes())
                steps.append(cm.predict_step(schedule, c, fabric, n))
            states = adapter.model_state_bytes(shape.params, shape.largest, n, OPTIMIZERS[shape.optimizer])
            held = states + (activations or 0.0)
            mid = steps[1]
            plan.rows.append({
                "label": _label(name, knobs), "adapter": name, "knobs": knobs,
                "step_s": {"low": steps[2].step_s, "mid": mid.step_s, "high": steps[0].step_s},
                "samples_per_s": {"low": n * batch / steps[0].step_s, "mid": n * batch / mid.step_s,
                                  "high": n * batch / steps[2].step_s},
                "compute_s": mid.compute_s, "comm_s": mid.comm_s, "exposed_s": mid.exposed_s,
                "model_state_bytes": states, "activation_bytes": activations,
                "fits": None if capacity is None else held <= capacity * 1e9,
                "_steps": [s.step_s for s in steps]})
    plan.recommendation = recommend(plan.rows)
    return plan


TIE = 0.02
"""Step times within this share of each other are not told apart: a model of a cluster that is not here resolves
no finer."""


def recommend(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Among the rows that fit: the fastest at the middle utilisation, and every row the model does not rank
    behind it: within TIE of it at every assumed utilisation, or faster than it at some. Of those, the one
    holding the least memory is recommended; its margin is over the fastest row outside them (the ratio of step
    times at each assumed utilisation). A row is ranked behind when it is no faster at any utilisation and slower
    by more than TIE at some."""
    fitting = sorted((r for r in rows if r["fits"] is not False), key=lambda r: r["step_s"]["mid"])
    if not fitting:
        return None

    def ratios(slow, fast):
        return [b / a for a, b in zip(fast["_steps"], slow["_steps"])]

    best = fitting[0]
    tied = [best] + [r for r in fitting[1:] if max(ratios(r, best)) <= 1 + TIE or min(ratios(r, best)) < 1 - TIE]
    pick = min(tied, key=lambda r: r["model_state_bytes"])
    out: dict[str, Any] = {"label": pick["label"], "tied": [r["label"] for r in tied if r is not pick],
                           "next": None}
    rest = [r for r in fitting if r not in tied]
    if rest:
        margin = ratios(rest[0], pick)
        out.update(next=rest[0]["label"], ratio={"low": min(margin), "mid": margin[1], "high": max(margin)})
    return out


def _ms(s: float) -> str:
    return f"{s * 1e3:.3g}" if s < 1 else f"{s * 1e3:,.0f}"


def _gb(b: float) -> str:
    return f"{b / 1e9:.3g}"


def lines(plan: Plan) -> list[str]:
    """The plan as a terminal would show it: what was priced on what, the table, the recommendation, what was
    not planned and why."""
    c, s, f = plan.cluster, plan.shape, plan.cluster.fabric()
    capacity = c.memory_gb if c.memory_gb is not None else memory_gb(c.profile)
    net = (f"{c.nics_per_node} x {c.nic_gbps:g} Gb/s NIC{'s' if c.nics_per_node > 1 else ''} per node "
           f"({f.inter_busbw_Bps / 1e9:.3g} GB/s all-reduce bus bandwidth at {NIC_EFFICIENCY:.0%} of line rate)"
           if c.nic_gbps is not None else f"the profile's network ({f.inter_busbw_Bps / 1e9:.3g} GB/s all-reduce "
                                          f"bus bandwidth across nodes)")
    flops = s.flops_per_sample
    flops_text = f"{flops / 1e12:.3g} TFLOP" if flops >= 1e12 else f"{flops / 1e9:.3g} GFLOP"
    out = [f"{s.name}: {s.params:,.0f} parameters, {flops_text} per sample (forward and backward), "
           f"{s.optimizer}; {plan.batch} per GPU ({plan.batch * c.gpus:,} global)",
           f"on {c.gpus} x {f.device} ({c.nodes} node{'s' if c.nodes > 1 else ''} x {c.gpus_per_node}, profile "
           f"{c.profile}, {capacity:g} GB each): {f.intra_busbw_Bps / 1e9:.3g} GB/s inside a node, {net}; {c.dtype}",
           f"model version {VERSION}; compute at {UTILISATION[0]:.0%}-{UTILISATION[2]:.0%} of the {c.dtype} peak "
           f"({f.peak_tflops[c.dtype]:g} TFLOP/s), the middle figure at {UTILISATION[1]:.0%}: ranges are over that "
           f"assumption, not confidence intervals",
           "",
           f"| backend | step (ms) | samples/s | communication exposed (ms) | model states per GPU (GB) | "
           f"fits in {capacity:g} GB{' with activations' if s.activations else ''} |" if capacity else
           "| backend | step (ms) | samples/s | communication exposed (ms) | model states per GPU (GB) | fits |",
           "|---|---|---|---|---|---|"]
    for r in sorted(plan.rows, key=lambda r: r["step_s"]["mid"]):
        st, sp = r["step_s"], r["samples_per_s"]
        fits = {True: "yes", False: "no", None: "?"}[r["fits"]]
        out.append(f"| {r['label']} | {_ms(st['mid'])} [{_ms(st['low'])}-{_ms(st['high'])}] | "
                   f"{sp['mid']:,.0f} [{sp['low']:,.0f}-{sp['high']:,.0f}] | {_ms(r['exposed_s'])} | "
                   f"{_gb(r['model_state_bytes'])} | {fits} |")
    out.append("")
    rec = plan.recommendation
    too_big = [r for r in plan.rows if r["fits"] is False]
    memory = {r["label"]: r["model_state_bytes"] for r in plan.rows}
    if rec is None:
        held, cures = (("model states and activations", "more GPUs, a smaller model, a dtype with fewer bytes or a "
                        "smaller per-GPU batch") if s.activations else
                       ("model states", "more GPUs, a smaller model or a dtype with fewer bytes"))
        out.append(f"recommendation: none: no configuration's {held} fit in {capacity:g} GB per GPU; {cures}")
    else:
        text = f"recommendation: {rec['label']}"
        if rec["tied"]:
            text += (f", which holds the least memory ({_gb(memory[rec['label']])} GB per GPU) of the "
                     f"{len(rec['tied']) + 1} configurations the model does not rank by speed (within {TIE:.0%} at "
                     f"every assumed utilisation, or faster at some): {', '.join(rec['tied'])}")
        if rec["next"]:
            r = rec["ratio"]
            text += (f"; {r['mid']:.2f}x [{r['low']:.2f}-{r['high']:.2f}] faster than {rec['next']}"
                     + ("" if r["low"] > 1 else ", not resolved at every assumed utilisation"))
        elif not rec["tied"]:
            text += " (the only configuration that fits)"
        out.append(text)
    if too_big:
        extra = (lambda r: f" + {_gb(r['activation_bytes'])} GB of activations" if r["activation_bytes"] else "")
        out.append("does not fit: " + "; ".join(f"{r['label']} ({_gb(r['model_state_bytes'])} GB of model states"
                                                f"{extra(r)})" for r in too_big))
    if plan.skipped:
        out.append(f"not planned at {c.dtype}: " + "; ".join(f"{k} ({v})" for k, v in plan.skipped.items()))
    acts = s.activations
    if acts:
        out.append(f"memory: model states (parameters, gradients and optimizer state, as DeepSpeed's estimators "
                   f"count) + activations, {_gb(acts.bytes(c.dtype, plan.batch))} GB per GPU at {plan.batch} per GPU "
                   f"under every backend ({acts.source}); fits holds both; buffers, temporaries and the framework's "
                   f"own allocations come on top")
    else:
        out.append("memory: model states only (parameters, gradients and optimizer state, as DeepSpeed's estimators "
                   "count): activations are not known without --hidden, and they, buffers and the framework's own "
                   "allocations come on top")
    slow = c.fabric().overlap_slowdown
    overlap = (f"compute overlapping communication takes {1 + slow:.3g}x as long (the profile's "
               f"overlap_compute_slowdown)" if slow else "communication overlapping compute is taken not to slow it "
               "(the profile states no slowdown)")
    out.append(f"how: {s.source}; no framework overhead (none was measured on the target); {overlap}")
    return out


def as_json(plan: Plan) -> dict[str, Any]:
    rows = [{k: v for k, v in r.items() if not k.startswith("_")} for r in plan.rows]
    return {"model_version": VERSION, "model": dataclasses.asdict(plan.shape) | {"tensors": len(plan.shape.tensors)},
            "cluster": dataclasses.asdict(plan.cluster) | {"gpus": plan.cluster.gpus},
            "per_gpu_batch": plan.batch, "utilisation": list(UTILISATION), "rows": rows,
            "recommendation": plan.recommendation, "not_planned": plan.skipped}
