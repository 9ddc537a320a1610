"""`compare plan`: which backend for a cluster that is not here, and whether the model fits in its memory."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import typer
from rich.markup import escape

import workloads
from harness.commands.common import console, fail
from harness.ground.argv import cli
from harness.core.requests import typed_path


SEQ_LEN = 2048
"""Tokens per sample of a transformer given by --params when --seq-len is not given."""


@dataclass
class PlanRequest:
    """`compare plan`."""

    workload: str | None = field(default=None, metadata=cli("--workload", "-w"))
    """Plan this workload's model (see `compare list`); or describe one with --params."""
    options: list[str] = field(default_factory=list, metadata=cli("--option", "-o"))
    """Workload option KEY=VALUE."""
    params: float | None = field(default=None, metadata=cli("--params"))
    """A transformer's parameter count, e.g. 7e9 (with --layers)."""
    layers: int | None = field(default=None, metadata=cli("--layers"))
    """Its transformer blocks."""
    hidden: int | None = field(default=None, metadata=cli("--hidden"))
    """Its hidden size: lays it out as Llama (per-matrix gradients, separate embedding and head, activations)."""
    heads: int | None = field(default=None, metadata=cli("--heads"))
    """Its attention heads (default: hidden / 128, or the largest count below it that divides hidden)."""
    kv_heads: int | None = field(default=None, metadata=cli("--kv-heads"))
    """Its key/value heads: fewer than --heads is grouped-query attention (default: as many)."""
    ffn: int | None = field(default=None, metadata=cli("--ffn"))
    """Its SwiGLU MLP width (default: Llama's, 8/3 x hidden rounded up to 256)."""
    seq_len: int | None = field(default=None, metadata=cli("--seq-len"))
    """Tokens per sample of a model given by --params (default: 2048; a workload's model has its own)."""
    attention: str = field(default="flash", metadata=cli("--attention"))
    """flash (a fused kernel: no s x s scores kept) or eager (the softmax kept for backward)."""
    checkpointing: str = field(default="none", metadata=cli("--checkpointing"))
    """none; full (every block, i.e. shard unit, recomputed in backward, only its input kept); selective
    (torchtitan's per-op policy: matmul and attention outputs saved, every second matmul recomputed; also
    selective:op) or selective:N (every Nth block recomputed whole)."""
    from_run: Path | None = field(default=None, metadata=cli("--from", parser=typed_path))
    """A `compare run` results directory of the same workload: each row's compute priced from what it measured (and
    its interval), not from an assumed utilisation. Without --gpu, the run's own machine and world size."""
    compile: bool = field(default=False, metadata=cli("--compile", negatable=False))
    """Plan every row with torch.compile (knob compile=true), at the speed-up the --from run measured."""
    gpu: str | None = field(default=None, metadata=cli("--gpu"))
    """The GPU, as a hardware profile (`compare predict --list`): h100, h200, a100, v100, p100 or a profile's full
    name (default: h100; with --from, the run's own GPU)."""
    nodes: int = field(default=1, metadata=cli("--nodes"))
    """Nodes."""
    gpus_per_node: int | None = field(default=None, metadata=cli("--gpus-per-node"))
    """GPUs per node (default: the profile's)."""
    nic_gbps: float | None = field(default=None, metadata=cli("--nic-gbps"))
    """Line rate of each NIC in Gb/s (default: the profile's network)."""
    nics_per_node: int = field(default=1, metadata=cli("--nics-per-node"))
    """NICs per node, with --nic-gbps."""
    dtype: str | None = field(default=None, metadata=cli("--dtype"))
    """Training precision: bf16, fp16 or fp32 (default: bf16; with --from on the run's own CPU, each row's own)."""
    batch: int | None = field(default=None, metadata=cli("--batch"))
    """Samples per GPU per step (default: the workload's global batch, or 8 sequences; with --from, the run's per
    process)."""
    global_batch: int | None = field(default=None, metadata=cli("--global-batch"))
    """Samples per step over all GPUs (instead of --batch)."""
    optimizer: str | None = field(default=None, metadata=cli("--optimizer"))
    """adamw or sgd (default: the workload's; adamw with --params)."""
    memory_gib: float | None = field(default=None, metadata=cli("--gpu-memory-gib"))
    """Memory per GPU in GiB (default: the profile's)."""
    as_json: bool = field(default=False, metadata=cli("--json", negatable=False))
    """Print the plan as JSON."""


