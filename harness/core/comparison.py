"""`compare run`: check the request, run the reference and every adapter, write records, report and plots.

Runs in: the parent. Everything that can be refused is refused in `plan()`, before anything is created on disk.
`execute()` then writes `records.jsonl` after every launch (harness/core/session.py), so whatever happens later,
finished rows are kept.
"""

from __future__ import annotations

import dataclasses
import platform
import random
import shlex
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import workloads
from harness.core import assemble, estimate
from harness.ground import outdir
from harness.ground.argv import to_argv
from harness.ground import provenance as envmod
from harness.ground.errors import BadInput
from harness.core.checks import parse_duration, parse_precision
from harness.core.plans import RunPlan
from harness.core.checks import MAX_REPEATS
from harness.core.requests import DEFAULT_BUDGET, DEFAULT_RUN_BUDGET, RunRequest
from harness.core.runner import Runner, plain_record, plan_rows, references, round_order, row_spec, run_header
from harness.core.session import Render, Session
from harness.launching import hosts

MIN_ROUNDS = 3
"""A run whose rounds are not fixed by --repeats (precision mode, and the default) runs at least this many: below it
no row has an interval and the verdict ranks nothing."""

RESULT_FILES = ("records.jsonl", "report.md", "sessions.json", "throughput.png", "loss.png", "step_times.png",
                "pairs.png", "epoch_time.png", "ttt_curve.png", "ttt_time.png")


def check(req: RunRequest) -> RunPlan:
    """The one validation of a run request: everything `compare run` refuses that depends on the request itself
    (and on the software installed here), each a BadInput of one line, nothing written. Every command that starts
    a run calls it: `compare run` (through `plan`), `compare tune` (its candidate rows), `compare sbatch` (for the
    allocation's topology, so that a script it writes is never refused in the queue hours later); a recorded
    rerun command is a `compare run` line. What depends on the machine and the moment (the hosts answering, this
    machine's cores for an allocation's ranks, the joined sessions' machine, the default output directory and its
    free space) is checked by `plan`, where the run starts.

    Returns the plan with its rows built and what the request alone resolves; `plan` completes it."""
    if req.until_target and req.repeats is None:  # launches to a target are long: one each unless asked
        req = dataclasses.replace(req, repeats=1)
    if req.tuned is not None:  # a tune's winners become rows (harness/core/tuning.py)
        req = dataclasses.replace(req, adapters=_with_tuned(req), tuned=None)
    p = plan_rows(req)
    _check_verdict_options(req, p)
    if req.join is not None:
        _check_join_request(req)
    if req.out is not None:
        outdir.check(req.out, req.force, RESULT_FILES)
    return p


def check_room(p: RunPlan, launches: int) -> None:
    """Refuse an --out on a filesystem with less free space than `launches` launches of `p` write at least."""
    outdir.check_room(p.out, outdir.least_written(launches, p.steps + p.warmup, p.request.plots),
                      f"records, report{', plots' if p.request.plots else ''} and logs of {launches} launch(es)")


def plan(req: RunRequest, room: bool = True) -> RunPlan:
    """Check `req` (`check`) and resolve it into a plan on this machine, refusing anything wrong (BadInput) before
    anything is written. `room=False`: the caller checks the free space itself (a tune, whose launches are not
    the rows times the rounds)."""
    p = check(req)
    req = p.request
    if req.steps is None and req.repeats is None and not req.until_target and p.until_target is None:
        # the default design: steps per launch from this machine's variance components, where measured
        from harness.core import design

        p.design = design.design(req.workload, req.device, p.steps, p.budget_s,
                                 estimate.costs(p, [row.label for row in p.runnable]), p.warmup)
        p.steps = p.design["steps"]
        p.equiv_steps = min(p.equiv_steps, p.steps + p.warmup)
    p.order_seed = req.order_seed if req.order_seed is not None else random.SystemRandom().randrange(2**32)
    if p.topology is not None:
        p.topology = hosts.probe(p.topology)  # every remote host answers, or one line and exit 2
        p.oversubscribed = hosts.check_cores(p.topology, req.oversubscribe)
    if req.out is not None:
        p.out = req.out  # checked with the request
    else:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        nodes = f"_{len(p.topology.nodes)}nodes" if p.topology is not None else ""
        p.out = req.results_dir / f"{workloads.slug(req.workload)}_{envmod.hardware_slug(req.device)}{nodes}_{stamp}"
        outdir.check(p.out, req.force, RESULT_FILES)
    rounds = req.repeats or MIN_ROUNDS  # by default and with --precision, at least MIN_ROUNDS
    if room:
        check_room(p, len(p.rows) * rounds + (1 if p.equiv_steps else 0))
    if req.join is not None:
        p.join = _joins(req, p)
    p.rerun = shlex.join(["compare", "run", *to_argv(resolved(p))])
    return p


