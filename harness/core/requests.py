"""What a user asks for: one request shape per subcommand, composed of the sections it takes (Rows, Workload, Rounds,
Time to target, Breakdown, Launch, Ranks and hosts, Output) and its own fields, each field an option declared once
(harness/ground/argv.py makes the commands' options from them, grouped by section in --help, and writes a request
back as its command line), and the bounds a request is held to. A command hands another the sections they share
(`taken`): a sweep's point is a `compare run` request, so is a tune's comparison. Its checks are
harness/core/checks.py (every request), rows.py (the rows) and workload_checks.py (the workload); a checked request
becomes a plan (plans.py).

Runs in: the parent.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import workloads
from harness.core.checks import MAX_WORLD
from harness.ground.argv import cli
from harness.ground.errors import BadInput
from harness.shared.spec import STALL_S

DEFAULT_PROFILE = "h100-sxm-ndr400"
"""The hardware profile `compare scale` extrapolates to when none is named."""
PREDICT_TO = 1024
"""The largest world size `compare scale` and `compare predict` extrapolate to by default."""


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


class Section:
    """A group of options that several commands take alike. A command's request is the sections it takes and its own
    fields, so no command has an option it then ignores; its options are listed (and grouped in --help) own fields
    first, then section by section in the order its class names them (harness/ground/argv.py)."""

    SECTION: ClassVar[str] = ""
    """The group's title in --help (a command's own fields are under its class's PANEL)."""
    WHERE: ClassVar[bool] = False
    """How and where the command runs rather than what it runs: listed after the command's own options."""
    HELP: ClassVar[dict[str, str]] = {}
    """A field's --help where a command means something of its own by it."""


@dataclass
class Rows(Section):
    """Which rows run."""

    SECTION = "Rows"

    adapters: list[str] | None = field(default=None, metadata=cli("--adapters", "-a", csv=True))
    """Comma-separated adapters; an entry NAME:KNOB=VALUE:... is one row with those knobs (default: every adapter;
    unavailable ones become rows with their reason)."""
    knobs: list[str] = field(default_factory=list, metadata=cli("--knob", "-k"))
    """ADAPTER.KNOB=VALUE, applied to every row of that adapter, e.g. ddp.bucket_cap_mb=50."""


@dataclass
class Training(Section):
    """What every row trains, and for how long a launch."""

    SECTION = "Workload"

    workload: str = field(default=workloads.DEFAULT, metadata=cli("--workload", "-w"))
    """Workload: a name (see `compare list`), or your own as path/to/file.py:NAME or package.module:NAME (a Workload
    subclass or a function returning its pieces; docs/your-model.md)."""
    options: list[str] = field(default_factory=list, metadata=cli("--option", "-o"))
    """Workload option KEY=VALUE, e.g. arch=resnet50."""
    loader_workers: int | None = field(default=None, metadata=cli("--loader-workers"))
    """DataLoader worker processes per rank, the same for every backend, for a workload whose training data is a
    Dataset (default 0: each rank reads its own batches)."""
    steps: int | None = field(default=None, metadata=cli("--steps"))
    """Timed steps (default: the workload's)."""
    warmup: int | None = field(default=None, metadata=cli("--warmup"))
    """Warm-up steps, discarded (default: the workload's)."""
    global_batch: int | None = field(default=None, metadata=cli("--global-batch"))
    """Global batch (default: the workload's); LR follows its rule."""
    max_grad_norm: float | None = field(default=None, metadata=cli("--max-grad-norm"))
    """Clip the global gradient norm to this before every optimizer step, each backend its own way (default: the
    workload's max_grad_norm, usually none)."""
    equiv_steps: int | None = field(default=None, metadata=cli("--equiv-steps"))
    """Steps compared with the single-process reference (0: skip)."""
    fault: str | None = None


@dataclass
class Rounds(Section):
    """How the rows' launches are ordered and how long they may go on."""

    SECTION = "Rounds"

    budget: str | None = field(default=None, metadata=cli("--budget"))
    """Time the rounds may take, e.g. 600s, 10m, 2h, 1h30m: a round that would end past it is not started, but 3
    always run (default 3m; 10m with --precision; not with --repeats)."""
    margin: str | None = field(default=None, metadata=cli("--margin"))
    """Equivalence margin of the verdict, e.g. 5% (the default): two rows whose ratio's 90% interval lies within it
    either way are equivalent (two one-sided tests)."""
    order_seed: int | None = field(default=None, metadata=cli("--order-seed"))
    """Seed of the shuffled order of rows within each round (default: a fresh one; every record keeps it)."""


