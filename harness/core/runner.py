"""The runner core: plan a run's rows, launch them one after another into a Session, and build their records.

Runs in: the parent. `compare run` (and `compare tune` and `compare sbatch` through its checks) and `compare scale`
stand on this module as siblings; a helper two commands need lives here, never in one of them. Order of work:
`plan_rows` (every check, before anything is written) -> `Runner.run` (launch, collect) -> `build_record` /
`plain_record` (records).
"""

from __future__ import annotations

import math
import os
import random
import threading
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import adapters
import workloads
from adapters.base import Availability, mixed_precision_refusal
from harness.ground import provenance as envmod
from harness.core import assemble, estimate
from harness.ground.errors import BadInput
from harness.core.checks import check_common, check_cores, check_list
from harness.core.plans import RunPlan, UntilTarget
from harness.core.checks import BREAKDOWN_BOUND, BREAKDOWN_STEPS, MAX_BREAKDOWN_STEPS, MAX_REPEATS, MAX_STEPS
from harness.core.requests import RunRequest
from harness.core.checks import pairs
from harness.core.rows import Row, build_rows, parse_knobs, parse_label
from harness.core.workload_checks import (bounded, check_fits, check_loader, check_user_code, load_workload,
                                         workload_key)
from harness.core.session import Session
from harness.launching import hosts, interrupt
from harness.launching.launch import Launch
from harness.shared.registry import returned_from_users_directory
from harness.shared.spec import RunSpec


def plan_rows(req: RunRequest, cores_fix: str | None = None) -> RunPlan:
    """Everything of `plan` but the output directory (`out` is left None): numbers resolved, rows built, cores
    checked. `compare scale` calls it once per world size. An exception raised through the user's own workload code
    (a Workload subclass's materialize or build_model, say) is theirs: UserCodeError, their traceback, exit 1."""
    from harness.shared.registry import UserCodeError, raised_in_user_code

    try:
        return _plan_rows(req, cores_fix)
    except (BadInput, UserCodeError):
        raise
    except Exception as exc:  # noqa: BLE001 - sorted by where it was raised
        if workloads.source(req.workload) == "built-in" or not raised_in_user_code(exc):
            raise
        raise UserCodeError(f"checking workload {req.workload} before launching", exc) from None


