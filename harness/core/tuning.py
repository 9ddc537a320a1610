"""`compare tune`: each backend's performance knobs searched within a budget (harness/core/race.py), its best
confirmed against its defaults on fresh launches, and the comparison at defaults set beside the comparison at best.

Runs in: the parent. `plan` refuses anything wrong before anything is written (the rows are checked by `compare
run`'s own planning); `execute` launches each round through the Runner into a Session, so every launch is a record
the moment it ends.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import adapters
from harness.ground.errors import BadInput
from harness.core.race import MIN_ROUNDS, Budget, Race, candidates, parse_budget, parse_tune, search


# ---- plan and execute (the command's domain) ------------------------------------------------------------------------
@dataclass
class TunePlan:
    run: Any
    """The RunPlan of every candidate row (harness/core/comparison.py's checks, once)."""
    backends: dict[str, list[str]]
    """Backend -> its candidate labels, the defaults first."""
    budget: Budget
    min_gain: float = 0.05
    """The smallest gain over a backend's defaults the tune is sized to find (`--min-gain`)."""
    untunable: dict[str, str] = field(default_factory=dict)
    """Adapters asked for that have nothing to tune -> why (said, and left out)."""
    unavailable: dict[str, str] = field(default_factory=dict)
    """Backends that cannot run here -> the reason (a record each, as `compare run` keeps)."""
    skipped: dict[str, str] = field(default_factory=dict)
    """Candidates that cannot run here (a knob this build lacks) -> the reason: not tried."""


def plan(req) -> TunePlan:
    """Check a TuneRequest and resolve it, refusing anything wrong (BadInput) before anything is written."""
    import random
    import shlex

    from harness.core import comparison
    from harness.ground.argv import to_argv
    from harness.core.checks import check_list, parse_precision
    from harness.core.requests import DEFAULT_MIN_GAIN, DEFAULT_TUNE_BUDGET, RunRequest, TuneRequest, taken
    from harness.core.rows import parse_knobs, parse_label

    check_list(req.adapters, adapters.names(), "adapter")
    for label in req.adapters or []:
        name, variant = parse_label(label)
        if variant:
            raise BadInput(f"adapter '{label}': compare tune starts from each adapter's defaults, so give plain names "
                           f"(-a {name}); fix a knob for every candidate with --knob {name}.KNOB=VALUE")
        if name not in adapters.names():
            from harness.shared.registry import UnknownName

            raise BadInput(str(UnknownName("adapter", name, adapters.names())))
    budget = parse_budget(req.budget if req.budget is not None else DEFAULT_TUNE_BUDGET)
    min_gain = parse_precision(req.min_gain if req.min_gain is not None else DEFAULT_MIN_GAIN, "--min-gain")
    tunable_names = [n for n in adapters.names() if adapters.get(n).TUNE]
    names = list(req.adapters) if req.adapters is not None else tunable_names
    chosen = parse_tune(req.tune, names)
    untunable = {n: "it declares no tunable knobs" for n in names if not adapters.get(n).TUNE and n not in chosen}
    names = [n for n in names if n not in untunable]
    if not names:
        raise BadInput(f"nothing to tune: {', '.join(untunable)} declare{'s' if len(untunable) == 1 else ''} no "
                       f"tunable knobs; adapters with tunable knobs: {', '.join(tunable_names)} (or name knobs with "
                       f"--tune ADAPTER.KNOB=V1,V2)")
    fixed = parse_knobs(req.knobs, set(names), names)
    backends = {n: candidates(n, req.device, chosen.get(n), fixed.get(n)) for n in names}
    labels = [c for cs in backends.values() for c in cs]
    run_req = RunRequest(**{**taken(req, RunRequest), "adapters": labels, "repeats": 1, "budget": None})
    p = comparison.plan(run_req, room=False)  # every row checked; --out claimed only once all of this passed
    cannot = {row.label: row.reason for row in p.unavailable}
    unavailable, skipped = {}, {}
    for name in list(backends):
        if name in cannot:  # the framework itself cannot run here: the backend is left out, with the reason
            unavailable[name] = cannot[name]
            backends.pop(name)
        else:  # a candidate whose knob this build lacks: that candidate alone is not tried
            skipped.update({c: cannot[c] for c in backends[name] if c in cannot})
            backends[name] = [c for c in backends[name] if c not in cannot]
    if not backends:
        raise BadInput("no backend to tune can run here: " + "; ".join(f"{n}: {r}" for n, r in unavailable.items()))
    # the least a tune writes: every candidate's race rounds, each backend's defaults and best confirmed, the
    # reference (room=False above: the run comparison.plan was asked for, one launch a row, is not what a tune makes)
    from harness.core.race import MIN_ROUNDS

    comparison.check_room(p, (sum(len(cs) for cs in backends.values()) + 2 * len(backends)) * MIN_ROUNDS
                          + (1 if p.equiv_steps else 0))
    p.order_seed = req.order_seed if req.order_seed is not None else random.SystemRandom().randrange(2**32)
    again = comparison.resolved(p)
    rerun = TuneRequest(**{**taken(again, TuneRequest), "adapters": list(backends) + list(unavailable),
                           "tune": list(req.tune), "budget": req.budget if req.budget is not None
                           else DEFAULT_TUNE_BUDGET,
                           "min_gain": req.min_gain if req.min_gain is not None else DEFAULT_MIN_GAIN})
    p.rerun = shlex.join(["compare", "tune", *to_argv(rerun)])
    return TunePlan(p, backends, budget, min_gain, untunable, unavailable, skipped)


def execute(tp: TunePlan, ui, started: float | None = None, render=None) -> tuple[list[dict[str, Any]], bool]:
    """Run the tune; returns (records, interrupted). The records are written after every launch (Session)."""
    from harness.ground import provenance as envmod
    from harness.core.comparison import RESULT_FILES
    from harness.core.runner import Runner, plain_record, round_order, run_header
    from harness.core.session import Session

    p = tp.run
    req, seed = p.request, p.order_seed
    rows = {r.label: r for r in p.rows}
    run_info = run_header(p, "tune", list(rows), started)
    run_info.update(order_seed=seed, margin=p.margin, tune_plan={
        "backends": tp.backends, "budget_s": tp.budget.seconds, "per_backend": tp.budget.per_backend,
        "untunable": tp.untunable, "unavailable": tp.unavailable, "skipped": tp.skipped, "min_rounds": MIN_ROUNDS,
        "halving": True, "min_gain": tp.min_gain})
    planned: list = []
    remote = p.topology is not None and p.topology.remote
    with Session(p.out, RESULT_FILES, shared_scratch=remote) as session:
        ui.start(p)
        # launches pipelined as `compare run`'s, except across hosts (harness/core/runner.py: Runner)
        runner = Runner(session, ui, run_info, pipelined=not remote)
        first = [True]

        def first_started():
            run_info["env"] = envmod.collect_safely(req.device)
            session.save([{**plain_record(run_info, p, rows[n], 0, "unavailable", reason), "tune": {"stage": "race"}}
                          for n, reason in tp.unavailable.items()])

        def run_round(stage: str, k: int, labels: list[str]) -> list[dict[str, Any]]:
            stage_plan = dataclasses.replace(p, extra={**p.extra, "tune": {"stage": stage}})
            jobs = [(stage_plan, rows[label], k) for label in round_order(labels, seed, k)]
            planned.extend(jobs)
            before = len(session.records)
            stopped = runner.run(jobs, first_started if first[0] else (lambda: None), stop_ui=False)
            first[0] = False
            if stopped:
                raise _Stopped(stopped)
            return [r for r in session.records[before:] if r.get("tune")]

        def on_round(stage: str, k: int, races: dict[str, Race]) -> None:
            for line in round_lines(stage, k, races):
                ui.estimate(line)

        ui.estimate(f"race then confirm, within {tp.budget.describe()}, sized for a gain of {tp.min_gain:.0%} "
                    f"(--min-gain): " + "; ".join(f"{b}: {len(c)} candidates" for b, c in tp.backends.items()))
        least = least_cost(tp)
        if least is not None:
            ui.estimate(least)
        stopped = None
        try:
            _, summary = search(tp.backends, run_round, tp.budget, on_round=on_round, min_gain=tp.min_gain)
        except _Stopped as exc:
            stopped, summary = exc.where, None
        ui.stop()
        if stopped:
            runner.close_interrupted(stopped, planned, req.device)
        else:
            session.records = [{**r, "tune_summary": summary} for r in session.records]
            session.save()
        session.finish(render)
    return session.records, stopped is not None


def least_cost(tp: TunePlan) -> str | None:
    """What the least rounds (MIN_ROUNDS of the race over every candidate, MIN_ROUNDS of the confirmation, each
    backend's best priced as its defaults) should take here, from this machine's last launches of these rows
    (harness/core/estimate.py), and whether that is past the budget; None where a row has no figure yet."""
    from harness.core import estimate
    from harness.core.runner import references

    p = tp.run
    per_backend = {}
    for b, labels in tp.backends.items():
        confirm = [labels[0]] * (2 if len(tp.backends) > 1 or len(labels) > 1 else 0)
        per_backend[b] = estimate.Forecast([(p, c) for c in labels + confirm] * MIN_ROUNDS).left()
    if any(v is None for v in per_backend.values()):
        return None
    ref = estimate.Forecast([], references([p])).left() or 0.0
    total = sum(per_backend.values()) + ref
    line = (f"the least rounds ({MIN_ROUNDS} of the race, {MIN_ROUNDS} of the confirmation) should take about "
            f"{estimate.duration(total)} here")
    over = ([b for b, v in per_backend.items() if v > tp.budget.seconds] if tp.budget.per_backend else
            list(tp.backends) if total > tp.budget.seconds else [])
    if over:
        line += (f", past the {tp.budget.describe()} budget{' for ' + ', '.join(over) if tp.budget.per_backend else ''}"
                 f": after the first race round the candidates slowest against their defaults are left out until "
                 f"the rest fit (successive halving; fewer candidates with --tune, or fewer --steps, avoid it)")
    return line


class _Stopped(Exception):
    def __init__(self, where: str):
        super().__init__(where)
        self.where = where


def round_lines(stage: str, k: int, races: dict[str, Race]) -> list[str]:
    """Progress after a round: per backend what is still racing and what was dropped."""
    if stage == "confirm":
        return [f"confirmation round {k} done"]
    out = []
    for b, race in races.items():
        dropped = [f"{c} ({d['why']})" for c, d in race.dropped.items()]
        out.append(f"race round {k}, {b}: {len(race.alive)} left" + (f", race pick so far {race.best}" if race.best
                                                                     else "")
                   + (f"; dropped: {', '.join(dropped)}" if dropped else ""))
    return out
