"""What `compare plan` prices: a model's shape (parameters per tensor, FLOPs per sample, the activations a batch
keeps), from a workload built on the meta device or from a transformer's size, and the bounds real models and
clusters have, each with its source.

Runs in: the parent (harness/model/planner.py)."""

from __future__ import annotations

import contextlib
import math
import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from adapters.dtypes import SHORT_DTYPES
from harness.model.activations import (ATTENTION, Activations, BadPlan, Checkpointing, FusedAttention, Saved,
                                       checkpointing_of)


DTYPES = ("bf16", "fp16", "fp32")


OPTIMIZERS = {"adamw": 8.0, "sgd": 4.0}
"""Optimizer state bytes per parameter in fp32: AdamW's two moments, SGD's momentum buffer."""


OPTIMIZER_TRAFFIC = {"adamw": 28.0, "sgd": 20.0}
"""Bytes per parameter an fp32 optimizer step reads and writes (AdamW: parameter, gradient and both moments read,
parameter and moments written; SGD with momentum: parameter, gradient, buffer read, parameter and buffer
written)."""


HEAD_DIM = 128
"""A transformer given by --hidden has hidden / HEAD_DIM attention heads (GPT-3's and Llama's head size)."""


@dataclass
class Shape:
    """What the plan needs of a model."""

    name: str
    params: float
    tensors: list[float]
    """Parameters per tensor, in forward order."""
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
    frozen: list[bool] = field(default_factory=list)
    """Per tensor: frozen (requires no gradient). Empty: every tensor trains."""
    output_elements: float = 0.0
    """Floating-point elements of the model's output per sample (a language model's logits over its vocabulary):
    what the loss holds in fp32 beside the activations (LOSS_BYTES)."""
    checkpointing: Checkpointing = field(default_factory=Checkpointing)
    cast_params: float | None = None
    """Parameters of the matrix and convolution weights backward needs at the end of forward (those of checkpointed
    blocks excepted: recomputed): under autocast each is held a second time, in 16 bits, the copy its matmul saved.
    None: not counted."""
    matmul_params: float | None = None
    """Parameters of every matrix and convolution weight a forward's matmuls take, checkpointed blocks' too: what a
    cast cache that lives past forward (apex O1's, until its loss scaling ends after backward) holds in 16 bits.
    None: not counted."""
    param_dtypes: list[str] = field(default_factory=list)
    """The dtypes of the parameters that train, as the model builds them, in short names (ModelFacts'); empty: fp32
    (a transformer given by its size)."""
    param_bytes: float = 4.0
    """Bytes per parameter element as the model builds them (8 for a model built in fp64): what a row training the
    model as built (no mixed precision) holds each parameter, gradient and optimizer state element in."""

    @property
    def built_dtype(self) -> str | None:
        """The one dtype every parameter is built in where it is not fp32 ("fp64"); None for fp32 or a mix."""
        one = set(self.param_dtypes)
        return next(iter(one)) if len(one) == 1 and one != {"fp32"} else None

    @property
    def trainable(self) -> float:
        """Parameters that train: all but the frozen tensors'."""
        return sum(t for t, f in zip(self.tensors, self.frozen) if not f) if self.frozen else self.params

    def grad_layers(self, grad_bytes: float) -> list[tuple[float, float]]:
        """(gradient bytes, share of backward) per tensor in forward order: a frozen tensor has no gradient, but its
        layer's backward still runs (its input's gradient)."""
        frozen = self.frozen or [False] * len(self.tensors)
        return [(0.0 if f else t * grad_bytes, t) for t, f in zip(self.tensors, frozen)]


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
    "--batch": Bound(1, 65_536, "per GPU, up to 65,536: no GPU's share can exceed the largest global batch "
                                "published (BERT with LAMB, You et al. 2020)"),
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
        # an integer as the user typed it; a fraction below 1 in its own digits (1e-09, not "0")
        got = str(value) if isinstance(value, int) else _count(value) if abs(value) >= 1 else f"{value:g}"
        raise BadPlan(f"{name} must be from {_count(b.low)} to {_count(b.high)} ({b.why}), got {got}")


def _count(v: float) -> str:
    """1,000,000 and 65,536 as they are; 1e13 and 1e200 (as a user types them) from 10^7 on."""
    return f"{v:,.0f}" if abs(v) < 1e7 else re.sub(r"e\+0*", "e", f"{v:g}")