def _plan_rows(req: RunRequest, cores_fix: str | None) -> RunPlan:
    topology = hosts.resolve(req)
    check_common(req)
    if req.repeats is not None and req.repeats < 1:
        raise BadInput(f"repeats must be at least 1, got {req.repeats}")
    if req.repeats is not None and req.repeats > MAX_REPEATS:
        raise BadInput(f"repeats must be at most {MAX_REPEATS}, got {req.repeats}")
    for name, value, least in (("--steps", req.steps, 1), ("--warmup", req.warmup, 0),
                               ("--global-batch", req.global_batch, 1), ("--equiv-steps", req.equiv_steps, 0),
                               ("--eval-every", req.eval_every, 1), ("--max-steps", req.max_steps, 1)):
        if value is not None and value < least:
            raise BadInput(f"{name} must be at least {least}, got {value}")
        if value is not None and name != "--global-batch" and value > MAX_STEPS:
            raise BadInput(f"{name} must be at most {MAX_STEPS:,} steps, got {value}")
    if req.max_grad_norm is not None and not (math.isfinite(req.max_grad_norm) and req.max_grad_norm > 0):
        raise BadInput(f"--max-grad-norm must be a positive number (the global gradient norm clipped to), got "
                       f"{req.max_grad_norm:g}")
    _check_until_target_flags(req)
    # The rows and the cores they need before anything about the batch or the model: a world size the machine
    # cannot run is the problem to name, not the batch it does not divide (`-n 10000` was answered with that).
    explicit = req.adapters is not None
    labels = req.adapters if explicit else adapters.names()
    check_list(req.adapters, adapters.names(), "adapter")
    rows = [(label, *parse_label(label)) for label in labels]
    knobs = parse_knobs(req.knobs, {n for _, n, _ in rows}, labels)
    built = build_rows(req, rows, explicit, "adapter", knobs, topology)
    over = (False if topology is not None  # checked per machine once the hosts have answered (`plan`)
            else check_cores(req, max(r.adapter.processes(req.world_size) for r in built if r.adapter), cores_fix))
    # importing the user's file and calling NAME run their code too: a hang or a crash there is bounded and said
    # as in the check below (it had printed nothing until killed)
    before = set(threading.enumerate())
    began = workloads.digest(req.workload)  # before the file is imported: every launch checks its file still has it
    with bounded(f"importing and calling workload {req.workload}", req.stall_s):
        workload = load_workload(req)
        params = check_fits(workload, req, max((n.slots for n in topology.nodes), default=1) if topology
                            else req.world_size)
    gb = workload.global_batch if req.global_batch is None else req.global_batch
    if gb % req.world_size:
        raise BadInput(f"global batch {gb} is not divisible by world size {req.world_size}; "
                       f"choose a --global-batch that is a multiple of {req.world_size}")
    n_train = workload.train_samples(gb)
    if n_train == 0:
        raise BadInput(f"workload {req.workload}'s training set is empty (0 samples); give it at least one global "
                       f"batch of samples ({gb})")
    if gb > n_train:
        raise BadInput(f"global batch {gb} is larger than workload {req.workload}'s training set ({n_train} "
                       f"samples); choose a --global-batch of at most {n_train}")
    loader_workers = check_loader(workload, req)
    with bounded(f"the check of workload {req.workload} before launching", req.stall_s):
        check_user_code(workload, req, gb)
    left = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    moved = returned_from_users_directory()
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

    refuse_for_model(req, built, workload, explicit)
    return RunPlan(req, None, built, oversubscribed=over, workload=workload, global_batch=gb, steps=steps,
                   warmup=warmup, equiv_steps=equiv, until_target=until, topology=topology,
                   loader_workers=loader_workers, param_count=params,
                   spec_extra={**_breakdown(req), **({"workload_digest": began} if began else {})},
                   max_grad_norm=workload.max_grad_norm if req.max_grad_norm is None else req.max_grad_norm,
                   left_threads=_left_threads(left), moved=_moved(req, moved))


def _moved(req: RunRequest, moved: str | None) -> str | None:
    """What a run says before its first launch where the workload's code changed compare's working directory
    (os.chdir in its file or function, to find its data): that compare went back, so its results land where --out
    said (they had gone to the user's directory, the check for results already there with them); None where not."""
    if moved is None:
        return None
    return (f"workload {req.workload} changed the working directory to {moved} while it was loaded; compare went "
            f"back to {os.getcwd()}, where --out and the workload's path are read from (each rank builds the workload "
            f"again in its own process, where the change stays)")


def _left_threads(left: list) -> str | None:
    """What a run says before its first launch of threads the workload's code left running in compare's process
    (importing its file, calling its function, the check running its builder and forward): they take CPU beside
    every launch, which the launches' interference figures count as other processes' (measured: two busy threads a
    builder started, 27 after the check's builds, cut a row's samples/s 40-fold). A thread is the user's where its
    stack is in their code now (harness/launching/launch_logs.py, users_place), named by where; None where none is."""
    import sys
    from collections import Counter

    from harness.launching.launch_logs import users_place

    frames = sys._current_frames()
    places = []
    for t in left:
        frame = frames.get(t.ident)
        while frame is not None:
            code = frame.f_code
            place = users_place(code.co_filename, frame.f_lineno, code.co_name)
            if place:
                places.append(place)
                break
            frame = frame.f_back
    if not places:
        return None
    counted = Counter(places).most_common()
    shown = ", ".join(f"{n} in {place}" if n > 1 else place for place, n in counted[:3])
    more = sum(n for _, n in counted[3:])
    return (f"warning: the workload's code left {len(places)} thread(s) running in compare's own process ("
            f"{shown}{f' and {more} more' if more else ''}), started while compare imported it and ran its builder "
            f"and forward in the check before launching; they run beside every launch and take its CPU: start them "
            f"in the training process only (not in the builder or at import), or end them")