def _joins(req: RunRequest, p: RunPlan) -> list:
    """The earlier sessions `--join DIR` names (DIR, or the runs a join lists), refused in one line (BadInput) unless
    they are runs of this same request on this machine (harness/reports/sessions.py: IDENTITY, MACHINE)."""
    from harness.ground.record import SCHEMA_VERSION, read_results
    from harness.core import joins

    try:
        dirs = joins.session_dirs(req.join)
        joins.unfinished(dirs)
    except joins.NotJoinable as exc:
        raise BadInput(f"--join {req.join}: {exc}") from None
    if any(d.resolve() == p.out.resolve() for d in dirs):
        raise BadInput(f"--join {req.join}: this run would write into a session it joins ({p.out}); leave --out "
                       "to a new directory")
    earlier = read_results(dirs[0], ("run",), "--join" if dirs[0] == req.join else f"--join {req.join}: session")
    if len(dirs) > 1:  # a join made before a copy of a run was refused: refused now, not after the whole run
        try:
            joins.check(joins.load(req.join))
        except joins.NotJoinable as exc:
            raise BadInput(f"--join {req.join}: {exc}") from None
    env = {"cpu_model": envmod.cpu_model(), "cpu_cores_usable": envmod.usable_cores(),
           "gpus": envmod.torch_facts().get("gpus") if req.device == "cuda" else
           (earlier[0].get("env") or {}).get("gpus"), "python": platform.python_version(),
           "tuning_env": envmod.tuning_env(), "torch": envmod.packaged_torch()}
    base = {"schema_version": SCHEMA_VERSION, "kind": "run", "workload": req.workload, "world_size": req.world_size,
            "status": "ok", "env": env, "row_order": [row.label for row in p.rows], "topology": {"device": req.device},
            "oversubscribed": p.oversubscribed, "margin": p.margin}
    # each row as its launches will record it, so its knobs, threads and the rest are held to the earlier sessions'
    # before anything runs
    this = [{**base, "label": row.label, "controls": assemble.controls(row_spec(p, row, Path(), 0), p.workload)}
            for row in p.rows if row.adapter is not None]
    this = this or [{**base, "controls": {"workload_options": p.workload.describe()["options"],
                                          "global_batch": p.global_batch, "steps": p.steps, "warmup": p.warmup,
                                          "seed": p.workload.seed, "bind_cores": req.bind_cores}}]
    try:
        joins.check([(str(req.join), earlier), ("this run", this)])
    except joins.NotJoinable as exc:
        again = _another_session(earlier[0].get("rerun_command"))
        raise BadInput(f"--join {req.join}: {exc}" + (f"; its request again: {again} --join {shlex.quote(str(req.join))}"
                                                        if again else "")) from None
    return [d.resolve() for d in dirs]


def _check_join_request(req: RunRequest) -> None:
    """What of `--join DIR` the request alone decides: a throughput run, and a directory that is there (whether it
    holds runs of this request on this machine is `_joins`', where the run starts)."""
    if req.until_target:
        raise BadInput("--join adds a session to a throughput comparison; it does not apply to --until-target runs")
    if not req.join.is_dir():
        raise BadInput(f"--join {req.join} {'is not a directory' if req.join.exists() else 'does not exist'}; give "
                       f"a directory written by `compare run` or `compare join`")


