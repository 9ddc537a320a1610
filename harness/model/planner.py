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
from harness.model import comm_cost, hardware
from harness.model.compute import Compute, layered_grads
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
CHECKPOINTING = ("none", "full", "selective")
"""--checkpointing: none; full recomputes every block (shard unit) in backward, keeping only its input; selective is
one of torchtitan's two policies: `selective` or `selective:op`, its per-op save list, or `selective:N`, every Nth
block checkpointed in full (Checkpointing)."""
SELECTIVE_OP_SAVES = ("aten.mm.default", "aten._scaled_dot_product_efficient_attention.default",
                      "aten._scaled_dot_product_flash_attention.default",
                      "aten._scaled_dot_product_cudnn_attention.default",
                      "aten._scaled_dot_product_flash_attention_for_cpu.default",
                      "_c10d_functional.reduce_scatter_tensor.default", "aten.max.default")
"""The ops whose outputs torchtitan's per-op policy saves (`_save_list` of torchtitan/models/llama3/infra/
parallelize.py, 2025: mm, the fused attention kernels, reduce_scatter, max), every second mm of a block excepted
("Saves output of all compute ops, except every second mm", torchtitan/distributed/activation_checkpoint.py);
the rest of a block is recomputed in backward. The CPU's fused attention kernel is added: it is the GPU kernels'
counterpart, and the one this project's tests run."""
ALLOCATOR_HEADROOM = 0.10
"""What PyTorch's CUDA caching allocator reserves beyond what is allocated at the peak, as a share of it: an
assumption, not a measurement of the target. On the H200 (docs/gpu.md, the fourth lease) reserved over allocated
was 1.10 for ddp and amp, 1.15 and 1.14 for FSDP2, 1.27 for ZeRO-3."""
LOSS_BYTES = 8.0
"""Bytes per element of the model's output (a language model's logits) that the loss holds in fp32 at the start of
backward beyond the activations: its gradient and the output's gradient, 4 bytes each (cross-entropy runs in
fp32, under autocast too)."""
GiB = 2**30


@dataclass(frozen=True)
class Checkpointing:
    """Activation checkpointing as torchtitan applies it to a model's blocks (shard units)."""

    mode: str = "none"
    every: int | None = None
    """selective: checkpoint every Nth block in full (torchtitan's selective_ac_option N: the blocks whose 1-based
    position is a multiple of N); None: the per-op policy, every block (SELECTIVE_OP_SAVES)."""

    @property
    def op(self) -> bool:
        return self.mode == "selective" and self.every is None

    def checkpointed(self, i: int) -> bool:
        """Whether the block at 0-based position i is checkpointed."""
        if self.mode == "selective" and self.every is not None:
            return (i + 1) % self.every == 0
        return self.mode != "none"

    def count(self, blocks: int) -> int:
        return sum(self.checkpointed(i) for i in range(blocks))

    def __str__(self) -> str:
        if self.mode != "selective":
            return self.mode
        return "selective:op" if self.every is None else f"selective:{self.every}"

    def describe(self) -> str:
        if self.mode == "none":
            return "no activation checkpointing"
        if self.mode == "full":
            return "full activation checkpointing (every block recomputed, its input kept)"
        if self.op:
            return ("selective activation checkpointing, torchtitan's per-op policy (the outputs of matmuls, fused "
                    "attention and reductions saved, every second matmul of a block and the rest recomputed)")
        return (f"selective activation checkpointing, torchtitan's every-{self.every}th-block policy (every "
                f"{self.every}th block recomputed whole, its input kept)")


def checkpointing_of(value: str) -> Checkpointing:
    """--checkpointing none | full | selective | selective:op | selective:N, or BadPlan naming the choices."""
    mode, _, option = value.partition(":")
    if mode not in CHECKPOINTING or (option and mode != "selective"):
        raise BadPlan(f"unknown --checkpointing {value}; choose from none, full, selective (torchtitan's per-op "
                      f"policy; selective:op the same), selective:N (every Nth block)")
    if mode != "selective" or option in ("", "op"):
        return Checkpointing(mode)
    try:
        every = int(option)
    except ValueError:
        every = 0
    if every < 1 or str(every) != option.lstrip("+"):
        raise BadPlan(f"--checkpointing {value}: N must be a whole number of at least 1 (every Nth block "
                      f"checkpointed, torchtitan's selective_ac_option), or op for its per-op policy")
    return Checkpointing("selective", every)


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


def _key(t) -> int:
    """The storage a tensor's data lives in: a view, an `_unsafe_view` (how a matmul's output is reshaped) and the
    tensor it came from are one, as memory sees them."""
    return t.untyped_storage()._cdata


