"""A run's analysis: which rows are faster, by how much, and only as far as the launches support it (the numbers
the verdict's words are made of: harness/reports/verdict.py), and the one rule that says what a pair's tests
resolved, for the verdict, the verdict over sessions, `compare diff`, the tune's gains and time to target alike.

Runs in: the parent (the report, and `compare run` between rounds, which asks how wide the widest simultaneous
interval over every pair still is). Everything comes from the records: per row, one throughput per launch (samples
over its timed window by the wall clock: harness/ground/record.py, throughput_clock) and a 95% interval over
launches (Student t on log throughput); every pair of rows compared as one family (harness/ground/stats.py,
`compare_pair`): its ratio with a 95% interval (and a simultaneous one), a difference test and an equivalence test
within the run's margin (TOST), each family Holm-adjusted. Rounds are blocks: where every row has one launch in each
round, pairs are analysed on their paired differences within rounds, else unpaired (Welch). Rows are grouped by a
compact letter display (rows that share a letter are not resolved apart).

Which rows are ranked: measured rows that used as many devices as the world size. A row that used fewer
(DataParallel without GPUs is one process on one device) measures something else and is left out.
"""

from __future__ import annotations

from itertools import combinations
from typing import Any

from harness.ground.record import MEASURED, fewer_devices, precision_of
from harness.ground.stats import (ALPHA, INTERVAL_METHOD, MIN_LAUNCHES, adjust, compare_pair, geomean_interval,
                                  half_width, letter_groups, recorded_margin)

RESOLVED = ("faster", "slower")
"""The outcomes of a pair whose difference is resolved."""


def outcome(pair: dict[str, Any]) -> str:
    """What a Holm-adjusted pair (harness/ground/stats.py: `adjust`) resolved, for its first side against its
    second: "faster" or "slower" (the difference test, p < 0.05 after Holm), "equivalent" (within the margin: the
    equivalence test, after Holm), "not resolved", or "no interval" (too few values for a test)."""
    if pair["p"] is None:
        return "no interval"
    if pair["p_holm"] < ALPHA:
        return "faster" if pair["estimate"] > 1 else "slower"
    return "equivalent" if pair["p_equivalent_holm"] < ALPHA else "not resolved"


