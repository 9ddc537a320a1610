"""`compare run`: validate the request, run the reference and every adapter, write records, report and plots.

Everything that can be rejected is rejected in `plan()`, before anything is created on disk. `execute()` then
writes `records.jsonl` after every launch, so whatever happens later, finished rows are kept.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import adapters
import workloads
from adapters.base import Adapter, KnobError
from harness import env as envmod
from harness import record
from harness.launch import run_launch
from harness.spec import RunSpec

RESULT_FILES = ("records.jsonl", "report.md", "throughput.png", "loss.png", "step_times.png")


class BadInput(Exception):
    """A request the harness refuses: one line for the user, exit code 2, nothing written."""


@dataclass
class Request:
    adapters: list[str] | None = None
    workload: str = workloads.DEFAULT
    world_size: int = 2
    device: str = "cpu"
    steps: int | None = None
    warmup: int | None = None
    global_batch: int | None = None
    repeats: int = 1
    threads: int | None = None
    equiv_steps: int | None = None
    timeout_s: float = 900.0
    out: Path | None = None
    results_dir: Path = Path("results")
    force: bool = False
    knobs: list[str] = field(default_factory=list)
    options: list[str] = field(default_factory=list)
    fault: str | None = None
    command: str = "compare run"


@dataclass
class Plan:
    request: Request
    workload: Any
    runnable: list[tuple[str, Adapter]]
    unavailable: list[tuple[str, type[Adapter], str]]
    out: Path
    global_batch: int
    steps: int
    warmup: int
    equiv_steps: int
    order: list[str] = field(default_factory=list)
    """Every row's label in the order asked for (the registry's by default): the order of the tables."""


def _pairs(items: list[str], what: str) -> list[tuple[str, str]]:
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise BadInput(f"{what} '{item}' is not KEY=VALUE")
        out.append((key.strip(), value.strip()))
    return out


def parse_label(label: str) -> tuple[str, dict[str, str]]:
    """"deepspeed:zero_stage=3:offload_optimizer=true" -> ("deepspeed", {...}): one row per knob variant."""
    name, *parts = label.split(":")
    variant = {}
    for part in parts:
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise BadInput(f"adapter row '{label}': '{part}' is not KNOB=VALUE (form: ADAPTER:KNOB=VALUE:...)")
        variant[key] = value
    return name, variant


def _check_writable(out: Path, force: bool) -> None:
    """Refuse an output path that exists with results (without --force) or cannot be written, writing nothing.
    Writability is proven by creating and removing a probe directory: permission bits lie for root and for
    read-only mounts."""
    if out.exists():
        if not out.is_dir():
            raise BadInput(f"output path {out} exists and is not a directory")
        existing = [f for f in RESULT_FILES if (out / f).exists()]
        if existing and not force:
            raise BadInput(f"output directory {out} already holds results ({', '.join(existing)}); "
                           f"use --force to overwrite or choose another --out")
        probe_in = out
    else:
        probe_in = out.parent
        while not probe_in.exists():
            probe_in = probe_in.parent
        if not probe_in.is_dir():
            raise BadInput(f"cannot create output directory {out}: {probe_in} is not a directory")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".compare-probe-", dir=probe_in))
    except OSError as exc:
        raise BadInput(f"output directory {out} is not writable: {exc.strerror} ({probe_in})") from None


def plan(req: Request) -> Plan:
    if req.device not in ("cpu", "cuda"):
        raise BadInput(f"unknown device '{req.device}'; valid choices: cpu, cuda")
    try:
        options = dict(_pairs(req.options, "option"))
        workload = workloads.get(req.workload, options)
    except (workloads.UnknownWorkload, KnobError) as exc:
        raise BadInput(f"workload {req.workload}: {exc}" if isinstance(exc, KnobError) else str(exc)) from None
    if req.world_size < 1:
        raise BadInput(f"world size must be at least 1, got {req.world_size}")
    if req.repeats < 1:
        raise BadInput(f"repeats must be at least 1, got {req.repeats}")
    if req.threads is not None and req.threads < 1:
        raise BadInput(f"threads must be at least 1, got {req.threads}")
    gb = req.global_batch or workload.global_batch
    if gb < 1 or gb % req.world_size:
        raise BadInput(f"global batch {gb} is not divisible by world size {req.world_size}; "
                       f"choose a --global-batch that is a multiple of {req.world_size}")
    steps = workload.steps if req.steps is None else req.steps
    warmup = workload.warmup if req.warmup is None else req.warmup
    if steps < 1 or warmup < 0:
        raise BadInput(f"need --steps >= 1 and --warmup >= 0, got steps={steps} warmup={warmup}")
    equiv = min(workload.equiv_steps if req.equiv_steps is None else req.equiv_steps, steps + warmup)

    explicit = req.adapters is not None
    labels = req.adapters if explicit else adapters.names()
    if explicit and not labels:
        raise BadInput(f"no adapters given; valid choices: {', '.join(adapters.names())}")
    if len(set(labels)) != len(labels):
        raise BadInput(f"adapter listed twice in --adapters {','.join(labels)}")
    rows = [(label, *parse_label(label)) for label in labels]
    knobs: dict[str, dict[str, str]] = {}
    for key, value in _pairs(req.knobs, "knob"):
        name, dot, knob = key.partition(".")
        if not dot:
            raise BadInput(f"knob '{key}' must be ADAPTER.KNOB=VALUE, e.g. ddp.bucket_cap_mb=50")
        if name not in {n for _, n, _ in rows}:
            raise BadInput(f"knob '{key}' is for adapter '{name}', which is not in this run "
                           f"({', '.join(labels)})")
        knobs.setdefault(name, {})[knob] = value

    runnable, unavailable = [], []
    for label, name, variant in rows:
        try:
            cls = adapters.get(name)
        except adapters.UnknownAdapter as exc:
            raise BadInput(str(exc)) from None
        avail = adapters.availability(name, req.device, req.world_size)
        if not avail:
            if explicit:
                ok = [n for n in adapters.names() if adapters.availability(n, req.device, req.world_size)]
                raise BadInput(f"adapter '{name}' cannot run here: {avail.message()}; "
                               f"available here: {', '.join(ok) or 'none'}")
            unavailable.append((label, cls, avail.message()))
            continue
        try:
            adapter = cls({**knobs.get(name, {}), **variant}, req.device)
            adapter.precision()  # resolves (and so validates) precision knobs in the parent
        except KnobError as exc:
            raise BadInput(f"adapter {label}: {exc}") from None
        runnable.append((label, adapter))
    if not runnable:
        raise BadInput("no adapter can run here: " + "; ".join(f"{n}: {r}" for n, _, r in unavailable))

    if req.out is not None:
        out = req.out
    else:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        out = req.results_dir / f"{req.workload}_{envmod.hardware_slug(req.device)}_{stamp}"
    _check_writable(out, req.force)
    return Plan(req, workload, runnable, unavailable, out, gb, steps, warmup, equiv,
                order=[label for label, _, _ in rows])


def default_threads(processes: int, override: int | None) -> int:
    """Threads per training process: the machine's usable cores shared equally by the processes of a launch."""
    return override or max(1, envmod.usable_cores() // processes)


def execute(p: Plan, ui) -> list[dict[str, Any]]:
    """Run the plan; `ui` receives progress (see harness.cli.RunUI). Returns the records."""
    req = p.request
    p.out.mkdir(parents=True, exist_ok=True)
    for f in RESULT_FILES:
        (p.out / f).unlink(missing_ok=True)
    (p.out / "logs").mkdir(exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="compare-"))
    run_info = {"run_id": p.out.name, "time_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "command": req.command, "row_order": p.order, "env": envmod.collect(req.device)}
    records: list[dict[str, Any]] = []
    records_path = p.out / "records.jsonl"
    ui.start(p)
    try:
        reference = _reference(p, scratch, ui)
        for label, cls, reason in p.unavailable:
            for repeat in range(req.repeats):
                records.append(record.base_record(run=run_info, adapter=cls.name, label=label, summary=cls.summary,
                                                  launcher=cls.launcher, workload=req.workload,
                                                  world_size=req.world_size, repeat=repeat,
                                                  status="unavailable", reason=reason))
        record.write_records(records_path, records)
        # Repeats are interleaved (all adapters, then all again) so slow drift of the machine hits all alike.
        for repeat in range(req.repeats):
            for label, adapter in p.runnable:
                rec = _run_one(p, label, adapter, repeat, scratch, reference, run_info, ui)
                records.append(rec)
                record.write_records(records_path, records)
                ui.finished(rec)
    except KeyboardInterrupt:
        ui.interrupted()
        raise
    finally:
        if records:
            record.write_records(records_path, records)
            from harness import report

            report.render(p.out, records)
        shutil.rmtree(scratch, ignore_errors=True)
    return records


def _spec(p: Plan, adapter: str, rank_dir: Path, *, processes: int, steps: int, warmup: int, equiv: int,
          knobs: dict, do_eval: bool) -> RunSpec:
    req = p.request
    return RunSpec(adapter=adapter, workload=req.workload, world_size=req.world_size, device=req.device,
                   global_batch=p.global_batch, steps=steps, warmup=warmup,
                   threads=default_threads(processes, req.threads), seed=p.workload.seed, rank_dir=str(rank_dir),
                   equiv_steps=equiv, knobs=knobs, workload_options=dict(_pairs(req.options, "option")),
                   fault=req.fault, eval=do_eval)


def _reference(p: Plan, scratch: Path, ui) -> dict | None:
    """Run the single-process fp32 reference for `equiv_steps` steps; its parameters, or None if it failed."""
    if p.equiv_steps < 1:
        return None
    ref = adapters.get("reference")({}, p.request.device)
    rank_dir = scratch / "reference"
    spec = _spec(p, "reference", rank_dir, processes=1, steps=p.equiv_steps, warmup=0, equiv=p.equiv_steps,
                 knobs={}, do_eval=False)
    ui.begin("reference", 0, p.equiv_steps)
    outcome = run_launch(ref, spec, p.request.timeout_s, lambda pr: ui.progress("reference", 0, pr))
    shutil.copy(outcome.log_path, p.out / "logs" / "reference.log")
    ui.reference_done(outcome)
    if outcome.status != "ok":
        return None
    import torch

    return torch.load(rank_dir / "params.pt")


def _run_one(p: Plan, label: str, adapter: Adapter, repeat: int, scratch: Path, reference, run_info, ui):
    req = p.request
    slug = label.replace(":", "_").replace("=", "-").replace("/", "_")
    rank_dir = scratch / f"{slug}-r{repeat}"
    spec = _spec(p, adapter.name, rank_dir, processes=adapter.processes(req.world_size), steps=p.steps,
                 warmup=p.warmup, equiv=p.equiv_steps, knobs=asdict(adapter.knobs), do_eval=True)
    ui.begin(label, repeat, p.steps + p.warmup)
    outcome = run_launch(adapter, spec, req.timeout_s, lambda pr: ui.progress(label, repeat, pr))
    shutil.copy(outcome.log_path, p.out / "logs" / f"{slug}-r{repeat}.log")
    rec = record.base_record(run=run_info, adapter=adapter.name, label=label, summary=adapter.summary,
                             launcher=adapter.launcher, workload=req.workload, world_size=req.world_size,
                             repeat=repeat, status=outcome.status, reason=outcome.reason)
    try:
        return record.from_outcome(rec, outcome, spec, reference, p.workload)
    except Exception as exc:  # a malformed rank file must not lose the other rows
        rec.update(status="failed", reason=f"could not build the record: {type(exc).__name__}: {exc}",
                   log_tail=outcome.log_tail)
        return rec