def refuse_for_model(req: RunRequest, rows: list[Row], workload, explicit: bool) -> None:
    """Rows that cannot train this model as their knobs stand (Adapter.model_availability, from what the check of a
    user's model found) become unavailable, with the knob that fixes them; an error with --strict or when no row is
    left, before anything is launched."""
    facts = getattr(workload, "model_facts", None)
    if facts is None:
        return
    refused = []
    for row in rows:
        if row.adapter is None:
            continue
        try:
            mixed = mixed_precision_refusal(row.adapter, facts)
            avail = mixed if mixed is not None else row.adapter.model_availability(facts)
        except Exception as exc:  # noqa: BLE001 - a broken check is a reason, not a crash
            avail = Availability(False, f"model check raised {type(exc).__name__}: {exc}")
        if avail:
            continue
        message = f"adapter {row.label} cannot train workload {req.workload} as given: {avail.message()}"
        if explicit and req.strict:
            raise BadInput(message)
        row.adapter, row.reason = None, avail.message()
        refused.append(message)
    if refused and not any(r.adapter for r in rows):
        raise BadInput(refused[0] + (f" (and {len(refused) - 1} more row(s) alike)" if len(refused) > 1 else ""))


def _breakdown(req: RunRequest) -> dict[str, Any]:
    """The launches' breakdown fields (RunSpec.breakdown, trace): none unless --breakdown or --trace."""
    steps = BREAKDOWN_STEPS if req.breakdown_steps is None else req.breakdown_steps
    if not 1 <= steps <= MAX_BREAKDOWN_STEPS:
        raise BadInput(f"--breakdown-steps must be between 1 and {MAX_BREAKDOWN_STEPS} ({BREAKDOWN_BOUND}), got "
                       f"{steps}")
    if not (req.breakdown or req.trace):
        if req.breakdown_steps is not None:  # as --eval-every without --until-target: it would change nothing
            raise BadInput("--breakdown-steps only applies with --breakdown (or --trace); add --breakdown, or leave "
                           "--breakdown-steps out")
        return {}
    return {"breakdown": steps, "trace": req.trace}


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


def round_order(rows: list, seed: int, round_index: int) -> list:
    """The rows of one round in the order they run: shuffled by a generator seeded with (seed, round), so the same
    seed gives the same order on any machine and Python (a str seed is hashed with SHA-512, not hash())."""
    order = list(rows)
    random.Random(f"{seed}:{round_index}").shuffle(order)
    return order


def run_header(p: RunPlan, kind: str, row_order: list[str], started: float | None) -> dict[str, Any]:
    """The fields every record of one run shares (env is filled in once the first launch is under way)."""
    req = p.request
    info = {"kind": kind, "run_id": p.out.name, "time_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "command": req.command, "row_order": row_order, "env": None, "oversubscribed": p.oversubscribed,
            "legend": adapters.legend()}
    if p.rerun:
        info["rerun_command"] = p.rerun
    until = getattr(p, "until_target", None)
    if until:
        info["until_target"] = asdict(until)
    workload = getattr(req, "workload", None)
    if workload and workloads.source(workload) != "built-in":  # a user's: where it came from, with its digest
        info["workload_source"] = workloads.provenance(workload)
    if getattr(p, "workload", None) is not None:
        # the count runs the workload's forward and backward in compare's own process, as the check before
        # launching does: its prints are held back and a hang in it is bounded by --stall-timeout the same way
        with bounded(f"counting the FLOPs of workload {workload}", req.stall_s):
            split = flop_split(p.workload, p.global_batch)
        if split and split["flops_per_sample"]:
            info["flops_per_sample"] = split["flops_per_sample"]
            info["conv_flops_share"] = split["conv_share"]
    if started is not None:
        info["started_wall"] = started
    return info


