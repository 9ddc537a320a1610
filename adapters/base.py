"""The adapter contract: everything framework-specific, and nothing else.

An adapter is one data-parallel backend (DataParallel, DDP under torchrun, DDP under mp.spawn, ...). The harness
drives every adapter through this class alone and never branches on which one it is running:

    parent process (harness.launch)          every rank (harness.worker)
    -------------------------------          ---------------------------
    Adapter.availability(device, world)      info = adapter.setup(spec)
    adapter.launch(spec_path, spec)          model, opt = adapter.wrap(model, opt)
      -> LaunchPlan(argv, env)               with adapter.autocast(): loss = ...
                                             adapter.backward(loss); adapter.step()
                                             adapter.all_reduce_mean(metrics)
                                             adapter.barrier(); adapter.teardown()

Rules every adapter keeps:
- `availability` never raises and never imports the framework at module import time; its reason says what is
  missing and how to get it.
- An adapter never changes learning rate, batch size, seeds or data: those belong to the workload.
- Framework knobs (bucket size, precision, compression, ...) are a dataclass `Knobs` with attribute docstrings;
  `describe()` reports them, resolved, in every result row.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import os
import sys
from dataclasses import dataclass, field
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:  # torch is imported lazily so `compare list` stays fast
    import torch

    from harness.spec import RunSpec


class Precision(str, enum.Enum):
    """Numeric precision of the training step (str-Enum so it serialises to JSON as is)."""

    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"


@dataclass(frozen=True)
class Availability:
    """Whether an adapter can run here, and if not, why and how to fix it."""

    ok: bool
    reason: str = ""
    """What is missing or unsupported (empty when ok)."""
    fix: str = ""
    """How the user gets a working setup (empty when ok or when nothing can be done on this machine)."""

    def __bool__(self) -> bool:
        return self.ok

    def message(self) -> str:
        return self.reason + (f" (fix: {self.fix})" if self.fix else "")


@dataclass
class LaunchPlan:
    """How the harness starts an adapter's ranks: one command, run in its own process group."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment on top of the harness's own (threads, loopback interface)."""
    processes: int = 1
    """How many training processes the command creates (for the record and the thread budget)."""


@dataclass
class RankInfo:
    """What `setup` tells the per-rank loop about this process."""

    rank: int
    world_size: int
    """Processes taking part (1 for DataParallel, which drives several devices from one process)."""
    local_rank: int
    device: str
    """torch device string this process computes on, e.g. "cpu" or "cuda:0"."""
    backend: str | None
    """torch.distributed / framework backend (gloo, nccl, ...), None when there is no process group."""
    data_rank: int
    data_world: int
    """This process feeds slice `data_rank` of `data_world` equal slices of every global batch."""
    devices_used: int = 1
    """Devices this process computes on (DataParallel: all of them; DDP: one)."""


class Adapter:
    """Base class: subclasses set the class attributes and override what their framework changes."""

    name: ClassVar[str]
    summary: ClassVar[str]
    launcher: ClassVar[str]
    """How its ranks are started, e.g. "torchrun", "torch.multiprocessing.spawn", "in-process"."""

    @dataclass
    class Knobs:
        """Framework options; subclasses replace this with their own dataclass."""

    def __init__(self, knobs: dict[str, Any] | None = None, device: str = "cpu"):
        self.knobs = build_knobs(self.Knobs, knobs or {})
        self.device_kind = device
        self.info: RankInfo | None = None
        self.model: torch.nn.Module | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.phase: Callable[[str], None] = lambda text: None
        """Set by the worker: call it with a short text to show in the live progress line (e.g. a one-time
        build during setup, so a user sees why the first launch is slow)."""

    # ---- parent side -------------------------------------------------------------------------------------
    @classmethod
    def availability(cls, device: str, world_size: int) -> Availability:
        """Can this adapter run `world_size` ranks on `device` ("cpu" or "cuda") here? Never raises."""
        return Availability(True)

    def processes(self, world_size: int) -> int:
        """Training processes a launch of `world_size` creates (one per device unless overridden)."""
        return world_size

    def launch(self, spec_path: Path, spec: RunSpec) -> LaunchPlan:
        """The command that starts every rank; each rank ends up in `harness.worker.run(spec_path, adapter)`."""
        raise NotImplementedError

    @classmethod
    def environment(cls) -> dict[str, Any]:
        """Framework versions and build facts for `compare env` (may import the framework)."""
        return {}

    # ---- rank side ---------------------------------------------------------------------------------------
    def setup(self, spec: RunSpec) -> RankInfo:
        raise NotImplementedError

    def wrap(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer):
        """Wrap model and optimizer for this framework; return what the training loop should call."""
        self.model, self.optimizer = model, optimizer
        return model, optimizer

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """The user's module inside whatever `wrap` returned (for comparing parameters)."""
        return getattr(model, "module", model)

    def cast_input(self, x: torch.Tensor) -> torch.Tensor:
        """Input batch as the wrapped model expects it (e.g. bf16 when a framework casts the whole model)."""
        return x

    def gather_parameters(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """Full fp32 CPU copies of every parameter, by the user module's names. Called on every rank at the
        same point (a collective for frameworks that partition parameters, e.g. ZeRO-3); rank 0's is kept."""
        return {n: p.detach().float().cpu().clone() for n, p in self.unwrap(model).named_parameters()}

    def eval_module(self, model: torch.nn.Module) -> torch.nn.Module:
        """The module to run evaluation forwards with (every rank calls it exactly once)."""
        return self.unwrap(model)

    def autocast(self) -> contextlib.AbstractContextManager:
        """Context for the forward pass and loss (mixed precision adapters override)."""
        return contextlib.nullcontext()

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(self) -> None:
        self.optimizer.step()

    def all_reduce_mean(self, tensor: torch.Tensor) -> torch.Tensor:
        """Mean of `tensor` over all processes (metrics only, outside the timed region)."""
        return tensor

    def barrier(self) -> None:
        pass

    def teardown(self) -> None:
        pass

    def precision(self) -> Precision:
        return Precision.FP32

    def comm(self):
        """The framework's communication primitives for `compare comm` (see harness/comm.py for the methods:
        all_reduce, broadcast, reduce, all_gather, gather, scatter, reduce_scatter, all_to_all, send, recv,
        isend, irecv, all_reduce_async, all_reduce_coalesced, batch_sendrecv, barrier). None: not offered."""
        return None

    def compression(self) -> str:
        """Gradient compression on the wire ("none", "fp16", ...): shown next to precision in every table."""
        return "none"

    def describe(self) -> dict[str, Any]:
        """Versions and resolved knobs, recorded in every row."""
        return {"knobs": dataclasses.asdict(self.knobs)}


# ---- helpers shared by adapters ----------------------------------------------------------------------------

def build_knobs(knobs_type: type, values: dict[str, Any]):
    """Instantiate a knobs dataclass from strings or values, coercing to the declared field types."""
    fields = {f.name: f for f in dataclasses.fields(knobs_type)}
    kwargs = {}
    for key, raw in values.items():
        if key not in fields:
            valid = ", ".join(sorted(fields)) or "none"
            raise KnobError(f"unknown knob '{key}'; valid knobs: {valid}")
        default = getattr(knobs_type(), key)
        kwargs[key] = coerce(raw, default, key)
    return knobs_type(**kwargs)


class KnobError(ValueError):
    pass


def coerce(raw: Any, default: Any, key: str) -> Any:
    if not isinstance(raw, str):
        return raw
    try:
        if isinstance(default, bool):
            if raw.lower() in ("1", "true", "yes", "on"):
                return True
            if raw.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if isinstance(default, int):
            return int(raw)
        if isinstance(default, float):
            return float(raw)
    except ValueError:
        raise KnobError(f"knob '{key}' expects a {type(default).__name__}, got '{raw}'") from None
    return raw


def python_module(module: str, *args: str) -> list[str]:
    """argv that runs `python -m module args...` with this interpreter."""
    return [sys.executable, "-m", module, *args]


def torchrun(nproc: int, module: str, *args: str) -> list[str]:
    """argv for torchrun (torch.distributed.run) on one node: a free rendezvous port, no restarts."""
    return python_module(
        "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", "--max-restarts=0",
        "--module", module, *args,
    )


def init_process_group_from_env(device: str, backend: str | None = None) -> RankInfo:
    """torch.distributed init from the env:// variables that torchrun, our spawn entry and others set."""
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    if device == "cuda":
        torch.cuda.set_device(local_rank)
        dev, backend = f"cuda:{local_rank}", backend or "nccl"
    else:
        dev, backend = "cpu", backend or "gloo"
    dist.init_process_group(backend=backend, init_method="env://", rank=rank, world_size=world)
    return RankInfo(rank=rank, world_size=world, local_rank=local_rank, device=dev, backend=backend,
                    data_rank=rank, data_world=world)


def cuda_world_check(device: str, world_size: int, one_process_per_gpu: bool = True) -> Availability:
    """NCCL refuses two ranks on one GPU: a one-rank-per-GPU adapter needs world_size GPUs."""
    if device != "cuda":
        return Availability(True)
    import torch

    if not torch.cuda.is_available():
        return Availability(False, "CUDA requested but torch sees no GPU",
                            "run on a machine with an NVIDIA GPU and a CUDA build of torch, or use --device cpu")
    n = torch.cuda.device_count()
    if one_process_per_gpu and world_size > n:
        return Availability(False, f"world size {world_size} needs {world_size} GPUs, this machine has {n}",
                            f"use --world-size {n} or fewer, or --device cpu")
    return Availability(True)
