"""The search of `compare tune` (harness/core/tuning.py runs it): each backend's candidates raced on launches, its best
confirmed against its defaults on fresh launches, and what the records say about it, for the report and for
`compare run --tuned`. Pure: launches come in through a callback, so a stub launcher of known noise tests it.

Runs in: the parent. Two stages, both made of rounds of fresh launches in a shuffled order (as `compare run`'s):

1. **Race.** Per backend, its defaults and one candidate per (knob, value) it declares (`Adapter.TUNE`), each
   changing one knob from the defaults. Every live candidate runs once per round. From the third round on, after
   every round, the backend's best (highest geometric mean of samples/s) is compared with each other live candidate
   on the rounds they share (paired t on log throughput, Holm-adjusted over that backend's live candidates): a
   candidate is dropped only when the best is faster than it at the 5% level, so one lucky launch never decides. A
   launch that fails drops its candidate, with its reason. Where the least rounds of every candidate would not fit
   the budget, the first round is followed by successive halving: the candidates slowest against their own
   defaults in that round are left out until the rest fit (`_fit_budget`). The race of a backend ends when one
   candidate is left,
   or when the next round and the confirmation it still needs would overrun the budget: the best of those left is
   taken and the others are named as within noise of it.
2. **Confirm.** The defaults and the best of every backend, on fresh launches only (no race launch is reused: a
   winner measured on the launches that chose it looks better than it is), at least three rounds and then as many as
   the budget allows. The gain of each best over its defaults, with its 95% interval and outcome (Holm over the
   backends), and the two verdicts, at defaults and at best, come from these rounds alone.

The race is replayed from the records (`replay`), at run time after every round and again by the report, so the
report re-renders from records alone and says exactly why each candidate was dropped. Knob interactions are not
searched (one knob at a time from the defaults): the report says so.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import adapters
from harness.core.analysis import outcome
from harness.ground.errors import BadInput
from harness.ground.record import MEASURED
from harness.ground.stats import ALPHA, MIN_LAUNCHES, adjust, compare_pair, geomean_interval, log_moments

MIN_ROUNDS = MIN_LAUNCHES
"""Rounds each stage runs at least: below it no pair has an interval."""

SELECT_PROBABILITY = 0.95
"""How often a candidate `--min-gain` faster than every other should be the race's pick: sets the race's rounds."""
CONFIRM_POWER = 0.90
"""The confirmation's power against a candidate `--min-gain` faster than its defaults (Holm over the backends taken
at its strictest, Bonferroni). With the race's pick right SELECT_PROBABILITY of the time, a truly better candidate is
confirmed at least 0.95 x 0.90 = 85% of the time: the 80% the issue asks for, with the variance estimate's own error
to spare."""
DETECTABLE_POWER = 0.80
"""The power at which a tune says the smallest gain it could have confirmed."""
MAX_PLANNED = 200
"""The most rounds either stage plans (a gain far inside the noise needs more than any budget holds)."""

PER_BACKEND = "/backend"
"""`--budget 5m/backend`: each backend gets that much (else the budget is for the whole tune)."""


# ---- candidates ---------------------------------------------------------------------------------------------------
def text(value: Any) -> str:
    """A knob value as a row label writes it (true, 1, 0.2, 50000000)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def numerics(adapter) -> tuple[str, str]:
    """What a tuned knob must not change: the step's precision and the wire compression."""
    return str(getattr(adapter.precision(), "value", adapter.precision())), adapter.compression()


