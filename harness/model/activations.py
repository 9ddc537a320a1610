"""What one GPU's batch keeps for backward in `compare plan`: the activations autograd saves, counted on the meta
device for a workload (`Saved`, with a fused attention kernel's saved tensors for `scaled_dot_product_attention`),
and activation checkpointing as torchtitan applies it (`Checkpointing`).

Runs in: the parent (harness/model/planner.py)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from harness.shared.bad_input import BadInput

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp64": 8}


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


LOSS_BYTES = 8.0
"""Bytes per element of the model's output (a language model's logits) that the loss holds in fp32 at the start of
backward beyond the activations: its gradient and the output's gradient, 4 bytes each (cross-entropy runs in
fp32, under autocast too)."""


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
        """The blocks of `blocks` checkpointed; BadPlan for selective:N with N beyond them, which checkpoints none
        (priced as none, and labelled checkpointing)."""
        if self.every is not None and blocks and self.every > blocks:
            raise BadPlan(f"--checkpointing selective:{self.every}: N is more than the model's {blocks} blocks, so no "
                          f"block would be checkpointed (the same as none); choose N of at most {blocks}")
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
    mode, colon, option = value.partition(":")
    if mode not in CHECKPOINTING or (option and mode != "selective"):
        raise BadPlan(f"unknown --checkpointing {value}; choose from none, full, selective (torchtitan's per-op "
                      f"policy; selective:op the same), selective:N (every Nth block)")
    if mode != "selective" or option == "op" or not colon:
        return Checkpointing(mode)
    try:
        every = int(option)
    except ValueError:
        every = 0
    if every < 1 or str(every) != option.lstrip("+"):
        raise BadPlan(f"--checkpointing {value}: N must be a whole number of at least 1 (every Nth block "
                      f"checkpointed, torchtitan's selective_ac_option), or op for its per-op policy")
    return Checkpointing("selective", every)


class BadPlan(BadInput, ValueError):
    """Inputs `compare plan` cannot price: bad input, one line naming the problem and the valid choices, exit 2."""


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
        self.weights = {_key(p): float(p.numel()) for p in model.parameters() if p.dim() >= 2}
        """A matrix or convolution parameter's storage -> its elements: what autocast casts when a matmul or
        convolution takes it."""
        self.weights_saved: dict[int, int] = {}
        """A weight autograd saved for backward -> the outermost unit running when it was saved (-1 for none)."""
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
            if key in self.weights:
                self.weights_saved.setdefault(key, self._active[0] if self._active else -1)
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

    def saved_weights(self, checkpointing: Checkpointing | None = None) -> float:
        """Elements of the matrix and convolution weights autograd holds for backward at the end of forward (each
        once; those of checkpointed units are taken again when backward recomputes them): what autocast holds a
        16-bit copy of, the copy its matmul saved."""
        ck = checkpointing or Checkpointing()
        return sum(self.weights[k] for k, u in self.weights_saved.items() if u < 0 or not ck.checkpointed(u))

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
