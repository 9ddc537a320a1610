"""`compare plan`: which backend for a cluster that is not here. The step of every framework's planned
configurations (each adapter's `plan_knobs`) on a hardware profile reshaped to the user's cluster, with the memory
each holds per GPU, and a recommendation with its margin.

Runs in: the parent. The model's pricing (costmodel.py) is used as it is; what this module adds is the target's
compute and network, each assumption stated where it is made:

- compute: FLOPs of one sample's forward and backward (counted by torch's FlopCounterMode on the workload's own
  model, or 6 x parameters x tokens for a transformer given by its size) over the profile's peak for the dtype
  times an assumed utilisation; low, middle and high are calibration.UTILISATION. Forward is 1/3 of it, backward
  2/3 (twice the forward's FLOPs) plus, with activation checkpointing, the recomputed forward; each layer's
  gradient is ready once backward has done that layer's share, in proportion to its parameters. The optimizer step
  reads and writes its state at the device's memory bandwidth. No framework overhead is carried over (none was
  measured on the target);
- network: the profile's bus bandwidth inside a node; across nodes, the node's NICs at NIC_EFFICIENCY of their
  line rate when --nic-gbps is given, else the profile's own measured figure;
- memory, in GiB: model states (parameters, gradients, optimizer state), as each adapter counts them
  (`model_state_bytes`, `model_state_rule`: ZeRO-2 and ZeRO-3 as DeepSpeed's estimators), plus the activations one
  GPU's batch keeps for backward, the same under every data-parallel backend: counted by autograd on the meta
  device for a workload (`Saved`, with a fused attention kernel's saved tensors for `scaled_dot_product_attention`
  and each shard unit checkpointed when asked), or, for a transformer given by its size, what transformers' Llama
  saves (`llama_activations`, held to the real model by a test).

The ranges are over the assumed utilisation, not confidence intervals: nothing on the target was measured.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
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
HEAD_DIM = 128
"""A transformer given by --hidden has hidden / HEAD_DIM attention heads (GPT-3's and Llama's head size)."""
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
ATTENTION = ("flash", "eager")
"""--attention: a fused kernel that keeps no s x s scores (FlashAttention; torch's scaled_dot_product_attention
picks its flash or memory-efficient kernel on every GPU profile here), or the softmax's probabilities kept."""
CHECKPOINTING = ("none", "full")
"""--checkpointing: full recomputes every block (shard unit) in backward, keeping only its input."""
GiB = 2**30


class BadPlan(ValueError):
    """Inputs `compare plan` cannot price; the message is one line naming the problem and the valid choices."""


@dataclass
class Activations:
    """What one sample's forward leaves for backward (activations), beside the model states."""

    float_elements: float
    """Floating-point elements, held at the step's dtype."""
    other_bytes: float
    """Everything else (integer indices, boolean masks, statistics kept in fp32 whatever the dtype)."""
    source: str

    def bytes(self, dtype: str, batch: int) -> float:
        return batch * (self.float_elements * DTYPE_BYTES[dtype] + self.other_bytes)


def _size(t) -> tuple[bool, float]:
    """(held at the step's dtype?, its elements if so, else its bytes): a tensor of the model's floating dtype
    scales with --dtype; an fp32 statistic beside 16-bit activations (a fused attention's log-sum-exp) and integer
    or boolean tensors do not."""
    if t.is_floating_point() and not getattr(t, "_fp32", 0):
        return True, float(t.numel())
    return False, float(t.numel() * t.element_size())