def _check_modes(attention: str, checkpointing: str | Checkpointing) -> Checkpointing:
    """The checkpointing asked for, or BadPlan naming the choices for an unknown --attention or --checkpointing."""
    if attention not in ATTENTION:
        raise BadPlan(f"unknown --attention {attention}; choose from {', '.join(ATTENTION)}")
    return checkpointing if isinstance(checkpointing, Checkpointing) else checkpointing_of(checkpointing)


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
                attention: str = "flash", checkpointing: str | Checkpointing = "none") -> Shape:
    """A decoder-only transformer given by its size, laid out as Llama is: `layers` blocks of an RMSNorm, attention
    (query and output h x h, key and value h x kv, kv = kv_heads x h / heads: grouped-query attention when
    kv_heads < heads), an RMSNorm and a SwiGLU MLP (gate, up and down, h x ffn each); the rest of --params is a
    separate embedding and output head of equal size and the final norm. With no --hidden, `layers` equal tensors.

    FLOPs per sample (a sequence of s tokens): 6 x the parameters that multiply (all but the embedding, a lookup)
    x s, plus attention's 12 x layers x hidden x s^2 (Narayanan et al. 2021, eq. 3, with the logit layer counted
    as its parameters); backward recomputes, with full checkpointing, each block's forward (2 x its parameters x
    s + 4 x hidden x s^2), with torchtitan's every-Nth-block policy that of every Nth block, and with its per-op
    policy the matmuls it does not save (key, output and up projections: every second of the block's seven) and,
    with eager attention, the attention itself (no fused kernel output to save). Activations per block and
    sequence: counted from what autograd saves in transformers' Llama (LlamaDecoderLayer, torch's ops, fp32;
    tests/unit/test_plan.py checks the count on the real model, under torch's own checkpointing), see
    `llama_activations`."""
    for name, value in (("--params", params), ("--layers", layers), ("--hidden", hidden), ("--seq-len", seq_len),
                        ("--heads", heads), ("--kv-heads", kv_heads), ("--ffn", ffn)):
        within(name, value)
    ck = _check_modes(attention, checkpointing)
    if not hidden:
        for name, value in (("--heads", heads), ("--kv-heads", kv_heads), ("--ffn", ffn)):
            if value is not None:
                raise BadPlan(f"{name} needs --hidden (the layout of a block is known only with its width)")
        if ck.op:
            raise BadPlan("--checkpointing selective (the per-op policy) needs --hidden: which matmuls it "
                          "recomputes depends on the layout of a block; give --hidden, or selective:N")
        recompute = ck.count(layers) * 2 * params / layers * seq_len
        how = f"FLOPs per sequence of {seq_len} tokens: 6 x parameters x tokens"
        if recompute:
            how += f", and {ck.count(layers)} blocks' forward again ({ck})"
        return Shape(f"transformer ({layers} layers)", params, [params / layers] * layers,
                     {"module": params / layers, "unit": params / layers}, 6 * params * seq_len, optimizer,
                     how, 8, None, recompute, checkpointing=ck,
                     cast_params=params * (layers - ck.count(layers)) / layers,  # its tensors are all matrices
                     matmul_params=params)
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
    if ck.op:
        recompute = layers * (2 * seq_len * hidden * (kv + hidden + f)
                              + (4 * hidden * seq_len**2 if attention == "eager" else 0))
    else:
        recompute = ck.count(layers) * (2 * block * seq_len + 4 * hidden * seq_len**2)
    gqa = f", {kv_heads} key/value heads" if kv_heads != a else ""
    desc = f"{layers} layers, hidden {hidden}, {a} heads{gqa}, SwiGLU {f}"
    how = (f"FLOPs per sequence of {seq_len} tokens: 6 x parameters (the embedding, a lookup, left out) x tokens + "
           f"12 x layers x hidden x tokens^2")
    if ck.mode == "full":
        how += ", and each block's forward again (full activation checkpointing)"
    elif ck.op:
        how += (", and the key, output and up projections again (torchtitan's per-op policy recomputes every "
                "second matmul)" + (" with the attention (eager: no fused kernel output saved)"
                                    if attention == "eager" else ""))
    elif recompute:
        how += f", and {ck.count(layers)} blocks' forward again (every {ck.every}th block)"
    # the matmuls' weights: every block's but its two norms', and the head's (the embedding is a lookup); a block
    # that is checkpointed (under the per-op policy, every block) keeps none of them for backward
    kept = layers - ck.count(layers)
    return Shape(f"transformer ({desc})", params, tensors, largest, flops, optimizer, how, 8,
                 llama_activations(layers, hidden, a, kv, f, embed / hidden, seq_len, attention, ck),
                 recompute, output_elements=seq_len * embed / hidden, checkpointing=ck,
                 cast_params=kept * (block - 2 * hidden) + embed, matmul_params=layers * (block - 2 * hidden) + embed)


