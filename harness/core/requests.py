"""What a user asks for (one request shape per subcommand, sharing one base) and the checks every request passes
before anything is launched or written.

Runs in: the parent. A refused request raises BadInput: one line for the user, exit code 2, nothing written.
"""

from __future__ import annotations

import dataclasses
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import adapters
import workloads
from adapters.base import Adapter, Availability
from harness.core import normalisation
from harness.ground import provenance as envmod
from harness.ground.argv import cli, split  # noqa: F401  (split re-exported: the commands' comma lists)
from harness.ground.errors import BadInput, first_sentence  # noqa: F401  (re-exported: what requests raise)
from harness.shared import options
from harness.shared.cache import cached_json, files_key
from harness.shared.options import OptionError
from harness.shared.registry import BadReference, UnknownName
from harness.shared.spec import STALL_S
from workloads import batch as batches
from workloads.base import LossError

DEFAULT_PROFILE = "h100-sxm-ndr400"
"""The hardware profile `compare scale` extrapolates to when none is named."""
PREDICT_TO = 1024
"""The largest world size `compare scale` and `compare predict` extrapolate to by default."""

DEVICES = ("cpu", "cuda")


def out_path(text: str | Path) -> Path:
    """--out as typed: "" stays recognisably empty (Path("") would silently mean the current directory)."""
    if not str(text).strip():
        raise BadInput("--out is empty; give a directory, or leave --out out for results/<name>_<hardware>_<time>")
    return Path(text)


def typed_path(text: str) -> Path:
    """A path option as typed: an empty one ('') would otherwise become '.', the current directory."""
    if isinstance(text, Path):
        return text
    if text == "":
        raise ValueError("an empty path ('')")
    return Path(text)


@dataclass
class Request:
    """The options every command that launches ranks shares (each command's request adds its own)."""

    NOT_OPTIONS: ClassVar[frozenset[str]] = frozenset()
    """Fields a command's line does not take, though its request has them (`compare scale` has --world-sizes)."""
    HELP: ClassVar[dict[str, str]] = {}
    """A field's --help where a command means something of its own by it."""

    device: str = field(default="cpu", metadata=cli("--device"))
    """cpu or cuda."""
    world_size: int | None = field(default=None, metadata=cli("--world-size", "-n"))
    """Ranks (devices for DataParallel; default 2 on CPU, every GPU on cuda, or the hosts' slots)."""
    timeout_s: float = field(default=900.0, metadata=cli("--timeout"))
    """Seconds before a launch is killed and recorded as a timeout."""
    stall_s: float = field(default=STALL_S, metadata=cli("--stall-timeout"))
    """Seconds without progress (no new phase or step from rank 0) after which a launch is stopped as stalled, each
    rank's Python stacks written to its log first (0: never)."""
    out: Path | None = field(default=None, metadata=cli("--out", kind=str, to_field=out_path, to_text=str))
    """Output directory (default: results/<name>_<hardware>_<time>, named after what it measures)."""
    results_dir: Path = Path("results")
    force: bool = field(default=False, metadata=cli())
    """Overwrite results already in --out."""
    strict: bool = field(default=False, metadata=cli())
    """A named adapter (or backend) that cannot run here is an error (exit 2), not an unavailable row."""
    oversubscribe: bool = field(default=False, metadata=cli())
    """Allow more processes than usable cores (every row so run is labelled oversubscribed)."""
    threads: int | None = field(default=None, metadata=cli("--threads"))
    """Threads per process (default: usable cores / processes)."""
    bind_cores: bool = field(default=False, metadata=cli("--bind-cores", negatable=False))
    """Bind each process to its own share of the usable cores (every adapter alike; recorded): local rank k gets
    its threads' cores from the k x threads-th on, wrapping round when oversubscribed. Default: the OS places the
    threads."""
    command: str = ""
    """The command line as typed, recorded in every row."""
    hosts: str | None = field(default=None, metadata=cli("--hosts"))
    """Run across hosts: HOST:SLOTS,..., e.g. h1:2,h2:2 (the world size is the sum of the slots)."""
    hostfile: Path | None = field(default=None, metadata=cli("--hostfile", parser=typed_path))
    """Hosts from a file of `HOST slots=N` lines (DeepSpeed/MPI syntax)."""
    nnodes: int | None = field(default=None, metadata=cli("--nnodes"))
    """Use the first N hosts (of --hosts, --hostfile or the SLURM allocation)."""
    iface: str | None = field(default=None, metadata=cli("--iface"))
    """Network interface for every rank (GLOO/NCCL_SOCKET_IFNAME; default: lo on one machine, else the frameworks'
    choice)."""
    launcher: str = field(default="ssh", metadata=cli("--launcher"))
    """How other hosts are reached: ssh, or slurm (srun, inside an allocation; hosts from SLURM)."""
    topology: Any = None
    """A topology given whole instead of the options above (`compare sbatch`, planning for an allocation)."""


