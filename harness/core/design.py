"""Variance at each level of repetition, and the design a default `compare run` takes from it (Kalibera & Jones,
ISMM 2013; issue 65).

Runs in: the parent. `compare doctor` measures the components (harness/core/noise_floor.py) and keeps them here per
machine and workload; `compare run` without --steps and --repeats asks `design` for its steps per launch, and its
report says why (`design_line`).

A row's log throughput varies at three levels: between windows of steps within a launch, between launches, and
between sessions (runs at other times). More steps per launch narrow only the first, more launches the first two,
more sessions all three. A launch of s steps costs c0 (start-up, evaluation, shutdown) + s x t seconds, and its log
throughput has variance sigma_L^2 + v / s (v: the within-launch variance of a window, times its steps). Over an
unbounded time the variance of a row's mean per second is smallest at s* = sqrt(v c0 / (sigma_L^2 t)) (`best_steps`).
A default run has a budget, several rows and at least 3 rounds, and its intervals are t intervals over its rounds:
`best_design` takes the steps whose rounds (as many as the budget holds, each row's launch priced from this
machine's last launches of it) give the narrowest t(0.975, n - 1) sqrt((sigma_L^2 + v / s) / n), among the steps
whose 3 rounds fit the budget. (The first design, s* alone, gave the default digits run here 2,021 steps a launch:
its 3 rounds took 4.6 to 6.7 minutes of a 3-minute budget and resolved fewer pairs than the workload's 280 steps.)
"""

from __future__ import annotations

import json
import math
from typing import Any

from harness.ground.stats import CONFIDENCE, log_moments, t_quantile

MIN_LAUNCHES = 3
"""Launches of a row below which no component is estimated."""

WINDOWS = 5
"""Windows of consecutive timed steps a launch is cut into to measure the variance within it."""
COMPONENTS_FILE = "variance_components.json"
DESIGN_BOUNDS = (0.25, 8.0)
"""The designed steps per launch stay within these multiples of the workload's own (and at least 10): outside them
the model of two variances has not been measured."""