def parse_tune(given: list[str], names: list[str]) -> dict[str, dict[str, list[str] | None]]:
    """`--tune ADAPTER.KNOB[=V1,V2,...]` (repeatable) -> {adapter: {knob: values or None (the declared ones)}}."""
    out: dict[str, dict[str, list[str] | None]] = {}
    for item in given:
        key, eq, values = item.partition("=")
        name, dot, knob = key.partition(".")
        if not dot or not name or not knob or (eq and not values.strip(",")):
            raise BadInput(f"--tune {item!r} must be ADAPTER.KNOB or ADAPTER.KNOB=V1,V2,..., e.g. "
                           f"ddp.bucket_cap_mb or ddp.bucket_cap_mb=1,5,100")
        if name not in names:
            raise BadInput(f"--tune {item}: adapter '{name}' is not in this tune ({', '.join(names)})")
        if knob in out.get(name, {}):
            raise BadInput(f"--tune {name}.{knob} is given twice; give every value in one: --tune "
                           f"{name}.{knob}=V1,V2")
        listed = [v.strip() for v in values.split(",")] if eq else None
        if listed is not None and "" in listed:
            raise BadInput(f"--tune {item!r} has an empty value (two commas in a row, or one at an end); e.g. "
                           f"--tune {name}.{knob}=1,5,100")
        twice = next((v for i, v in enumerate(listed or []) if v in listed[:i]), None)
        if twice is not None:
            raise BadInput(f"--tune {item}: value {twice} is listed twice; give each candidate once")
        out.setdefault(name, {})[knob] = listed
    return out


def candidates(name: str, device: str, chosen: dict[str, list[str] | None] | None = None,
               fixed: dict[str, str] | None = None) -> list[str]:
    """The row labels raced for adapter `name`: its defaults first, then one row per (knob, value), one knob changed
    at a time. `chosen` (from --tune): only those knobs, with the values given (None: the declared ones). BadInput
    for a knob the adapter lacks, one with no declared values and none given, a value its Knobs refuse, or one that
    changes the numerics. `fixed` (from --knob): knobs set for every candidate, so not searched."""
    from harness.shared import options

    cls = adapters.get(name)
    fields = {f.name for f in dataclasses.fields(cls.Knobs)}
    declared = dict(cls.TUNE)
    fixed = fixed or {}
    if chosen is None:
        plan = {k: [text(v) for v in vs] for k, vs in declared.items() if k not in fixed}
    else:
        plan = {}
        for knob, values in chosen.items():
            if knob not in fields:
                raise BadInput(f"--tune {name}.{knob}: adapter {name} has no knob '{knob}'; its tunable knobs: "
                               f"{', '.join(declared) or 'none'} (every knob: `compare knobs {name}`)")
            if knob in fixed:
                raise BadInput(f"--tune {name}.{knob} searches a knob that --knob {name}.{knob}={fixed[knob]} fixes; "
                               f"give one of them")
            if values is None and knob not in declared:
                raise BadInput(f"--tune {name}.{knob}: {name} declares no candidate values for '{knob}'; give them, "
                               f"e.g. --tune {name}.{knob}=V1,V2")
            plan[knob] = values if values is not None else [text(v) for v in declared[knob]]
    try:  # the knobs --knob fixes for every candidate, refused as `compare run` refuses them
        base = numerics(cls(dict(fixed), device))
        default_knobs = options.build(cls.Knobs, dict(fixed), what="knob")
    except options.OptionError as exc:
        raise BadInput(f"adapter {name}: {exc}") from None
    labels = [name]
    for knob, values in plan.items():
        given: dict[str, str] = {}  # label -> the value as typed
        for value in values:
            try:
                built = options.build(cls.Knobs, {**fixed, knob: value}, what="knob")
                tried = numerics(cls({**fixed, knob: value}, device))
            except options.OptionError as exc:
                raise BadInput(f"--tune {name}.{knob}={value}: {exc}") from None
            if tried != base:
                raise BadInput(f"--tune {name}.{knob}={value} changes the numerics ({'/'.join(base)} -> "
                               f"{'/'.join(tried)}): compare it as a row of its own (compare run -a "
                               f"{name}:{knob}={value}), not as a tuning of speed")
            own = getattr(default_knobs, knob)
            if own is None:  # unset: the framework's own value, where the adapter says what it is
                own = cls.FRAMEWORK_DEFAULTS.get(knob)
            if getattr(built, knob) == own:
                if chosen is not None:  # named by the user: a candidate that would never be raced is a mistake
                    raise BadInput(f"--tune {name}.{knob}={value}: {value} is {name}'s own value of '{knob}', which "
                                   f"its defaults row already races; give other values")
                continue  # the defaults' own value: that row is already there
            label = f"{name}:{knob}={text(getattr(built, knob))}"
            if label in given and chosen is not None:
                raise BadInput(f"--tune {name}.{knob}: values {given[label]} and {value} are the same value; give "
                               f"each candidate once")
            given.setdefault(label, value)
            if label not in labels:
                labels.append(label)
    return labels