@dataclass
class RunRequest(Request):
    """`compare run`."""

    adapters: list[str] | None = field(default=None, metadata=cli("--adapters", "-a", csv=True))
    """Comma-separated adapters; an entry NAME:KNOB=VALUE:... is one row with those knobs (default: every adapter;
    unavailable ones become rows with their reason)."""
    workload: str = field(default=workloads.DEFAULT, metadata=cli("--workload", "-w"))
    """Workload: a name (see `compare list`), or your own as path/to/file.py:NAME or package.module:NAME (a Workload
    subclass or a function returning its pieces; docs/your-model.md)."""
    loader_workers: int | None = field(default=None, metadata=cli("--loader-workers"))
    """DataLoader worker processes per rank, the same for every backend, for a workload whose training data is a
    Dataset (default 0: each rank reads its own batches)."""
    steps: int | None = field(default=None, metadata=cli("--steps"))
    """Timed steps (default: the workload's)."""
    warmup: int | None = field(default=None, metadata=cli("--warmup"))
    """Warm-up steps, discarded (default: the workload's)."""
    global_batch: int | None = field(default=None, metadata=cli("--global-batch"))
    """Global batch (default: the workload's); LR follows its rule."""
    repeats: int | None = field(default=None, metadata=cli("--repeats"))
    """Launches per adapter, in interleaved rounds (default: at least 3 rounds, then as many as fit --budget: enough
    for a verdict; 1 with --until-target)."""
    equiv_steps: int | None = field(default=None, metadata=cli("--equiv-steps"))
    """Steps compared with the single-process reference (0: skip)."""
    knobs: list[str] = field(default_factory=list, metadata=cli("--knob", "-k"))
    """ADAPTER.KNOB=VALUE, applied to every row of that adapter, e.g. ddp.bucket_cap_mb=50."""
    options: list[str] = field(default_factory=list, metadata=cli("--option", "-o"))
    """Workload option KEY=VALUE, e.g. arch=resnet50."""
    fault: str | None = None
    until_target: bool = field(default=False, metadata=cli("--until-target", negatable=False))
    """Train every adapter until the workload's accuracy target (time to target); no warm-up is discarded."""
    eval_every: int | None = field(default=None, metadata=cli("--eval-every"))
    """With --until-target: evaluate every K steps (default: the workload's)."""
    max_steps: int | None = field(default=None, metadata=cli("--max-steps"))
    """With --until-target: the step budget (default: the workload's)."""
    baseline: str | None = field(default=None, metadata=cli("--baseline"))
    """The row every other row is compared with, as a ratio with its 95% interval (default: the first row that runs
    on the whole world size)."""
    precision: str | None = field(default=None, metadata=cli("--precision"))
    """Every pair's simultaneous 95% interval this narrow (half-width), e.g. 5%: a pilot of rounds estimates the
    variance, the rounds it needs are fixed from it and run (two stages, so the stated error holds), or as many as
    the --budget allows."""
    budget: str | None = field(default=None, metadata=cli("--budget"))
    """Time the rounds may take, e.g. 600s, 10m, 2h: a round that would end past it is not started, but 3 always run
    (default 3m; 10m with --precision; not with --repeats)."""
    margin: str | None = field(default=None, metadata=cli("--margin"))
    """Equivalence margin of the verdict, e.g. 5% (the default): two rows whose ratio's 90% interval lies within it
    either way are equivalent (two one-sided tests)."""
    order_seed: int | None = field(default=None, metadata=cli("--order-seed"))
    """Seed of the shuffled order of rows within each round (default: a fresh one; every record keeps it)."""
    plots: bool = field(default=True, metadata=cli("--plots"))
    """Draw the plots (--no-plots: report.md and records only, about 3 s sooner; `compare report DIR` draws them
    later)."""
    tuned: Path | None = field(default=None, metadata=cli("--tuned", parser=typed_path))
    """A `compare tune` results directory: its best row of each backend becomes a row of this run (beside those of
    --adapters, if given)."""
    breakdown: bool = field(default=False, metadata=cli("--breakdown", negatable=False))
    """After each launch's evaluation, profile --breakdown-steps more steps (torch.profiler) and show where a step's
    time goes: forward, backward, optimizer, communication overlapped and exposed, waiting for the slowest rank."""
    breakdown_steps: int = field(default=5, metadata=cli("--breakdown-steps"))
    """Steps profiled by --breakdown (after one the profiler warms up on), 1 to 1,000."""
    join: Path | None = field(default=None, metadata=cli("--join", parser=typed_path))
    """An earlier run of this same request on this machine (or a join of several): this run is another session of
    it, and its report gives the verdict over every session, whose intervals include the variation between runs
    (refused where the workload, rows, world size, batch, steps or machine differ)."""
    trace: bool = field(default=False, metadata=cli("--trace", negatable=False))
    """With the breakdown (implies --breakdown): keep the profiled steps' Perfetto / chrome://tracing trace of rank 0
    and of the slowest other rank, from each row's first launch (traces/ in the results)."""


def parse_world_sizes(text: str | None) -> list[int] | None:
    """"1,2,4" -> [1, 2, 4], refusing what is not an increasing list of distinct whole numbers >= 1."""
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",")]
    if not any(parts):
        raise BadInput("no world sizes given; e.g. --world-sizes 1,2,4")
    if "" in parts:
        raise BadInput(f"an empty world size in --world-sizes {text} (two commas in a row, or one at an end); e.g. "
                       f"--world-sizes 1,2,4")
    sizes = []
    for part in parts:
        if not part.lstrip("-").isdigit():
            raise BadInput(f"world size '{part}' is not a whole number; e.g. --world-sizes 1,2,4")
        sizes.append(int(part))
    for n in sizes:
        if n < 1:
            raise BadInput(f"world sizes must be at least 1, got {n}")
        if n > MAX_WORLD:
            raise BadInput(f"world sizes must be at most {MAX_WORLD:,}, got {n}")
    seen = set()
    for n in sizes:
        if n in seen:
            raise BadInput(f"world size {n} listed twice in --world-sizes {text}")
        seen.add(n)
    if sizes != sorted(sizes):
        raise BadInput(f"--world-sizes must be in increasing order, got {text}; e.g. "
                       f"{','.join(map(str, sorted(sizes)))}")
    return sizes


MAX_STRAGGLER = 100.0
"""The slowest straggler a sweep takes: the rank spins (factor - 1) x its compute before every step, so a larger
factor (or inf) would only hold the point until its --timeout."""


@dataclass
class ScaleRequest(RunRequest):
    """`compare scale`: the same comparison at several world sizes."""

    NOT_OPTIONS = frozenset({"world_size", "hosts", "hostfile", "nnodes", "iface", "launcher", "until_target",
                             "eval_every", "max_steps", "baseline", "precision", "budget", "order_seed", "margin",
                             "tuned", "join"})
    HELP = {"threads": "Threads per rank at every point (default: usable cores / the largest world size that "
                       "fits).",
            "repeats": "Fresh launches per point; the spread is reported.",
            "steps": "Timed steps per point (default: the workload's).",
            "warmup": "Warm-up steps per point (default: the workload's).",
            "global_batch": "Strong: the global batch; weak: the per-rank batch (default: the workload's global "
                            "batch)."}

    repeats: int = field(default=1, metadata=cli("--repeats"))
    world_sizes: list[int] | None = field(default=None, metadata=cli(
        "--world-sizes", kind=str, to_field=parse_world_sizes, to_text=lambda sizes: ",".join(map(str, sizes))))
    """Increasing comma list, e.g. 1,2,4 (default: 1 and every size up to the usable cores)."""
    scaling: str = field(default="strong", metadata=cli("--scaling"))
    """strong: fixed global batch; weak: fixed per-rank batch (global batch grows with N, LR by the workload's
    rule)."""
    straggler: str | None = field(default=None, metadata=cli("--straggler"))
    """RANK:FACTOR: that rank computes FACTOR times slower at every world size that has it."""
    comm_dirs: list[Path] = field(default_factory=list, metadata=cli("--comm", parser=typed_path))
    """`compare comm` results to calibrate the model with (default: measure them here)."""
    model: bool = field(default=True, metadata=cli("--model"))
    """Calibrate the performance model (a `compare comm` sweep per world size) and predict (--no-model: skip the
    comm sweep and the prediction)."""
    profiles: list[str] = field(default_factory=lambda: [DEFAULT_PROFILE], metadata=cli(
        "--profile", to_field=lambda names: list(dict.fromkeys(names))))
    """Hardware profile(s) to extrapolate to (see `compare predict --list`)."""
    predict_to: int = field(default=PREDICT_TO, metadata=cli("--predict-to"))
    """Largest world size predicted."""
    profile_steps: int = field(default=10, metadata=cli("--profile-steps"))
    """Steps per batch size of the compute profile."""