def decide(pairs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A family of pairs, each with its first side the faster estimate, Holm-adjusted and given its `outcome` and
    `within_margin`: a difference resolved and yet inside the margin (both tests hold), which a verdict says as
    "faster, and within ±5%", never as a bare "ahead" that reads as a difference worth having. A pair whose first
    side is resolved slower (a pooled estimate may order a pair otherwise than its rows) is turned round."""
    for i, p in enumerate(adjust(pairs)):
        p["outcome"] = outcome(p)
        if p["outcome"] == "slower":
            p = pairs[i] = oriented([p], p["b"], p["a"])
        p["within_margin"] = p["outcome"] == "faster" and p["p_equivalent_holm"] < ALPHA
    return pairs


def measured(r: dict[str, Any]) -> bool:
    """Whether a launch's record holds a throughput the verdict can take."""
    return r.get("status") in MEASURED and bool(r.get("samples_per_s"))


def _launches(records: list[dict[str, Any]]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in records:
        if measured(r):
            out.setdefault(r["label"], []).append(r)
    return out


def _blocks(launches: dict[str, list[dict]], ranked: list[str]) -> str | None:
    """None when every ranked row has exactly one launch in each of the same rounds (complete blocks), else why
    not."""
    rounds = {k: [r.get("repeat") for r in launches[k]] for k in ranked}
    first = sorted(rounds[ranked[0]], key=str) if ranked else []
    if any(None in v for v in rounds.values()):
        return "the records do not say which round each launch was in"
    if any(len(set(v)) != len(v) or sorted(v, key=str) != first for v in rounds.values()):
        return "rounds are incomplete (a launch failed or was left out), so rows have launches in different rounds"
    return None


def round_key(rec: dict[str, Any]) -> tuple:
    """A launch's round, ordered as numbers (round 10 after round 9), records without one last."""
    k = rec.get("repeat")
    return (0, k, "") if isinstance(k, int) else (1, 0, str(k))


def two_stage_pilot(records: list[dict[str, Any]]) -> int | None:
    """The pilot's rounds of a `--precision` run of two stages (its records' precision_mode), else None."""
    mode = records[0].get("precision_mode") if records else None
    return mode.get("pilot_rounds") if mode and mode.get("rule") == "two-stage" else None


def analyse(records: list[dict[str, Any]], baseline: str | None = None, margin: float | None = None,
            pilot: int | None = None) -> dict[str, Any]:
    """Per-row intervals, every pair's comparison, the letter groups and ratios against the baseline, with each
    row's launches in round order (`launches`). `pilot`: the rounds of a two-stage `--precision` run's pilot (default: as its records say),
    whose variance every paired interval takes once that many rounds have run (harness/ground/stats.py)."""
    # Rows in the order asked for (records are written in the shuffled order they ran): the default baseline is the
    # first row asked for that runs on the whole world size, whatever order the launches took.
    asked_order = records[0].get("row_order") or []
    order = [k for k in asked_order if any(r["label"] == k for r in records)]
    order += [k for k in dict.fromkeys(r["label"] for r in records) if k not in order]
    if margin is None:
        margin = recorded_margin(records)
    launches = _launches(records)
    ranked, left_out = [], []
    for label in order:
        if label not in launches:
            continue
        (left_out if fewer_devices(launches[label][0]) is not None else ranked).append(label)
    for k in launches:
        launches[k].sort(key=lambda r: (round_key(r), r.get("position") or 0))
    values = {k: [r["samples_per_s"] for r in launches[k]] for k in launches}
    rows = {k: {**geomean_interval(values[k]), "precision": precision_of(launches[k][0]),
                "cpu_s_per_step": _mean([r.get("cpu_s_per_step") for r in launches[k]])} for k in launches}
    asked = baseline if baseline is not None else records[0].get("baseline")
    base = asked if asked in ranked else (ranked[0] if ranked else None)
    unblocked = _blocks(launches, ranked)
    by_estimate = sorted(ranked, key=lambda k: -rows[k]["estimate"])
    if pilot is None:
        pilot = two_stage_pilot(records)
    n_min = min((len(values[k]) for k in ranked), default=0)
    stein = pilot if pilot is not None and unblocked is None and n_min >= pilot else None
    pairs = _pairs(by_estimate, values, unblocked is None, margin, stein)
    ratios = {}
    if base is not None:
        for k in ranked:
            if k != base:
                ratios[k] = oriented(pairs, k, base)
                cpu_k, cpu_b = rows[k]["cpu_s_per_step"], rows[base]["cpu_s_per_step"]
                ratios[k]["cpu_ratio"] = cpu_k / cpu_b if cpu_k and cpu_b else None
    ranks = n_min >= MIN_LAUNCHES
    differ = {frozenset((p["a"], p["b"])) for p in pairs if p["outcome"] == "faster"}
    out = {"rows": rows, "ranked": ranked, "left_out": left_out, "baseline": base, "asked_baseline": asked,
           "between_sessions": records[0].get("between_sessions"),
           "ratios": ratios, "n_min": n_min, "method": INTERVAL_METHOD, "margin": margin, "pairs": pairs,
           "order": by_estimate, "blocked": unblocked is None, "why_unblocked": unblocked, "values": values,
           "pilot": stein, "asked_pilot": pilot,
           "letters": letter_groups(by_estimate, differ) if ranks else None}
    out["widest"] = widest(out)
    out["launches"] = launches
    return out


def _pairs(order: list[str], values: dict[str, list[float]], paired: bool, margin: float,
           pilot: int | None = None) -> list[dict[str, Any]]:
    """Every pair (a, b) with a's estimate the higher: the comparison, its unpaired interval beside a paired one, the
    Holm-adjusted p-values of both families and the outcome: faster (a resolved ahead of b), equivalent (within
    the margin), not resolved, or no interval (too few launches). `pilot`: paired intervals take the variance of
    that many first rounds (two-stage `--precision`)."""
    pairs, m = [], len(order) * (len(order) - 1) // 2
    for a, b in combinations(order, 2):
        c = compare_pair(values[a], values[b], paired, margin, pilot=pilot)
        c["unpaired"] = compare_pair(values[a], values[b], False, margin) if paired else None
        # Bonferroni's simultaneous interval (1 - ALPHA/m each): all m hold together with 95% confidence, the
        # interval form of the family's correction, which `--precision` is sized for
        sim = (compare_pair(values[a], values[b], paired, margin, confidence=1 - ALPHA / m, pilot=pilot) if m > 1
               else c)
        c["simultaneous"] = {"lo": sim["lo"], "hi": sim["hi"], "confidence": 1 - ALPHA / m,
                             "half_width": half_width({**sim, "estimate": c["estimate"]})}
        pairs.append({"a": a, "b": b, **c})
    return decide(pairs)


def oriented(pairs: list[dict[str, Any]], x: str, y: str) -> dict[str, Any]:
    """The pair of x and y as x / y, with its outcome for x (faster, slower, equivalent, not resolved)."""
    p = next(p for p in pairs if {p["a"], p["b"]} == {x, y})
    if p["a"] == x:
        return {**p}
    flip = {"faster": "slower"}.get(p["outcome"], p["outcome"])
    return {**p, "a": x, "b": y, "estimate": 1 / p["estimate"], "outcome": flip,
            "lo": None if p["hi"] is None else 1 / p["hi"], "hi": None if p["lo"] is None else 1 / p["lo"]}


def _mean(values: list[float | None]) -> float | None:
    v = [x for x in values if x is not None]
    return sum(v) / len(v) if v else None


def pilot_variances(analysis: dict[str, Any], pilot: int) -> list[float] | None:
    """Each pair's variance of its log ratio per round in the first `pilot` rounds, for `stats.stein_rounds`: of the
    paired differences within rounds, or with rounds incomplete the sum of the two rows' variances (Welch's); None
    while a row has fewer than `pilot` launches."""
    from harness.ground.stats import log_moments

    values, out = analysis["values"], []
    for p in analysis["pairs"]:
        a, b = values[p["a"]][:pilot], values[p["b"]][:pilot]
        if min(len(a), len(b)) < pilot:
            return None
        out.append(log_moments([x / y for x, y in zip(a, b)])[1] if analysis["blocked"]
                   else log_moments(a)[1] + log_moments(b)[1])
    return out


def widest(analysis: dict[str, Any]) -> tuple[str, float] | None:
    """The pair whose simultaneous interval (Bonferroni over every pair of the ranked rows) is the widest, as
    ("a/b", relative half-width); None while some pair has no interval or there is no pair."""
    worst = None
    for p in analysis["pairs"]:
        hw = p["simultaneous"]["half_width"]
        if hw is None:
            return None
        if worst is None or hw > worst[1]:
            worst = (f"{p['a']}/{p['b']}", hw)
    return worst