# ---- the race, replayed from records --------------------------------------------------------------------------------
@dataclass
class Race:
    """One backend's race as far as its records go."""

    backend: str
    candidates: list[str]
    alive: list[str]
    dropped: dict[str, dict[str, Any]] = field(default_factory=dict)
    """label -> {"round", "why" ("slower", "failed", "budget" or "interrupted"), and "best", "ratio", "lo", "hi",
    "p_holm" or "reason"}."""
    rounds: int = 0
    values: dict[str, list[float]] = field(default_factory=dict)
    """label -> samples/s per race round it ran, in round order."""
    walls: dict[str, list[float]] = field(default_factory=dict)
    """label -> each launch's wall time (s), for the budget."""

    @property
    def best(self) -> str | None:
        live = [k for k in self.alive if self.values.get(k)]
        if not live:
            return None
        return max(live, key=lambda k: geomean_interval(self.values[k])["estimate"])

    @property
    def default(self) -> str:
        return self.candidates[0]


def trial(rec: dict[str, Any]) -> dict[str, Any]:
    return rec.get("tune") or {}


def replay(records: list[dict[str, Any]], backends: dict[str, list[str]], budget: Budget | None = None
           ) -> dict[str, Race]:
    """Every backend's race from the race records (kind "tune", stage "race"), round by round, with the elimination
    rule of the module docstring: what `compare tune` decided after each round, and what its report shows. With
    `budget`, the first round is followed by `_fit_budget`."""
    races = {b: Race(b, list(labels), list(labels)) for b, labels in backends.items()}
    by_round: dict[int, list[dict]] = {}
    for r in records:
        t = trial(r)
        if t.get("stage") == "race" and r.get("adapter") in races and r.get("status") != "not_run":
            by_round.setdefault(int(r["repeat"]), []).append(r)  # a launch the tune never made is no round of it
    for k in sorted(by_round):
        for b, race in races.items():
            ran = [r for r in by_round[k] if r["adapter"] == b and r["label"] in race.alive]
            if not ran:
                continue
            race.rounds += 1
            for r in ran:
                race.walls.setdefault(r["label"], []).append(float(r.get("wall_time_s") or 0.0))
                if r["status"] in MEASURED and r.get("samples_per_s"):
                    race.values.setdefault(r["label"], []).append(float(r["samples_per_s"]))
                else:  # a launch the user interrupted says nothing of its candidate: the tune stopped there
                    race.alive.remove(r["label"])
                    race.dropped[r["label"]] = {"round": k,
                                                "why": "interrupted" if r["status"] == "interrupted" else "failed",
                                                "reason": r.get("reason") or r["status"]}
            _eliminate(race, k)
        if budget is not None and k == min(by_round):
            _fit_budget(races, by_round[k], budget, k, records)
    return races


def budget_of(records: list[dict[str, Any]]) -> Budget | None:
    """The budget a tune's race was fitted to, as its records keep it (tune_plan); None for a tune made before
    the race halved its candidates to fit (no `halving` in its plan), which is replayed as it ran."""
    plan = next((r.get("tune_plan") for r in records if r.get("tune_plan")), None) or {}
    if not plan.get("halving") or not plan.get("budget_s"):
        return None
    return Budget(float(plan["budget_s"]), bool(plan.get("per_backend")))