DEFAULT_TUNE_BUDGET = "10m"
"""`compare tune`'s budget, for the whole tune."""
DEFAULT_MIN_GAIN = "5%"
"""`compare tune`'s smallest gain over a backend's defaults worth finding."""


@dataclass
class TuneRequest(RunRequest):
    """`compare tune`: the options of `compare run` that set the comparison, and the search's."""

    NOT_OPTIONS = frozenset({"until_target", "eval_every", "max_steps", "precision", "repeats", "baseline", "tuned",
                             "plots", "breakdown", "breakdown_steps", "trace", "join"})
    HELP = {"adapters": "Comma-separated adapters to tune, plain names (default: every adapter that declares tunable "
                        "knobs and can run here).",
            "budget": "Time the whole tune may take, e.g. 20m, or per backend, e.g. 5m/backend: the race stops where "
                      "its next round and the confirmation would overrun it; each stage runs 3 rounds at least "
                      f"(default {DEFAULT_TUNE_BUDGET} in all).",
            "knobs": "A knob fixed for every candidate of its adapter, ADAPTER.KNOB=VALUE (repeatable); it is not "
                     "searched."}

    min_gain: str | None = field(default=None, metadata=cli("--min-gain"))
    """The smallest gain over a backend's defaults worth finding, e.g. 10% (default 5%): the race runs until a
    candidate that much faster would be its pick 95% of the time, and the confirmation until it would be confirmed
    with 90% power (sized from the race's own variance), where the budget allows; the report says what the tune
    needed and, where the budget cut it short, the smallest gain it could have confirmed."""
    tune: list[str] = field(default_factory=list, metadata=cli("--tune"))
    """Knobs to search, ADAPTER.KNOB (its declared candidates) or ADAPTER.KNOB=V1,V2 (these values), repeatable; an
    adapter named here is searched over these knobs only (default: every knob each adapter declares, `compare
    knobs ADAPTER` lists them all)."""


@dataclass
class CommRequest(Request):
    """`compare comm`."""

    HELP = {"world_size": "Ranks (default 2, or the hosts' slots)."}

    backends: list[str] | None = field(default=None, metadata=cli("--backends", csv=True))
    """Comma-separated backends (default: all; unavailable ones become rows with their reason)."""
    ops: list[str] | None = field(default=None, metadata=cli("--ops", csv=True))
    """Comma-separated ops (default: all)."""
    sizes: str = field(default="1K:64M", metadata=cli("--sizes"))
    """LO:HI (doubling), or a comma list; units K, M, G (binary)."""
    dtype: str = field(default="fp32", metadata=cli("--dtype"))
    """Element type of the buffers: fp32, fp16, bf16 or fp64."""
    max_iters: int = field(default=50, metadata=cli("--iters"))
    """Most timed iterations per cell (fewer for large sizes, at least 5)."""
    gap_s: float = field(default=0.0, metadata=cli("--gap", to_field=lambda ms: ms / 1e3, to_text=lambda s: s * 1e3,
                                                    help="Milliseconds of busy work on every rank before each timed "
                                                         "call, untimed, as a training step calls collectives after "
                                                         "its compute (default 0: back to back, as nccl-tests)."))
    """Seconds of local busy work every rank does before each timed call (not timed); 0: back to back."""


@dataclass
class SbatchRequest(RunRequest):
    """`compare sbatch`: the options of `compare run`, and the allocation's."""

    HELP = {"force": "Replace --script, and pass --force to the run.",
            "world_size": "Ranks; must equal --nodes x --ntasks-per-node (default: that product).",
            "launcher": "slurm: the job's ranks start through srun in its allocation (the only choice here)."}

    launcher: str = field(default="slurm", metadata=cli("--launcher"))

    nodes: int | None = field(default=None, metadata=cli("--nodes"))
    """Nodes of the allocation (required)."""
    ntasks_per_node: int | None = field(default=None, metadata=cli("--ntasks-per-node"))
    """Ranks per node (required)."""
    time_limit: str | None = field(default=None, metadata=cli("--time"))
    """SLURM time limit, e.g. 00:30:00."""
    partition: str | None = field(default=None, metadata=cli("--partition"))
    """SLURM partition."""
    job_name: str = field(default="compare", metadata=cli("--job-name"))
    """SLURM job name."""
    exclusive: bool = field(default=True, metadata=cli("--exclusive"))
    """Ask for whole nodes (--no-exclusive: share them)."""
    script: Path | None = field(default=None, metadata=cli("--script", parser=typed_path))
    """Write the script here (default: print it)."""

    def run_request(self) -> RunRequest:
        """The `compare run` that the script runs, with its options as given here."""
        return RunRequest(**{f.name: getattr(self, f.name) for f in dataclasses.fields(RunRequest)})


@dataclass
class Row:
    """One row of a comparison: an adapter with its knobs (a comm backend is the adapter it runs through)."""

    label: str
    """As the user wrote it: "ddp", "deepspeed:zero_stage=3", or a comm backend "torch"."""
    name: str
    """Registry name of the adapter."""
    cls: type[Adapter] | None
    """None only when the adapter's module fails to import (its reason says so)."""
    adapter: Adapter | None = None
    """The configured adapter; None when it cannot run here."""
    reason: str = ""
    """Why it cannot run here (with the fix), when `adapter` is None."""
    environment: dict[str, Any] | None = None
    """What the row's ranks run with beyond its knobs (`python=PATH`, `env.NAME=VALUE`): {"python", "python_version",
    "torch", "env"}; None for compare's own interpreter and environment (row_environment)."""