def _another_session(rerun: str | None) -> str | None:
    """An earlier run's command as another session of it runs it: its own --out, --force and --order-seed left out
    (a session has a fresh order and its own directory); None where it is not a `compare run` (`compare tune` has
    no --join, and a suggestion must be a command that exists)."""
    if not rerun:
        return None
    words, out, skip = shlex.split(rerun), [], False
    if words[:2] != ["compare", "run"]:
        return None
    for w in words:
        if skip:
            skip = False
        elif w in ("--out", "--order-seed"):
            skip = True
        elif w != "--force" and not w.startswith(("--out=", "--order-seed=")):
            out.append(w)
    return shlex.join(out)


def _with_tuned(req: RunRequest) -> list[str]:
    """--adapters (if given) and then each backend's winner in the tune at --tuned DIR; BadInput if DIR is not a
    finished `compare tune`."""
    from harness.core import race
    from harness.ground.record import read_results

    records = read_results(req.tuned, ("tune",), "--tuned")  # records.jsonl, or the .gz a committed tune keeps
    if records[0].get("run_interrupted") or not any(r.get("tune_summary") for r in records):
        raise BadInput(f"--tuned {req.tuned}: that tune did not finish, so it has no confirmed winners; run it again")
    if records[0]["workload"] != req.workload:
        raise BadInput(f"--tuned {req.tuned} tuned workload {records[0]['workload']}, not {req.workload}; give -w "
                       f"{records[0]['workload']} or another tune")
    try:  # what `compare report` would render of it: records that pass the field checks but no report can be made of
        winners = race.winners(records)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, ZeroDivisionError) as exc:
        raise BadInput(f"--tuned {req.tuned}: its records.jsonl holds a tune of a shape this compare cannot read "
                       f"({type(exc).__name__}: {' '.join(str(exc).split())})") from None
    rows = list(req.adapters or [])
    return rows + [label for label in winners if label not in rows]


def resolved(p: RunPlan) -> RunRequest:
    """The request that reproduces plan `p` exactly: what it resolved (the rows, the world size, steps, warm-up,
    global batch, equivalence steps, the order seed, --precision's budget) written in, so its command line runs the
    same plan whatever the workload's defaults or the machine become. Threads per process stay as given: they
    follow each row's processes."""
    r, until = p.request, p.until_target
    return dataclasses.replace(
        r, adapters=[row.label for row in p.rows], steps=None if until else p.steps,
        warmup=None if until else p.warmup, eval_every=until.eval_every if until else None,
        max_steps=until.max_steps if until else None, global_batch=p.global_batch, equiv_steps=p.equiv_steps,
        order_seed=p.order_seed, budget=None if p.budget_s is None else f"{p.budget_s:g}s",
        tuned=None, join=None, hosts=None if p.topology is None or p.topology.launcher == "slurm" else
        ",".join(f"{n.host}:{n.slots}" for n in p.topology.nodes), hostfile=None,
        nnodes=len(p.topology.nodes) if p.topology is not None and p.topology.launcher == "slurm" else None,
        iface=p.topology.iface if p.topology is not None else r.iface)


def _check_verdict_options(req: RunRequest, p: RunPlan) -> None:
    """--baseline, --precision, --budget and --order-seed, refused (BadInput) before anything is written."""
    labels = [r.label for r in p.rows]
    if req.baseline is not None:
        if req.baseline not in labels:
            raise BadInput(f"--baseline {req.baseline!r} is not among the rows of this run; choose one of: "
                           f"{', '.join(labels)}")
        if req.baseline not in [r.label for r in p.runnable]:
            raise BadInput(f"--baseline {req.baseline} cannot run here (unavailable); choose one of: "
                           f"{', '.join(r.label for r in p.runnable)}")
    if req.order_seed is not None and not 0 <= req.order_seed < 2**63:
        raise BadInput(f"--order-seed must be between 0 and 2**63 - 1, got {req.order_seed}")
    if req.margin is not None:
        p.margin = parse_precision(req.margin, "--margin")
        if req.until_target:
            raise BadInput("--margin is the throughput verdict's equivalence margin; it does not apply to "
                           "--until-target runs")
        if len(p.runnable) < 2:
            raise BadInput(f"--margin says when two rows are equivalent, and only {len(p.runnable)} row can run here "
                           f"({', '.join(r.label for r in p.runnable) or 'none'}); name at least two with --adapters")
    if req.precision is None:
        if req.until_target:
            if req.budget is not None:
                raise BadInput("--budget sets how long throughput rounds may take; it does not apply to "
                               "--until-target runs (--max-steps bounds each launch)")
            return
        if req.budget is not None and req.repeats is not None:
            raise BadInput(f"--budget and --repeats both set how many rounds run (--repeats {req.repeats}: exactly "
                           f"that many); give one of them")
        if req.repeats is None:  # the default: 3 rounds, then as many as fit the budget
            p.budget_s = parse_duration(req.budget if req.budget is not None else DEFAULT_RUN_BUDGET)
        return
    p.precision = parse_precision(req.precision)
    p.budget_s = parse_duration(req.budget if req.budget is not None else DEFAULT_BUDGET)
    if req.until_target:
        raise BadInput("--precision narrows throughput intervals; it does not apply to --until-target runs")
    if req.repeats is not None:
        raise BadInput(f"--precision and --repeats both set how many rounds run (--precision {req.precision}: as "
                       f"many as that interval needs, within --budget; --repeats {req.repeats}: exactly that many); "
                       f"give one of them")
    if len(p.runnable) < 2:
        raise BadInput(f"--precision compares rows with each other, and only {len(p.runnable)} row can run here "
                       f"({', '.join(r.label for r in p.runnable) or 'none'}); name at least two with --adapters")


