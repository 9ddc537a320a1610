"""`compare run`: check the request, run the reference and every adapter, write records, report and plots.

Runs in: the parent. Everything that can be refused is refused in `plan()`, before anything is created on disk.
`execute()` then writes `records.jsonl` after every launch (harness/session.py), so whatever happens later,
finished rows are kept.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import adapters
import workloads
from harness import env as envmod
from harness import interrupt, outdir, record
from harness.inputs import (BadInput, Row, RunPlan, RunRequest, UntilTarget, build_rows, check_common, check_cores,
                            check_list, pairs, parse_label)
from harness.launch import Launch
from harness.options import OptionError
from harness.registry import UnknownName
from harness.session import Session
from harness.spec import RunSpec

RESULT_FILES = ("records.jsonl", "report.md", "throughput.png", "loss.png", "step_times.png", "epoch_time.png",
                "ttt_curve.png", "ttt_time.png")


def plan(req: RunRequest) -> RunPlan:
    check_common(req)
    if req.repeats < 1:
        raise BadInput(f"repeats must be at least 1, got {req.repeats}")
    for name, value, least in (("--steps", req.steps, 1), ("--warmup", req.warmup, 0),
                               ("--global-batch", req.global_batch, 1), ("--equiv-steps", req.equiv_steps, 0),
                               ("--eval-every", req.eval_every, 1), ("--max-steps", req.max_steps, 1)):
        if value is not None and value < least:
            raise BadInput(f"{name} must be at least {least}, got {value}")
    _check_until_target_flags(req)
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
    until = _until_target(req, workload)
    if until:
        steps, warmup = until.max_steps, 0
        if req.equiv_steps is not None and req.equiv_steps > steps:
            raise BadInput(f"--equiv-steps {req.equiv_steps} is more than the {steps}-step budget (--max-steps)")
    else:
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
                   warmup=warmup, equiv_steps=equiv, until_target=until)


def _check_until_target_flags(req: RunRequest) -> None:
    """Options that belong to one mode only, refused in the other (before anything is built)."""
    if not req.until_target:
        for name, value in (("--eval-every", req.eval_every), ("--max-steps", req.max_steps)):
            if value is not None:
                raise BadInput(f"{name} only applies with --until-target; add --until-target, or leave {name} out")
        return
    if req.steps is not None:
        raise BadInput("--steps sets the length of a fixed-length run, but an --until-target run lasts until the "
                       "target or the step budget; use --max-steps for the budget")
    if req.warmup:
        raise BadInput("--until-target counts every step from the first as training (no warm-up is discarded); "
                       "leave --warmup out")


def _until_target(req: RunRequest, workload) -> UntilTarget | None:
    """The resolved until-target settings (None for a fixed-length run); BadInput for a workload without a target
    or a cadence that the budget never reaches."""
    if not req.until_target:
        return None
    if workload.target is None:
        with_target = [n for n in workloads.names() if workloads.get(n).target is not None]
        raise BadInput(f"workload {req.workload} has no accuracy target, so it cannot be trained until one; "
                       f"workloads with a target: {', '.join(with_target)}")
    every = workload.eval_every if req.eval_every is None else req.eval_every
    budget = workload.max_steps_to_target if req.max_steps is None else req.max_steps
    if every > budget:
        raise BadInput(f"--eval-every {every} is more than the {budget}-step budget, so the target would be checked "
                       f"only once, after the last step; choose --eval-every of at most {budget} or a larger "
                       f"--max-steps")
    return UntilTarget(target=workload.target, metric=workload.metric_name, eval_every=every, max_steps=budget)


def default_threads(processes: int, override: int | None) -> int:
    """Threads per training process: the machine's usable cores shared equally by the processes of a launch."""
    return override or max(1, envmod.usable_cores() // processes)


def execute(p: RunPlan, ui, started: float | None = None) -> tuple[list[dict[str, Any]], bool]:
    """Run the plan; `ui` receives progress (see harness.cli.RunUI). Returns (records, interrupted). Raises
    SessionError when the results cannot be written (exit 1) and BadInput when another run holds the directory.

    Launches are pipelined, never their measurements: once a launch's timed steps are over (rank 0 says so), the
    next launch starts and does its untimed start-up (interpreter, imports, rendezvous, model, data) while the
    previous one evaluates and shuts down; its ranks then wait at the gate (harness/progress.py) until the
    previous launch has ended entirely, so no other launch's process runs during any warm-up or timed step.
    Every launch is still a fresh set of processes, started by its own launcher.

    Until-target runs are not pipelined: their end-to-end time counts the start-up too, so each launch starts
    only once the previous one (the reference run included) has ended entirely."""
    from harness import report

    req = p.request
    run_info = {"kind": "run", "run_id": p.out.name,
                "time_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "command": req.command, "row_order": [r.label for r in p.rows], "env": None,
                "oversubscribed": p.oversubscribed}
    if p.until_target:
        run_info["until_target"] = asdict(p.until_target)
    if started is not None:
        run_info["started_wall"] = started
    stopped: str | None = None
    """When the run was interrupted (Ctrl-C, SIGTERM): "during the reference run", "during ddp (repeat 1)", ..."""
    with Session(p.out, RESULT_FILES) as session:
        ui.start(p)
        state = _State(p, session, ui, run_info)
        live: list[_Job] = []  # started and not yet finished, oldest first
        try:
            prev = state.start_reference()
            if prev:
                live.append(prev)
            run_info["env"] = envmod.collect(req.device)  # while the reference starts up
            interrupt.check()
            session.save([_plain(run_info, req, row, repeat, "unavailable", row.reason)
                          for row in p.unavailable for repeat in range(req.repeats)])
            pipelined = p.until_target is None
            if prev and not pipelined:
                live.remove(prev)
                stopped = state.done(prev, prev.launch.finish())
                prev = None
            elif prev:
                prev.launch.wait_for("timed_done")
            # Repeats are interleaved (all adapters, then all again) so slow drift of the machine hits all alike.
            for repeat, row in [(repeat, row) for repeat in range(req.repeats) for row in p.runnable]:
                if stopped:
                    break
                job = state.start(row, repeat, gated=prev is not None)
                live.append(job)
                if prev:
                    live.remove(prev)
                    stopped = state.done(prev, prev.launch.finish())
                    if stopped:
                        break
                job.launch.open_gate()
                if pipelined:
                    job.launch.wait_for("timed_done")
                    prev = job
                else:
                    live.remove(job)
                    stopped = state.done(job, job.launch.finish())
            if prev and not stopped:
                live.remove(prev)
                stopped = state.done(prev, prev.launch.finish())
        except KeyboardInterrupt:
            stopped = stopped or (f"during {live[0].what}" if live else "between launches")
        finally:
            for job in live:  # a Ctrl-C while two launches were alive (one ending, the next starting)
                state.done(job, job.launch.interrupt())
            ui.stop()
        if stopped:
            if run_info["env"] is None:  # interrupted before the environment was read (importing torch)
                run_info["env"] = envmod.collect(req.device, import_torch=False)
            done = {(r["label"], r["repeat"]) for r in session.records}
            never = [_plain(run_info, req, row, repeat, "not_run", f"the run was interrupted {stopped}")
                     for repeat in range(req.repeats) for row in p.runnable if (row.label, repeat) not in done]
            session.records = [{**r, "run_interrupted": stopped} for r in session.records + never]
            session.save()
        session.finish(report.render)
    return session.records, stopped is not None


@dataclass
class _Job:
    launch: Launch
    spec: RunSpec
    row: Row | None
    """None for the reference run."""
    repeat: int
    slug: str

    @property
    def what(self) -> str:
        return "the reference run" if self.row is None else f"{self.row.label} (repeat {self.repeat + 1})"


class _State:
    """What the launches of one run share: the plan, the session, the UI, and the reference's parameters."""

    def __init__(self, p: RunPlan, session: Session, ui, run_info: dict[str, Any]):
        self.p, self.session, self.ui, self.run_info = p, session, ui, run_info
        self.reference: dict | None = None
        self.reference_run: dict | None = None
        """When the reference launch ran and how long it took (for the report's time breakdown)."""

    def start_reference(self) -> _Job | None:
        """Start the single-process fp32 reference for `equiv_steps` steps (None when there is nothing to check)."""
        p = self.p
        if p.equiv_steps < 1:
            return None
        ref = adapters.get("reference")({}, p.request.device)
        spec = _spec(p, "reference", self.session.scratch / "reference", processes=1, steps=p.equiv_steps,
                     warmup=0, equiv=p.equiv_steps, knobs={}, do_eval=False)
        self.ui.begin("reference", 0, p.equiv_steps)
        launch = Launch(ref, spec, p.request.timeout_s, lambda pr: self.ui.progress("reference", 0, pr)).start()
        return _Job(launch, spec, None, 0, "reference")

    def start(self, row: Row, repeat: int, gated: bool) -> _Job:
        p, adapter = self.p, row.adapter
        slug = row.label.replace(":", "_").replace("=", "-").replace("/", "_")
        spec = _spec(p, adapter.name, self.session.scratch / f"{slug}-r{repeat}",
                     processes=adapter.processes(p.request.world_size), steps=p.steps, warmup=p.warmup,
                     equiv=p.equiv_steps, knobs=asdict(adapter.knobs), do_eval=True)
        if p.until_target:
            spec.eval_every, spec.target = p.until_target.eval_every, p.until_target.target
        self.ui.begin(row.label, repeat, p.steps + p.warmup)
        launch = Launch(adapter, spec, p.request.timeout_s,
                        lambda pr: self.ui.progress(row.label, repeat, pr)).start(gated=gated)
        return _Job(launch, spec, row, repeat, slug)

    def done(self, job: _Job, outcome) -> str | None:
        """Record a finished launch; "during ..." if it was interrupted (the run stops), else None."""
        self.session.keep_log(outcome.log_path, f"{job.slug}.log" if job.row is None else f"{job.slug}-r{job.repeat}.log")
        if job.row is None:
            self.ui.reference_done(outcome)
            self.reference_run = {"status": outcome.status, "launch_wall": outcome.launch_wall,
                                  "wall_time_s": outcome.wall_time_s}
            if outcome.status == "ok":
                import torch

                self.reference = torch.load(job.spec.params_path)
        else:
            rec = _record(self.p, job, outcome, self.reference, self.run_info)
            if self.reference_run:
                rec["reference_run"] = self.reference_run
            self.session.save([rec])
            self.ui.finished(rec)
        return f"during {job.what}" if outcome.status == "interrupted" else None


def _plain(run_info, req, row: Row, repeat: int, status: str, reason: str) -> dict[str, Any]:
    return record.base_record(run=run_info, adapter=row.name, label=row.label,
                              summary=getattr(row.cls, "summary", ""), launcher=getattr(row.cls, "launcher", "?"),
                              workload=req.workload, world_size=req.world_size, repeat=repeat, status=status,
                              reason=reason)


def _spec(p: RunPlan, adapter: str, rank_dir: Path, *, processes: int, steps: int, warmup: int, equiv: int,
          knobs: dict, do_eval: bool) -> RunSpec:
    req = p.request
    return RunSpec(adapter=adapter, workload=req.workload, world_size=req.world_size, device=req.device,
                   global_batch=p.global_batch, steps=steps, warmup=warmup,
                   threads=default_threads(processes, req.threads), rank_dir=str(rank_dir),
                   equiv_steps=equiv, knobs=knobs, workload_options=dict(pairs(req.options, "option")),
                   fault=req.fault, eval=do_eval)


def _record(p: RunPlan, job: _Job, outcome, reference, run_info) -> dict[str, Any]:
    req, adapter = p.request, job.row.adapter
    rec = record.base_record(run=run_info, adapter=adapter.name, label=job.row.label, summary=adapter.summary,
                             launcher=adapter.launcher, workload=req.workload, world_size=req.world_size,
                             repeat=job.repeat, status=outcome.status, reason=outcome.reason)
    try:
        return record.from_outcome(rec, outcome, job.spec, reference, p.workload)
    except Exception as exc:  # a malformed rank file must not lose the other rows
        rec.update(status="failed", reason=f"could not build the record: {type(exc).__name__}: {exc}",
                   log_tail=outcome.log_tail)
        return rec