@dataclass
class Plan:
    """A checked request, ready to run: every number resolved, every row built, the output directory chosen."""

    request: Request
    out: Path | None
    """None only while a sub-plan is being built (`compare scale` plans each world size, then picks one out)."""
    rows: list[Row]
    oversubscribed: bool = False
    """More processes than usable cores (only with --oversubscribe)."""
    topology: Any = None
    """Where the ranks run (harness.shared.spec.Topology; None: this machine, one single-node launch)."""
    rerun: str | None = None
    """The command line that reproduces this plan exactly, with what it resolved (harness/ground/argv.py)."""

    @property
    def runnable(self) -> list[Row]:
        return [r for r in self.rows if r.adapter is not None]

    @property
    def unavailable(self) -> list[Row]:
        return [r for r in self.rows if r.adapter is None]


@dataclass
class UntilTarget:
    """The resolved settings of an until-target run."""

    target: float
    """The workload's accuracy target."""
    metric: str
    """What the accuracy counts, in words ("test accuracy", "next-byte accuracy")."""
    eval_every: int
    max_steps: int
    """The step budget."""


@dataclass
class RunPlan(Plan):
    workload: Any = None
    global_batch: int = 0
    steps: int = 0
    """Timed steps; in an until-target run, the step budget."""
    warmup: int = 0
    equiv_steps: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    """Added to every record of this plan (`compare scale`: which point of the sweep it is)."""
    tag: str = ""
    """Appended to row names in progress lines and to log names when one run holds several plans (" n=4")."""
    spec_extra: dict[str, Any] = field(default_factory=dict)
    """RunSpec fields for every launch of this plan beyond the common ones (profile, straggler)."""
    until_target: UntilTarget | None = None
    """Set for `compare run --until-target`: launches then run one at a time, never overlapping."""
    precision: float | None = None
    """Relative half-width every ratio's interval must reach (`compare run --precision`), or None."""
    budget_s: float | None = None
    """Seconds the rounds may take (precision mode, or rounds by default), or None: a fixed --repeats."""
    margin: float | None = None
    """The verdict's equivalence margin (`--margin`), or None for the default (stats.DEFAULT_MARGIN)."""
    order_seed: int | None = None
    """Seed of the rows' shuffled order within each round (`compare run`: --order-seed, or a fresh one)."""
    loader_workers: int = 0
    """DataLoader workers per rank (a workload whose training data is a Dataset)."""
    param_count: int | None = None
    """The model's parameters, counted on the meta device before launching (None where that was not done)."""
    join: list[Path] | None = None
    """`compare run --join DIR`: the run directories of the earlier sessions this run joins."""
    design: dict[str, Any] | None = None
    """A default run's design: its steps per launch and the variance components they came from
    (harness/core/noise_floor.py: design)."""


@dataclass
class CommPlan(Plan):
    ops: list[str] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)


# ---- checks shared by every subcommand ------------------------------------------------------------------------

MAX_THREADS = 4096
"""--threads above this is a typo, not a machine: refused before torch.set_num_threads() would overflow in a rank."""
MAX_WORLD = 65536
"""A world size above this is a typo, not a cluster (the largest the model extrapolates to, too): refused before
any other check would name it in a less helpful message."""
MAX_STEPS = 10**7
"""--steps, --warmup, --max-steps (and the step counts that follow them) above this are refused: every rank keeps
one time and one loss per step (0.3 GB at this bound), and 2**63 overflowed the progress file's counters."""
MAX_REPEATS = 1000
"""--repeats above this is refused: the plan lists every launch up front (10**20 of them took all the memory)."""
MAX_BUDGET_S = 7 * 24 * 3600.0
"""--budget above a week is a typo."""
DEFAULT_BUDGET = "10m"
"""--precision's budget."""
DEFAULT_RUN_BUDGET = "3m"
"""The budget of a `compare run` given neither --repeats nor --precision: its 3 rounds and as many more as fit. Sized
for the 2-core machine this project is developed on, where the default comparison's rows take about a minute a
round: its 3 rounds end in about 3.5 minutes, and a faster workload gets more rounds in the same time."""
MAX_BREAKDOWN_STEPS = 1000
"""--breakdown-steps above this is refused: the profiler holds every event of every profiled step in memory until
they are split. The split is linear in the events and each rank reports every step it splits to the stall watch
(tests/benchmarks/bench_split.py times it on 1,000 synthetic steps); a stall there anyway costs the breakdown,
never the row (harness/rank/train.py writes the row's result before the profiled steps)."""
BREAKDOWN_BOUND = "the profiler holds every event of the profiled steps in memory until they are split"
"""Why --breakdown-steps is bounded, as its refusal says it."""
MAX_ITERS = 10**6
"""`compare comm --iters` above this is refused (a cell of 10**20 calls would never end)."""


def require_torch() -> None:
    """torch imports here (every adapter and the reference need it): one line otherwise, before anything runs.
    Cheap: the answer is cached, keyed by torch's files (adapters/base.py: torch_build)."""
    from adapters.base import torch_build

    build = torch_build()
    if not build.get("installed"):
        raise BadInput("torch is not installed in this environment; `make setup` installs the pinned CPU build "
                       "(torch==2.13.0) into .venv/")
    if build.get("broken"):
        raise BadInput(f"torch in {build['where']} fails to import ({build['broken']}); every adapter needs it: "
                       "reinstall it with `make clean setup`, or remove what shadows it from PYTHONPATH")


def check_common(req: Request, min_world: int = 1) -> None:
    """Device, world size, timeout, threads and --out, each refused with one line naming the valid values."""
    require_torch()
    if req.device not in DEVICES:
        raise BadInput(f"unknown device '{req.device}'; valid choices: {', '.join(DEVICES)}")
    if req.world_size < min_world:
        what = " for communication" if min_world > 1 else ""
        raise BadInput(f"world size must be at least {min_world}{what}, got {req.world_size}")
    if req.world_size > MAX_WORLD:
        raise BadInput(f"world size must be at most {MAX_WORLD:,}, got {req.world_size}")
    if not req.timeout_s > 0:
        raise BadInput(f"--timeout must be a positive number of seconds, got {req.timeout_s:g}")
    if not req.stall_s >= 0:
        raise BadInput(f"--stall-timeout must be a number of seconds, at least 0 (0: never), got {req.stall_s:g}")
    if req.threads is not None and req.threads < 1:
        raise BadInput(f"threads must be at least 1, got {req.threads}")
    if req.threads is not None and req.threads > MAX_THREADS:
        raise BadInput(f"threads must be at most {MAX_THREADS} (more than any machine's cores), got {req.threads}")