class Saved:
    """What autograd saves for backward while a forward runs: each tensor once (a tensor saved by two ops, or a
    view of it, is one), the model's parameters and buffers and their views left out (they are model states).
    With units, each saved tensor is attributed to the unit running when it was saved, and each unit's input is
    recorded: what activation checkpointing keeps of a unit."""

    def __init__(self, model, units=()):
        self.states = {id(p) for p in model.parameters()} | {id(b) for b in model.buffers()}
        self.units = list(units)
        self.kept: dict[int, tuple[int, bool, float]] = {}
        """id of a saved tensor's base -> (the outermost unit running when it was saved, -1 for none; held at
        the step's dtype; its elements or bytes)."""
        self.inputs: dict[int, tuple[bool, float]] = {}
        """id of each unit's input (its base) -> (held at the step's dtype; its elements or bytes)."""
        self._active: list[int] = []

    def run(self, forward) -> "Saved":
        import torch

        hooks = []
        for i, unit in enumerate(self.units):
            def enter(module, args, i=i):
                if not self._active:
                    first = next((a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()), None)
                    if first is not None:
                        base = first if first._base is None else first._base
                        self.inputs[id(base)] = _size(base)
                self._active.append(i)

            def leave(*_):
                self._active.pop()  # returns None: the unit's output is left as it is

            hooks += [unit.register_forward_pre_hook(enter), unit.register_forward_hook(leave)]

        def pack(t):
            base = t if t._base is None else t._base
            if id(t) not in self.states and id(base) not in self.states and id(base) not in self.kept:
                self.kept[id(base)] = (self._active[0] if self._active else -1, *_size(base))
            return t

        try:
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                forward()
        finally:
            for h in hooks:
                h.remove()
        return self

    def total(self, checkpointing: bool = False) -> tuple[float, float]:
        """(floating-point elements, other bytes) held for backward at the end of forward; with checkpointing
        (every unit recomputed in backward), what is saved outside the units and each unit's input, plus the
        largest unit's own while backward recomputes it."""
        def add(items):
            items = list(items)
            return (sum(n for floating, n in items if floating), sum(n for floating, n in items if not floating))

        if not checkpointing:
            return add((f, n) for _, f, n in self.kept.values())
        outside = add([(f, n) for u, f, n in self.kept.values() if u < 0] +
                      [fn for t, fn in self.inputs.items() if self.kept.get(t, (0,))[0] >= 0])
        per_unit = [add((f, n) for t, (u, f, n) in self.kept.items() if u == i and t not in self.inputs)
                    for i in range(len(self.units))]
        largest = max(per_unit, key=lambda fo: 2 * fo[0] + fo[1], default=(0.0, 0.0))
        return outside[0] + largest[0], outside[1] + largest[1]


def saved_for_backward(model, run) -> tuple[float, float]:
    """(floating-point elements, other bytes) that autograd saves for backward while `run()` executes (Saved)."""
    return Saved(model).run(run).total()


class FusedAttention:
    """While active, torch's `scaled_dot_product_attention` saves for backward what a fused kernel saves
    (FlashAttention-2, and PyTorch's flash and memory-efficient kernels: query, key, value, output and an fp32
    log-sum-exp per query row; no s x s scores) instead of what its decomposition on the meta device saves. Counts
    its calls: a model that never calls it computes attention its own way, and that is what is counted."""

    def __init__(self):
        self.calls = 0

    def __enter__(self):
        import torch
        import torch.nn.functional as F

        class Fused(torch.autograd.Function):
            @staticmethod
            def forward(ctx, q, k, v):
                out = q.new_empty(*q.shape[:-1], v.shape[-1])
                lse = torch.empty(*q.shape[:-1], dtype=torch.float32, device=q.device)
                lse._fp32 = 1  # stays fp32 at any --dtype
                ctx.save_for_backward(q, k, v, out, lse)
                return out

            @staticmethod
            def backward(ctx, grad):  # only counted, never run backward
                raise NotImplementedError

        def fused(q, k, v, *args, **kwargs):
            self.calls += 1
            return Fused.apply(q, k, v)

        self._torch = F.scaled_dot_product_attention
        F.scaled_dot_product_attention = fused
        return self

    def __exit__(self, *exc):
        import torch.nn.functional as F

        F.scaled_dot_product_attention = self._torch


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
    recompute_flops_per_sample: float = 0.0
    """FLOPs backward spends recomputing forward (activation checkpointing); not in flops_per_sample, which is
    the model's (what MFU counts)."""


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