def _fit_budget(races: dict[str, Race], first: list[dict[str, Any]], budget: Budget, k: int,
                records: list[dict[str, Any]]) -> None:
    """Successive halving where the budget cannot hold every candidate's least rounds: after the first race round,
    while the least rounds still to run (the race's other MIN_ROUNDS - 1 over the live candidates, and the
    confirmation's MIN_ROUNDS of each backend's defaults and best, priced as its defaults) would overrun the budget,
    the candidate slowest against its own defaults in that round is left out, never a backend's defaults nor its last
    other candidate. One launch each decides only what is not measured further: no gain is claimed from it (the
    confirmation's fresh launches decide), and a re-rendered report makes the same choice from the same records."""
    walls = {r["label"]: float(r.get("wall_time_s") or 0.0) for r in first}
    total = sum(walls.values())
    starts = [r["launch_wall"] for r in first if r.get("launch_wall")]
    ends = [r["launch_wall"] + float(r.get("wall_time_s") or 0.0) for r in first if r.get("launch_wall")]
    span = max(ends) - min(starts) if starts and len(starts) == len(first) else total
    overlap = span / total if total else 1.0  # pipelined launches overlap: the round took less than their sum
    reference = next((float(r["reference_run"].get("wall_time_s") or 0.0) for r in records
                      if isinstance(r.get("reference_run"), dict)), 0.0)
    confirming = len(races) > 1 or any(len(r.candidates) > 1 for r in races.values())

    def rest(race: Race) -> float:
        default = walls.get(race.default, _mean([walls.get(c, 0.0) for c in race.alive]))
        return ((MIN_ROUNDS - 1) * _round_cost(race, race.alive)
                + (MIN_ROUNDS * 2 * default if confirming else 0.0))

    def over(group: list[Race]) -> bool:
        if budget.per_backend:
            race = group[0]
            return sum(walls.get(c, 0.0) for c in race.candidates) + rest(race) > budget.seconds
        return span + reference + overlap * sum(rest(r) for r in group) > budget.seconds

    def slowness(race: Race, c: str) -> float:
        values = {x: race.values[x][0] for x in race.alive if race.values.get(x)}
        base = values.get(race.default) or max(values.values())
        return values[c] / base

    groups = [[race] for race in races.values()] if budget.per_backend else [list(races.values())]
    for group in groups:
        while over(group):
            left = [(slowness(race, c), race, c) for race in group
                    if len([x for x in race.alive if x != race.default]) > 1
                    for c in race.alive if c != race.default and race.values.get(c)]
            if not left:
                break
            ratio, race, c = min(left, key=lambda t: t[0])
            race.alive.remove(c)
            race.dropped[c] = {"round": k, "why": "budget", "ratio": ratio, "n": 1}


def _eliminate(race: Race, k: int) -> None:
    """After a round: drop each live candidate that the best is resolved faster than (paired over the rounds they
    share, Holm over the backend's live candidates), once every live one has MIN_ROUNDS launches."""
    live = [c for c in race.alive if race.values.get(c)]
    if len(live) < 2 or min(len(race.values[c]) for c in live) < MIN_ROUNDS:
        return
    best = race.best
    n = min(len(race.values[c]) for c in live)  # the most recent n rounds, which every live candidate ran
    others = [c for c in live if c != best]
    pairs = [{"c": c, **compare_pair(race.values[best][-n:], race.values[c][-n:], paired=True)} for c in others]
    for p in adjust(pairs):
        if outcome(p) == "faster":
            race.alive.remove(p["c"])
            race.dropped[p["c"]] = {"round": k, "why": "slower", "best": best, "ratio": 1 / p["estimate"],
                                    "lo": 1 / p["hi"], "hi": 1 / p["lo"], "p_holm": p["p_holm"], "n": n}


# ---- how many rounds a gain needs (power) --------------------------------------------------------------------------
def paired_variance(race: Race) -> tuple[float, int] | None:
    """The variance of a candidate's log ratio to the defaults per round, pooled over every candidate that shared
    at least 2 rounds with them (dropped ones too: the noise is the machine's), and its degrees of freedom; None
    before any."""
    base = race.values.get(race.default) or []
    ss, df = 0.0, 0
    for c, vals in race.values.items():
        n = min(len(vals), len(base))
        if c == race.default or n < 2:
            continue
        logs = [math.log(x / y) for x, y in zip(vals[:n], base[:n])]
        mean = sum(logs) / n
        ss += sum((x - mean) ** 2 for x in logs)
        df += n - 1
    return (ss / df, df) if df else None