def check_cores(req: Request, processes: int, fix: str | None = None) -> bool:
    """Whether `processes` CPU processes oversubscribe the usable cores; refused unless --oversubscribe. `fix`:
    what to say instead of "--world-size N or fewer" (`compare scale` has --world-sizes)."""
    if req.device != "cpu":
        return False
    cores = envmod.usable_cores()
    if processes <= cores:
        if req.threads is None or processes * req.threads <= cores:
            return False
        if not req.oversubscribe:  # more compute threads than cores: oversubscribed as surely as more processes
            raise BadInput(f"world size {processes} x --threads {req.threads} needs {processes * req.threads} cores "
                           f"but this machine has {cores} usable cores; use --threads {max(1, cores // processes)} "
                           f"or fewer, or --oversubscribe to run it anyway (every row is then labelled "
                           f"oversubscribed)")
        return True
    if not req.oversubscribe:
        raise BadInput(f"world size {processes} needs {processes} processes but this machine has {cores} usable "
                       f"cores; use {fix or f'--world-size {cores} or fewer'}, or --oversubscribe to run it anyway "
                       f"(every row is then labelled oversubscribed)")
    return True


def load_workload(req: RunRequest):
    """The request's workload with its options (BadInput naming the valid choices otherwise)."""
    try:
        workload = workloads.get(req.workload, dict(pairs(req.options, "option")))
    except (UnknownName, BadReference) as exc:
        raise BadInput(str(exc)) from None
    except OptionError as exc:
        raise BadInput(f"workload {req.workload}: {exc}") from None
    reason = workload.unavailable()
    if reason:
        raise BadInput(f"workload {req.workload} cannot run here: {reason}")
    return workload


MAX_LOADER_WORKERS = 256
"""--loader-workers above this is a typo: every rank would start that many processes."""


def check_loader(workload, req: RunRequest) -> int:
    """The loader workers per rank: refused below 0, above MAX_LOADER_WORKERS, or for a workload that holds its
    data in memory (there is no loader for them to feed)."""
    if req.loader_workers is None:
        return 0
    if not 0 <= req.loader_workers <= MAX_LOADER_WORKERS:
        raise BadInput(f"--loader-workers must be between 0 and {MAX_LOADER_WORKERS}, got {req.loader_workers}")
    if not workload.reads_through_loader():
        raise BadInput(f"--loader-workers applies to a workload whose training data is a Dataset; {req.workload} "
                       f"holds its data in memory as tensors, which every rank indexes directly")
    return req.loader_workers


def check_user_code(workload, req: RunRequest, global_batch: int) -> None:
    """A workload from outside this repository (a file, a module, an entry point) runs forwards and losses on its
    training samples before anything is launched or written: on torch's meta device, which allocates nothing, or
    where the model does what meta cannot (a data-dependent branch, .item()) on the CPU. An exception in the user's
    code is raised as UserCodeError (their traceback, exit 1) rather than as a failed row of every backend; an output
    that no loss can be taken from is one line. What the passes find (harness/core/model_check.py) is kept on the
    workload for the rows and the report: randomness or state in its forward, parameters a step leaves without a
    gradient (`model_facts`), BatchNorm layers. A loss without a count has the counts it may average over read from
    each rank's slices (harness/core/normalisation.py), for a failed equivalence check to be explained."""
    if workloads.source(req.workload) == "built-in":
        return
    import torch

    from adapters.base import ModelFacts
    from harness.core import model_check
    from harness.shared.registry import UserCodeError

    data = workload.materialize("cpu", global_batch)
    x, y = data.batch(torch.arange(min(2, data.n_train)), "cpu")
    world = req.world_size if req.world_size and global_batch % req.world_size == 0 else 1
    first_steps = [data.batch(workload.batch_indices(step, global_batch, data.n_train, 0, world)
                              [:model_check.CHECK_SAMPLES], "cpu") for step in range(model_check.CHECKED_STEPS)]
    facts = workload.model_facts = ModelFacts()
    params = counted = random = None
    try:
        with torch.device("meta"):
            model = workload.build_model()
            counted = _counted(workload, workload.forward(model, batches.to(x, "meta")), batches.to(y, "meta"))
        params = sum(p.numel() for p in model.parameters())
    except UserCodeError:
        raise
    except LossError as exc:  # what the model returned cannot give a loss: one line, not a traceback
        raise BadInput(str(exc)) from None
    except Exception:  # noqa: BLE001 - what meta cannot do is tried for real below
        pass
    if params is not None:
        check_trains(model, req.workload)
        facts.batch_norm = model_check.batch_norm_layers(model)
        _check_gradients(facts, workload, "meta", [(batches.to(a, "meta"), batches.to(b, "meta"))
                                                   for a, b in first_steps])
    workload.nondeterministic = _dropout(model) if params is not None else None
    if params is None or not (workload.nondeterministic or params > SMALL_MODEL):
        outputs = []

        def forward(model):
            outputs.append(workload.forward(model, x))  # training mode, as the steps run it
            return outputs[-1]

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(workload.seed)
            model = workload.build_model()
            check_trains(model, req.workload)
            try:
                random, workload.stateful = model_check.diagnose(workload.build_model, forward, workload.seed)
            except UserCodeError:
                raise
            except Exception as exc:  # noqa: BLE001 - the user's code
                raise UserCodeError(f"a forward and loss of workload {req.workload} on {batches.length(x)} training "
                                    f"samples", exc) from None
            loss = loss_takes(workload, outputs[0], y, req.workload)
            counted = workload.loss_terms(outputs[0], y)[1] is not None
            facts.batch_norm = model_check.batch_norm_layers(model)
            if not facts.checked_steps:  # meta could not run it: on the CPU
                _check_gradients(facts, workload, "cpu", first_steps)
        check_finite(outputs[0], loss, req.workload, batches.length(x))
        workload.nondeterministic = _dropout(model) or random
    _batch_norm(workload, facts)
    if not counted:
        form = "pieces" if isinstance(workload, workloads.FunctionWorkload) else "subclass"
        steps = max(workload.equiv_steps, getattr(req, "equiv_steps", None) or 0)  # what the check may cover
        workload.varying_counts = normalisation.candidates(workload, data, global_batch, req.world_size or 1, steps,
                                                           form)


def _counted(workload, output, target) -> bool:
    """Whether the workload's loss of `output` comes with a count (checked as a step would use it)."""
    workload.step_loss(output, target)
    return workload.loss_terms(output, target)[1] is not None