def flop_split(workload, global_batch: int) -> dict[str, float] | None:
    """The workload's FLOPs per sample and their share in convolutions (Workload.flop_split), kept in the cache
    directory per workload, options, torch and the files that define it: counting takes torch's FlopCounterMode,
    whose first use imports TorchDynamo (2.5 s here), on every run of the same model."""
    from harness.shared.cache import cached_json

    return cached_json(f"flopsplit-{workloads.slug(type(workload).name)}", workload_key(workload),
                       lambda: workload.flop_split(global_batch), keep=lambda v: v is not None)


@dataclass
class Job:
    """One launch: a row of a plan (or, with `row` None, the single-process reference for that plan)."""

    launch: Launch
    spec: RunSpec
    plan: RunPlan
    row: Row | None
    repeat: int
    slug: str

    @property
    def name(self) -> str:
        """The row as progress lines and logs show it ("ddp", "ddp n=4", "reference")."""
        return ("reference" if self.row is None else self.row.label) + self.plan.tag

    @property
    def what(self) -> str:
        return self.said()

    def said(self, state: str = "") -> str:
        """This launch in words ("ddp (repeat 0)"), with its `state` where given ("ddp (repeat 0, ending)")."""
        if self.row is None:
            return "the reference run" + self.plan.tag + (f" ({state})" if state else "")
        return f"{self.name} (repeat {self.repeat}{', ' + state if state else ''})"


def _reference_key(p: RunPlan) -> tuple:
    """Plans that share this key share one reference run (same workload, options, batch and steps)."""
    return (p.request.workload, tuple(p.request.options), p.global_batch, p.equiv_steps, p.request.device)