def memory_gib(profile: str) -> float | None:
    """The profile's device memory in GiB (its `memory_GiB`), or None."""
    return json.loads((cm.PROFILES_DIR / f"{profile}.json").read_text(encoding="utf-8")).get("memory_GiB")


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
    "--heads": Bound(1, 1_024, "up to 1,024, eight times the most published (MT-NLG 530B's 128)"),
    "--kv-heads": Bound(1, 1_024, "as --heads"),
    "--ffn": Bound(64, 262_144, "from 64 to 262,144, over three times the widest published MLP (PaLM 540B's "
                                "73,728)"),
    "--gpu-memory-gib": Bound(1, 1_024, "up to 1,024, over three times the largest GPU memory (288 GB)"),
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


def _check_modes(attention: str, checkpointing: str) -> None:
    """BadPlan naming the choices for an unknown --attention or --checkpointing."""
    if attention not in ATTENTION:
        raise BadPlan(f"unknown --attention {attention}; choose from {', '.join(ATTENTION)}")
    if checkpointing not in CHECKPOINTING:
        raise BadPlan(f"unknown --checkpointing {checkpointing}; choose from {', '.join(CHECKPOINTING)}")


def llama_ffn(hidden: int) -> int:
    """Llama's MLP width for a hidden size: two thirds of 4 x hidden, rounded up to a multiple of 256 (Llama's
    `multiple_of`; 11,008 for 4,096, 13,824 for 5,120)."""
    return 256 * math.ceil(8 * hidden / 3 / 256)