def llama_activations(layers: int, hidden: int, heads: int, kv: int, ffn: int, vocab: float, s: int,
                      attention: str, checkpointing: str | Checkpointing) -> Activations:
    """Per sequence of s tokens, what autograd saves in transformers' Llama (counted by `Saved` on the real model,
    and held to it by a test): per block 8 s h + 2 s kv + 4 s ffn elements and an fp32 log-sum-exp of heads x s
    with a fused attention kernel; 10 s h + 4 s ffn + heads x s^2 with eager attention (the softmax's s x s
    probabilities; key and value expanded to every head); both + 2 s for the norms' statistics. Outside the
    blocks: the final norm's 3 s h, the rotary tables' 2 s x head size, and the loss's log-softmax over the
    vocabulary, s x vocab. With full checkpointing a block keeps only its input (s h), and one block's own while
    backward recomputes it (its input among them); with every Nth block checkpointed, those blocks do; with
    torchtitan's per-op policy each block keeps its input and what the policy saves: the query, value, gate and
    down projections' outputs (s h + s kv + s ffn + s h) and the fused attention's output and log-sum-exp (s h and
    heads x s in fp32; with eager attention nothing of the attention), and one block's activations while it is
    recomputed, less those it holds anyway (its input, the gate's and the fused attention's outputs, which
    autograd saves too). With eager attention a checkpointed block also keeps the s x s causal mask it is given.
    tests/unit/test_plan.py holds all of it to what torch's own checkpointing (and its selective checkpointing
    under this policy) keeps in transformers' Llama."""
    ck = checkpointing if isinstance(checkpointing, Checkpointing) else checkpointing_of(checkpointing)
    h, d = hidden, hidden // heads
    if attention == "flash":
        floats, other = 8 * s * h + 2 * s * kv + 4 * s * ffn + 2 * s, 4 * heads * s
        kernel = "a fused attention kernel (FlashAttention or torch's flash/memory-efficient SDPA: no s^2 scores)"
        per_block = "8 s h + 2 s kv + 4 s ffn + 2 s"
        op_floats, op_other = 4 * s * h + s * kv + s * ffn, other
        kept_anyway = 2 * s * h + s * ffn  # the block's input, the attention's output, the gate's: autograd's too
    else:
        floats, other = 10 * s * h + 4 * s * ffn + heads * s**2 + 2 * s, 0
        kernel = "eager attention (the s x s softmax kept per head)"
        per_block = "10 s h + 4 s ffn + a s^2 + 2 s"
        op_floats, op_other = 3 * s * h + s * kv + s * ffn, 0
        kept_anyway = s * h + s * ffn
    outside = 3 * s * h + 2 * s * d + s * vocab + s
    cut = ck.count(layers)
    if cut and attention == "eager":
        outside += s * s  # the causal mask, an input every checkpointed block keeps (a fused kernel needs none)
    if ck.op:
        total_floats = layers * op_floats + (floats - kept_anyway) + outside
        total_other = layers * op_other
    elif cut:  # full, or every Nth block: a checkpointed block keeps its input; one is recomputed at a time
        total_floats = (layers - cut) * floats + cut * s * h + floats - s * h + outside
        total_other = (layers - cut) * other + other
    else:
        total_floats, total_other = layers * floats + outside, layers * other
    return Activations(total_floats, total_other,
                       f"what transformers' Llama saves for backward, per block {per_block} elements, with {kernel}, "
                       f"{ck.describe()}; s = {s}")


def _lazy(model) -> bool:
    """Whether the model still holds parameters a lazy module (nn.LazyLinear) makes at its first forward."""
    from torch.nn.parameter import is_lazy

    return any(is_lazy(p) for p in model.parameters())


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 160 else text[:157] + "..."


