"""Every field of a record, declared once: the TypedDict layers a record of each kind is made of (a field with its
type and, under it, what it holds), which `check_record` holds every record to (harness/ground/record.py) and
docs/records.md is generated from (harness/ground/schema.py).

Runs in: the parent.
"""

import functools
from types import UnionType
from typing import Any, NotRequired, TypedDict, Union, get_args, get_origin, get_type_hints, is_typeddict


Number = int | float
"""A JSON number: an int or a float (a bool is neither)."""


NUMBER_TYPES = (int, float)


class Env(TypedDict):
    """`env`: the machine and software a record was made on: versions (torch, frameworks, Python), CPU model, flags
    and usable cores, memory, GPUs, `git_commit`, `tuning_env` (framework tuning variables the ranks inherited)."""

    python: str
    torch: str
    platform: str
    cpu_model: str
    cpu_cores_usable: int
    host_key: NotRequired[str | None]
    """A digest of the host's name and machine id (provenance.host_key): runs made on this very host, as against
    another of the same CPU; what this machine's between-session spread is kept for (harness/core/joins.py)."""
    memory_total_bytes: int
    distributed: dict[str, Any]


class StepTime(TypedDict):
    """`step_time_s` (the slowest rank's step) and a comm cell's `time_s` (one call)."""

    median: Number
    p10: Number
    p90: Number
    n: int


class Controls(TypedDict):
    """`controls`: the conditions every row of a run shares (or states where it differs): global / per-device /
    per-process batch, training-set size, steps, warm-up, seed, LR and its rule, the gradient-norm clip
    (`max_grad_norm`, where the workload clips), precision, compression, threads per rank, knobs, workload options,
    CUDA math settings."""

    global_batch: int
    lr: Number
    lr_rule: str
    precision: str
    steps: int
    warmup: int
    seed: int
    knobs: dict[str, Any]
    threads_per_rank: list[int]
    workload_options: dict[str, Any]
    max_grad_norm: NotRequired[Number]
    """The workload's `max_grad_norm`: the global gradient norm every row clipped to before each optimizer step, each
    backend its own way; absent where nothing was clipped."""
    loss_normalisation: NotRequired[str]
    """`global count`: the loss is over a counted number of items (tokens that are not padding, masked positions),
    each rank's divided by the count's mean over the ranks (one all-reduce a step), as a single process divides the
    global batch's by its count; `per-sample mean`: each rank's loss is the mean over its own samples."""


class TimeToTarget(TypedDict):
    """`ttt`: a run until a target (--until-target, or status not_reached)."""

    target: Number
    metric: str
    eval_every: int
    budget_steps: int
    reached: bool
    steps_run: int
    evals: int
    eval_time_s: Number
    best_metric: Number
    final_metric: Number
    curve: list[Any]


class Reached(TypedDict):
    """What `ttt` adds once the target was reached."""

    steps_to_target: int
    train_time_to_target_s: Number
    e2e_time_to_target_s: Number
    startup_to_target_s: Number


class ScalePoint(TypedDict):
    """`scale`: where a compare scale record sits in its sweep."""

    point: int
    world_sizes: list[int]
    scaling: str


class Base(TypedDict):
    """What every record holds, whatever its kind."""

    schema_version: int
    """SCHEMA_VERSION now; `compare report` reads every one of READABLE_SCHEMAS (1: throughput from the median step,
    rendered as it always was)."""
    kind: NotRequired[str]
    """`run` (compare run), `scale` (compare scale), `comm` (compare comm) or `tune` (compare tune)."""
    run_id: str
    """The run's id, shared by every record of one command."""
    time_utc: str
    """When the run started (UTC, ISO 8601)."""
    command: str
    """The command line as typed."""
    env: Env
    """The machine and software (Env)."""
    oversubscribed: NotRequired[bool]
    """More processes than usable cores (`--oversubscribe`): every figure is labelled."""
    legend: NotRequired[dict[str, dict[str, Any]]]
    """How reports show each adapter and comm backend, as the registry said when the run was made
    (adapters.legend): its `place` (colour, and the row order where `row_order` is absent), the `adapter` whose
    colour it takes and its `blog_label` in the seed blog's chart. A report reads it, never the live registry."""
    launcher: NotRequired[str]
    """How its processes were started (`torchrun`, `horovodrun`, `deepspeed`, ...)."""
    world_size: int
    """Ranks (devices for DataParallel)."""
    status: str
    """`ok`, `not_reached` (until-target budget spent, fully measured), `diverged` (measured, but its loss was NaN or
    infinite from the step its reason names to the last: out of the comparison), `unavailable`, `failed`, `timeout`
    (including a stall), `interrupted`, `not_run`; comm cells also `unsupported`."""
    shutdown_error: NotRequired[str]
    """A launch that ended badly after every rank had written its result: measurements kept."""
    failed_parts: NotRequired[dict[str, str]]
    """Optional parts of the launch that failed, stalled or were interrupted after every rank had written its
    measurement (`breakdown`: the profiled steps, their split and trace): part -> why. The measurement is kept."""
    load_avg_before: NotRequired[list[float]]
    """The machine's load average when the launch started."""