class Saved:
    """What autograd saves for backward while a forward runs: each tensor once (a tensor saved by two ops, or a
    view of it, is one), the model's parameters and buffers and their views left out (they are model states).
    With units, each saved tensor is attributed to the unit running when it was saved, and each unit's input is
    recorded: what activation checkpointing keeps of a unit. With `policy` (Checkpointing with the per-op policy),
    the outputs that torchtitan's per-op policy would save in each unit are recorded too, and the FLOPs of the ops
    it would recompute."""

    def __init__(self, model, units=(), policy: Checkpointing | None = None):
        self.states = {_key(p) for p in model.parameters()} | {_key(b) for b in model.buffers()}
        self.units = list(units)
        self.policy = policy if policy is not None and policy.op else None
        self.kept: dict[int, tuple[int, bool, float]] = {}
        """a saved tensor's storage (_key) -> (the outermost unit running when it was saved, -1 for none; held at
        the step's dtype; its elements or bytes)."""
        self.inputs: dict[int, tuple[bool, float]] = {}
        """each unit's input's storage -> (held at the step's dtype; its elements or bytes)."""
        self.unit_inputs: dict[int, int] = {}
        """unit -> its input's storage."""
        self.policy_saved: list[dict[int, tuple[bool, float]]] = [{} for _ in self.units]
        """Per unit: the storage of a tensor the per-op policy saves -> (at the step's dtype; elements or bytes)."""
        self.recompute_flops = [0.0 for _ in self.units]
        """Per unit: FLOPs of the ops the per-op policy recomputes in backward."""
        self._active: list[int] = []
        self._mm = 0
        self._refs: list = []

    def policy_output(self, tensors) -> None:
        """Record tensors the policy saves (a fused attention's outputs) for the unit running, if any."""
        if self.policy is None or not self._active:
            return
        for t in tensors:
            base = t if t._base is None else t._base
            self._refs.append(base)  # alive until the run ends, so that no later tensor reuses its storage's key
            self.policy_saved[self._active[0]].setdefault(_key(base), _size(base))

    def _dispatch_mode(self):
        """A TorchDispatchMode that applies the per-op policy to each op run inside a unit (torchtitan's rule:
        an op in SELECTIVE_OP_SAVES is saved, every second mm of the unit's forward excepted; any other op is
        recomputed, and its FLOPs counted as torch's FlopCounterMode counts them)."""
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_leaves
        from torch.utils.flop_counter import flop_registry

        saved = self

        class Policy(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                out = func(*args, **kwargs)
                if not saved._active:
                    return out
                unit = saved._active[0]
                name = str(func)
                if name == "aten.mm.default":
                    saved._mm += 1
                keep = name in SELECTIVE_OP_SAVES and not (name == "aten.mm.default" and saved._mm % 2 == 0)
                if keep:
                    saved.policy_output([t for t in tree_leaves(out) if isinstance(t, torch.Tensor)])
                elif func.overloadpacket in flop_registry:
                    saved.recompute_flops[unit] += flop_registry[func.overloadpacket](*args, **kwargs, out_val=out)
                return out

        return Policy()

    def run(self, forward) -> "Saved":
        import torch

        hooks = []
        for i, unit in enumerate(self.units):
            def enter(module, args, i=i):
                if not self._active:
                    self._mm = 0  # torchtitan counts a block's matmuls afresh in each of its forwards
                    first = next((a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()), None)
                    if first is not None:
                        base = first if first._base is None else first._base
                        self._refs.append(base)
                        self.inputs[_key(base)] = _size(base)
                        self.unit_inputs[i] = _key(base)
                self._active.append(i)

            def leave(*_):
                self._active.pop()  # returns None: the unit's output is left as it is

            hooks += [unit.register_forward_pre_hook(enter), unit.register_forward_hook(leave)]

        def pack(t):
            base = t if t._base is None else t._base
            key = _key(base)
            if key not in self.states and key not in self.kept:
                self.kept[key] = (self._active[0] if self._active else -1, *_size(base))
            return t

        mode = self._dispatch_mode() if self.policy is not None else contextlib.nullcontext()
        try:
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), mode:
                forward()
        finally:
            for h in hooks:
                h.remove()
            self._refs.clear()
        return self

    def total(self, checkpointing: Checkpointing | None = None) -> tuple[float, float]:
        """(floating-point elements, other bytes) held for backward at the end of forward and while backward
        recomputes a checkpointed unit: what is saved outside the units and in the units not checkpointed, each
        checkpointed unit's input (and, under the per-op policy, what the policy saves in it), plus the largest
        checkpointed unit's own while backward recomputes it."""
        held, largest = self.parts(checkpointing)
        return held[0] + largest[0], held[1] + largest[1]

    def parts(self, checkpointing: Checkpointing | None = None) -> tuple[tuple[float, float], tuple[float, float]]:
        """(what is held at the end of forward, what the largest checkpointed unit's recompute adds to it), each as
        (floating-point elements, other bytes)."""
        def add(items):
            items = list(items)
            return (sum(n for floating, n in items if floating), sum(n for floating, n in items if not floating))

        ck = checkpointing or Checkpointing()
        cut = {i for i in range(len(self.units)) if ck.checkpointed(i)}
        if not cut:
            return add((f, n) for _, f, n in self.kept.values()), (0.0, 0.0)
        counted = {t: (f, n) for t, (u, f, n) in self.kept.items() if u not in cut}
        for i in sorted(cut):
            t = self.unit_inputs.get(i)
            if t is not None:
                counted.setdefault(t, self.inputs[t])
            if ck.op:
                for t, fn in self.policy_saved[i].items():
                    counted.setdefault(t, fn)
        own = [add((f, n) for t, (u, f, n) in self.kept.items() if u == i and t not in counted) for i in cut]
        return add(counted.values()), max(own, key=lambda fo: 2 * fo[0] + fo[1], default=(0.0, 0.0))