def llama_block(hidden: int, heads: int | None = None, kv_heads: int | None = None,
                ffn: int | None = None) -> tuple[int, int, int]:
    """(heads, key/value heads, MLP width) of a Llama block of width `hidden`, from what is given: heads of 128
    (the largest count up to hidden / 128 that divides hidden), as many key/value heads, Llama's MLP width."""
    if heads is None:
        heads = max(d for d in range(1, max(1, hidden // HEAD_DIM) + 1) if hidden % d == 0)
    elif hidden % heads:
        raise BadPlan(f"--hidden {hidden} is not a multiple of --heads {heads}; give heads that divide it")
    kv_heads = kv_heads or heads
    if heads % kv_heads:
        raise BadPlan(f"--kv-heads {kv_heads} must divide --heads {heads} (each key/value head serves heads / "
                      f"kv-heads query heads)")
    return heads, kv_heads, ffn or llama_ffn(hidden)


def block_tensors(hidden: int, heads: int, kv_heads: int, ffn: int) -> list[int]:
    """Parameters per tensor of one Llama block, in forward order: RMSNorm, query, key, value, output, RMSNorm,
    gate, up, down."""
    kv = kv_heads * (hidden // heads)
    return [hidden, hidden * hidden, hidden * kv, hidden * kv, hidden * hidden, hidden, hidden * ffn, hidden * ffn,
            ffn * hidden]


def block_params(hidden: int, heads: int | None = None, kv_heads: int | None = None, ffn: int | None = None) -> int:
    """Parameters of one Llama block (two norms, attention, SwiGLU MLP)."""
    return sum(block_tensors(hidden, *llama_block(hidden, heads, kv_heads, ffn)))


def transformer(params: float, layers: int, hidden: int | None, seq_len: int, optimizer: str, *,
                heads: int | None = None, kv_heads: int | None = None, ffn: int | None = None,
                attention: str = "flash", checkpointing: str = "none") -> Shape:
    """A decoder-only transformer given by its size, laid out as Llama is: `layers` blocks of an RMSNorm, attention
    (query and output h x h, key and value h x kv, kv = kv_heads x h / heads: grouped-query attention when
    kv_heads < heads), an RMSNorm and a SwiGLU MLP (gate, up and down, h x ffn each); the rest of --params is a
    separate embedding and output head of equal size and the final norm. With no --hidden, `layers` equal tensors.

    FLOPs per sample (a sequence of s tokens): 6 x the parameters that multiply (all but the embedding, a lookup)
    x s, plus attention's 12 x layers x hidden x s^2 (Narayanan et al. 2021, eq. 3, with the logit layer counted
    as its parameters); with checkpointing, each block's forward (2 x its parameters x s + 4 x hidden x s^2) again
    in backward. Activations per block and sequence: counted from what autograd saves in transformers' Llama
    (LlamaDecoderLayer, torch's ops, fp32; tests/unit/test_plan.py checks the count on the real model), see
    `llama_activations`."""
    for name, value in (("--params", params), ("--layers", layers), ("--hidden", hidden), ("--seq-len", seq_len),
                        ("--heads", heads), ("--kv-heads", kv_heads), ("--ffn", ffn)):
        within(name, value)
    _check_modes(attention, checkpointing)
    if not hidden:
        for name, value in (("--heads", heads), ("--kv-heads", kv_heads), ("--ffn", ffn)):
            if value is not None:
                raise BadPlan(f"{name} needs --hidden (the layout of a block is known only with its width)")
        return Shape(f"transformer ({layers} layers)", params, [params / layers] * layers,
                     {"module": params / layers, "unit": params / layers}, 6 * params * seq_len, optimizer,
                     f"FLOPs per sequence of {seq_len} tokens: 6 x parameters x tokens", 8, None)
    a, kv_heads, f = llama_block(hidden, heads, kv_heads, ffn)
    kv = kv_heads * (hidden // a)
    per_layer = block_tensors(hidden, a, kv_heads, f)
    block = sum(per_layer)
    embed = (params - layers * block - hidden) / 2
    if embed < 0:
        raise BadPlan(f"--params {params:.3g} is fewer than --layers {layers} Llama blocks of hidden {hidden} "
                      f"({block:,.0f} parameters each: attention {a} heads, {kv_heads} key/value heads, SwiGLU "
                      f"MLP {f}) = {layers * block:.3g}; give a larger --params or smaller --layers/--hidden/--ffn")
    tensors = [t for t in [embed, *per_layer * layers, hidden, embed] if t]
    largest = {"module": max(embed, hidden * f), "unit": max(block, 2 * embed + hidden)}
    flops = 6 * (params - embed) * seq_len + 12 * layers * hidden * seq_len**2
    recompute = layers * (2 * block * seq_len + 4 * hidden * seq_len**2) if checkpointing == "full" else 0.0
    gqa = f", {kv_heads} key/value heads" if kv_heads != a else ""
    desc = f"{layers} layers, hidden {hidden}, {a} heads{gqa}, SwiGLU {f}"
    how = (f"FLOPs per sequence of {seq_len} tokens: 6 x parameters (the embedding, a lookup, left out) x tokens + "
           f"12 x layers x hidden x tokens^2" + (", and each block's forward again (full activation "
                                                 "checkpointing)" if recompute else ""))
    return Shape(f"transformer ({desc})", params, tensors, largest, flops, optimizer, how, 8,
                 llama_activations(layers, hidden, a, kv, f, embed / hidden, seq_len, attention, checkpointing),
                 recompute)


def llama_activations(layers: int, hidden: int, heads: int, kv: int, ffn: int, vocab: float, s: int,
                      attention: str, checkpointing: str) -> Activations:
    """Per sequence of s tokens, what autograd saves in transformers' Llama (counted by `Saved` on the real model,
    and held to it by a test): per block 8 s h + 2 s kv + 4 s ffn elements and an fp32 log-sum-exp of heads x s
    with a fused attention kernel; 10 s h + 4 s ffn + heads x s^2 with eager attention (the softmax's s x s
    probabilities; key and value expanded to every head); both + 2 s for the norms' statistics. Outside the
    blocks: the final norm's 3 s h, the rotary tables' 2 s x head size, and the loss's log-softmax over the
    vocabulary, s x vocab. With full checkpointing a block keeps only its input (s h), and one block's own while
    backward recomputes it (its input among them)."""
    h, d = hidden, hidden // heads
    if attention == "flash":
        floats, other = 8 * s * h + 2 * s * kv + 4 * s * ffn + 2 * s, 4 * heads * s
        kernel = "a fused attention kernel (FlashAttention or torch's flash/memory-efficient SDPA: no s^2 scores)"
        per_block = "8 s h + 2 s kv + 4 s ffn + 2 s"
    else:
        floats, other = 10 * s * h + 4 * s * ffn + heads * s**2 + 2 * s, 0
        kernel = "eager attention (the s x s softmax kept per head)"
        per_block = "10 s h + 4 s ffn + a s^2 + 2 s"
    outside = 3 * s * h + 2 * s * d + s * vocab + s
    if checkpointing == "full":
        total_floats, total_other = layers * s * h + floats - s * h + outside, other  # its input counted once
        how = "full activation checkpointing: each block's input kept, one block's activations while it is recomputed"
    else:
        total_floats, total_other = layers * floats + outside, layers * other
        how = "no activation checkpointing"
    return Activations(total_floats, total_other,
                       f"what transformers' Llama saves for backward, per block {per_block} elements, with {kernel}, "
                       f"{how}; s = {s}")


def of_workload(name: str, options: dict[str, Any] | None, optimizer: str | None, *, attention: str = "flash",
                checkpointing: str = "none") -> Shape:
    """The workload's own model, built on the meta device: its parameters tensor by tensor (in registration
    order), its largest module and shard unit (the parameters outside every unit are one unit too, as FSDP wraps
    the root), its optimizer (SGD with momentum or Adam/AdamW) unless `optimizer` is given, the FLOPs of one
    forward and backward counted by torch on two samples of its data, and what autograd saves for backward in a
    forward, with `scaled_dot_product_attention` saving what a fused kernel saves (attention "flash") and with
    every shard unit recomputed in backward (checkpointing "full")."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    import workloads

    _check_modes(attention, checkpointing)
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
    # What one gather holds: a group of units that share a parameter (tied weights) is gathered as one, the
    # shared parameter once.
    groups = w.shard_groups(model) if units != [model] else [[model]]
    in_units = [sum({id(p): p.numel() for m in group for p in m.parameters()}.values()) for group in groups]
    unit = max(in_units + [sum(tensors) - sum(in_units)])
    if optimizer is None:
        opt = w.make_optimizer(model, w.lr(w.global_batch))
        optimizer = "adamw" if isinstance(opt, (torch.optim.Adam, torch.optim.AdamW)) else "sgd"
    data = w.materialize("cpu", w.global_batch)
    x, y = (t.to("meta") for t in data.batch(torch.arange(2), "cpu"))
    counter = FlopCounterMode(display=False)
    with counter:
        w.loss(model(x), y).backward()
    recompute = 0.0
    if checkpointing == "full":
        forward = FlopCounterMode(display=False)
        with forward:
            model(x)
        names = {id(m): f"{type(model).__name__}.{fqn}" if fqn else type(model).__name__
                 for fqn, m in model.named_modules()}
        counts = forward.get_flop_counts()
        recompute = sum(sum(counts.get(names[id(u)], {}).values()) for u in units if u is not model) / len(x)
    fused = FusedAttention() if attention == "flash" else contextlib.nullcontext()
    with fused:
        saved = Saved(model, [u for u in units if u is not model]).run(lambda: w.loss(model(x), y))
    floats, other = saved.total(checkpointing == "full")
    how = "what autograd saved for backward in one forward on the meta device, parameters left out"
    if attention == "flash":
        how += (f"; scaled_dot_product_attention as a fused kernel saves it ({fused.calls} calls)" if fused.calls
                else "; no call to scaled_dot_product_attention, so --attention changes nothing: any attention is "
                     "counted as the model's code computes it")
    if checkpointing == "full":
        how += (f"; full activation checkpointing of its {len(units)} shard units (each one's input kept, the "
                f"largest one's activations while recomputed)" if units != [model] else
                "; checkpointing: the workload has no shard units to recompute, so nothing is saved by it")
    acts = Activations(floats / len(x), other / len(x),
                       how + "; floating-point tensors at the step's dtype, though autocast keeps some in fp32")
    source = "FLOPs of one forward and backward counted by torch's FlopCounterMode on the workload's model"
    if recompute:
        source += ", and the shard units' forward again in backward (checkpointing)"
    given = ", ".join(f"{k}={v}" for k, v in (options or {}).items())
    return Shape(f"{name} ({given})" if given else name, sum(tensors), tensors,
                 {"module": float(module), "unit": float(unit)},
                 counter.get_total_flops() / len(x), optimizer, source, w.global_batch, acts, recompute)


@dataclass
class Cluster:
    profile: str
    nodes: int
    gpus_per_node: int
    dtype: str
    nic_gbps: float | None = None
    nics_per_node: int = 1
    memory_gib: float | None = None

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def capacity_gib(self) -> float | None:
        """Memory per GPU in GiB: --gpu-memory-gib, else the profile's."""
        return self.memory_gib if self.memory_gib is not None else memory_gib(self.profile)

    def fabric(self) -> cm.Fabric:
        """The profile with this cluster's node size and, given --nic-gbps, its network."""
        f = cm.load_profile(self.profile)
        f = dataclasses.replace(f, devices_per_node=self.gpus_per_node)
        if self.nic_gbps is not None:
            f = dataclasses.replace(f, inter_busbw_Bps=self.nics_per_node * self.nic_gbps / 8 * 1e9 * NIC_EFFICIENCY)
        f.time = functools.lru_cache(maxsize=None)(f.time)  # a model's blocks repeat the same sizes thousands of times
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
    within("--gpu-memory-gib", cluster.memory_gib)
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
    rate = fabric.peak_tflops[dtype] * 1e12 * utilisation
    total = shape.flops_per_sample * batch / rate
    backward = 2 * total / 3 + shape.recompute_flops_per_sample * batch / rate
    bandwidth = 2 * fabric.copy_Bps if fabric.copy_Bps else None
    opt = shape.params * OPTIMIZER_TRAFFIC[shape.optimizer] / bandwidth if bandwidth else 0.0
    layers = [(t * grad_bytes, t) for t in shape.tensors]
    return cm.Compute(total / 3, backward, opt, cm.layered_grads(layers, backward), 0.0, fabric.copy_Bps)


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
    capacity = cluster.capacity_gib()
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
            rule = adapter.model_state_rule(OPTIMIZERS[shape.optimizer])
            held = states + (activations or 0.0)
            mid = steps[1]
            plan.rows.append({
                "label": _label(name, knobs), "adapter": name, "knobs": knobs,
                "step_s": {"low": steps[2].step_s, "mid": mid.step_s, "high": steps[0].step_s},
                "samples_per_s": {"low": n * batch / steps[0].step_s, "mid": n * batch / mid.step_s,
                                  "high": n * batch / steps[2].step_s},
                "compute_s": mid.compute_s, "comm_s": mid.comm_s, "exposed_s": mid.exposed_s,
                "model_state_bytes": states, "rule": rule, "activation_bytes": activations,
                "total_bytes": held if activations is not None else None,
                "fits": None if capacity is None else held <= capacity * GiB,
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


def _gib(b: float) -> str:
    return f"{b / GiB:.3g}"


def lines(plan: Plan) -> list[str]:
    """The plan as a terminal would show it: what was priced on what, the table, the recommendation, what was
    not planned and why, and how each figure was counted."""
    c, s, f = plan.cluster, plan.shape, plan.cluster.fabric()
    capacity = c.capacity_gib()
    net = (f"{c.nics_per_node} x {c.nic_gbps:g} Gb/s NIC{'s' if c.nics_per_node > 1 else ''} per node "
           f"({f.inter_busbw_Bps / 1e9:.3g} GB/s all-reduce bus bandwidth at {NIC_EFFICIENCY:.0%} of line rate)"
           if c.nic_gbps is not None else f"the profile's network ({f.inter_busbw_Bps / 1e9:.3g} GB/s all-reduce "
                                          f"bus bandwidth across nodes)")
    flops = s.flops_per_sample
    flops_text = (f"{flops / 1e12:,.0f} TFLOP" if flops >= 1e15 else f"{flops / 1e12:.3g} TFLOP" if flops >= 1e12
                  else f"{flops / 1e9:.3g} GFLOP")
    acts = s.activations
    fits = (f"fits in {capacity:g} GiB" if capacity else "fits") + ("" if acts else " (model states only)")
    out = [f"{s.name}: {s.params:,.0f} parameters, {flops_text} per sample (forward and backward), "
           f"{s.optimizer}; {plan.batch} per GPU ({plan.batch * c.gpus:,} global)",
           f"on {c.gpus} x {f.device} ({c.nodes} node{'s' if c.nodes > 1 else ''} x {c.gpus_per_node}, profile "
           f"{c.profile}, {capacity:g} GiB each): {f.intra_busbw_Bps / 1e9:.3g} GB/s inside a node, {net}; "
           f"{c.dtype}",
           f"model version {VERSION}; compute at {UTILISATION[0]:.0%}-{UTILISATION[2]:.0%} of the {c.dtype} peak "
           f"({f.peak_tflops[c.dtype]:g} TFLOP/s), the middle figure at {UTILISATION[1]:.0%}: ranges are over that "
           f"assumption, not confidence intervals",
           "",
           "| backend | step (ms) | samples/s | communication exposed (ms) | model states per GPU (GiB) | "
           + ("activations (GiB) | total per GPU (GiB) | " if acts else "") + f"{fits} |",
           "|---|---|---|---|---|" + ("---|---|" if acts else "") + "---|"]
    for r in sorted(plan.rows, key=lambda r: r["step_s"]["mid"]):
        st, sp = r["step_s"], r["samples_per_s"]
        total = f"{_gib(r['activation_bytes'])} | {_gib(r['total_bytes'])} | " if acts else ""
        out.append(f"| {r['label']} | {_ms(st['mid'])} [{_ms(st['low'])}-{_ms(st['high'])}] | "
                   f"{sp['mid']:,.0f} [{sp['low']:,.0f}-{sp['high']:,.0f}] | {_ms(r['exposed_s'])} | "
                   f"{_gib(r['model_state_bytes'])} | {total}{ {True: 'yes', False: 'no', None: '?'}[r['fits']]} |")
    out.append("")
    rec = plan.recommendation
    too_big = [r for r in plan.rows if r["fits"] is False]
    memory = {r["label"]: r["model_state_bytes"] for r in plan.rows}
    if rec is None:
        held, cures = (("model states and activations", "more GPUs, a smaller model, a dtype with fewer bytes, a "
                        "smaller per-GPU batch or activation checkpointing") if acts else
                       ("model states", "more GPUs, a smaller model or a dtype with fewer bytes"))
        out.append(f"recommendation: none: no configuration's {held} fit in {capacity:g} GiB per GPU; {cures}")
    else:
        text = f"recommendation: {rec['label']}"
        if rec["tied"]:
            text += (f", which holds the least memory ({_gib(memory[rec['label']])} GiB of model states per GPU) "
                     f"of the {len(rec['tied']) + 1} configurations the model does not rank by speed (within "
                     f"{TIE:.0%} at every assumed utilisation, or faster at some): {', '.join(rec['tied'])}")
        if rec["next"]:
            r = rec["ratio"]
            text += (f"; {r['mid']:.2f}x [{r['low']:.2f}-{r['high']:.2f}] faster than {rec['next']}"
                     + ("" if r["low"] > 1 else ", not resolved at every assumed utilisation"))
        elif not rec["tied"]:
            text += " (the only configuration that fits)"
        out.append(text)
    if too_big:
        out.append("does not fit: " + "; ".join(
            f"{r['label']} ({_gib(r['total_bytes'])} GiB: {_gib(r['model_state_bytes'])} of model states + "
            f"{_gib(r['activation_bytes'])} of activations)" if acts else
            f"{r['label']} ({_gib(r['model_state_bytes'])} GiB of model states)" for r in too_big))
    if plan.skipped:
        out.append(f"not planned at {c.dtype}: " + "; ".join(f"{k} ({v})" for k, v in plan.skipped.items()))
    rules: dict[str, list[str]] = {}
    for r in plan.rows:
        rules.setdefault(r["rule"], []).append(r["label"])
    out.append(f"model states (P parameters, N = {c.gpus} GPUs, L = {s.largest['module']:,.0f} parameters in "
               f"the largest module, U = {s.largest['unit']:,.0f} in the largest shard unit; bytes): "
               + "; ".join(f"{', '.join(labels)}: {rule}" for rule, labels in rules.items()))
    if acts:
        out.append(f"activations: {_gib(acts.bytes(c.dtype, plan.batch))} GiB per GPU at {plan.batch} per GPU "
                   f"under every backend ({acts.source}); total and fits hold both; buffers, temporaries and the "
                   f"framework's own allocations come on top")
    else:
        out.append("activations: not known without --hidden; they, buffers, temporaries and the framework's own "
                   "allocations come on top of the model states")
    slow = f.overlap_slowdown
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