class Run(TypedDict):
    """What a run or scale record holds beside Base, measured or not."""

    started_wall: NotRequired[float]
    """Wall-clock time (epoch seconds) the run started."""
    row_order: NotRequired[list[str]]
    """The rows as asked for, in that order."""
    run_interrupted: NotRequired[str]
    """Set on every record of a run stopped by Ctrl-C or SIGTERM: where it was stopped."""
    concurrent_compare_runs: NotRequired[list[dict[str, Any]]]
    """Other compare runs alive on this machine when the timed steps began."""
    adapter: str
    """The adapter's name (`ddp`, `horovod`, ...)."""
    label: str
    """The row: the adapter with its knobs (`ddp:bucket_cap_mb=1`)."""
    summary: NotRequired[str]
    """The adapter's one-line description."""
    workload: str
    """The workload's name."""
    repeat: int
    """Which launch of the row (0, 1, ...): each repeat is a fresh launch."""
    reason: str
    """Why a row is not ok: the first error line, the unavailable framework's reason and fix."""
    log_tail: NotRequired[str]
    """The last lines of a failed launch's log (a stall's: each rank's Python stacks)."""
    log_not_kept: NotRequired[str]
    """Why the launch's log is not in logs/ (it could not be written there: a full disk); log_tail keeps its end."""
    reached: NotRequired[dict[str, Any]]
    """Where rank 0 was when a launch failed: its phase, step and total."""
    stalled_rank: NotRequired[int]
    """A stalled launch's rank that stopped first: behind every other by its finished steps and the line of the
    training loop its stack was at (harness/launching/stalled.py); absent where no single rank was behind."""
    leftover_processes_killed: NotRequired[int]
    """Processes of the launch still alive after it ended, killed by compare."""
    comm_schedule: NotRequired[dict[str, Any] | None]
    """The adapter's communication pattern as the cost model reads it (kind, buckets, wire scale, overlap)."""
    adapter_info: NotRequired[dict[str, Any]]
    """What the framework reported: versions, resolved knobs, notes."""
    param_count: NotRequired[int]
    """Every parameter of the model, trainable and frozen (records before 2026-11-28 called it trainable; it has
    always counted all)."""
    trainable_param_count: NotRequired[int]
    """The parameters that require a gradient: what gradients, their communication and the optimizer state are
    sized by (fewer than param_count in a fine-tune with frozen layers, e.g. LoRA)."""
    data: NotRequired[dict[str, Any]]
    """Where the data came from (source, sizes; for a Dataset, the loader and its workers per rank)."""
    workload_source: NotRequired[str]
    """A workload from outside this repository: its file (with the SHA-256 of its text), module or entry point."""
    tokens_per_sample: NotRequired[int]
    """A language model's tokens per training sample (its sequence length)."""
    tokens_per_s: NotRequired[float]
    """`samples_per_s` x `tokens_per_sample`: the tokens/s a language model's users compare."""
    tokens_per_sample_unpadded: NotRequired[float]
    """Where the batches are padded (a dict batch's `attention_mask`): the mean real tokens of a training sample,
    which the report gives beside `tokens_per_sample` (tokens/s counts the pads)."""
    flops_per_sample: NotRequired[float]
    """FLOPs of one sample's forward and backward, counted by torch's FlopCounterMode on the real model (matmuls
    and convolutions; the optimizer left out)."""
    conv_flops_share: NotRequired[float]
    """The share of `flops_per_sample` in convolutions: on CUDA an fp32 model's convolutions may run in TF32
    (cuDNN's default) while its matmuls do not (torch's), which sets the peak its MFU is judged against and whether
    its precision says "TF32 conv"."""
    tflops_per_device: NotRequired[float]
    """Achieved TFLOP/s per device: `samples_per_s_per_device` x `flops_per_sample` / 1e12."""
    mfu: NotRequired[dict[str, Any]]
    """Model FLOPs utilisation: `value` (achieved over the device's dense peak at the row's arithmetic), the `peak`
    it was judged against, or `why_none` (a CPU, a GPU without a known peak)."""
    launch_wall: NotRequired[float]
    """Wall-clock time the launch started."""
    wall_time_s: NotRequired[float]
    """The launch's wall time, start to end."""
    phases_s: NotRequired[dict[str, float]]
    """Seconds per phase of the launch (launcher, python, imports, init, setup, gate, warm-up, timed, eval, result,
    shutdown)."""
    setup_s: NotRequired[float]
    """The slowest rank's set-up (model, wrapper, data)."""
    samples_per_s_median_step: NotRequired[float]
    """The same as samples_per_s at the median step (schema 1's figure)."""
    step_time_spread_ranks_s: NotRequired[list[float]]
    """Each rank's own median step time."""
    step_clock: NotRequired[str]
    """`host_sync` (CPU) or `cuda_events` (CUDA events, no sync between steps)."""
    skipped_steps_timed: NotRequired[int]
    """fp16 steps the loss scaler skipped inside the timed window."""
    compile: NotRequired[dict[str, Any]]
    """What torch.compile compiled (TorchDynamo's counters, slowest rank): `graphs` and `compile_s` over the launch,
    `graphs_timed` and `compile_s_timed` inside the timed window (its samples/s then includes compiling)."""
    dtypes: NotRequired[dict[str, str]]
    """The dtypes rank 0's backend held, read from its live objects (Adapter.dtypes): `params`, `master` (a separate
    fp32 copy, or "none"), `compute`, `grads` (after the first backward), `reduce` (on the wire), `optimizer`."""
    breakdown: NotRequired[dict[str, Any]]
    """--breakdown: the profiled steps after the evaluation split into parts (harness/shared/step_parts.py), seconds
    per step averaged over ranks and steps: forward, backward, optimizer, other, comm_exposed, waiting (they add up to
    `step_s`), `overlapped` (not added), `exposed_by_kind`; `ranks` (each rank's), `timed_step_s`,
    `profiled_vs_timed` and `within_tolerance` (of `tolerance`), `collectives_seen` per rank, `overlap_seen`,
    `slowest_rank`, `traces` (rank -> path in the results, --trace) and `trace_s`."""
    cpu_time_s_per_rank: NotRequired[list[float]]
    """Each rank's process CPU time (all threads) over the timed window."""
    cpu_s_per_step: NotRequired[float]
    """CPU seconds per timed step per rank (mean over ranks)."""
    timed_window_wall_s: NotRequired[float]
    """The timed window by the wall clock (synchronised on CUDA), slowest rank: what `samples_per_s` divides by (from
    schema 3), less the equivalence snapshot and an until-target run's evaluations."""
    noise: NotRequired[dict[str, Any]]
    """What else the machine did over the timed window (rank 0's /proc/stat): ticks, steal share, other processes'
    CPU share, flags; `unchecked` where the window was too short to read them from."""
    cpu_affinity_per_rank: NotRequired[list[list[int] | None]]
    """Each rank's CPU affinity."""
    cpu_affinity_any_thread_per_rank: NotRequired[list[list[int] | None]]
    """Every core any thread of each rank may run on."""
    peak_memory_bytes: NotRequired[int | None]
    """The largest rank's peak over the timed steps."""
    peak_memory_bytes_per_rank: NotRequired[list[int | None]]
    """Each rank's peak: CPU RSS less file-backed pages, or CUDA allocated."""
    peak_memory_file_bytes_per_rank: NotRequired[list[int | None]]
    """File-backed pages beside the peak (shared libraries, mapped data)."""
    peak_memory_cuda_reserved_bytes_per_rank: NotRequired[list[int | None]]
    """On CUDA: the caching allocator's reserved peak."""
    peak_memory_host_bytes_per_rank: NotRequired[list[int | None]]
    """On CUDA: the host memory peak (offloaded state, pinned buffers)."""
    final_loss_window: NotRequired[int]
    """How many steps `final_loss` averages."""
    eval: NotRequired[dict[str, Any] | None]
    """Test metric: accuracy, loss, target, target_met, test samples, per-rank counts; `metric`, its name in
    words; `default_steps` and `default_global_batch`, the workload's default run, which is what reaches `target`."""
    eval_skipped: NotRequired[str]
    """Why there is no `eval` where one was asked for, in words: no test set, or no accuracy to take without the
    workload's metric (float targets, dict batches, an output without logits)."""
    max_param_diff: NotRequired[float | None]
    """Largest parameter difference from the single-process reference after the equivalence steps."""
    reference_run: NotRequired[dict[str, Any]]
    """The single-process reference launch: status, start, wall time."""
    until_target: NotRequired[dict[str, Any]]
    """With `--until-target`: target, metric, evaluation cadence, step budget."""
    ttt: NotRequired[TimeToTarget]
    """Time to target: reached, steps, training and end-to-end seconds, evaluations, curve (TimeToTarget)."""
    row_env: NotRequired[dict[str, Any]]
    """A row run with another interpreter or extra environment variables (`python=PATH`, `env.NAME=VALUE` in its
    label): `python` and its `python_version` and `torch` as that interpreter reported them, and `env`."""
    straggler: NotRequired[dict[str, Any]]
    """With `--straggler`: the slow rank, its factor and the delay added per step."""
    compute_profile: NotRequired[list[dict[str, Any]]]
    """Each rank's compute time per batch size, measured alone after training."""
    load_balance: NotRequired[dict[str, Any]]
    """Each rank's share of the step spent computing against waiting."""