def saved_for_backward(model, run) -> tuple[float, float]:
    """(floating-point elements, other bytes) that autograd saves for backward while `run()` executes (Saved)."""
    return Saved(model).run(run).total()


class FusedAttention:
    """While active, torch's `scaled_dot_product_attention` saves for backward what a fused kernel saves
    (FlashAttention-2, and PyTorch's flash and memory-efficient kernels: query, key, value, output and an fp32
    log-sum-exp per query row; no s x s scores) instead of what its decomposition on the meta device saves. Counts
    its calls: a model that never calls it computes attention its own way, and that is what is counted."""

    def __init__(self, on_output=None):
        self.calls = 0
        self.on_output = on_output
        """Called with the kernel's outputs (output and log-sum-exp): a selective policy that saves the fused
        attention's outputs records them (Saved.policy_output)."""

    def __enter__(self):
        import torch
        import torch.nn.functional as F

        on_output = self.on_output

        class Fused(torch.autograd.Function):
            @staticmethod
            def forward(ctx, q, k, v):
                if q.dim() == 4:  # (batch, heads, tokens, head size), laid out tokens before heads as the fused
                    # kernels return it: the model's transpose back and .contiguous() then keep its storage
                    out = q.new_empty(q.shape[0], q.shape[2], q.shape[1], v.shape[-1]).transpose(1, 2)
                else:
                    out = q.new_empty(*q.shape[:-1], v.shape[-1])
                lse = torch.empty(*q.shape[:-1], dtype=torch.float32, device=q.device)
                lse._fp32 = 1  # stays fp32 at any --dtype
                ctx.save_for_backward(q, k, v, out, lse)
                if on_output is not None:
                    on_output([out, lse])
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

    @property
    def trainable(self) -> float:
        """Parameters that train: all but the frozen tensors'."""
        return sum(t for t, f in zip(self.tensors, self.frozen) if not f) if self.frozen else self.params

    def grad_layers(self, grad_bytes: float) -> list[tuple[float, float]]:
        """(gradient bytes, share of backward) per tensor in forward order: a frozen tensor has no gradient, but its
        layer's backward still runs (its input's gradient)."""
        frozen = self.frozen or [False] * len(self.tensors)
        return [(0.0 if f else t * grad_bytes, t) for t, f in zip(self.tensors, frozen)]


def gpu_choices() -> dict[str, str]:
    """--gpu value -> hardware profile: each profile's name, and its first word (h100, a100, ...) where that is
    unique; only profiles with a peak for some precision (a GPU)."""
    names = [n for n in hardware.profiles() if not hardware.profile_problem(n) and hardware.load_profile(n).peak_tflops]
    short: dict[str, list[str]] = {}
    for n in names:
        short.setdefault(n.split("-")[0], []).append(n)
    out = {k: v[0] for k, v in short.items() if len(v) == 1}
    out.update({n: n for n in names})
    return out


