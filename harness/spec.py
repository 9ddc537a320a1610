"""RunSpec: everything one launch's ranks need, written to JSON by the parent and read by every rank.

Runs in: both (the parent writes it, every rank reads it).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PARENT_PID_ENV = "COMPARE_PARENT_PID"
"""Set by the parent in every launch's environment: its pid. A rank whose `compare` is gone kills itself."""
PARENT_PGID_ENV = "COMPARE_PARENT_PGID"
"""The parent's process group, which a rank must never signal."""


@dataclass
class RunSpec:
    adapter: str
    """Registry name of the adapter whose ranks read this spec."""
    workload: str
    """Registry name of the workload ("-" for a communication benchmark)."""
    world_size: int
    """Requested parallelism: ranks for process-per-device adapters, devices for DataParallel."""
    device: str
    """"cpu" or "cuda"."""
    global_batch: int
    steps: int
    """Timed steps (after warm-up)."""
    warmup: int
    threads: int
    """torch intra-op threads per training process, set explicitly for every launcher."""
    rank_dir: str
    """Directory where every rank writes rank<k>.json (and rank 0 the parameter snapshot)."""
    equiv_steps: int = 0
    """Snapshot parameters after this many steps for the equivalence check (0: no snapshot)."""
    knobs: dict[str, Any] = field(default_factory=dict)
    workload_options: dict[str, Any] = field(default_factory=dict)
    fault: str | None = None
    """Fault injection for tests: "ADAPTER:RANK:exit|hang|raise:STEP" (see harness/rank/main.py)."""
    eval: bool = True
    eval_every: int = 0
    """Also evaluate after every this many steps and after the last one (0: only once, after training)."""
    target: float | None = None
    """With eval_every: stop at the first of those evaluations whose accuracy reaches this (until-target runs)."""
    mode: str = "train"
    """train: the training loop (harness/rank/train.py); comm: the communication benchmark (harness/rank/comm.py)."""
    comm: dict[str, Any] = field(default_factory=dict)
    """For mode comm: ops, sizes (bytes), dtype, max_iters."""
    profile: dict[str, Any] = field(default_factory=dict)
    """After the timed steps, time forward, backward and optimizer step of a plain local copy of the model on
    each rank (harness/rank/profile.py): {"batches": per-rank batch sizes, "steps": n, "flops": bool}; empty:
    no profile (`compare run`)."""
    straggler: dict[str, Any] = field(default_factory=dict)
    """{"rank": r, "factor": f}: rank r computes f times slower (a known delay added to each of its steps);
    empty: none."""

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, path: str | Path) -> RunSpec:
        return cls(**json.loads(Path(path).read_text()))

    @property
    def progress_path(self) -> Path:
        """The small shared-memory file through which rank 0 tells the parent its phase and step."""
        return Path(self.rank_dir) / "progress.bin"

    def rank_result_path(self, rank: int) -> Path:
        return Path(self.rank_dir) / f"rank{rank}.json"

    @property
    def params_path(self) -> Path:
        """Rank 0's parameter snapshot after `equiv_steps` steps (for max_param_diff)."""
        return Path(self.rank_dir) / "params.pt"