class RunOnly(TypedDict):
    """What only a `compare run` record holds (its rounds and verdict), beside Run."""

    rerun_command: NotRequired[str]
    """The command line that reproduces the run exactly: its request written back with what it resolved (the rows,
    world size, steps, warm-up, global batch, equivalence steps, the order seed; harness/ground/argv.py)."""
    order_seed: NotRequired[int]
    """Seed of the shuffled order of rows within each round (`--order-seed` repeats it)."""
    position: NotRequired[int]
    """This launch's place in its round's shuffled order (0 first)."""
    baseline: NotRequired[str | None]
    """The row ratios are measured against (`--baseline`, or the first row on the full world size)."""
    margin: NotRequired[float | None]
    """The verdict's equivalence margin (`--margin` as a fraction; None: the default, 5%)."""
    design: NotRequired[dict[str, Any]]
    """A default run's design (no `--steps`, no `--repeats`): `steps` per launch, the workload's own
    (`workload_steps`) and the variance components they came from (`components`: within a launch per window and
    its steps, between launches, a launch's fixed and per-step seconds, from `compare doctor`; null where none were
    measured here, and the workload's steps were kept)."""
    between_sessions: NotRequired[dict[str, Any]]
    """What this host's cache knew of the variation between runs when the run was made (from the verdict over 3 or
    more joined sessions all made on this host, `env.host_key`, every session ranking every row with 3 launches and
    none failed: for the run's workload and options, timed steps, warm-up, global batch and world size, the join
    whose newest session is newest; absent where none was of that request): sessions, pairs, the median and largest
    between-session SD of a pair's log ratio, the median standard error within one run, the workload, its options,
    rows (which may be others than the run's) and steps, and the date; and, kept since, `per_pair`: each pair's rows
    (`a` / `b`), pooled ratio, τ and 95% prediction interval for a new session's estimate. The verdict says it beside
    "these intervals hold for this run", and names every pair it resolves (or shows equivalent) whose prediction
    interval does not hold that outcome: for this run alone, not this machine."""
    precision_mode: NotRequired[dict[str, Any]]
    """Without `--repeats`: target (`--precision`, or null), budget, rounds used and the least run, how it ended,
    elapsed seconds, the widest interval left and the stopping criterion (`simultaneous`: every pair's Bonferroni
    interval; absent: the ratios to the baseline); with `--precision` since two stages, `rule` ("two-stage"),
    `pilot_rounds` (whose variance every paired interval takes) and `planned_rounds` (fixed from the pilot; null if
    the pilot did not end)."""