def memory_gib(profile: str) -> float | None:
    """The profile's device memory in GiB (its `memory_GiB`), or None."""
    return json.loads((hardware.PROFILES_DIR / f"{profile}.json").read_text(encoding="utf-8")).get("memory_GiB")


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
                     how, 8, None, recompute, checkpointing=ck)
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
    return Shape(f"transformer ({desc})", params, tensors, largest, flops, optimizer, how, 8,
                 llama_activations(layers, hidden, a, kv, f, embed / hidden, seq_len, attention, ck),
                 recompute, output_elements=seq_len * embed / hidden, checkpointing=ck)


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
    from torch.utils.flop_counter import FlopCounterMode

    import workloads
    from workloads import batch as batches

    ck = _check_modes(attention, checkpointing)
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
    params = list(model.parameters())
    tensors = [float(p.numel()) for p in params]
    frozen = [not p.requires_grad for p in params]
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
    x, y = (batches.to(t, "meta") for t in data.batch(torch.arange(2), "cpu"))
    counter = FlopCounterMode(display=False)
    with counter:
        out = w.forward(model, x)
        w.step_loss(out, y).backward()
    logits = batches.logits(out)
    output_elements = float(logits.numel()) / batches.length(x) if isinstance(logits, torch.Tensor) and \
        logits.is_floating_point() else 0.0
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
    floats, other = saved.total(ck)
    how = "what autograd saved for backward in one forward on the meta device, parameters left out"
    if attention == "flash":
        how += (f"; scaled_dot_product_attention as a fused kernel saves it ({fused.calls} calls)" if fused.calls
                else "; no call to scaled_dot_product_attention, so --attention changes nothing: any attention is "
                     "counted as the model's code computes it")
    if ck.mode != "none":
        how += (f"; {ck.describe()}, over its {len(blocks)} shard units ({ck.count(len(blocks))} checkpointed; the "
                f"largest one's activations while recomputed)" if blocks else
                f"; {ck}: the workload has no shard units to recompute, so checkpointing changes nothing")
    acts = Activations(floats / batches.length(x), other / batches.length(x),
                       how + "; floating-point tensors at the step's dtype, though autocast keeps some in fp32")
    source = "FLOPs of one forward and backward counted by torch's FlopCounterMode on the workload's model"
    if recompute:
        source += (", and what backward recomputes (" + ("the ops torchtitan's per-op policy does not save"
                                                       if ck.op else f"the checkpointed shard units' forward, {ck}")
                   + ")")
    given = ", ".join(f"{k}={v}" for k, v in (options or {}).items())
    return Shape(f"{name} ({given})" if given else name, sum(tensors), tensors,
                 {"module": float(module), "unit": float(unit)},
                 counter.get_total_flops() / batches.length(x), optimizer, source, w.global_batch, acts, recompute,
                 frozen if any(frozen) else [], output_elements, ck)


@dataclass
class Cluster:
    profile: str | None
    """The hardware profile; None: the run's own machine, a CPU (`compare plan --from` a CPU run)."""
    nodes: int
    gpus_per_node: int
    dtype: str | None
    """None: every row at its own precision (the run's own machine, no --dtype)."""
    nic_gbps: float | None = None
    nics_per_node: int = 1
    memory_gib: float | None = None
    machine: str | None = None
    """How the run's own CPU machine is named."""

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def capacity_gib(self) -> float | None:
        """Memory per GPU in GiB: --gpu-memory-gib, else the profile's (the run's own CPU: its host memory)."""
        if self.memory_gib is not None or self.profile is None:
            return self.memory_gib
        return memory_gib(self.profile)

    def fabric(self) -> comm_cost.Fabric | None:
        """The profile with this cluster's node size and, given --nic-gbps, its network (None: a CPU)."""
        if self.profile is None:
            return None
        f = hardware.load_profile(self.profile)
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
    per_node = gpus_per_node if gpus_per_node is not None else hardware.load_profile(profile).devices_per_node
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
    if cluster.dtype is not None and cluster.dtype not in DTYPES:
        raise BadPlan(f"unknown --dtype {cluster.dtype}; choose from {', '.join(DTYPES)}")
    if cluster.profile is not None:
        f = hardware.load_profile(cluster.profile)
        if cluster.gpus_per_node > f.devices_per_node:
            raise BadPlan(f"--gpus-per-node {cluster.gpus_per_node} is more than the {f.devices_per_node} GPUs a "
                          f"node of {cluster.profile} connects (its intra-node bandwidth is for that many); give at "
                          f"most {f.devices_per_node}")
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


def compute(shape: Shape, fabric: comm_cost.Fabric, dtype: str, batch: int, utilisation: float,
            grad_bytes: float) -> Compute:
    """One GPU's step compute at `utilisation` of the peak (see the module's docstring)."""
    rate = fabric.peak_tflops[dtype] * 1e12 * utilisation
    total = shape.flops_per_sample * batch / rate
    backward = 2 * total / 3 + shape.recompute_flops_per_sample * batch / rate
    bandwidth = 2 * fabric.copy_Bps if fabric.copy_Bps else None
    opt = shape.trainable * OPTIMIZER_TRAFFIC[shape.optimizer] / bandwidth if bandwidth else 0.0
    return Compute(total / 3, backward, opt, layered_grads(shape.grad_layers(grad_bytes), backward), 0.0,
                      fabric.copy_Bps)


