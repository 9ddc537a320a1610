"""RunSpec: everything one launch's ranks need, written to JSON by the parent and read by every rank.

Runs in: both (the parent writes it, every rank reads it).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

STALL_S = 300.0
"""Default --stall-timeout: a launch whose rank 0 has not moved (phase or step) for this long after its gate opened
is stopped as stalled, each local rank's Python stacks first written to its log. On one machine, a rank 0 that has
said nothing at all by then (a launcher or a rendezvous stuck before its worker began) counts as stalled too."""
PARENT_PID_ENV = "COMPARE_PARENT_PID"
"""Set by the parent in every launch's environment: its pid. A rank whose `compare` is gone kills itself."""
PARENT_PGID_ENV = "COMPARE_PARENT_PGID"
"""The parent's process group, which a rank must never signal."""
PARENT_PIDNS_ENV = "COMPARE_PARENT_PIDNS"
"""The parent's PID namespace (`readlink /proc/self/ns/pid`) and its machine's boot id: a rank in another PID
namespace or on another machine must not look for the parent's pid (it is someone else's there, or nobody's)."""
PARENT_BOOT_ENV = "COMPARE_PARENT_BOOT_ID"


@dataclass
class Node:
    """One host of a multi-node launch."""

    host: str
    """As the user named it (--hosts, --hostfile, the SLURM allocation)."""
    slots: int
    """Processes (ranks) on it."""
    local: bool = False
    """This machine: its commands start here directly, not over ssh."""


@dataclass
class Topology:
    """Where the ranks of a multi-node launch run (harness/launching/hosts.py builds it from what the user gave)."""

    nodes: list[Node]
    launcher: str = "ssh"
    """How remote commands start: "ssh" (`ssh HOST CMD`, as the frameworks do themselves) or "slurm" (`srun`
    inside an allocation)."""
    iface: str | None = None
    """Network interface for every rank (GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME; horovodrun
    --network-interfaces); None: left to the frameworks ("auto")."""
    master: str = "127.0.0.1"
    """Node 0 as every node reaches it: where rendezvous stores listen."""
    port: int = 0
    """Rendezvous port on `master`, picked free by the parent for each launch (multi-node launchers bind it
    themselves on node 0, so unlike a single-host launch it cannot be held by the parent in between)."""
    source: str = ""
    """Where the hosts came from, for messages and records ("--hosts h1:1,h2:1", "SLURM job 12")."""
    one_machine: bool | None = None
    """Every host is this machine (same boot id: loopback node ranks, or simulated hosts); None: not known."""
    cores: list[int] = field(default_factory=list)
    """Usable cores per node, as probed before the run (empty: not known)."""

    @property
    def world_size(self) -> int:
        return sum(n.slots for n in self.nodes)

    @property
    def remote(self) -> bool:
        """Some rank runs on another host (or wherever SLURM puts it): no shared kernel or local disk assumed."""
        return self.launcher == "slurm" or not all(n.local for n in self.nodes)

    def rank_offset(self, node_rank: int) -> int:
        """Global rank of the first process on node `node_rank`."""
        return sum(n.slots for n in self.nodes[:node_rank])

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Topology:
        return cls(**{**d, "nodes": [Node(**n) for n in d["nodes"]]})


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
    max_grad_norm: float | None = None
    """Clip the global gradient norm to this before every optimizer step (--max-grad-norm, else the workload's);
    None: no clipping."""
    knobs: dict[str, Any] = field(default_factory=dict)
    workload_options: dict[str, Any] = field(default_factory=dict)
    workload_digest: str | None = None
    """The SHA-256 (16 hex digits) of a user's workload file when the run began (workloads.digest): a rank whose
    file no longer has it fails at once, saying so (workloads.check_unchanged). None for a built-in workload."""
    bind_cores: bool = False
    """Bind this process's threads to its own `threads` cores (harness/rank/life.py: bind_cores)."""
    fault: str | None = None
    """Fault injection for tests: "ADAPTER:RANK:exit|hang|raise:STEP" (see harness/rank/life.py)."""
    eval: bool = True
    eval_every: int = 0
    """Also evaluate after every this many steps and after the last one (0: only once, after training)."""
    target: float | None = None
    """With eval_every: stop at the first of those evaluations whose accuracy reaches this (until-target runs)."""
    mode: str = "train"
    """train: the training loop (harness/rank/train.py); comm: the communication benchmark (harness/rank/comm_cells.py);
    contention: the compute-contention calibration of `compare scale` (harness/rank/compute_profile.py: contention)."""
    comm: dict[str, Any] = field(default_factory=dict)
    """For mode comm: ops, sizes (bytes), dtype, max_iters."""
    profile: dict[str, Any] = field(default_factory=dict)
    """After the timed steps, time forward, backward and optimizer step of a plain local copy of the model on
    each rank (harness/rank/compute_profile.py): {"batches": per-rank batch sizes, "steps": n, "flops": bool}; empty:
    no profile (`compare run`)."""
    straggler: dict[str, Any] = field(default_factory=dict)
    """{"rank": r, "factor": f}: rank r computes f times slower (a known delay added to each of its steps);
    empty: none."""
    topology: Topology | None = None
    """The hosts of a multi-node launch; None: every rank on this machine, started by one single-node launcher."""
    loader_workers: int = 0
    """DataLoader worker processes per rank, for a workload whose training data is a Dataset (0: read in the rank)."""
    breakdown: int = 0
    """Profile this many more steps after the evaluation and split each into its parts (harness/rank/breakdown.py);
    0: none."""
    trace: bool = False
    """With breakdown: write each rank's profiler trace (trace-rank<k>.json.gz in rank_dir)."""
    python: str | None = None
    """The interpreter this launch's commands start (a row's `python=PATH`); None: compare's own."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment variables of the row (`env.NAME=VALUE`), set for every rank of the launch."""

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> RunSpec:
        d = json.loads(Path(path).read_text(encoding="utf-8"))
        if d.get("topology"):
            d["topology"] = Topology.from_dict(d["topology"])
        return cls(**d)

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

    @property
    def gradient_peaks_path(self) -> Path:
        """Beside it, the reference's largest gradient of every parameter element (Strategy.gradient_peaks)."""
        return Path(self.rank_dir) / "gradient_peaks.pt"