def plan(req: PlanRequest) -> None:
    """Which backend for a cluster that is not here: each framework's step time and samples/s on it (over an
    assumed range of utilisation, or from a run's measurements with --from), the memory each holds per GPU and
    whether it fits, and a recommendation with its margin."""
    import dataclasses as dc

    from harness.ground.errors import BadInput
    from harness.core.checks import pairs
    from harness.model import activations, measured, planner, shapes
    from harness.commands.common import malformed
    from harness.reports import MALFORMED, plan_report
    from harness.shared.options import OptionError

    model = ("a workload (-w, one of " + ", ".join(workloads.names()) + ") or a transformer's size (--params with "
             "--layers)")
    run = None
    try:
        if req.from_run is not None:
            _not_a_join(req.from_run)
            run = measured.read(req.from_run)
    except measured.BadRun as exc:
        fail(str(exc))
    except MALFORMED as exc:  # records of a shape the field check lets through: one line, as report says it
        fail(malformed(req.from_run, exc, "plan from"))
    if run is not None and req.params is not None:
        fail(f"--from prices the run's own workload ({run.workload}), not a transformer given by --params; leave out "
             f"--params, or --from")
    if req.compile and run is None:
        fail("--compile needs --from RUN_DIR: torch.compile's speed-up is taken from a run that measured a compiled "
             "row (a knob compile=true), not assumed")
    if req.workload is None and req.params is None and run is None:
        fail(f"give the model to plan: {model}")
    if req.workload is not None and req.params is not None:
        fail(f"give {model}, not both")
    if req.options and req.workload is None and run is None:
        fail(f"-o {req.options[0]} sets a workload's option, and no workload is given (-w); a transformer given by "
             f"--params is shaped by --layers, --hidden, --heads, --kv-heads and --ffn")
    if req.params is not None and req.layers is None:
        fail("--params needs --layers (its transformer blocks), e.g. --params 7e9 --layers 32")
    if req.nics_per_node != 1 and req.nic_gbps is None:  # an audit's --nics-per-node 2 was silently ignored
        fail(f"--nics-per-node {req.nics_per_node} needs --nic-gbps (the bus bandwidth across nodes is NICs per node "
             "x their line rate; without --nic-gbps it is the profile's measured network)")
    if req.gpu is not None and not req.gpu.strip():  # '' is falsy: it would plan the default, h100
        fail(f"an empty --gpu ({req.gpu!r}); choose from {', '.join(planner.gpu_choices())}")
    if req.dtype is not None and not req.dtype.strip():  # and bf16
        fail(f"an empty --dtype ({req.dtype!r}); choose from {', '.join(shapes.DTYPES)}")
    if req.global_batch is not None and req.global_batch < 1:  # the planner said "give a multiple of 8" of 0
        fail(f"--global-batch must be at least 1, got {req.global_batch}")
    if req.optimizer is not None and req.optimizer not in shapes.OPTIMIZERS:
        fail(f"unknown --optimizer {req.optimizer}; choose from {', '.join(shapes.OPTIMIZERS)}")
    try:
        shapes.within("--seq-len", req.seq_len)
        options = dict(pairs(req.options, "option"))
        name = req.workload
        if run is not None:
            name, options = _same_workload(run, req.workload, options)
        if run is not None and run.device == "cuda" and measured.profile_of(run.gpu) is None:
            if req.gpu is None:
                raise measured.BadRun(
                    f"--from {run.path} ran on {run.gpu or 'a GPU of no recorded name'}, which has no hardware "
                    f"profile: its own machine cannot be planned, nor its compute carried (its peak is not known); "
                    f"add a profile (harness/model/profiles/README.md)")
        if run is not None and run.device == "cpu" and req.gpu is None:
            target = _own_cpu(run, req)
        else:
            gpu = req.gpu or (measured.profile_of(run.gpu) if run is not None and run.gpu else None) or "h100"
            nodes, per_node = req.nodes, req.gpus_per_node
            if run is not None and req.gpu is None and req.nodes == 1 and per_node is None:
                per_node = run.world_size  # the run's own machine at its own world size
            target = planner.cluster(gpu, nodes, per_node, req.dtype or "bf16", req.nic_gbps, req.nics_per_node,
                                     req.memory_gib)
        batch = req.batch
        if run is not None and batch is None and req.global_batch is None:
            batch = run.per_rank_batch()
        per_gpu = planner.check(target, batch, req.global_batch)
        source = None
        if run is not None:
            source = _source(run, target, req.compile)
        ck = activations.checkpointing_of(req.checkpointing)
        if name is not None:
            for flag, value in (("--hidden", req.hidden), ("--heads", req.heads), ("--kv-heads", req.kv_heads),
                                ("--ffn", req.ffn), ("--layers", req.layers), ("--seq-len", req.seq_len)):
                if value is not None:
                    fail(f"{flag} describes a model given by --params; workload {name}'s model has its own "
                         f"shape (set it with its -o options, see `compare knobs {name}`)")
            # The model is built, run and counted on the meta device: a published size takes a minute or two here
            # (hf llama-70b at 1,000 layers, its bound, about two); on a terminal the wait says what it is.
            with console.status(f"building and counting workload {escape(name)}'s model on the meta device"):
                # from a run, the optimizer it trained with (the workload's), which another cannot replace
                shape = shapes.of_workload(name, options, req.optimizer if run is None else None,
                                           attention=req.attention, checkpointing=ck)
            if run is not None:
                flag = "--batch" if req.batch is not None else "--global-batch"  # None where neither was given
                measured.what_it_measured(run, per_gpu, flag, ck, req.optimizer, shape.optimizer, req.attention)
        else:
            seq_len = req.seq_len if req.seq_len is not None else SEQ_LEN
            shape = shapes.transformer(req.params, req.layers, req.hidden, seq_len, req.optimizer or "adamw",
                                        heads=req.heads, kv_heads=req.kv_heads, ffn=req.ffn,
                                        attention=req.attention, checkpointing=ck)
        inputs = {f.metadata["cli"].flags[0] if "cli" in f.metadata else f.name: getattr(req, f.name)
                  for f in dc.fields(req)}
        result = planner.make(shape, target, per_gpu or shape.default_batch, source, inputs)
    except BadInput as exc:  # BadPlan (no row trains the model as it is built at this dtype), BadRun, UnknownName
        fail(str(exc).strip("'\""))
    except OptionError as exc:
        fail(f"workload {req.workload}: {exc}")
    except MALFORMED as exc:  # the run's records, of a shape the field check lets through
        if run is None:
            raise
        fail(malformed(req.from_run, exc, "plan from"))
    if req.as_json:
        typer.echo(json.dumps(plan_report.as_json(result), indent=2, default=str))
        return
    for line in plan_report.lines(result):
        console.print(escape(line), soft_wrap=True)