def _label(name: str, knobs: dict[str, Any]) -> str:
    return name + "".join(f":{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in knobs.items())


@dataclass
class Priced:
    """A row's step three ways (fastest, middle, slowest) and how its compute was priced."""

    steps: list[cm.Step]
    how: str
    n: int
    """Devices the step runs on (its samples/s is n x batch / step)."""
    precision: str


class Assumed:
    """Compute at an assumed share of the dtype's peak: UTILISATION's low, middle and high (no run given)."""

    kind = "assumed"

    def configurations(self, cluster: Cluster):
        return None  # every adapter's plan_knobs

    def price(self, shape: Shape, cluster: Cluster, fabric: comm_cost.Fabric, batch: int, name: str,
              knobs: dict[str, Any], adapter) -> Priced | str:
        steps = [cm.predict_step(adapter.comm_schedule(), compute(shape, fabric, cluster.dtype, batch, u,
                                                                  adapter.gradient_bytes()), fabric, cluster.gpus)
                 for u in reversed(UTILISATION)]
        return Priced(steps, "assumed", cluster.gpus, cluster.dtype)

    def header(self, cluster: Cluster, fabric: comm_cost.Fabric) -> str:
        return (f"compute at {UTILISATION[0]:.0%}-{UTILISATION[2]:.0%} of the {cluster.dtype} peak "
                f"({fabric.peak_tflops[cluster.dtype]:g} TFLOP/s), the middle figure at {UTILISATION[1]:.0%}: an "
                f"assumed utilisation (--from RUN_DIR prices it from a run instead); ranges are over that "
                f"assumption, not confidence intervals")

    def footer(self) -> list[str]:
        return []

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "utilisation": list(UTILISATION),
                "what": "FLOPs over the dtype's peak at each assumed utilisation (low, middle, high)"}


@dataclass
class Plan:
    shape: Shape
    cluster: Cluster
    batch: int
    rows: list[dict[str, Any]] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    recommendation: dict[str, Any] | None = None
    source: Any = None
    inputs: dict[str, Any] = field(default_factory=dict)


def memory(shape: Shape, adapter, n: int, dtype: str, batch: int, cuda: bool) -> dict[str, Any]:
    """A row's memory per device in bytes: model states (the adapter's count, frozen parameters at their storage
    only), the framework's own buffers (the adapter's memory_buffers), activations, the loss over the model's
    output in fp32, and the caching allocator's headroom (ALLOCATOR_HEADROOM of the rest, on a GPU)."""
    optimizer = OPTIMIZERS[shape.optimizer]
    trainable = shape.trainable if shape.frozen else None
    states = adapter.model_state_bytes(shape.params, shape.largest, n, optimizer, trainable=trainable)
    buffers = [{"name": b_name, "bytes": b_bytes, "how": b_how}
               for b_name, b_bytes, b_how in adapter.memory_buffers(shape.tensors, shape.largest, n, trainable)]
    acts = shape.activations.bytes(dtype, batch) if shape.activations else None
    loss = shape.output_elements * batch * (LOSS_BYTES + 4 - DTYPE_BYTES[dtype])
    allocated = states + sum(b["bytes"] for b in buffers) + (acts or 0.0) + loss
    headroom = ALLOCATOR_HEADROOM * allocated if cuda else 0.0
    return {"model_state_bytes": states, "rule": adapter.model_state_rule(optimizer, frozen=bool(shape.frozen)),
            "buffers": buffers, "buffer_bytes": sum(b["bytes"] for b in buffers), "activation_bytes": acts,
            "loss_bytes": loss, "headroom_bytes": headroom,
            "total_bytes": allocated + headroom if acts is not None else None,
            "known_bytes": allocated + headroom}


def make(shape: Shape, cluster: Cluster, batch: int, source=None, inputs: dict[str, Any] | None = None) -> Plan:
    """Every planned row priced three ways (the source's: an assumed utilisation, or a run's measurements and their
    interval), its memory, and the recommendation."""
    import adapters

    source = source or Assumed()
    fabric = cluster.fabric()
    capacity = cluster.capacity_gib()
    plan = Plan(shape, cluster, batch, source=source, inputs=dict(inputs or {}))
    configurations = source.configurations(cluster)
    if configurations is None:
        configurations = []
        for name in adapters.names():
            knob_sets = adapters.get(name).plan_knobs(cluster.dtype)
            if isinstance(knob_sets, str):
                plan.skipped[name] = knob_sets
                continue
            configurations += [(name, knobs) for knobs in knob_sets]
    for name, knobs, *own_label in configurations:
        if isinstance(knobs, str):  # the source's reason for not planning it
            plan.skipped[name] = knobs
            continue
        adapter = adapters.get(name)(knobs, "cuda")
        label = own_label[0] if own_label else _label(name, knobs)
        priced = source.price(shape, cluster, fabric, batch, name, knobs, adapter)
        if isinstance(priced, str):
            plan.skipped[label] = priced
            continue
        steps, n = priced.steps, priced.n
        mem = memory(shape, adapter, n, priced.precision, batch, cluster.profile is not None)
        held = mem["known_bytes"]
        plan.rows.append({
            "label": label, "adapter": name, "knobs": knobs, "precision": priced.precision, "devices": n,
            "step_s": {"low": steps[0].step_s, "mid": steps[1].step_s, "high": steps[2].step_s},
            "samples_per_s": {"low": n * batch / steps[2].step_s, "mid": n * batch / steps[1].step_s,
                              "high": n * batch / steps[0].step_s},
            "compute_s": steps[1].compute_s, "comm_s": steps[1].comm_s, "exposed_s": steps[1].exposed_s,
            "overhead_s": steps[1].overhead_s, "compute_from": priced.how,
            **{k: v for k, v in mem.items() if k != "known_bytes"},
            "fits": None if capacity is None else held <= capacity * GiB,
            "_steps": [s.step_s for s in steps], "_held": held})
    plan.recommendation = recommend(plan.rows)
    return plan