def _counted(w, model, x, y, attention: str, ck: Checkpointing):
    """One forward and backward of `model` on the batch (x, y), on whichever device they are: the FLOPs torch
    counts, the output's logits, what autograd saves (Saved, with the fused-attention rule and the checkpointing
    asked for), the fused attention calls, what backward recomputes per batch, and the shard units. A lazy module's
    parameters are made by a first forward before anything is counted. Returns the model with the counts."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from workloads import batch as batches

    if _lazy(model):
        with torch.no_grad():
            w.forward(model, x)
    counter = FlopCounterMode(display=False)
    with counter:
        out = w.forward(model, x)
        w.step_loss(out, y).backward()
    logits = batches.logits(out)
    if not isinstance(logits, torch.Tensor):  # a tuple or dict without `logits`: its largest per-sample tensor
        per_sample = [t for _, t in batches.leaves(out) if t.is_floating_point() and t.dim()
                      and t.shape[0] == batches.length(x)]
        logits = max(per_sample, key=lambda t: t.numel()) if per_sample else None
    units = w.shard_units(model) or [model]
    blocks = [u for u in units if u is not model]
    fused = FusedAttention() if attention == "flash" else contextlib.nullcontext()
    saved = Saved(model, blocks, ck)
    if attention == "flash":
        fused.on_output = saved.policy_output
    with fused:
        saved.run(lambda: w.step_loss(w.forward(model, x), y))
    recompute = 0.0
    if ck.op:
        recompute = sum(saved.recompute_flops) / batches.length(x)
    elif ck.count(len(blocks)):
        forward = FlopCounterMode(display=False)
        with forward:
            w.forward(model, x)
        names = {id(m): f"{type(model).__name__}.{fqn}" if fqn else type(model).__name__
                 for fqn, m in model.named_modules()}
        counts = forward.get_flop_counts()
        recompute = sum(sum(counts.get(names[id(u)], {}).values()) for i, u in enumerate(blocks)
                        if ck.checkpointed(i)) / batches.length(x)
    return model, (counter.get_total_flops(), logits, saved, getattr(fused, "calls", 0), recompute, units, blocks)


def of_workload(name: str, options: dict[str, Any] | None, optimizer: str | None, *, attention: str = "flash",
                checkpointing: str | Checkpointing = "none") -> Shape:
    """The workload's own model, built on the meta device: its parameters tensor by tensor (in registration
    order) and which are frozen (requires_grad False), its largest module and shard unit (the parameters outside
    every unit are one unit too, as FSDP wraps the root), its optimizer (SGD with momentum or Adam/AdamW) unless
    `optimizer` is given, the FLOPs of one forward and backward counted by torch on two samples of its data, the
    size of its output, and what autograd saves for backward in a forward, with `scaled_dot_product_attention`
    saving what a fused kernel saves (attention "flash") and with its shard units checkpointed as asked: every one
    (full), every Nth (selective:N), or under torchtitan's per-op policy (selective), applied op by op on the meta
    device as torch's selective checkpointing would (Saved with a policy)."""
    import torch

    import workloads
    from harness.shared.registry import UserCodeError, raised_in_user_code
    from workloads import batch as batches
    from workloads.base import SMALL_MODEL, nothing_to_train

    ck = _check_modes(attention, checkpointing)
    w = workloads.get(name, options)
    reason = w.unavailable()
    if reason:
        raise BadPlan(f"workload {name} cannot be planned here: {reason}")
    given = ", ".join(f"{k}={v}" for k, v in (options or {}).items()) or "its defaults"
    try:
        with torch.device("meta"):  # nothing allocated: a model larger than this machine can still be planned
            model = w.build_model()
    except (RuntimeError, OverflowError, ValueError) as exc:  # e.g. a tensor larger than any address space
        if workloads.source(name) != "built-in" and raised_in_user_code(exc):  # their own error, not its size
            raise UserCodeError(f"building workload {name} on torch's meta device", exc) from None
        raise BadPlan(f"workload {name} ({given}) cannot be built: {' '.join(str(exc).split())}; choose smaller "
                      f"workload options") from None
    why = None if _lazy(model) else nothing_to_train(model, name)
    if why:  # one line, as `compare run` says it (its backward had no gradient to take: two tracebacks)
        raise BadPlan(why)
    data = w.materialize("cpu", w.global_batch)
    x, y = data.batch(torch.arange(2), "cpu")
    device = "meta"
    try:
        model, counts = _counted(w, model, batches.to(x, "meta"), batches.to(y, "meta"), attention, ck)
    except (UserCodeError, BadPlan):  # BadPlan: the request's own (selective:N beyond its blocks), not meta's
        raise
    except Exception as exc:  # noqa: BLE001 - what meta cannot run (.item(), a data-dependent branch, a copy to
        # the CPU) is counted on the CPU, for a model small enough to build here
        params = None if _lazy(model) else sum(p.numel() for p in model.parameters())
        if params is not None and params > SMALL_MODEL:
            raise BadPlan(f"workload {name} ({given}) cannot be counted on torch's meta device ({_first_line(exc)}), "
                          f"and at {params:,} parameters it is not built on this machine's CPU instead (up to "
                          f"{SMALL_MODEL:,}); make its forward run on meta (no .item() or data-dependent branch), or "
                          f"give its size: --params, --layers, --hidden") from None
        device = "CPU"
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(w.seed)
            try:
                model = w.build_model()
                model, counts = _counted(w, model, x, y, attention, ck)
            except UserCodeError:
                raise
            except Exception as cpu_exc:  # noqa: BLE001 - the user's code fails on the CPU too
                raise UserCodeError(f"a forward and backward of workload {name} on 2 training samples",
                                    cpu_exc) from None
    flops, logits, saved, fused_calls, recompute, units, blocks = counts
    if optimizer is None:
        opt = w.make_optimizer(model, w.lr(w.global_batch))
        optimizer = "adamw" if isinstance(opt, (torch.optim.Adam, torch.optim.AdamW)) else "sgd"
    params = list(model.parameters())
    tensors = [float(p.numel()) for p in params]
    dtypes = sorted({SHORT_DTYPES.get(str(p.dtype).removeprefix("torch."), str(p.dtype).removeprefix("torch."))
                     for p in params if p.requires_grad})
    element_bytes = sum(p.numel() * p.element_size() for p in params) / max(1, sum(p.numel() for p in params))
    frozen = [not p.requires_grad for p in params]
    module = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    # What one gather holds: a group of units that share a parameter (tied weights) is gathered as one, the
    # shared parameter once.
    groups = w.shard_groups(model) if units != [model] else [[model]]
    in_units = [sum({id(p): p.numel() for m in group for p in m.parameters()}.values()) for group in groups]
    unit = max(in_units + [sum(tensors) - sum(in_units)])
    output_elements = float(logits.numel()) / batches.length(x) if isinstance(logits, torch.Tensor) and \
        logits.is_floating_point() else 0.0
    floats, other = saved.total(ck)
    how = ("what autograd saved for backward in one forward on the meta device" if device == "meta" else
           "what autograd saved for backward in one forward on the CPU (its forward does what the meta device "
           "cannot)") + ", parameters left out"
    if attention == "flash":
        how += (f"; scaled_dot_product_attention as a fused kernel saves it ({fused_calls} calls)" if fused_calls
                else "; no call to scaled_dot_product_attention, so --attention changes nothing: any attention is "
                     "counted as the model's code computes it")
    if ck.mode != "none":
        how += (f"; {ck.describe()}, over its {len(blocks)} shard units ({ck.count(len(blocks))} checkpointed; the "
                f"largest one's activations while recomputed)" if blocks else
                f"; {ck}: the workload has no shard units to recompute, so checkpointing changes nothing")
    acts = Activations(floats / batches.length(x), other / batches.length(x),
                       how + "; floating-point tensors at the step's dtype, though autocast keeps some in fp32")
    source = "FLOPs of one forward and backward counted by torch's FlopCounterMode on the workload's model" + (
        "" if device == "meta" else " on the CPU")
    if recompute:
        source += (", and what backward recomputes (" + ("the ops torchtitan's per-op policy does not save"
                                                       if ck.op else f"the checkpointed shard units' forward, {ck}")
                   + ")")
    flops = flops / batches.length(x)
    given = ", ".join(f"{k}={v}" for k, v in (options or {}).items())
    return Shape(f"{name} ({given})" if given else name, sum(tensors), tensors,
                 {"module": float(module), "unit": float(unit)},
                 flops, optimizer, source, w.global_batch, acts, recompute,
                 frozen if any(frozen) else [], output_elements, ck, saved.saved_weights(ck),
                 saved.saved_weights(), dtypes, element_bytes)