VARIANCE_CONFIDENCE = 0.80
"""Rounds are sized from an upper confidence bound of the race's variance at this level, not its estimate: from a
few rounds the estimate is as often too small as too large, and too small would leave the tune short of its power
(the standard remedy for sizing from a pilot: Browne 1995)."""


def variance_upper(variance: float, df: int) -> float:
    """The one-sided VARIANCE_CONFIDENCE upper bound of a variance estimated with `df` degrees of freedom."""
    from scipy import stats as sp

    return variance * df / float(sp.chi2.ppf(1 - VARIANCE_CONFIDENCE, df))


def _t(q: float, df: int) -> float:
    from scipy import stats as sp

    return float(sp.t.ppf(q, df))


def select_rounds(variance: float, min_gain: float, candidates: int) -> int:
    """Race rounds after which a candidate `min_gain` faster than each of the other `candidates - 1` has the highest
    mean SELECT_PROBABILITY of the time (paired within rounds, normal): Phi(delta sqrt(R) / s)^(C-1) >= P."""
    from scipy import stats as sp

    if candidates < 2 or variance <= 0:
        return MIN_ROUNDS
    z = float(sp.norm.ppf(SELECT_PROBABILITY ** (1.0 / (candidates - 1))))
    return min(MAX_PLANNED, max(MIN_ROUNDS, math.ceil((z * z * variance) / math.log1p(min_gain) ** 2)))


def confirm_rounds(variance: float, min_gain: float, backends: int, power: float = CONFIRM_POWER) -> int:
    """Confirmation rounds for `power` against a gain of `min_gain`: the fewest n with (t(1 - a/2B, n-1) +
    t(power, n-1)) x s / sqrt(n) <= log(1 + min_gain), a = 5% over B backends (paired t, two-sided)."""
    delta, s, q = math.log1p(min_gain), math.sqrt(max(variance, 0.0)), 1 - ALPHA / max(backends, 1) / 2
    n = MIN_ROUNDS
    while n < MAX_PLANNED and (_t(q, n - 1) + _t(power, n - 1)) * s / math.sqrt(n) > delta:
        n += 1
    return n


def detectable(variance: float, rounds: int, backends: int, power: float = DETECTABLE_POWER) -> float | None:
    """The smallest gain `rounds` confirmation rounds confirm with `power` at this variance (as confirm_rounds)."""
    if rounds < 2:
        return None
    q = 1 - ALPHA / max(backends, 1) / 2
    return math.expm1((_t(q, rounds - 1) + _t(power, rounds - 1)) * math.sqrt(max(variance, 0.0)) / math.sqrt(rounds))


# ---- the search loop ------------------------------------------------------------------------------------------------
@dataclass
class Budget:
    seconds: float
    per_backend: bool = False

    def describe(self) -> str:
        from harness.core.estimate import duration

        return duration(self.seconds) + (" per backend" if self.per_backend else " in all")


def parse_budget(text_: str) -> Budget:
    """"20m" (the whole tune) or "5m/backend" (each backend) -> Budget; BadInput otherwise."""
    from harness.core.checks import parse_duration

    per = text_.strip().endswith(PER_BACKEND)
    try:
        return Budget(parse_duration(text_.strip()[:-len(PER_BACKEND)] if per else text_, "--budget"), per)
    except BadInput:  # with the per-backend form, which parse_duration (run's --budget too) does not know
        raise BadInput(f"--budget must be a duration above 0 and at most a week, for the whole tune or for each "
                       f"backend, e.g. 20m or 5m{PER_BACKEND}; got {text_!r}") from None


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _round_cost(race: Race, labels: list[str]) -> float:
    return sum(_mean(race.walls.get(k, [])) for k in labels)


def confirm_rows(races: dict[str, Race]) -> list[str]:
    """The confirmation's rows: every backend's defaults and its best where that is another candidate."""
    rows = []
    for race in races.values():
        best = race.best
        rows += [race.default] + ([best] if best and best != race.default else [])
    return rows