class Runner:
    """Runs launches into one Session, in order, each plan's single-process reference first.

    Launches are pipelined, never their measurements: once a launch's timed steps are over (rank 0 says so), the
    next launch starts and does its untimed start-up (interpreter, imports, rendezvous, model, data) while the
    previous one evaluates and shuts down; its ranks then wait at the gate (harness/shared/progress.py) until the
    previous launch has ended entirely, so no other launch's process runs during any warm-up or timed step.
    Every launch is still a fresh set of processes, started by its own launcher.

    `pipelined=False`: each launch starts only once the previous one (the reference run included) has ended
    entirely, and nothing waits for rank 0's events. Until-target runs run that way (their end-to-end time counts
    the start-up too), and so do launches with ranks on other hosts (the gate, an flock, and the events FIFO assume
    one kernel and a local filesystem)."""

    def __init__(self, session: Session, ui, run_info: dict[str, Any], pipelined: bool = True):
        self.session, self.ui, self.run_info, self.pipelined = session, ui, run_info, pipelined
        self.references: dict[tuple, dict | None] = {}
        """Reference parameters per reference key (None: that reference failed)."""
        self.reference_losses: dict[tuple, list[float]] = {}
        """The reference's loss at each of its steps, per reference key (what a failed check is explained by)."""
        self.reference_gradients: dict[tuple, dict | None] = {}
        """Per reference key: parameter -> the reference's steps (from 0) that left it without a gradient."""
        self.reference_runs: dict[tuple, dict] = {}
        """When each reference launch ran and how long it took (for the report's time breakdown)."""
        self.finished: set[tuple[int, str, int]] = set()
        """(id of the plan, row label, repeat) of every row launch that has ended."""
        self.scheduled: set[tuple] = set()
        """Reference keys whose reference run is already planned (once per run, however many calls to `run`)."""
        self.positions: dict[tuple[int, str, int], int] = {}
        """(id of the plan, row label, repeat) -> its place in its round (0: first), as it ran."""
        self.forecast: estimate.Forecast | None = None
        """What the launches left should take (harness/core/estimate.py), where the command made one."""

    def run(self, jobs: list[tuple[RunPlan, Row, int]], first_started=lambda: None, stop_ui: bool = True) -> str | None:
        """Launch `jobs` (plan, row, repeat) in order; returns "during ..." if the run was interrupted, else None.
        `first_started()` is called once the first launch is under way (work that can overlap its start-up).
        `stop_ui=False` leaves the progress display running for a later call (rounds added one at a time)."""
        items: list[tuple[RunPlan, Row | None, int]] = []
        for plan, row, repeat in jobs:
            key = _reference_key(plan)
            if plan.equiv_steps >= 1 and key not in self.scheduled:
                self.scheduled.add(key)
                items.append((plan, None, 0))
            items.append((plan, row, repeat))
            self.positions[(id(plan), row.label, repeat)] = sum(1 for k in self.positions if k[2] == repeat)
        stopped: str | None = None
        live: list[Job] = []  # started and not yet finished, oldest first
        prev: Job | None = None
        try:
            for i, (plan, row, repeat) in enumerate(items):
                job = self._start(plan, row, repeat, gated=prev is not None)
                live.append(job)
                if i == 0:
                    first_started()
                    interrupt.check()
                if not self.pipelined:
                    live.remove(job)
                    stopped = self._done(job, job.launch.finish())
                    if stopped:
                        break
                    continue
                if prev:
                    live.remove(prev)
                    stopped = self._done(prev, prev.launch.finish())
                    if stopped:  # the next launch had started while this one ended: both were under way
                        stopped = _during([prev, *live])
                        break
                job.launch.open_gate()
                if self.pipelined:
                    job.launch.wait_for("timed_done")
                    prev = job
                else:
                    live.remove(job)
                    stopped = self._done(job, job.launch.finish())
                    if stopped:
                        break
            if prev and not stopped:
                live.remove(prev)
                stopped = self._done(prev, prev.launch.finish())
        except KeyboardInterrupt:
            stopped = stopped or (_during(live) if live else "between launches")
        finally:
            for job in live:  # a Ctrl-C while two launches were alive (one ending, the next starting)
                self._done(job, job.launch.interrupt())
            if stop_ui or stopped:
                self.ui.stop()
        return stopped

    def close_interrupted(self, stopped: str, jobs: list[tuple[RunPlan, Row, int]], device: str) -> None:
        """After an interruption: a `not_run` record for every job that never ran, and every record marked, with
        what stopped it where a signal did ("by SIGTERM during ddp (repeat 1)")."""
        by = interrupt.requested_by()
        stopped = f"by {by} {stopped}" if by else stopped
        if self.run_info["env"] is None:  # interrupted before the environment was read (importing torch)
            self.run_info["env"] = envmod.collect(device, import_torch=False)
        never = [plain_record(self.run_info, plan, row, repeat, "not_run", f"the run was interrupted {stopped}")
                 for plan, row, repeat in jobs if (id(plan), row.label, repeat) not in self.finished]
        self.session.records = [{**r, "run_interrupted": stopped} for r in self.session.records + never]
        self.session.save()

    def _start(self, plan: RunPlan, row: Row | None, repeat: int, gated: bool) -> Job:
        req = plan.request
        if row is None:
            adapter, slug = adapters.get("reference")({}, req.device), "reference" + file_slug(plan.tag)
            # One process on this machine, whatever the rows' hosts.
            spec = make_spec(plan, "reference", self.session.scratch / slug, processes=1, steps=plan.equiv_steps,
                             warmup=0, equiv=plan.equiv_steps, knobs={}, do_eval=False, extra={}, topology=None)
            total = plan.equiv_steps
        else:
            adapter = row.adapter
            slug = file_slug(row.label + plan.tag)
            spec = row_spec(plan, row, self.session.scratch / f"{slug}-r{repeat}", repeat)
            total = plan.steps + plan.warmup
        job = Job(None, spec, plan, row, repeat, slug)  # type: ignore[arg-type]
        self.ui.begin(job.name, repeat, total, None if self.forecast is None else self.forecast.left())
        job.launch = Launch(adapter, spec, req.timeout_s, lambda pr: self.ui.progress(job.name, repeat, pr),
                            stall_s=req.stall_s).start(gated=gated)
        return job

    def _done(self, job: Job, outcome) -> str | None:
        """Record a finished launch; "during ..." if it was interrupted (the run stops), else None."""
        key = _reference_key(job.plan)
        self.session.keep_log(outcome, f"{job.slug}.log" if job.row is None else f"{job.slug}-r{job.repeat}.log")
        self._time(job, outcome)
        if job.row is None:
            self.ui.reference_done(outcome, job.name)
            self.reference_runs[key] = {"status": outcome.status, "launch_wall": outcome.launch_wall,
                                        "wall_time_s": outcome.wall_time_s}
            if outcome.status != "ok":
                self.reference_runs[key]["reason"] = outcome.reason
            self.references[key] = None
            if outcome.status == "ok":
                import torch

                self.references[key] = torch.load(job.spec.params_path)
                self.reference_losses[key] = outcome.ranks[0].losses
                described = outcome.ranks[0].adapter or {}
                self.reference_gradients[key] = None if described.get("no_gradient") is None else {
                    "no_gradient": described["no_gradient"], "frozen": described.get("frozen") or {},
                    "peaks": (torch.load(job.spec.gradient_peaks_path) if job.spec.gradient_peaks_path.exists()
                              else None)}
        else:
            self.finished.add((id(job.plan), job.row.label, job.repeat))
            ref = self.reference_runs.get(key)
            no_reference = None if ref is None or ref["status"] == "ok" else (
                f"the single-process reference {ref['status']}" + (f": {ref['reason']}" if ref.get("reason") else ""))
            rec = build_record(job, outcome, self.references.get(key), self.run_info, self.reference_losses.get(key),
                               self.reference_gradients.get(key), no_reference)
            self.session.keep_traces(rec, f"{job.slug}-r{job.repeat}")
            rec["position"] = self.positions.get((id(job.plan), job.row.label, job.repeat))
            if ref is not None:
                rec["reference_run"] = ref
            self.session.save([rec])
            if rec["status"] == "ok" and rec.get("tflops_per_device"):  # what a later run's step estimate rests on
                estimate.remember_speed(rec["topology"]["device"], rec["controls"]["threads_per_rank"][0],
                                        rec["tflops_per_device"] * 1e12, f"{job.row.label} on {rec['workload']}, "
                                                                         f"{rec['time_utc'][:10]}")
            self.ui.finished(rec, job.name)
        return f"during {job.what}" if outcome.interrupted else None


    def _time(self, job: Job, outcome) -> None:
        """This machine's figure for the row's next runs (harness/core/estimate.py), and the run's forecast."""
        label = "reference" if job.row is None else job.row.label
        if outcome.status == "ok" and outcome.ranks:
            phases = assemble.phases(outcome, outcome.ranks)
            estimate.remember(job.plan, label, outcome.wall_time_s, job.spec.steps + job.spec.warmup,
                              phases.get("warmup", 0.0) + phases.get("timed", 0.0))
        if self.forecast is not None:
            line = self.forecast.ended(job.plan, label, outcome.wall_time_s if outcome.status == "ok" else 0.0)
            if line:
                self.ui.estimate(line)


