"""RunSpec: everything one adapter launch needs, written to JSON by the parent and read by every rank."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class RunSpec:
    adapter: str
    workload: str
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
    seed: int
    rank_dir: str
    """Directory where every rank writes rank<k>.json (and rank 0 the parameter snapshot)."""
    equiv_steps: int = 0
    """Snapshot parameters after this many steps for the equivalence check (0: no snapshot)."""
    knobs: dict[str, Any] = field(default_factory=dict)
    workload_options: dict[str, Any] = field(default_factory=dict)
    fault: str | None = None
    """Fault injection for tests: "ADAPTER:RANK:exit|hang|raise:STEP" (see harness.worker)."""
    eval: bool = True
    mode: str = "train"
    """train: the training loop; comm: the communication benchmark (harness.comm.run_rank)."""
    comm: dict[str, Any] = field(default_factory=dict)
    """For mode comm: ops, sizes (bytes), dtype, max_iters."""

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, path: str | Path) -> RunSpec:
        return cls(**json.loads(Path(path).read_text()))