def search(backends: dict[str, list[str]], run_round: Callable[[str, int, list[str]], list[dict[str, Any]]],
           budget: Budget, clock: Callable[[], float] = time.monotonic,
           on_round: Callable[[str, int, dict[str, Race]], None] = lambda stage, k, races: None,
           min_gain: float = 0.05) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run the race, then the confirmation. `run_round(stage, k, labels)` launches each label once (round k of
    stage "race" or "confirm") and returns their records (it may raise KeyboardInterrupt). From the race's
    MIN_ROUNDS-th round on, its own variance sizes both stages for `min_gain` (`select_rounds`, `confirm_rounds`):
    a backend's race ends when its planned rounds have run (or one candidate is left, or the budget, which keeps
    room for the planned confirmation), and the confirmation runs its planned rounds (or as many as the budget
    allows). Returns (records, how each stage ended and what it needed)."""
    records: list[dict[str, Any]] = []
    start = clock()
    spent: dict[str, float] = {b: 0.0 for b in backends}
    ended: dict[str, str] = {}
    plans: dict[str, dict[str, Any]] = {}
    k = 0

    def plan(b: str, race: Race) -> None:
        got = paired_variance(race)
        if got is None or race.rounds < MIN_ROUNDS:
            return
        variance, df = got
        upper = variance_upper(variance, df)
        plans[b] = {"variance": variance, "df": df, "variance_upper": upper,
                    "select_rounds": select_rounds(upper, min_gain, len(race.alive)),
                    "confirm_rounds": confirm_rounds(upper, min_gain, len(backends))}

    def confirming() -> int:
        return max([MIN_ROUNDS] + [p["confirm_rounds"] for p in plans.values()])

    def spend(recs):
        for r in recs:
            b = r.get("adapter")
            if b in spent:
                spent[b] += float(r.get("wall_time_s") or 0.0)

    def reserve(race: Race) -> float:
        best = race.best or race.default
        return confirming() * _round_cost(race, list(dict.fromkeys([race.default, best])))

    races = replay(records, backends, budget)
    while True:
        racing = [b for b, race in races.items() if len(race.alive) > 1 and b not in ended]
        for b, race in races.items():
            if b not in ended:
                plan(b, race)
            if len(race.alive) <= 1 and b not in ended:
                ended[b] = "one left" if race.alive else "every candidate failed"
        for b in racing:
            if b in plans and races[b].rounds >= plans[b]["select_rounds"]:
                ended[b] = "planned"
        racing = [b for b in racing if b not in ended]
        if k >= MIN_ROUNDS and racing:
            if budget.per_backend:
                for b in racing:
                    race = races[b]
                    if spent[b] + _round_cost(race, race.alive) + reserve(race) > budget.seconds:
                        ended[b] = "budget"
            else:
                need = sum(_round_cost(races[b], races[b].alive) for b in racing) + sum(map(reserve, races.values()))
                if clock() - start + need > budget.seconds:
                    ended.update({b: "budget" for b in racing})
            racing = [b for b in racing if b not in ended]
        if not racing:
            break
        recs = run_round("race", k, [c for b in racing for c in races[b].alive])
        records += recs
        spend(recs)
        k += 1
        races = replay(records, backends, budget)
        on_round("race", k, races)
    rows = confirm_rows(races)
    if len(rows) < 2:  # one backend whose defaults won: nothing to confirm a gain of, no one to compare it with
        rows = []
    race_s, confirm_start, c = clock() - start, clock(), 0
    planned = confirming()
    while rows:
        if c >= planned:
            break
        if c >= MIN_ROUNDS:
            last = [r for r in records if trial(r).get("stage") == "confirm" and r["repeat"] == k + c - 1]
            per_b: dict[str, float] = {}
            for r in last:
                per_b[r["adapter"]] = per_b.get(r["adapter"], 0.0) + float(r.get("wall_time_s") or 0.0)
            if budget.per_backend:
                if any(spent[b] + per_b.get(b, 0.0) > budget.seconds for b in per_b):
                    break
            elif clock() - start + sum(per_b.values()) > budget.seconds:
                break
        recs = run_round("confirm", k + c, rows)
        records += recs
        spend(recs)
        c += 1
        on_round("confirm", c, races)
    # what the plan needed, at these launches' times: the race's rounds still short of plan, and the whole
    # confirmation, beside what ran
    short = sum(max(0, plans[b]["select_rounds"] - races[b].rounds) * _round_cost(races[b], races[b].alive)
                for b in plans if ended.get(b) == "budget")
    conf_round = sum(_round_cost(races[b], list(dict.fromkeys([races[b].default, races[b].best or races[b].default])))
                     for b in races)
    summary = {"budget_s": budget.seconds, "per_backend": budget.per_backend, "race_rounds": k, "confirm_rounds": c,
               "race_ended": ended, "elapsed_s": clock() - start, "confirm_s": clock() - confirm_start,
               "spent_s": spent, "min_gain": min_gain, "plans": plans, "confirm_planned": planned if rows else 0,
               "needed_s": race_s + short + (planned * conf_round if rows else 0.0)}
    return records, summary


# ---- what the confirmation says (records alone: the report and `compare run --tuned` read it) -----------------------
def backends_of(records: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Backend -> candidate labels, as the tune planned them (recorded in every record)."""
    plan = next((r.get("tune_plan") for r in records if r.get("tune_plan")), None) or {}
    return {b: list(c) for b, c in (plan.get("backends") or {}).items()}