def references(plans: list[RunPlan]) -> list[RunPlan]:
    """A plan per reference launch the Runner will make for these plans (plans sharing a key share one)."""
    seen: dict[tuple, RunPlan] = {}
    for plan in plans:
        if plan.equiv_steps >= 1:
            seen.setdefault(_reference_key(plan), plan)
    return list(seen.values())


def file_slug(text: str) -> str:
    return text.strip().replace(" ", "-").replace(":", "_").replace("=", "-").replace("/", "_")


def plain_record(run_info, p: RunPlan, row: Row, repeat: int, status: str, reason: str) -> dict[str, Any]:
    """A record with no measurement (unavailable, not run)."""
    rec = assemble.base_record(run=run_info, adapter=row.name, label=row.label,
                             summary=getattr(row.cls, "summary", ""), launcher=getattr(row.cls, "launcher", "?"),
                             workload=p.request.workload, world_size=p.request.world_size, repeat=repeat,
                             status=status, reason=reason)
    rec.update(p.extra)
    if getattr(row, "environment", None):
        rec["row_env"] = row.environment
    return rec


def _during(jobs: list) -> str:
    """"during ddp (repeat 0)", or every launch that was under way: "during deepspeed (repeat 0, ending) and horovod
    (repeat 0, starting)" (a launch starts while the one before it evaluates and shuts down)."""
    if len(jobs) == 1:
        return f"during {jobs[0].what}"
    return "during " + " and ".join(j.said("ending" if i == 0 else "starting") for i, j in enumerate(jobs))