@dataclass
class ToTarget(Section):
    """Time to target instead of throughput."""

    SECTION = "Time to target"

    until_target: bool = field(default=False, metadata=cli("--until-target", negatable=False))
    """Train every adapter until the workload's accuracy target (time to target); no warm-up is discarded."""
    eval_every: int | None = field(default=None, metadata=cli("--eval-every"))
    """With --until-target: evaluate every K steps (default: the workload's)."""
    max_steps: int | None = field(default=None, metadata=cli("--max-steps"))
    """With --until-target: the step budget (default: the workload's)."""


@dataclass
class Breakdown(Section):
    """Where a step's time goes."""

    SECTION = "Breakdown"

    breakdown: bool = field(default=False, metadata=cli("--breakdown", negatable=False))
    """After each launch's evaluation, profile --breakdown-steps more steps (torch.profiler) and show where a step's
    time goes: forward, backward, optimizer, communication overlapped and exposed, waiting for the slowest rank."""
    breakdown_steps: int | None = field(default=None, metadata=cli("--breakdown-steps"))
    """Steps profiled by --breakdown (after one the profiler warms up on), 1 to 1,000 (default 5)."""
    trace: bool = field(default=False, metadata=cli("--trace", negatable=False))
    """With the breakdown (implies --breakdown): keep the profiled steps' Perfetto / chrome://tracing trace of rank 0
    and of the slowest other rank, from each row's first launch (traces/ in the results)."""


@dataclass
class Launch(Section):
    """How each launch's processes start on a machine."""

    SECTION = "Launch"
    WHERE = True

    device: str = field(default="cpu", metadata=cli("--device"))
    """cpu or cuda."""
    timeout_s: float = field(default=900.0, metadata=cli("--timeout"))
    """Seconds before a launch is killed and recorded as a timeout."""
    stall_s: float = field(default=STALL_S, metadata=cli("--stall-timeout"))
    """Seconds without progress (no new phase or step from rank 0) after which a launch is stopped as stalled, each
    rank's Python stacks written to its log first (0: never)."""
    strict: bool = field(default=False, metadata=cli())
    """A named adapter (or backend) that cannot run here is an error (exit 2), not an unavailable row; and a row
    that failed, timed out or diverged makes the run exit 1 (its results are still written), for scripts and CI."""
    oversubscribe: bool = field(default=False, metadata=cli())
    """Allow more processes than usable cores (every row so run is labelled oversubscribed)."""
    threads: int | None = field(default=None, metadata=cli("--threads"))
    """Threads per process (default: usable cores / processes)."""
    bind_cores: bool = field(default=False, metadata=cli("--bind-cores", negatable=False))
    """Bind each process to its own share of the usable cores (every adapter alike; recorded): local rank k gets
    its threads' cores from the k x threads-th on, wrapping round when oversubscribed. Default: the OS places the
    threads."""


@dataclass
class Hosts(Section):
    """How many ranks, and on which hosts."""

    SECTION = "Ranks and hosts"
    WHERE = True

    world_size: int | None = field(default=None, metadata=cli("--world-size", "-n"))
    """Ranks (devices for DataParallel; default 2 on CPU, every GPU on cuda, or the hosts' slots)."""
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
class Output(Section):
    """Where the results go."""

    SECTION = "Output"
    WHERE = True

    out: Path | None = field(default=None, metadata=cli("--out", kind=str, to_field=out_path, to_text=str))
    """Output directory (default: results/<name>_<hardware>_<time>, named after what it measures)."""
    results_dir: Path = Path("results")
    force: bool = field(default=False, metadata=cli())
    """Overwrite results already in --out."""
    command: str = ""
    """The command line as typed, recorded in every row."""


@dataclass
class Figures(Section):
    """Whether plots are drawn."""

    SECTION = "Output"
    WHERE = True

    plots: bool = field(default=True, metadata=cli("--plots"))
    """Draw the plots (--no-plots: report.md and records only, about 3 s sooner; `compare report DIR` draws them
    later)."""


@dataclass
class Request(Launch, Hosts, Output):
    """Launching ranks: the sections every command that starts ranks on hosts takes (`compare comm` takes these
    alone, with its own)."""