def execute(p: RunPlan, ui, started: float | None = None, render: Render | None = None
            ) -> tuple[list[dict[str, Any]], bool]:
    """Run the plan; `ui` receives progress (see harness/commands/ui.py: RunUI); `render` writes the report at the
    end (the command's: harness/reports; None: the records alone). Returns (records, interrupted). Raises
    SessionError when the results cannot be written (exit 1) and BadInput when another run holds the directory."""
    req = p.request
    run_info = run_header(p, "run", [r.label for r in p.rows], started)
    seed = p.order_seed
    run_info.update(order_seed=seed, baseline=req.baseline, margin=p.margin)
    if p.design is not None:
        run_info["design"] = p.design
    remote = p.topology is not None and p.topology.remote
    with Session(p.out, RESULT_FILES, shared_scratch=remote) as session:
        if p.join:  # another session of earlier runs: the report is the verdict over all of them
            from harness.core import joins

            joins.write_manifest(p.out, [*p.join, p.out.resolve()],
                                    f"{p.rerun or 'compare run'} --join {shlex.quote(str(req.join))}")
        ui.start(p)
        runner = Runner(session, ui, run_info, pipelined=p.until_target is None and not remote)

        def first_started():  # while the first launch starts up
            run_info["env"] = envmod.collect_safely(req.device)
            if p.until_target is None:  # what one run's intervals leave out, as far as this machine has seen it
                from harness.core import joins

                known = joins.known(run_info["env"], req.workload, p.workload.describe()["options"],
                                    {"steps": p.steps, "warmup": p.warmup, "global_batch": p.global_batch,
                                     "world_size": req.world_size})
                if known:
                    run_info["between_sessions"] = known
            session.save([plain_record(run_info, p, row, repeat, "unavailable", row.reason)
                          for row in p.unavailable for repeat in range(req.repeats or 1)])

        def round_jobs(k: int):
            # Rounds are interleaved (every row, then every row again) so slow drift of the machine hits all alike,
            # and the rows of each round come in an order shuffled from the recorded seed, so a periodic disturbance
            # does not always hit the same row.
            return [(p, row, k) for row in round_order(p.runnable, seed, k)]

        if p.left_threads:
            ui.estimate(p.left_threads)
        if p.moved:
            ui.estimate(p.moved)
        large = estimate.size_line(
            req.workload + (f" ({', '.join(req.options)})" if req.options else ""), p.param_count,
            run_info.get("flops_per_sample"), p.global_batch // req.world_size, p.steps + p.warmup, req.device,
            hosts.threads_per_process(req.world_size, req.threads, p.topology))
        if large:
            ui.estimate(large)
        if p.budget_s is None:
            jobs = [job for k in range(req.repeats) for job in round_jobs(k)]
            if p.until_target is None:  # an until-target launch's length is not known in advance
                runner.forecast = estimate.Forecast([(p, row.label) for _, row, _ in jobs], references([p]))
                ui.estimate(runner.forecast.line())
            stopped = runner.run(jobs, first_started)
        else:
            ui.estimate(_rounds_line(p))
            jobs, stopped = _rounds(p, runner, session, ui, round_jobs, first_started)
        if stopped:
            runner.close_interrupted(stopped, jobs, req.device)
        session.finish(render)
    return session.records, stopped is not None