class Tune(TypedDict):
    """What a tune record (kind "tune": one launch of one candidate, harness/core/tuning.py) holds beside a run's."""

    tune: dict[str, Any]
    """The launch's stage: {"stage": "race"} (choosing each backend's best) or {"stage": "confirm"} (the defaults
    and the best on fresh launches, which the gains and verdicts come from)."""
    tune_plan: NotRequired[dict[str, Any]]
    """The tune as planned: backend -> candidate labels (the defaults first), the budget in seconds and whether per
    backend, the adapters left out as untunable or unavailable and why, the least rounds of each stage,
    `halving` (true since the race fits its candidates to the budget after its first round) and `min_gain` (the gain
    the tune was sized for, `--min-gain`)."""
    tune_summary: NotRequired[dict[str, Any]]
    """How the tune ended (absent if interrupted): the budget, race and confirmation rounds, why each backend's race
    ended ("one left", "planned", "budget", "every candidate failed"), elapsed seconds and the launch seconds per
    backend; since `--min-gain`, the gain, each backend's sizing (`plans`: the race's variance of a candidate's log
    ratio to its defaults per round, its degrees of freedom and upper bound, the race and confirmation rounds it
    called for), the confirmation rounds planned and the seconds the plan needed (`needed_s`)."""


class Measured(TypedDict):
    """What a run or scale record adds once it was measured (status ok, or not_reached)."""

    controls: Controls
    """The conditions (Controls)."""
    topology: dict[str, Any]
    """Processes, devices used, backend, launcher argv and process group; across hosts the nodes, processes per node
    and every rank's host."""
    step_time_s: StepTime
    """The slowest rank's step time: median, p10, p90, mean, n."""
    step_times_s: list[float]
    """Every timed step's slowest-rank time."""
    samples_per_s: Number
    """The samples of the timed steps over the timed window by the wall clock, the slowest rank's (schema 2: over the
    summed slowest-rank step times, i.e. the mean step)."""
    samples_per_s_per_device: Number
    """`samples_per_s` over the devices used."""
    loss_curve: list[float]
    """The global training loss per step."""
    uncounted_steps: NotRequired[list[int]]
    """The steps (from 0) whose global batch held nothing a counted loss counts (every label -100): their loss is 0
    by definition and no training loss, so the final loss and the loss plot leave them out."""
    final_loss: Number
    """Mean of the last `final_loss_window` steps' loss (those in `uncounted_steps` left out)."""
    equivalence: dict[str, Any]
    """The check: steps, tolerance, whether it was checked (and why not), passed; `batch_norm` (the model's
    BatchNorm layers and whether this row's statistics were per process or over the global batch); for a failed
    check `largest_diffs` (the parameters that differ most, each with the reference's steps, from 0, that left it
    without a gradient, and where the reference kept its gradients `gradient_peak`, its largest gradient over its
    steps among the elements that differ most, and `gradient_ratio`, that over the model's median element's) and
    `why_failed` (randomness in the model, or those parameters and what the backend does
    with a parameter that got no gradient)."""
    time_to_first_step_s: Number
    """From the launch's start to the end of the first step, without the gate wait."""
    peak_memory_kind: str
    """What the peak counts (`rss_anon`, `cuda_max_allocated`, ...)."""