def _not_a_join(path: Path) -> None:
    """BadRun where `path` is a join of runs (`compare join`: its sessions.json, no records of its own), naming the
    runs it joins: a plan prices one run's measurements (each row's own launches), not a verdict over sessions."""
    from harness.core import joins
    from harness.ground.record import records_file
    from harness.model.measured import BadRun

    if not path.is_dir() or records_file(path) is not None:
        return
    try:
        if joins.manifest(path) is None:
            return
    except joins.NotJoinable:
        return  # read_results says what the directory lacks
    runs = ", ".join(str(d) for d in joins.session_dirs(path))
    raise BadRun(f"--from {path} is a join of runs (`compare join`: sessions.json, no records of its own), and a plan "
                 f"prices one run's measurements; plan --from one of the runs it joins: {runs}")


def _same_workload(run, workload: str | None, options: dict) -> tuple[str, dict]:
    """The run's workload and options, which -w and -o (if given) must name: a plan from a run prices that run's
    model (another model's compute is not what it measured). BadRun otherwise."""
    from harness.model.measured import BadRun

    if workload is not None and workload != run.workload:
        raise BadRun(f"--from {run.path} is a run of workload {run.workload}, not {workload}; plan -w {run.workload} "
                     f"(or leave -w out)")
    merged = {**run.options, **options}
    if options:
        mine = workloads.get(run.workload, merged).describe()["options"]
        theirs = workloads.get(run.workload, run.options).describe()["options"]
        differ = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
        if differ:
            given = ", ".join(f"{k}={mine.get(k)} (the run: {theirs.get(k)})" for k in differ)
            raise BadRun(f"--from {run.path} ran workload {run.workload} with other options: {given}; a plan from a "
                         f"run prices the model it ran (leave out -o, or make a run of this model)")
    return run.workload, run.options