def _pilot(p: RunPlan) -> int | None:
    """The pilot's rounds of a `--precision` run (two stages), from the number of pairs among its runnable rows."""
    from harness.ground.stats import pilot_rounds

    n = len(p.runnable)
    return pilot_rounds(n * (n - 1) // 2) if p.precision is not None and n >= 2 else None


def _rounds_line(p: RunPlan) -> str:
    """What a run of rounds will cost, before its first launch."""
    one_round = estimate.Forecast([(p, row.label) for row in p.runnable]).left()
    pilot = _pilot(p)
    least = max(MIN_ROUNDS, p.request.repeats or 0)
    until = ("" if pilot is None else
             f": a pilot of {pilot}, then as many as its variance says every pair's simultaneous interval needs for "
             f"±{p.precision * 100:g}% (two stages)")
    return (f"rounds of {len(p.runnable)} launch(es){until}; at least {least}, then none that would end past the "
            f"{estimate.duration(p.budget_s)} budget"
            + ("" if one_round is None else f"; a round should take about {estimate.duration(one_round)} here (the "
                                            f"first also runs the reference)"))


def _rounds(p: RunPlan, runner: Runner, session: Session, ui, round_jobs, first_started):
    """Rounds: at least MIN_ROUNDS (or --repeats), then more until the budget would be overrun (the last round's
    duration is the estimate). With --precision, two stages (harness/ground/stats.py, Stein 1945): a pilot of
    `pilot_rounds` rounds, after which the rounds are fixed once from the pilot's variance of every pair
    (`stein_rounds`) and run, and every paired interval takes the pilot's variance: stopping is never decided by
    how narrow the intervals happen to be. The table so far is shown after every round, and every record says how the
    rounds ended. Returns (every job planned so far, "during ..." if interrupted)."""
    from harness.ground.stats import stein_rounds
    from harness.core import analysis

    req, start = p.request, time.monotonic()
    pilot = _pilot(p)
    least = max(MIN_ROUNDS, req.repeats or 0)  # the budget may end the pilot: ordinary intervals, said so
    jobs: list = []
    stopped, ended, widest, k, planned = None, "max_rounds", None, 0, None
    while k < MAX_REPEATS:
        round_start = time.monotonic()
        this_round = round_jobs(k)
        jobs += this_round
        stopped = runner.run(this_round, first_started if k == 0 else (lambda: None), stop_ui=False)
        k += 1
        if stopped:
            ended = "interrupted"
            break
        found = analysis.analyse(session.records, req.baseline, p.margin, pilot=pilot)
        widest = found["widest"]
        if pilot is not None and planned is None and k >= pilot:
            variances = analysis.pilot_variances(found, pilot)
            if variances is not None:  # every pair measured in the pilot: the second stage is fixed, once
                planned = min(MAX_REPEATS, stein_rounds(variances, pilot, p.precision))
                ui.estimate(f"pilot of {pilot} rounds done: {planned} rounds in all give every pair's simultaneous "
                            f"interval ±{p.precision * 100:g}%")
        ui.round_done(k, found, p.precision)
        if k < least:
            continue
        if planned is not None and k >= planned:
            ended = "resolved"
            break
        now = time.monotonic()
        if now - start + (now - round_start) > p.budget_s:
            ended = "budget"
            break
    ui.stop()
    outcome = {"target": p.precision, "budget_s": p.budget_s, "rounds": k, "least": least, "ended": ended,
               "elapsed_s": time.monotonic() - start, "widest": list(widest) if widest else None,
               "criterion": "simultaneous"}
    if pilot is not None:
        outcome.update(rule="two-stage", pilot_rounds=pilot, planned_rounds=planned)
    session.records = [{**r, "precision_mode": outcome} for r in session.records]
    session.save()
    return jobs, stopped