class Scale(TypedDict):
    """What a scale record adds to a run record."""

    scale: ScalePoint
    """This point of the sweep: scaling, world sizes, point, per-rank batch, baseline."""
    scale_sweep: NotRequired[dict[str, Any]]
    """The sweep: scaling, world sizes, threads per rank, the model's inputs; in the first record, `prediction`: the
    model's prediction of the sweep, made when it ended, which its report renders (harness/model/predicted.py)."""
    contention: NotRequired[dict[str, Any]]
    """The calibration launch: compute with and without the other ranks busy."""


class Comm(TypedDict):
    """What a comm record (kind "comm", one op at one size on one backend) holds beside Base."""

    adapter: NotRequired[str]
    """The adapter its backend runs through."""
    reason: NotRequired[str]
    """Why a cell is not ok: the launch's failure, or why the backend does not offer the op."""
    backend: str
    """The communication backend (`torch`, `horovod`, `deepspeed`)."""
    backend_name: NotRequired[str]
    """The transport it ran on (`gloo`, `nccl`, ...)."""
    framework: NotRequired[str]
    """The framework and its version."""
    dtype: str
    """The buffers' element type."""
    device: str
    """`cpu` or `cuda`."""
    topology: NotRequired[dict[str, Any]]
    """Processes and devices; across hosts the nodes and every rank's host."""
    launcher_argv: NotRequired[list[str]]
    """The launch's command line."""
    group: NotRequired[str]
    """Which table of the report the op belongs to."""
    elements: NotRequired[int]
    """Elements in the buffer."""
    wrong_ranks: NotRequired[int]
    """How many ranks' checked result was wrong."""
    busbw_interval_GBps: NotRequired[list[float] | None]
    """busbw's 95% distribution-free interval for the median call over the iterations ([lo, hi]; None below 6
    iterations)."""


