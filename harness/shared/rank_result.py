"""What a rank hands its parent: a typed result per kind of launch, written once by the rank that made it
(`<rank_dir>/rank<k>.json`) and read back by the parent as the same dataclass, so the parent reads a field where it
once read a dictionary key back by its spelling (harness/core/assemble.py, comm_bench.py, sweep.py).

Runs in: both (every rank writes one; the parent reads them once the launch has ended).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar


@dataclass
class RankResult:
    """What every rank reports, whatever its launch measured."""

    KIND: ClassVar[str] = ""

    rank: int
    world_size: int
    device: str = "cpu"
    backend: str | None = None
    """torch.distributed / framework backend (gloo, nccl, ...); None without a process group."""
    marks: dict[str, float] = field(default_factory=dict)
    """Wall-clock milestones of this rank (entry, imports_done, init_done, ..., result_written)."""
    cpu_affinity: list[int] | None = None
    """The cores this rank was bound to (--bind-cores), else every core it may run on."""
    cpu_affinity_any_thread: list[int] | None = None
    """Every core some thread of this rank may run on (binding that missed a thread shows here)."""
    host: dict[str, Any] | None = None
    """Where it ran: hostname, the interface it was told to use, the machine's boot id."""


@dataclass
class TrainResult(RankResult):
    """A training launch's rank (`compare run`, each point of `compare scale`)."""

    KIND = "train"

    local_rank: int = 0
    data_rank: int = 0
    data_world: int = 1
    devices_used: int = 1
    """Devices this process computed on (DataParallel: all of them)."""
    pid: int = 0
    threads: int = 1
    interop_threads: int = 1
    omp_num_threads_env: str | None = None
    start_wall: float = 0.0
    setup_s: float = 0.0
    """From entry to a joined group and a wrapped model."""
    first_step_end_wall: float | None = None
    end_wall: float = 0.0
    warmup: int = 0
    step_times_s: list[float] = field(default_factory=list)
    """Every step this rank took (warm-up first), as its step clock timed it."""
    losses: list[float] = field(default_factory=list)
    loss_counted: bool | None = None
    """Whether the loss came with a count of its items, divided by the count's mean over the ranks (an all-reduce of
    one number a step; Workload.step_loss), rather than a mean over each rank's samples."""
    uncounted_steps: list[int] = field(default_factory=list)
    """The steps (from 0) whose global batch held nothing the counted loss counts (every label -100): their loss is
    0 by definition, in one process as on every backend, and no training loss."""
    peak_memory_bytes: int | None = None
    peak_memory_kind: str = ""
    peak_memory_file_bytes: int | None = None
    eval: dict[str, Any] | None = None
    """This rank's share of the exact evaluation (harness/rank/evaluation.py)."""
    eval_skipped: str | None = None
    """Why there is no evaluation, in words (Workload.why_not_evaluated), where the run asked for one."""
    lr: float = 0.0
    lr_rule: str = ""
    param_count: int = 0
    """Every parameter of the model, trainable and frozen."""
    trainable_param_count: int = 0
    """The parameters that require a gradient (fewer than param_count in a fine-tune with frozen layers)."""
    precision: str = "fp32"
    compression: str = "none"
    adapter: dict[str, Any] = field(default_factory=dict)
    """What the adapter reports of itself (versions, resolved knobs)."""
    workload: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    per_process_batch: int = 0
    train_samples: int | None = None
    evals: list[dict[str, Any]] | None = None
    """The periodic evaluations of an until-target run."""
    snapshot_s: float | None = None
    profile: dict[str, Any] | None = None
    """Its compute measured apart after the timed steps (`compare scale`)."""
    straggler: dict[str, Any] | None = None
    timed_window: dict[str, Any] | None = None
    """CPU and wall time over the timed window, and /proc/stat's counters around it."""
    step_clock: str = "host_sync"
    skipped_steps_timed: int | None = None
    compile: dict[str, Any] | None = None
    """What torch.compile compiled in this rank (harness/rank/measure.py CompileWatch), None if nothing."""
    peak_memory_cuda_extra: dict[str, Any] | None = None
    cuda_math: dict[str, Any] | None = None
    breakdown: dict[str, Any] | None = None
    """Its profiled steps after the timed window, split into parts (harness/rank/breakdown.py); None: not asked."""
    dtypes: dict[str, str] | None = None
    """The dtypes it held (Adapter.dtypes): the gradients after the first backward (with a warm-up), the rest after
    the last timed step."""
    unfinished: list[str] = field(default_factory=list)
    """The optional parts still to run when this result was written ("breakdown": the profiled steps, their split
    and trace). A rank writes its result before them and again after: a launch that fails, stalls or is interrupted
    during them keeps the row's measurement, and the record names the part that did not finish."""


@dataclass
class CommResult(RankResult):
    """A `compare comm` launch's rank: every (op, size) cell it checked and timed."""

    KIND = "comm"

    cells: list[dict[str, Any]] = field(default_factory=list)
    framework: dict[str, Any] = field(default_factory=dict)


@dataclass
class ContentionResult(RankResult):
    """A `compare scale` contention calibration's rank: its compute alone and with every rank computing at once."""

    KIND = "contention"

    data_world: int = 1
    per_process_batch: int = 0
    threads: int = 1
    alone: list[dict[str, Any]] = field(default_factory=list)
    together: list[dict[str, Any]] = field(default_factory=list)
    parts: dict[str, Any] | None = None
    """A step against its parts (compute, the collective alone, both at once), where the launch has a comm."""


KINDS = {cls.KIND: cls for cls in (TrainResult, CommResult, ContentionResult)}


def write(path: Path, result: RankResult) -> None:
    """Atomically (a per-process temp name: ranks share the directory), with its kind, once."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"kind": result.KIND, **dataclasses.asdict(result)}))
    os.replace(tmp, path)


def read(path: Path) -> RankResult:
    """The result a rank wrote, as the dataclass of its kind (ValueError for a file no rank of this compare wrote)."""
    data = json.loads(path.read_text())
    cls = KINDS.get(data.pop("kind", None))
    if cls is None:
        raise ValueError(f"{path}: not a rank's result")
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})