def _own_cpu(run, req):
    """The run's own CPU machine at its own world size (a CPU has no profile: only what the run measured there)."""
    from harness.model import planner
    from harness.model.measured import BadRun

    if req.nodes != 1 or req.gpus_per_node not in (None, run.world_size) or req.nic_gbps is not None:
        raise BadRun(f"--from {run.path} ran on a CPU ({run.machine}), which has no hardware profile: only its own "
                     f"machine at its own world size ({run.world_size}) can be planned from it; leave out --nodes, "
                     f"--gpus-per-node and --nic-gbps, or give --gpu (a GPU run's compute carries to another GPU)")
    # the host's memory is shared by the run's processes: each holds its share (every process had been judged
    # against all of it)
    memory = req.memory_gib if req.memory_gib is not None else (
        run.host_memory_bytes / 2**30 / run.world_size if run.host_memory_bytes else None)
    return planner.Cluster(None, 1, run.world_size, req.dtype, memory_gib=memory, machine=run.machine)


def _source(run, target, compile_: bool):
    """The measured compute source for a plan of `target`, or BadRun when the run cannot price it."""
    from harness.model import measured

    from harness.core import analysis

    source = measured.FromRun(run, target.dtype, compile_)
    # the run's verdict, pair by pair, as its report computes it: the plan claims no order it does not support
    from harness.reports.verdict import swamped

    a = analysis.analyse(run.records)
    pairs = a["pairs"]
    source.verdict = {(x, y): analysis.oriented(pairs, x, y) for p in pairs for x, y in ((p["a"], p["b"]),
                                                                                         (p["b"], p["a"]))}
    # a pair the run resolves where the sessions joined before on this machine expect a new session's estimate
    # either way (the run report's "this run alone, not this machine"): its 95% prediction interval, each way
    known = a.get("between_sessions") or {}
    source.swamped = {key: (bounds, known.get("sessions")) for p, lo, hi in swamped(a)
                      for key, bounds in (((p["a"], p["b"]), (lo, hi)), ((p["b"], p["a"]), (1 / hi, 1 / lo)))}
    if target.profile is None:
        source.configurations(target)  # BadRun, before anything is built, where no row can be priced
    if target.profile is not None:
        if run.device == "cuda" and measured.profile_of(run.gpu) is None:
            raise measured.BadRun(
                f"--from {run.path} ran on {run.gpu or 'a GPU of no recorded name'}, which has no hardware profile: "
                f"its peak is not known, so its compute cannot be carried to {target.profile}; add a profile "
                f"(harness/model/profiles/README.md)")
        if run.device == "cpu":
            raise measured.BadRun(
                f"--from {run.path} ran on a CPU ({run.machine}), whose peak FLOP/s is not known: its compute cannot "
                f"be carried to {target.profile}; plan the run's own machine (leave out --gpu), or --from a GPU run")
        if source.reference(target.dtype) is None:
            have = ", ".join(sorted({r.precision for r in run.rows.values()}))
            raise measured.BadRun(
                f"--from {run.path} measured no {target.dtype} row (its rows ran in {have}): its compute at another "
                f"precision says little about {target.dtype} (MFU differs between precisions: 64% of fp32's peak "
                f"and 25% of bf16's on the H200's Llama); give --dtype {have.split(', ')[0]}, or a run with a "
                f"{target.dtype} row")
    if compile_:
        source.speedup = measured.compile_speedup(run)
        compiled = [r for r in run.rows.values() if r.compiled]
        if not compiled:
            raise measured.BadRun(
                f"--compile: --from {run.path} measured no compiled row (a knob compile=true); add one beside its "
                f"plain row, e.g. compare run -a ddp,ddp:compile=true")
        if source.speedup is None and target.profile is not None:
            raise measured.BadRun(
                f"--compile: --from {run.path} measured {', '.join(r.label for r in compiled)} but not the same "
                f"row without compile, so no speed-up can be read from it; add the plain row")
    return source