def _check_gradients(facts, workload, device: str, steps) -> None:
    """Fill `facts` with the parameters that `steps` (the first steps' batches, in order) leave without a gradient,
    on `device`; nothing where the passes cannot run there."""
    import torch

    from harness.core import model_check
    from harness.shared.registry import UserCodeError

    with torch.random.fork_rng(devices=[]), torch.device(device):
        torch.manual_seed(workload.seed)
        try:
            model = workload.build_model()
            facts.no_gradient = model_check.no_gradient(
                model, steps, lambda m, inputs, target: workload.step_loss(workload.forward(m, inputs), target))
            facts.checked_steps = len(steps)
        except UserCodeError:
            raise
        except Exception:  # noqa: BLE001 - not checked here (a backward meta cannot run, say)
            facts.no_gradient, facts.checked_steps = {}, 0


def _batch_norm(workload, facts) -> None:
    """The BatchNorm layers found, as the workload's `batch_norm` (a declared one stays)."""
    if facts.batch_norm and not workload.batch_norm:
        workload.batch_norm = ", ".join(facts.batch_norm)


def check_trains(model, name: str) -> None:
    """Refuse a model with nothing to train (no parameter, or none that requires a gradient): every backend would
    fail at launch on "optimizer got an empty parameter list" or DDP's "doesn't have any parameter that requires a
    gradient". Counted on the model as built (on meta: nothing allocated)."""
    params = list(model.parameters())
    if not params:
        raise BadInput(f"workload {name}: its model ({type(model).__name__}) has no parameters, so there is nothing "
                       f"to train or to compare; give a model with parameters")
    if not any(p.requires_grad for p in params):
        raise BadInput(f"workload {name}: none of its model's {len(params)} parameter tensor(s) requires a gradient "
                       f"(all frozen), so there is nothing to train or to compare; unfreeze some")


def _shape(value) -> str:
    """What a model's output or a batch's targets are, in words: "float32 (2, 3)", a dict's or a tuple's parts."""
    import torch

    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype).replace('torch.', '')} {tuple(value.shape)}"
    if isinstance(value, dict) or hasattr(value, "items"):
        return "{" + ", ".join(f"{k}: {_shape(v)}" for k, v in list(value.items())[:6]) + "}"
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(_shape(v) for v in value[:6]) + ")"
    return type(value).__name__


def loss_takes(workload, output, target, name: str):
    """The loss a step back-propagates of the model's output on two training samples (Workload.step_loss); BadInput
    in one line where it cannot take that output (a width or dtype the targets do not fit: "Target 7 is out of
    bounds"), naming both shapes, or where what the model returned gives no loss (LossError)."""
    try:
        return workload.step_loss(output, target)
    except LossError as exc:
        raise BadInput(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - a loss that cannot take this output, in the user's or torch's code
        said = " ".join(str(exc).split()).rstrip(".")
        raise BadInput(f"workload {name}: its loss cannot take the model's output (output {_shape(output)}, targets "
                       f"{_shape(target)}): {type(exc).__name__}: {said[:300]}; make the model's output what the "
                       f"loss expects (the default loss: cross-entropy over integer class targets, mean squared error "
                       f"for float targets)") from None


def check_finite(output, loss, name: str, samples: int) -> None:
    """Refuse a model whose output or loss on two training samples is NaN or infinite before any backend ran:
    every row would train on it, and two NaN outputs never compare equal (which read as randomness in forward)."""
    import torch
    from torch.utils._pytree import tree_leaves

    leaves = [t for t in tree_leaves(output) if isinstance(t, torch.Tensor) and t.is_floating_point()]
    bad = sum(int((~torch.isfinite(t.detach())).sum()) for t in leaves)
    if bad:
        total = sum(t.numel() for t in leaves)
        kinds = " and ".join(k for k, f in (("NaN", torch.isnan), ("infinite", torch.isinf))
                             if any(bool(f(t.detach()).any()) for t in leaves))
        raise BadInput(f"workload {name}: its model's output on {samples} training sample(s) holds {kinds} values "
                       f"({bad:,} of {total:,}) before any backend ran; a model whose output is not finite cannot be "
                       f"trained or compared (check its initialisation, inputs and operations)")
    if isinstance(loss, torch.Tensor) and loss.numel() and not bool(torch.isfinite(loss.detach()).all()):
        raise BadInput(f"workload {name}: its loss on {samples} training sample(s) is {loss.detach().flatten()[0].item()} "
                       f"before any backend ran (the output is finite): a loss that is not finite cannot be trained "
                       f"or compared (check the loss and the targets)")


SMALL_MODEL = 5_000_000
"""Parameters up to which a user's model is also run twice on the CPU before launching, to find randomness in its
forward that its modules do not show (a functional dropout): a fraction of a second at this size."""


def _dropout(model) -> str | None:
    """Why a model's training-mode output is random, from its modules: dropout with p > 0, or None."""
    import torch.nn as nn

    kinds = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)
    found = sorted({f"{type(m).__name__}(p={m.p:g})" for m in model.modules() if isinstance(m, kinds) and m.p > 0})
    return f"it has dropout ({', '.join(found)})" if found else None


def workload_key(workload) -> str:
    """What a workload's model-derived facts (its parameter count, a sample's FLOPs) depend on, as a cache key: the
    files defining its class and every file of the workloads package (which a built-in model may import from), the
    installed torch and transformers (read from their metadata: nothing is imported) and its resolved
    options."""
    import inspect
    import json
    import sys
    from importlib import metadata

    files = {Path(inspect.getfile(klass)) for klass in type(workload).__mro__
             if getattr(sys.modules.get(klass.__module__), "__file__", None)}
    files |= set(Path(workloads.__file__).parent.glob("*.py"))
    versions = []
    for package in ("torch", "transformers"):
        try:
            versions.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{package} absent")
    return "|".join([files_key(sorted(files)), *versions, json.dumps(workload.describe(), sort_keys=True,
                                                                      default=str)])


