"""`compare run`: check the request, run the reference and every adapter, write records, report and plots.

Runs in: the parent. Everything that can be refused is refused in `plan()`, before anything is created on disk.
`execute()` then writes `records.jsonl` after every launch (harness/session.py), so whatever happens later,
finished rows are kept.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import adapters
import workloads
from harness import env as envmod
from harness import outdir, record
from harness.inputs import (BadInput, Row, RunPlan, RunRequest, build_rows, check_common, check_cores, check_list,
                            pairs, parse_label)
from harness.launch import run_launch
from harness.options import OptionError
from harness.registry import UnknownName
from harness.session import Session
from harness.spec import RunSpec

RESULT_FILES = ("records.jsonl", "report.md", "throughput.png", "loss.png", "step_times.png")


def plan(req: RunRequest) -> RunPlan:
    check_common(req)
    if req.repeats < 1:
        raise BadInput(f"repeats must be at least 1, got {req.repeats}")
    for name, value, least in (("--steps", req.steps, 1), ("--warmup", req.warmup, 0),
                               ("--global-batch", req.global_batch, 1), ("--equiv-steps", req.equiv_steps, 0)):
        if value is not None and value < least:
            raise BadInput(f"{name} must be at least {least}, got {value}")
    try:
        workload = workloads.get(req.workload, dict(pairs(req.options, "option")))
    except UnknownName as exc:
        raise BadInput(str(exc)) from None
    except OptionError as exc:
        raise BadInput(f"workload {req.workload}: {exc}") from None
    gb = workload.global_batch if req.global_batch is None else req.global_batch
    if gb % req.world_size:
        raise BadInput(f"global batch {gb} is not divisible by world size {req.world_size}; "
                       f"choose a --global-batch that is a multiple of {req.world_size}")
    n_train = workload.train_samples(gb)
    if gb > n_train:
        raise BadInput(f"global batch {gb} is larger than workload {req.workload}'s training set ({n_train} "
                       f"samples); choose a --global-batch of at most {n_train}")
    steps = workload.steps if req.steps is None else req.steps
    warmup = workload.warmup if req.warmup is None else req.warmup
    if req.equiv_steps is not None and req.equiv_steps > steps + warmup:
        raise BadInput(f"--equiv-steps {req.equiv_steps} is more than the {warmup} + {steps} steps the run takes")
    equiv = min(workload.equiv_steps, steps + warmup) if req.equiv_steps is None else req.equiv_steps

    explicit = req.adapters is not None
    labels = req.adapters if explicit else adapters.names()
    check_list(req.adapters, adapters.names(), "adapter")
    rows = [(label, *parse_label(label)) for label in labels]
    knobs: dict[str, dict[str, str]] = {}
    for key, value in pairs(req.knobs, "knob"):
        name, dot, knob = key.partition(".")
        if not dot:
            raise BadInput(f"knob '{key}' must be ADAPTER.KNOB=VALUE, e.g. ddp.bucket_cap_mb=50")
        if name not in {n for _, n, _ in rows}:
            raise BadInput(f"knob '{key}' is for adapter '{name}', which is not in this run "
                           f"({', '.join(labels)})")
        knobs.setdefault(name, {})[knob] = value
    built = build_rows(req, rows, explicit, "adapter", knobs)
    over = check_cores(req, max(r.adapter.processes(req.world_size) for r in built if r.adapter))
    if req.out is not None:
        out = req.out
    else:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        out = req.results_dir / f"{req.workload}_{envmod.hardware_slug(req.device)}_{stamp}"
    outdir.check(out, req.force)
    return RunPlan(req, out, built, oversubscribed=over, workload=workload, global_batch=gb, steps=steps,
                   warmup=warmup, equiv_steps=equiv)


def default_threads(processes: int, override: int | None) -> int:
    """Threads per training process: the machine's usable cores shared equally by the processes of a launch."""
    return override or max(1, envmod.usable_cores() // processes)


def execute(p: RunPlan, ui, started: float | None = None) -> tuple[list[dict[str, Any]], bool]:
    """Run the plan; `ui` receives progress (see harness.cli.RunUI). Returns (records, interrupted). Raises
    SessionError when the results cannot be written (exit 1) and BadInput when another run holds the directory."""
    from harness import report

    req = p.request
    run_info = {"kind": "run", "run_id": p.out.name,
                "time_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "command": req.command, "row_order": [r.label for r in p.rows], "env": envmod.collect(req.device),
                "oversubscribed": p.oversubscribed}
    if started is not None:
        run_info["started_wall"] = started
    stopped: str | None = None
    """When the run was interrupted (Ctrl-C, SIGTERM): "during the reference run", "during ddp (repeat 1)", ..."""
    with Session(p.out, RESULT_FILES) as session:
        ui.start(p)
        try:
            try:
                reference = _reference(p, session, ui)
            except _Interrupted as stop:
                stopped, reference = stop.args[0], None
            session.save([_plain(run_info, req, row, repeat, "unavailable", row.reason)
                          for row in p.unavailable for repeat in range(req.repeats)])
            # Repeats are interleaved (all adapters, then all again) so slow drift of the machine hits all alike.
            for repeat, row in [(repeat, row) for repeat in range(req.repeats) for row in p.runnable]:
                if stopped:
                    break
                rec = _run_one(p, row, repeat, session, reference, run_info, ui)
                if rec["status"] == "interrupted":
                    stopped = f"during {row.label} (repeat {repeat + 1})"
                session.save([rec])
                ui.finished(rec)
        except KeyboardInterrupt:
            stopped = stopped or "between launches"
        finally:
            ui.stop()
        if stopped:
            done = {(r["label"], r["repeat"]) for r in session.records}
            never = [_plain(run_info, req, row, repeat, "not_run", f"the run was interrupted {stopped}")
                     for repeat in range(req.repeats) for row in p.runnable if (row.label, repeat) not in done]
            session.records = [{**r, "run_interrupted": stopped} for r in session.records + never]
            session.save()
        session.finish(report.render)
    return session.records, stopped is not None


class _Interrupted(Exception):
    pass


def _plain(run_info, req, row: Row, repeat: int, status: str, reason: str) -> dict[str, Any]:
    return record.base_record(run=run_info, adapter=row.name, label=row.label,
                              summary=getattr(row.cls, "summary", ""), launcher=getattr(row.cls, "launcher", "?"), workload=req.workload, world_size=req.world_size,
                              repeat=repeat, status=status, reason=reason)


def _spec(p: RunPlan, adapter: str, rank_dir: Path, *, processes: int, steps: int, warmup: int, equiv: int,
          knobs: dict, do_eval: bool) -> RunSpec:
    req = p.request
    return RunSpec(adapter=adapter, workload=req.workload, world_size=req.world_size, device=req.device,
                   global_batch=p.global_batch, steps=steps, warmup=warmup,
                   threads=default_threads(processes, req.threads), rank_dir=str(rank_dir),
                   equiv_steps=equiv, knobs=knobs, workload_options=dict(pairs(req.options, "option")),
                   fault=req.fault, eval=do_eval)


def _reference(p: RunPlan, session: Session, ui) -> dict | None:
    """Run the single-process fp32 reference for `equiv_steps` steps; its parameters, or None if it failed."""
    if p.equiv_steps < 1:
        return None
    ref = adapters.get("reference")({}, p.request.device)
    rank_dir = session.scratch / "reference"
    spec = _spec(p, "reference", rank_dir, processes=1, steps=p.equiv_steps, warmup=0, equiv=p.equiv_steps,
                 knobs={}, do_eval=False)
    ui.begin("reference", 0, p.equiv_steps)
    outcome = run_launch(ref, spec, p.request.timeout_s, lambda pr: ui.progress("reference", 0, pr))
    session.keep_log(outcome.log_path, "reference.log")
    ui.reference_done(outcome)
    if outcome.status == "interrupted":
        raise _Interrupted("during the reference run")
    if outcome.status != "ok":
        return None
    import torch

    return torch.load(spec.params_path)


def _run_one(p: RunPlan, row: Row, repeat: int, session: Session, reference, run_info, ui) -> dict[str, Any]:
    req, adapter = p.request, row.adapter
    slug = row.label.replace(":", "_").replace("=", "-").replace("/", "_")
    rank_dir = session.scratch / f"{slug}-r{repeat}"
    spec = _spec(p, adapter.name, rank_dir, processes=adapter.processes(req.world_size), steps=p.steps,
                 warmup=p.warmup, equiv=p.equiv_steps, knobs=asdict(adapter.knobs), do_eval=True)
    ui.begin(row.label, repeat, p.steps + p.warmup)
    outcome = run_launch(adapter, spec, req.timeout_s, lambda pr: ui.progress(row.label, repeat, pr))
    session.keep_log(outcome.log_path, f"{slug}-r{repeat}.log")
    rec = record.base_record(run=run_info, adapter=adapter.name, label=row.label, summary=adapter.summary,
                             launcher=adapter.launcher, workload=req.workload, world_size=req.world_size,
                             repeat=repeat, status=outcome.status, reason=outcome.reason)
    try:
        return record.from_outcome(rec, outcome, spec, reference, p.workload)
    except Exception as exc:  # a malformed rank file must not lose the other rows
        rec.update(status="failed", reason=f"could not build the record: {type(exc).__name__}: {exc}",
                   log_tail=outcome.log_tail)
        return rec