TIE = 0.02
"""Step times within this share of each other are not told apart: a model of a cluster that is not here resolves
no finer."""


def recommend(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Among the rows that fit: the fastest at the middle figure, and every row the model does not rank behind it:
    within TIE of it at every figure (fastest, middle, slowest), or faster than it at some. Of those, the one
    holding the least memory is recommended; its margin is over the fastest row outside them (the ratio of step
    times at each figure). A row is ranked behind when it is no faster at any figure and slower by more than TIE
    at some."""
    fitting = sorted((r for r in rows if r["fits"] is not False), key=lambda r: r["step_s"]["mid"])
    if not fitting:
        return None

    def ratios(slow, fast):
        return [b / a for a, b in zip(fast["_steps"], slow["_steps"])]

    def held(r):
        return r.get("_held", r["model_state_bytes"])

    best = fitting[0]
    tied = [best] + [r for r in fitting[1:] if max(ratios(r, best)) <= 1 + TIE or min(ratios(r, best)) < 1 - TIE]
    pick = min(tied, key=held)
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


def _where(plan: Plan) -> str:
    """"on 64 x NVIDIA H100 SXM 80GB (8 nodes x 8, ...): ..." or the run's own CPU machine."""
    c, f = plan.cluster, plan.cluster.fabric()
    capacity = c.capacity_gib()
    if f is None:
        mem = f", {capacity:.3g} GiB of host memory" if capacity else ""
        return (f"on the run's own machine: {c.machine}{mem}; each row at the world size it ran "
                f"({c.gpus} processes), every row at its own precision" if c.dtype is None else
                f"on the run's own machine: {c.machine}{mem}; each row at the world size it ran ({c.gpus} processes), "
                f"{c.dtype}")
    net = (f"{c.nics_per_node} x {c.nic_gbps:g} Gb/s NIC{'s' if c.nics_per_node > 1 else ''} per node "
           f"({f.inter_busbw_Bps / 1e9:.3g} GB/s all-reduce bus bandwidth at {NIC_EFFICIENCY:.0%} of line rate)"
           if c.nic_gbps is not None else f"the profile's network ({f.inter_busbw_Bps / 1e9:.3g} GB/s all-reduce "
                                          f"bus bandwidth across nodes)")
    return (f"on {c.gpus} x {f.device} ({c.nodes} node{'s' if c.nodes > 1 else ''} x {c.gpus_per_node}, profile "
            f"{c.profile}, {capacity:g} GiB each): {f.intra_busbw_Bps / 1e9:.3g} GB/s inside a node, {net}; "
            f"{c.dtype}")


def lines(plan: Plan) -> list[str]:
    """The plan as a terminal would show it: what was priced on what, the table, the recommendation, what was
    not planned and why, and how each figure was counted."""
    c, s, f = plan.cluster, plan.shape, plan.cluster.fabric()
    source = plan.source or Assumed()
    capacity = c.capacity_gib()
    def flop(v):
        return f"{v / 1e12:,.0f} TFLOP" if v >= 1e15 else f"{v / 1e12:.3g} TFLOP" if v >= 1e12 else f"{v / 1e9:.3g} GFLOP"

    flops_text = flop(s.flops_per_sample)
    acts = s.activations
    per = "GPU" if f is not None else "process"
    pers = "GPUs" if f is not None else "processes"
    fits = (f"fits in {capacity:.4g} GiB" if capacity else "fits") + ("" if acts else " (model states only)")
    trainable = (f" ({s.trainable:,.0f} trainable, {s.params - s.trainable:,.0f} frozen)" if s.frozen else "")
    out = [f"{s.name}: {s.params:,.0f} parameters{trainable}, {flops_text} per sample (forward and backward), "
           f"{s.optimizer}; {plan.batch} per {per}"
           + (f" ({plan.batch * c.gpus:,} global)" if f is not None else "")
           + (f"; {s.checkpointing} checkpointing, {flop(s.recompute_flops_per_sample)} a sample recomputed in "
              f"backward" if s.checkpointing.mode != "none" else ""),
           _where(plan),
           f"model version {VERSION}; {source.header(c, f)}",
           "",
           f"| backend | step (ms) | samples/s | communication exposed (ms) | model states per {per} (GiB) | "
           f"framework buffers (GiB) | " + (f"activations (GiB) | total per {per} (GiB) | " if acts else "")
           + f"{fits} |",
           "|---|---|---|---|---|---|" + ("---|---|" if acts else "") + "---|"]
    for r in sorted(plan.rows, key=lambda r: r["step_s"]["mid"]):
        st, sp = r["step_s"], r["samples_per_s"]
        total = f"{_gib(r['activation_bytes'])} | {_gib(r['total_bytes'])} | " if acts else ""
        out.append(f"| {r['label']} | {_ms(st['mid'])} [{_ms(st['low'])}-{_ms(st['high'])}] | "
                   f"{sp['mid']:,.0f} [{sp['low']:,.0f}-{sp['high']:,.0f}] | {_ms(r['exposed_s'])} | "
                   f"{_gib(r['model_state_bytes'])} | {_gib(r['buffer_bytes'])} | "
                   f"{total}{ {True: 'yes', False: 'no', None: '?'}[r['fits']]} |")
    out.append("")
    rec = plan.recommendation
    too_big = [r for r in plan.rows if r["fits"] is False]
    held = {r["label"]: r["_held"] for r in plan.rows}
    if rec is None and plan.rows:
        what, cures = (("model states, buffers and activations", "more GPUs, a smaller model, a dtype with fewer "
                        "bytes, a smaller per-GPU batch or activation checkpointing") if acts else
                       ("model states and buffers", "more GPUs, a smaller model or a dtype with fewer bytes"))
        out.append(f"recommendation: none: no configuration's {what} fit in {capacity:.4g} GiB per {per}; {cures}")
    elif rec is None:
        out.append("recommendation: none: no configuration could be priced (see below)")
    else:
        text = f"recommendation: {rec['label']}"
        if rec["tied"]:
            text += (f", which holds the least memory ({_gib(held[rec['label']])} GiB per {per}) of the "
                     f"{len(rec['tied']) + 1} configurations the model does not rank by speed (within {TIE:.0%} "
                     f"at every figure of the range, or faster at some): {', '.join(rec['tied'])}")
        if rec["next"]:
            r = rec["ratio"]
            text += (f"; {r['mid']:.2f}x [{r['low']:.2f}-{r['high']:.2f}] faster than {rec['next']}"
                     + ("" if r["low"] > 1 else ", not resolved at every figure of the range"))
        elif not rec["tied"]:
            text += " (the only configuration that fits)"
        out.append(text)
    if too_big:
        out.append("does not fit: " + "; ".join(
            f"{r['label']} ({_gib(r['total_bytes'])} GiB: {_gib(r['model_state_bytes'])} of model states + "
            f"{_gib(r['buffer_bytes'])} of buffers + {_gib(r['activation_bytes'])} of activations + "
            f"{_gib(r['loss_bytes'] + r['headroom_bytes'])} of loss and allocator headroom)" if acts else
            f"{r['label']} ({_gib(r['_held'])} GiB of model states, buffers and allocator headroom)"
            for r in too_big))
    if plan.skipped:
        at = f" at {c.dtype}" if c.dtype else ""
        out.append(f"not planned{at}: " + "; ".join(f"{k} ({v})" for k, v in plan.skipped.items()))
    rules: dict[str, list[str]] = {}
    for r in plan.rows:
        rules.setdefault(r["rule"], []).append(r["label"])
    frozen = ", T trainable of them" if s.frozen else ""
    out.append(f"model states (P parameters{frozen}, N = {c.gpus} {pers}, L = {s.largest['module']:,.0f} "
               f"parameters in the largest module, U = {s.largest['unit']:,.0f} in the largest shard unit; bytes): "
               + "; ".join(f"{', '.join(labels)}: {rule}" for rule, labels in rules.items()))
    if s.frozen:
        out.append(f"frozen parameters: {s.params - s.trainable:,.0f} of {s.params:,.0f} hold their storage only "
                   f"(no gradient, no optimizer state, no gradient communication); the model prices FSDP's and "
                   f"ZeRO-3's gathers from the gradients, so it leaves out gathering the frozen ones")
    buffers: dict[str, list[str]] = {}
    for r in plan.rows:
        for b in r["buffers"]:
            buffers.setdefault(f"{b['name']}: {b['how']}", []).append(f"{r['label']} {_gib(b['bytes'])} GiB")
    out.append("framework buffers (each framework's own, at its defaults): "
               + ("; ".join(f"{what} ({', '.join(rows)})" for what, rows in buffers.items()) if buffers else
                  "none for these configurations"))
    if acts:
        dtype = f"{c.dtype}'s bytes" if c.dtype else "bytes of each row's precision"
        out.append(f"activations: {_gib(acts.bytes(c.dtype or 'fp32', plan.batch))} GiB per {per} at "
                   f"{plan.batch} per {per}{'' if c.dtype else ' (in fp32)'} under every backend ({acts.source})")
        loss = plan.rows[0]["loss_bytes"] if plan.rows else 0.0
        out.append(f"loss over the model's output: {_gib(loss)} GiB per {per} (its {s.output_elements:,.0f} "
                   f"output elements a sample, in fp32 at the start of backward: the log-softmax kept in fp32 and "
                   f"the loss's and the output's gradients, {LOSS_BYTES + 4:g} bytes an element less the "
                   f"{dtype} counted in the activations)")
    else:
        out.append("activations: not known without --hidden; they and the loss over the output come on top of the "
                   "model states and buffers")
    if f is not None:
        out.append(f"allocator headroom: {ALLOCATOR_HEADROOM:.0%} of the above, assumed (what PyTorch's caching "
                   f"allocator reserves beyond the allocated peak; reserved over allocated was 1.10-1.27 on the "
                   f"H200 this project leased); the CUDA context (a few hundred MiB, outside the allocator) is not "
                   f"counted; total and fits hold all of it")
    else:
        out.append("total and fits hold model states, buffers, activations and the loss; the Python process, its "
                   "libraries and the allocator's own overhead come on top")
    out += source.footer()
    if hasattr(source, "row_lines"):
        out += source.row_lines(plan.rows, c)
    if f is not None:
        slow = f.overlap_slowdown
        overlap = (f"compute overlapping communication takes {1 + slow:.3g}x as long (the profile's "
                   f"overlap_compute_slowdown)" if slow else "communication overlapping compute is taken not to "
                   "slow it (the profile states no slowdown)")
        overhead = ("no framework overhead (none was measured on the target)" if source.kind == "assumed" else
                    "each row's own time outside forward, backward, optimizer and communication as the run measured "
                    "it, carried over unscaled")
        out.append(f"how: {s.source}; {overhead}; {overlap}")
    else:
        out.append(f"how: {s.source}")
    return out


def as_json(plan: Plan) -> dict[str, Any]:
    """The plan with every input and assumption it was made with, so a plan can be diffed against a later one."""
    rows = [{k: v for k, v in r.items() if not k.startswith("_")} for r in plan.rows]
    f = plan.cluster.fabric()
    source = plan.source or Assumed()
    assumptions = {
        "compute": source.as_json(),
        "allocator_headroom": ALLOCATOR_HEADROOM if f is not None else None,
        "loss_bytes_per_output_element": LOSS_BYTES,
        "tie": TIE,
        "nic_efficiency": NIC_EFFICIENCY if plan.cluster.nic_gbps is not None else None,
        "overlap_compute_slowdown": f.overlap_slowdown if f is not None else None,
        "optimizer_state_bytes_per_parameter": OPTIMIZERS[plan.shape.optimizer],
        "optimizer_traffic_bytes_per_parameter": OPTIMIZER_TRAFFIC[plan.shape.optimizer],
        "framework_overhead": "none (not measured on the target)" if source.kind == "assumed" else
                              "each row's own, as the run measured it",
    }
    shape = dataclasses.asdict(plan.shape) | {"tensors": len(plan.shape.tensors), "trainable": plan.shape.trainable,
                                              "frozen": sum(plan.shape.frozen),
                                              "checkpointing": str(plan.shape.checkpointing)}
    cluster = dataclasses.asdict(plan.cluster) | {"gpus": plan.cluster.gpus}
    if f is not None:
        cluster |= {"device": f.device, "peak_tflops": f.peak_tflops, "memory_GiB": plan.cluster.capacity_gib(),
                    "intra_busbw_Bps": f.intra_busbw_Bps, "inter_busbw_Bps": f.inter_busbw_Bps}
    return {"model_version": VERSION, "inputs": plan.inputs, "model": shape, "cluster": cluster,
            "per_gpu_batch": plan.batch, "utilisation": list(UTILISATION) if source.kind == "assumed" else None,
            "assumptions": assumptions, "rows": rows, "recommendation": plan.recommendation,
            "not_planned": plan.skipped}