class CommMeasured(TypedDict):
    """What a comm record adds once measured (status ok)."""

    op: str
    """The collective (`all_reduce`, `all_gather`, ...)."""
    size_bytes: int
    """The buffer size (divisible by the world size)."""
    time_s: StepTime
    """The slowest rank's time per call: median, p10, p90, mean, n."""
    algbw_GBps: Number
    """Size over the median time."""
    busbw_GBps: Number
    """algbw x busbw_factor."""
    busbw_factor: Number
    """nccl-tests' factor from algorithm to bus bandwidth for this op and world size."""


class RunRecord(Base, Run, RunOnly):
    """A record of `compare run` or `compare scale` as readers see it (Measured's fields once measured)."""


class CommRecord(Base, Comm):
    """A record of `compare comm` as readers see it (CommMeasured's fields once measured)."""


Record = RunRecord | CommRecord
"""What read_records returns: every field these types require is there, with its type (docs/records.md)."""


LAYERS: tuple[tuple[type, tuple[str, ...], str], ...] = (
    (Base, ("run", "scale", "comm", "tune"), "every record"),
    (Run, ("run", "scale", "tune"), "every run, scale and tune record"),
    (RunOnly, ("run", "tune"), "every run and tune record"),
    (Measured, ("run", "scale", "tune"), "every measured run, scale and tune record"),
    (Scale, ("scale",), "every scale record"), (Tune, ("tune",), "every tune record"), (Comm, ("comm",), "every comm record"),
    (CommMeasured, ("comm",), "every measured comm record"))
"""Each layer of fields, the kinds of record it belongs to and which records its required fields are required of:
docs/records.md is generated from these (harness/ground/schema.py)."""


@functools.cache
def field_docs(layer: type) -> dict[str, str]:
    """The docstring written under each field of a TypedDict layer (its `--help`, as a dataclass field's is)."""
    import ast
    import inspect
    import textwrap

    body = ast.parse(textwrap.dedent(inspect.getsource(layer))).body[0].body
    return {node.target.id: " ".join(after.value.value.split()) for node, after in zip(body, body[1:])
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)}


def _runtime(t: Any) -> type | tuple[type, ...]:
    """What isinstance checks a field's declared type against: a number is an int or a float, a nested TypedDict a
    dict, list[int] a list."""
    if t == Number:
        return NUMBER_TYPES
    if is_typeddict(t):
        return dict
    return get_origin(t) or t


@functools.cache
def required_fields(layer: type) -> dict[str, type | tuple[type, ...]]:
    """A layer's required fields and their runtime types, in declaration order (its NotRequired ones are described,
    not checked: records written before they existed lack them)."""
    return {key: _runtime(t) for key, t in get_type_hints(layer).items() if key in layer.__required_keys__}


@functools.cache
def optional_fields(layer: type) -> dict[str, type | tuple[type, ...]]:
    """A layer's NotRequired fields and their runtime types (a float may be written as an int, and any of them as
    null, which a reader takes as absent): checked only where a record holds them, so a hand-edited record is
    refused by name and not by whichever line of a report first trips on it."""
    out: dict[str, type | tuple[type, ...]] = {}
    for key, t in get_type_hints(layer).items():
        if key in layer.__required_keys__:
            continue
        args = get_args(t) if get_origin(t) in (Union, UnionType) else (t,)
        types: list[type] = []
        for arg in args:
            runtime = NUMBER_TYPES if arg is float else _runtime(arg)
            types.extend(runtime if isinstance(runtime, tuple) else (runtime,))
        if all(isinstance(tp, type) for tp in types):
            out[key] = tuple(dict.fromkeys([*types, type(None)]))
    return out


def checked_fields() -> dict[str, str]:
    """Top-level field -> what `check_record` requires of it ("int, every record"), for docs/records.md: the
    types are written once, in the TypedDicts above that the check itself reads (harness/ground/record.py:
    check_record)."""
    def name(types):
        return "number" if types == NUMBER_TYPES else types.__name__

    out: dict[str, str] = {}
    for layer, _, when in LAYERS:
        for key, types in required_fields(layer).items():
            out.setdefault(key, f"{name(types)}, {when}")
    return out


class WithTimeToTarget(TypedDict):
    """A record whose `ttt` is checked (a time-to-target run's)."""

    ttt: TimeToTarget