def check_fits(workload, req: RunRequest, ranks: int) -> int | None:
    """Refuse a workload whose model states alone (fp32 parameters, gradients and one optimizer buffer, a lower
    bound on what training holds) for `ranks` ranks on this machine exceed its memory: `-o hidden=99999999999`
    used to fail at launch, out of memory. The model is built on torch's meta device, which allocates nothing.
    Returns its parameter count (None where meta cannot build it; on CUDA it is not counted)."""
    if req.device != "cpu":
        return None
    given = ", ".join(req.options) or "its defaults"

    def count() -> int | None:
        import torch

        try:
            with torch.device("meta"):
                return sum(p.numel() for p in workload.build_model().parameters())
        except RuntimeError as exc:
            if "overflow" in str(exc):  # a tensor larger than any address space
                raise BadInput(f"workload {req.workload} ({given}) cannot be built: {' '.join(str(exc).split())}; "
                               f"choose smaller workload options") from None
            return None
        except Exception:  # noqa: BLE001 - a model that cannot be built on meta is left to the launch
            return None

    # A built-in workload's count is kept in the cache directory (workload_key), so a run of one imports no torch
    # here: 3.5 s of every `compare run`'s start on this machine. A user's model is built on meta regardless
    # (check_user_code), so its count is taken afresh.
    key = workload_key(workload) if workloads.source(req.workload) == "built-in" else None
    params = count() if key is None else cached_json(f"params-{workloads.slug(req.workload)}", key, count,
                                                     keep=lambda v: isinstance(v, int))
    if params is None:
        return None
    need, total = 12 * params * ranks, envmod.memory_total_bytes()
    if need > total:
        raise BadInput(f"workload {req.workload} ({given}) has {params:,} parameters: their fp32 values, gradients "
                       f"and one optimizer buffer alone take {need / 2**30:,.1f} GiB for {ranks} rank(s), more than "
                       f"this machine's {total / 2**30:,.1f} GiB; choose smaller workload options")
    return params


def pairs(items: list[str], what: str, form: str = "KEY=VALUE") -> list[tuple[str, str]]:
    """["k=v", ...] -> [("k", "v"), ...], refusing an item that is not KEY=VALUE (`form`: how the message shows
    the expected form)."""
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise BadInput(f"{what} '{item}' is not {form}")
        if key.strip() in {k for k, _ in out}:
            raise BadInput(f"{what} '{key.strip()}' given twice")
        out.append((key.strip(), value.strip()))
    return out


def parse_knobs(given: list[str], names: set[str], labels: list[str]) -> dict[str, dict[str, str]]:
    """--knob ADAPTER.KNOB=VALUE (repeatable) -> {adapter: {knob: value}}; BadInput for one not of that form or for
    an adapter not among `names` (the run's, whose rows are `labels`)."""
    knobs: dict[str, dict[str, str]] = {}
    for key, value in pairs(given, "knob", "ADAPTER.KNOB=VALUE, e.g. ddp.bucket_cap_mb=50"):
        name, dot, knob = key.partition(".")
        if not dot:
            raise BadInput(f"knob '{key}' must be ADAPTER.KNOB=VALUE, e.g. ddp.bucket_cap_mb=50")
        if name not in names:
            raise BadInput(f"knob '{key}' is for adapter '{name}', which is not in this run "
                           f"({', '.join(labels)})")
        knobs.setdefault(name, {})[knob] = value
    return knobs


def parse_label(label: str) -> tuple[str, dict[str, str]]:
    """"deepspeed:zero_stage=3:offload_optimizer=true" -> ("deepspeed", {...}): one row per knob variant."""
    name, *parts = label.split(":")
    if parts:  # a misspelt adapter is named as such, before its knobs are read
        try:
            adapters.get(name)
        except UnknownName as exc:
            raise BadInput(str(exc)) from None
    variant = {}
    for part in parts:
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise BadInput(f"adapter row '{label}': '{part}' is not KNOB=VALUE (form: ADAPTER:KNOB=VALUE:...)"
                           + _knobs_of(name))
        if key in variant:
            raise BadInput(f"adapter row '{label}': knob '{key}' given twice")
        variant[key] = value
    return name, variant


HARNESS_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK",
               "LOCAL_RANK", "PYTHONPATH", "PYTHONUNBUFFERED", "TMPDIR", "PATH", "GLOO_SOCKET_IFNAME",
               "NCCL_SOCKET_IFNAME", "CUDA_VISIBLE_DEVICES")
"""Variables the harness sets for every rank (harness/launching/rank_env.py) or that place the ranks: a row may not
set them through `env.NAME=VALUE`, or it would not run under the same conditions as the others."""