def components(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Variance components of log samples/s from launches of one row: within a launch (`window_var`, between WINDOWS
    windows of its timed steps, pooled over the launches; `v` = that times the steps of a window), between launches
    beyond what the steps within explain (`launch_var`), and the cost of a launch (`fixed_s`, `step_s`); None below
    MIN_LAUNCHES launches with step times."""
    ok = [r for r in records if r.get("status") == "ok" and r.get("samples_per_s") and r.get("step_times_s")
          and len(r["step_times_s"]) >= WINDOWS * 2]
    if len(ok) < MIN_LAUNCHES:
        return None
    ss, df, per_window = 0.0, 0, []
    for r in ok:
        times = r["step_times_s"]
        w = len(times) // WINDOWS
        logs = [math.log(w / sum(times[i * w:(i + 1) * w])) for i in range(WINDOWS)]
        mean = sum(logs) / WINDOWS
        ss += sum((x - mean) ** 2 for x in logs)
        df += WINDOWS - 1
        per_window.append(w)
    window_var = ss / df
    steps = len(ok[0]["step_times_s"])
    v = window_var * (sum(per_window) / len(per_window))
    total = log_moments([r["samples_per_s"] for r in ok])[1]
    step_s = sum(sum(r["step_times_s"]) / len(r["step_times_s"]) for r in ok) / len(ok)
    warmup = (ok[0].get("controls") or {}).get("warmup") or 0
    fixed_s = max(0.0, sum(r["wall_time_s"] - (steps + warmup) * step_s for r in ok) / len(ok))
    return {"window_var": window_var, "window_steps": per_window[0], "v": v, "launch_total_var": total,
            "launch_var": max(0.0, total - v / steps), "steps": steps, "step_s": step_s, "fixed_s": fixed_s,
            "launches": len(ok), "label": ok[0]["label"], "workload": ok[0]["workload"],
            "date": (ok[0].get("time_utc") or "")[:10]}


def best_steps(comp: dict[str, Any], default_steps: int) -> int:
    """The steps per launch that minimise a row's variance per second of launches, s* = sqrt(v c0 / (sigma_L^2 t)),
    within DESIGN_BOUNDS of the workload's own."""
    lo, hi = max(10, round(default_steps * DESIGN_BOUNDS[0])), round(default_steps * DESIGN_BOUNDS[1])
    if comp["launch_var"] <= 0 or comp["step_s"] <= 0:
        return hi
    best = math.sqrt(comp["v"] * comp["fixed_s"] / (comp["launch_var"] * comp["step_s"]))
    return int(min(hi, max(lo, round(best))))


def bounds(default_steps: int) -> tuple[int, int]:
    """The steps per launch a design may choose: DESIGN_BOUNDS of the workload's own, and at least 10."""
    return max(10, round(default_steps * DESIGN_BOUNDS[0])), max(10, round(default_steps * DESIGN_BOUNDS[1]))


def best_design(comp: dict[str, Any], costs: list[tuple[float, float]], warmup: int, budget_s: float,
                default_steps: int, least_rounds: int = 3) -> dict[str, Any]:
    """The steps per launch that give a pair the narrowest t interval within `budget_s`: `costs` is each row's launch
    (fixed seconds, seconds a step), a round runs every row once, the budget holds n(s) rounds, and the half-width
    goes as t(0.975, n - 1) sqrt((sigma_L^2 + v / s) / n). Only steps whose `least_rounds` rounds fit the budget are
    considered; where none do, the workload's own steps. Returns steps, rounds (what the budget holds at them) and
    `fits` (whether any did)."""
    lo, hi = bounds(default_steps)

    def rounds(s: int) -> int:
        each = sum(c0 + (s + warmup) * t for c0, t in costs)
        return int(budget_s // each) if each > 0 else 0

    quantile: dict[int, float] = {}

    def half(s: int) -> float:
        n = rounds(s)
        if n not in quantile:
            quantile[n] = t_quantile(0.5 + CONFIDENCE / 2, n - 1)
        return quantile[n] * math.sqrt((comp["launch_var"] + comp["v"] / s) / n)

    fits = [s for s in range(lo, hi + 1) if rounds(s) >= least_rounds]
    if not fits:
        return {"steps": default_steps, "rounds": max(least_rounds, rounds(default_steps)), "fits": False}
    steps = min(fits, key=lambda s: (half(s), s))
    return {"steps": steps, "rounds": rounds(steps), "fits": True}


def buys(comp: dict[str, Any]) -> dict[str, float]:
    """How much narrower a pair's interval within one run gets (a fraction) from twice the steps per launch (only
    the within-launch part shrinks) and from twice the launches (all of it)."""
    s, lv, v = comp["steps"], comp["launch_var"], comp["v"]
    return {"steps": 1 - math.sqrt((lv + v / (2 * s)) / (lv + v / s)), "launches": 1 - math.sqrt(0.5)}


def _key(workload: str, device: str) -> str:
    from harness.ground.provenance import cpu_model, usable_cores

    return json.dumps([cpu_model(), usable_cores(), device, workload])


def store_components(comp: dict[str, Any], device: str) -> bool:
    """Keep this machine's components for the workload (the cache directory), for later default runs; whether they
    were kept (read back: the cache is best effort, and a directory that cannot be written keeps nothing)."""
    from harness.shared import cache

    data = cache.read_dict(COMPONENTS_FILE)
    data[_key(comp["workload"], device)] = comp
    cache.write_dict(COMPONENTS_FILE, data)
    return cache.read_dict(COMPONENTS_FILE).get(_key(comp["workload"], device)) == json.loads(json.dumps(comp))


def known_components(workload: str, device: str) -> dict[str, Any] | None:
    """This machine's components for `workload` as `compare doctor` last measured them, or None."""
    from harness.shared import cache

    got = cache.read_dict(COMPONENTS_FILE).get(_key(workload, device))
    need = ("v", "launch_var", "steps", "step_s", "fixed_s", "window_var", "window_steps", "date", "label")
    return got if isinstance(got, dict) and all(k in got for k in need) else None


def design(workload: str, device: str, default_steps: int, budget_s: float,
           costs: list[tuple[float, float] | None], warmup: int) -> dict[str, Any]:
    """The steps per launch a default run takes, and why: `best_design` from this machine's components where
    `compare doctor` measured them for this workload, the run's budget and its rows' launch costs (None for a row
    never run here: priced as the launch the components were measured on); else the workload's own."""
    comp = known_components(workload, device)
    plain = {"steps": default_steps, "workload_steps": default_steps, "components": None}
    if comp is None or not costs:
        return plain
    priced = [c if c is not None else (comp["fixed_s"], comp["step_s"]) for c in costs]
    chosen = best_design(comp, priced, warmup, budget_s, default_steps)
    return {**plain, "steps": chosen["steps"], "components": comp, "budget_s": budget_s, "rows": len(costs),
            "rows_priced": sum(c is not None for c in costs), "rounds": chosen["rounds"], "fits": chosen["fits"]}


def design_line(d: dict[str, Any]) -> str:
    """The report's sentence on a default run's design."""
    comp = d.get("components")
    if not comp:
        return (f"Design: the workload's {d['steps']} timed steps per launch, rounds while they fit the budget (this "
                "machine had no variance components for it: `compare doctor -w WORKLOAD` measures them, and later "
                "default runs choose their steps per launch from them).")
    measured = (f"this machine's variance components (`compare doctor`, {comp['date']}, {comp['launches']} launches "
                f"of {comp['label']}): within a launch, between windows of {comp['window_steps']} steps, SD "
                f"{math.sqrt(comp['window_var']):.1%}; between launches, beyond that, SD "
                f"{math.sqrt(comp['launch_var']):.1%}")
    if "budget_s" in d:
        rule = (f"those whose rounds give a pair the narrowest t interval, t(0.975, n-1) sqrt((sigma_L^2 + v/s) / "
                f"n) with n the rounds the budget holds at s steps ({d['rows_priced']} of the {d['rows']} rows priced "
                f"from their last launches here, the others at {comp['fixed_s']:.1f} s a launch plus "
                f"{comp['step_s'] * 1e3:.2f} ms a step, as {comp['label']}'s), among the steps whose 3 rounds fit "
                f"the budget, within {DESIGN_BOUNDS[0]:g}–{DESIGN_BOUNDS[1]:g}× the workload's")
        if not d["fits"]:
            return (f"Design: the workload's {d['steps']} timed steps per launch: no steps within "
                    f"{DESIGN_BOUNDS[0]:g}–{DESIGN_BOUNDS[1]:g}× its own let 3 rounds of the {d['rows']} rows fit "
                    f"the {d['budget_s']:g} s budget, so the 3 rounds that always run will overrun it (from "
                    f"{measured}).")
        return (f"Design: {d['steps']} timed steps per launch (the workload's own: {d['workload_steps']}) and "
                f"{d['rounds']} rounds, so {d['rounds']} launches per row, expected in the {d['budget_s']:g} s budget "
                f"(rounds go on while they fit it). From {measured}. The steps are {rule}.")
    return (f"Design: {d['steps']} timed steps per launch (the workload's own: {d['workload_steps']}), rounds while "
            f"they fit the budget. From this machine's variance components (`compare doctor`, {comp['date']}, "
            f"{comp['launches']} launches of {comp['label']}): within a launch, between windows of "
            f"{comp['window_steps']} steps, SD {math.sqrt(comp['window_var']):.1%}; between launches, beyond that, SD "
            f"{math.sqrt(comp['launch_var']):.1%}; a launch costs {comp['fixed_s']:.1f} s plus "
            f"{comp['step_s'] * 1e3:.2f} ms a step. The steps that make a pair's interval narrowest per minute are "
            f"sqrt(v c0 / (sigma_L^2 t)) (Kalibera & Jones 2013), kept within {DESIGN_BOUNDS[0]:g}–"
            f"{DESIGN_BOUNDS[1]:g}× the workload's.")