def row_spec(p: RunPlan, row: Row, rank_dir: Path, repeat: int) -> RunSpec:
    """What a launch of `row` runs (its `repeat`th; the first one traces where the run asks for traces)."""
    adapter = row.adapter
    spec = make_spec(p, adapter.name, rank_dir, processes=adapter.processes(p.request.world_size), steps=p.steps,
                     warmup=p.warmup, equiv=p.equiv_steps, knobs=asdict(adapter.knobs), do_eval=True,
                     extra={**p.spec_extra, **({"trace": False} if repeat else {})}, topology=p.topology)
    if row.environment:  # python=PATH, env.NAME=VALUE (harness/core/rows.py: row_environment)
        spec.python, spec.env = row.environment.get("python"), dict(row.environment["env"])
    return spec


def make_spec(p: RunPlan, adapter: str, rank_dir: Path, *, processes: int, steps: int, warmup: int, equiv: int,
              knobs: dict, do_eval: bool, extra: dict[str, Any], topology=None) -> RunSpec:
    req = p.request
    spec = RunSpec(adapter=adapter, workload=workloads.resolvable(req.workload), world_size=req.world_size,
                   device=req.device, loader_workers=p.loader_workers,
                   global_batch=p.global_batch, steps=steps, warmup=warmup, max_grad_norm=p.max_grad_norm,
                   threads=hosts.threads_per_process(processes, req.threads, topology), rank_dir=str(rank_dir),
                   equiv_steps=equiv, knobs=knobs, workload_options=dict(pairs(req.options, "option")),
                   fault=req.fault, eval=do_eval, topology=topology, bind_cores=req.bind_cores, **extra)
    if p.until_target and do_eval:
        spec.eval_every, spec.target = p.until_target.eval_every, p.until_target.target
    return spec


def build_record(job: Job, outcome, reference, run_info, reference_losses=None,
                 reference_gradients: dict | None = None, no_reference: str | None = None) -> dict[str, Any]:
    p, adapter = job.plan, job.row.adapter
    rec = assemble.base_record(run=run_info, adapter=adapter.name, label=job.row.label, summary=adapter.summary,
                             launcher=adapter.launcher, workload=p.request.workload,
                             world_size=p.request.world_size, repeat=job.repeat, status=outcome.status,
                             reason=outcome.reason)
    rec.update(p.extra)
    if job.row.environment:
        rec["row_env"] = job.row.environment
    schedule = adapter.comm_schedule()
    rec["comm_schedule"] = schedule.to_record() if schedule else None
    try:
        return assemble.from_outcome(rec, outcome, job.spec, reference, p.workload, reference_losses,
                                     adapter=adapter, reference_gradients=reference_gradients,
                                     no_reference=no_reference)
    except Exception as exc:  # a malformed rank file must not lose the other rows
        rec.update(status="failed", reason=f"could not build the record: {type(exc).__name__}: {exc}",
                   log_tail=outcome.log_tail)
        return rec