def row_environment(label: str, variant: dict[str, str], device: str = "cpu", remote: bool = False
                    ) -> tuple[dict[str, str], dict[str, Any] | None]:
    """A row's variant split into its adapter's knobs and what its ranks run with: `python=PATH` (another
    interpreter, e.g. a second venv with another torch or framework; checked by running it: it must import torch)
    and `env.NAME=VALUE` (an environment variable). BadInput for a path that is not such an interpreter, `env.` with
    no valid name, or a variable the harness sets itself."""
    import re
    import subprocess

    knobs, env, python = {}, {}, None
    for key, value in variant.items():
        if key == "python":
            python = value
        elif key.startswith("env."):
            name = key[len("env."):]
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise BadInput(f"adapter row '{label}': 'env.{name}' needs a variable name (letters, digits and _, "
                               f"not starting with a digit), e.g. env.NCCL_ALGO=Ring")
            if name in HARNESS_ENV or name.startswith("COMPARE_"):
                raise BadInput(f"adapter row '{label}': {name} is set by the harness for every row (threads with "
                               f"--threads, placement by the launcher); a row may set other variables, e.g. "
                               f"env.NCCL_ALGO=Ring")
            env[name] = value
        else:
            knobs[key] = value
    if python is None and not env:
        return knobs, None
    out: dict[str, Any] = {"env": env}
    if python is not None:
        if remote:
            raise BadInput(f"adapter row '{label}': python= runs its ranks with another interpreter on this machine; "
                           "across hosts give each host's venv the same packages instead")
        path = Path(python).expanduser()
        if not python or not path.is_file() or not os.access(path, os.X_OK):
            raise BadInput(f"adapter row '{label}': python={python} is not an executable file; give a Python "
                           "interpreter, e.g. python=/path/to/venv/bin/python")
        probe = "import sys, torch; print(sys.version.split()[0], torch.__version__)"
        try:
            got = subprocess.run([str(path), "-c", probe], capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BadInput(f"adapter row '{label}': python={python} is not a Python interpreter that runs here "
                           f"({type(exc).__name__})") from None
        words = got.stdout.split()
        if got.returncode != 0 or len(words) != 2:
            last = (got.stderr.strip().splitlines() or ["no output"])[-1]
            raise BadInput(f"adapter row '{label}': python={python} is not a Python interpreter with torch "
                           f"({last}); give one, e.g. python=/path/to/venv/bin/python")
        out.update(python=str(path), python_version=words[0], torch=words[1])
    return knobs, out


def _knobs_of(name: str) -> str:
    """"; valid knobs of ddp: bucket_cap_mb, ..." for an error message ("" if the adapter cannot be loaded)."""
    import dataclasses

    try:
        knobs = sorted(f.name for f in dataclasses.fields(adapters.get(name).Knobs))
    except Exception:  # noqa: BLE001 - only a hint in a message that is already an error
        return ""
    return f"; valid knobs of {name}: {', '.join(knobs) or 'none'}"


def check_list(given: list[str] | None, valid: list[str], what: str) -> None:
    """An explicit list must be non-empty and without duplicates."""
    if given is None:
        return
    if not given:
        raise BadInput(f"no {what}s given; valid choices: {', '.join(valid)}")
    if "" in given:
        raise BadInput(f"an empty {what} in '{','.join(given)}' (two commas in a row, or one at an end); valid "
                       f"choices: {', '.join(valid)}")
    seen = set()
    for name in given:
        if name in seen:
            raise BadInput(f"{what} '{name}' listed twice")
        seen.add(name)


def build_rows(req: Request, labels: list[tuple[str, str, dict[str, str]]], explicit: bool, kind: str,
               knobs: dict[str, dict[str, str]] | None = None, topology=None) -> list[Row]:
    """Rows for (label, adapter name, knob variant) triples: each adapter configured and its knobs checked, or
    marked unavailable with its reason (across hosts also when it cannot span them). A named row that cannot run
    is an error only with --strict."""
    rows = []
    for _, name, _ in labels:
        if name not in adapters.names():
            raise BadInput(str(UnknownName("adapter", name, adapters.names())))
    # Across hosts each machine holds only its own node's ranks (and devices): check the largest node here.
    per_machine = req.world_size if topology is None else max(n.slots for n in topology.nodes)
    avails = adapters.availability_all(req.device, per_machine, [name for _, name, _ in labels])
    if topology is not None:
        avails = {name: avail and adapters.multinode(name, topology) for name, avail in avails.items()}
    knob_reasons = set()
    for label, name, variant in labels:
        variant, environment = row_environment(label, variant, req.device,
                                               topology is not None and topology.remote)
        avail = avails[name]
        try:
            cls = adapters.get(name)
        except Exception:  # noqa: BLE001 - an adapter file that fails to import: its availability says why
            cls = None
        given = (knobs or {}).get(name, {})
        if not avail or cls is None:
            if cls is not None:  # a knob that could never be right is bad input, whether or not it can run here
                try:
                    options.build(cls.Knobs, {**given, **variant}, what="knob")
                except OptionError as exc:
                    raise BadInput(f"{kind} {label}: {exc}") from None
            if explicit and req.strict:
                raise BadInput(unavailable_message(kind, label, avail.message(), req.device, req.world_size))
            rows.append(Row(label, name, cls, reason=avail.message()))
            continue
        for key in variant:
            if key in given and given[key] != variant[key]:
                raise BadInput(f"knob {key} of {label} is given twice with different values: {variant[key]} in the "
                               f"row and {given[key]} in --knob {name}.{key}; give it once")
        try:
            adapter = cls({**given, **variant}, req.device)
            adapter.precision()  # resolves (and so checks) precision knobs against the device
            adapter.check_knobs(req.world_size)  # and knobs that depend on the world size (a mesh)
        except OptionError as exc:
            raise BadInput(f"{kind} {label}: {exc}") from None
        try:
            avail = adapter.knob_availability(req.device, per_machine)
        except Exception as exc:  # noqa: BLE001 - a broken check is a reason, not a crash
            avail = Availability(False, f"knob check raised {type(exc).__name__}: {exc}")
        if not avail:  # `compare list` does not know the row's knobs: the line says the fix itself
            if explicit and req.strict:
                raise BadInput(f"{kind} '{label}' cannot run here: {avail.message()}")
            rows.append(Row(label, name, cls, reason=avail.message()))
            knob_reasons.add(avail.message())
            continue
        same = next((r for r in rows if r.adapter is not None and r.name == name and r.adapter.knobs == adapter.knobs
                     and r.environment == environment), None)
        if same is not None:  # `ddp:bucket_cap_mb=1,ddp:bucket_cap_mb=1.0`: one row twice, under two spellings
            raise BadInput(f"{kind}s {same.label} and {label} are the same row (the same knobs, spelled "
                           f"differently); give it once")
        rows.append(Row(label, name, cls, adapter, environment=environment))
    if not any(r.adapter for r in rows):
        if all(r.reason in knob_reasons for r in rows):
            raise BadInput(f"no {kind} can run here: {rows[0].reason}"
                           + (f" (and {len(rows) - 1} more row(s) for their knobs)" if len(rows) > 1 else ""))
        reasons = Counter(first_sentence(r.reason) for r in rows)
        what, n = reasons.most_common(1)[0]
        share = "" if n == len(rows) else f" ({n} of the {len(rows)}; the others for reasons of their own)"
        raise BadInput(f"no {kind} can run here: {what}{share}; see `{list_command(req.device, req.world_size)}` "
                       f"for the reasons and fixes")
    return rows


def parse_precision(text: str, option: str = "--precision") -> float:
    """"5%" -> 0.05: a percentage above 0 and below 100 (BadInput otherwise)."""
    import re

    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*%\s*", text or "")
    value = float(m.group(1)) / 100.0 if m else None
    if value is None or not 0.0 < value < 1.0:
        raise BadInput(f"{option} must be a percentage above 0% and below 100%, e.g. 5%; got {text!r}")
    return value


def parse_duration(text: str, option: str = "--budget") -> float:
    """"10m" -> 600.0: a number of seconds (s, the default), minutes (m) or hours (h), above 0 and at most a week."""
    import re

    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([smh]?)\s*", text or "")
    seconds = float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)] if m else None
    if seconds is None or not 0.0 < seconds <= MAX_BUDGET_S:
        raise BadInput(f"{option} must be a duration above 0 and at most a week, e.g. 600s, 10m or 2h; got {text!r}")
    return seconds


def unavailable_message(kind: str, name: str, reason: str, device: str, world_size: int) -> str:
    """One readable line for a named adapter/backend that cannot run (with --strict)."""
    return (f"{kind} '{name}' cannot run here: {first_sentence(reason)}; see `{list_command(device, world_size)}` "
            f"for every reason and fix")


def list_command(device: str, world_size: int | None) -> str:
    """The `compare list` line that shows the same availability (a world size above the usable cores got this far
    only with --oversubscribe, which `compare list` then needs too)."""
    over = device == "cpu" and world_size is not None and world_size > envmod.usable_cores()
    return f"compare list --device {device} --world-size {world_size}{' --oversubscribe' if over else ''}"