@dataclass
class Verdict(Section):
    """How many rounds a comparison runs, and what its verdict is against."""

    SECTION = "Rounds"

    repeats: int | None = field(default=None, metadata=cli("--repeats"))
    """Launches per adapter, in interleaved rounds (default: at least 3 rounds, then as many as fit --budget: enough
    for a verdict; 1 with --until-target)."""
    precision: str | None = field(default=None, metadata=cli("--precision"))
    """Every pair's simultaneous 95% interval this narrow (half-width), e.g. 5%: a pilot of rounds estimates the
    variance, the rounds it needs are fixed from it and run (two stages, so the stated error holds), or as many as
    the --budget allows."""
    baseline: str | None = field(default=None, metadata=cli("--baseline"))
    """The row every other row is compared with, as a ratio with its 95% interval (default: the first row that runs
    on the whole world size)."""
    join: Path | None = field(default=None, metadata=cli("--join", parser=typed_path))
    """An earlier run of this same request on this machine (or a join of several): this run is another session of
    it, and its report gives the verdict over every session, whose intervals include the variation between runs
    (refused where the workload, rows, world size, batch, steps or machine differ)."""


@dataclass
class Tuned(Section):
    """A tune's winners as rows (listed with the rows)."""

    SECTION = "Rows"

    tuned: Path | None = field(default=None, metadata=cli("--tuned", parser=typed_path))
    """A `compare tune` results directory: its best row of each backend becomes a row of this run (beside those of
    --adapters, if given)."""


@dataclass
class RunRequest(Rows, Tuned, Training, Rounds, Verdict, ToTarget, Breakdown, Launch, Hosts, Output, Figures):
    """`compare run`: every section."""


def taken(request: Any, cls: type) -> dict[str, Any]:
    """The fields of `request` that a `cls` request also has: what one command's request hands to another's (a
    sweep's point, a tune's comparison)."""
    mine = {f.name for f in dataclasses.fields(request)}
    return {f.name: getattr(request, f.name) for f in dataclasses.fields(cls) if f.name in mine}


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
class ScaleRequest(Rows, Training, Breakdown, Launch, Output, Figures):
    """`compare scale`: the same comparison at several world sizes (its own sweep of them, so no --world-size or
    hosts; one launch per point unless --repeats, so no rounds or verdict)."""

    PANEL: ClassVar[str] = "Sweep"
    HELP = {"threads": "Threads per rank at every point (default: usable cores / the largest world size that "
                       "fits).",
            "steps": "Timed steps per point (default: the workload's).",
            "warmup": "Warm-up steps per point (default: the workload's).",
            "global_batch": "Strong: the global batch; weak: the per-rank batch (default: the workload's global "
                            "batch)."}

    repeats: int = field(default=1, metadata=cli("--repeats"))
    """Fresh launches per point; the spread is reported."""
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
    profiles: list[str] | None = field(default=None, metadata=cli(
        "--profile", to_field=lambda names: list(dict.fromkeys(names))))
    """Hardware profile(s) to extrapolate to (see `compare predict --list`; default h100-sxm-ndr400)."""
    predict_to: int | None = field(default=None, metadata=cli("--predict-to"))
    """Largest world size predicted (default 1024)."""
    profile_steps: int = field(default=10, metadata=cli("--profile-steps"))
    """Steps per batch size of the compute profile."""

    def point(self, **changes: Any) -> RunRequest:
        """The `compare run` request of one point of the sweep: this request's sections, with `changes` (its world
        size, global batch, threads)."""
        return RunRequest(**{**taken(self, RunRequest), **changes})


DEFAULT_TUNE_BUDGET = "10m"
"""`compare tune`'s budget, for the whole tune."""
DEFAULT_MIN_GAIN = "5%"
"""`compare tune`'s smallest gain over a backend's defaults worth finding."""


@dataclass
class TuneRequest(Rows, Training, Rounds, Launch, Hosts, Output):
    """`compare tune`: the sections of `compare run` that set the comparison and its rounds, and the search's."""

    PANEL: ClassVar[str] = "Search"
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

    PANEL: ClassVar[str] = "Collectives"
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

    PANEL: ClassVar[str] = "Allocation"
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
        return RunRequest(**taken(self, RunRequest))



DEFAULT_BUDGET = "10m"
"""--precision's budget."""
DEFAULT_RUN_BUDGET = "3m"
"""The budget of a `compare run` given neither --repeats nor --precision: its 3 rounds and as many more as fit. Sized
for the 2-core machine this project is developed on, where the default comparison's rows take about a minute a
round: its 3 rounds end in about 3.5 minutes, and a faster workload gets more rounds in the same time."""