def confirmed(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per backend: its defaults, the race's best, the confirmation's launches of each, the best's gain over the
    defaults (paired over the confirmation rounds: ratio, 95% interval, outcome, Holm over the backends) and the
    winner: the best where the confirmation resolved it faster than the defaults, else the defaults."""
    from harness.ground.stats import recorded_margin

    backends = backends_of(records)
    races = replay(records, backends, budget_of(records))
    margin = recorded_margin(records)
    summary = next((r.get("tune_summary") for r in records if r.get("tune_summary")), None) or {}
    out: dict[str, dict[str, Any]] = {}
    pairs = []
    for b, race in races.items():
        conf = [r for r in records if trial(r).get("stage") == "confirm" and r["adapter"] == b]
        best = race.best or race.default
        vals: dict[str, dict[int, float]] = {}
        for r in conf:
            if r["status"] in MEASURED and r.get("samples_per_s"):
                vals.setdefault(r["label"], {})[r["repeat"]] = float(r["samples_per_s"])
        entry = {"backend": b, "default": race.default, "best": best, "race": race, "values": vals,
                 "gain": None, "winner": race.default, "detectable": None}
        sized = (summary.get("plans") or {}).get(b)
        common = sorted(set(vals.get(best, {})) & set(vals.get(race.default, {})))
        if sized and best != race.default:
            entry["detectable"] = detectable(sized["variance"], len(common), len(races))
        elif best != race.default and len(common) >= 3:  # a tune from before the race's variance was kept: the
            # confirmation's own paired spread (the variance of its log ratios over the rounds), said so
            variance = log_moments([vals[best][k] / vals[race.default][k] for k in common])[1]
            entry["detectable"] = detectable(variance, len(common), len(races))
            entry["detectable_from"] = "confirmation"
        if best != race.default and best in vals and race.default in vals:
            gain = compare_pair([vals[best][k] for k in common], [vals[race.default][k] for k in common],
                                paired=True, margin=margin)
            entry["gain"] = gain
            pairs.append(gain)
        out[b] = entry
    for g in adjust(pairs):
        g["outcome"] = outcome(g)
    for entry in out.values():
        g = entry["gain"]
        if g is not None and g["outcome"] == "faster":
            entry["winner"] = entry["best"]
    return out


def never_launched(records: list[dict[str, Any]]) -> list[str]:
    """The candidates of a tune (as planned) with no launch made: an interrupted tune's, in the planned order."""
    launched = {r["label"] for r in records if trial(r) and r.get("status") not in ("not_run", "unavailable")}
    return [c for labels in backends_of(records).values() for c in labels if c not in launched]


def winners(records: list[dict[str, Any]]) -> list[str]:
    """The row label of each backend's winner (`compare run --tuned DIR`)."""
    return [e["winner"] for e in confirmed(records).values()]
