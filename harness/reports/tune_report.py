"""The report of a `compare tune`: each backend's best knobs and its gain over its defaults, every candidate and how
it was dropped, and the verdict at defaults beside the verdict at best. From the records alone (the race is replayed
by harness/core/tuning.py, exactly as it was decided).

Runs in: the parent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.core import race as tuning
from harness.core.analysis import oriented
from harness.core.estimate import duration
from harness.ground.outdir import write_text
from harness.ground.stats import geomean_interval
from harness.reports import run_report, run_rows
from harness.reports import verdict as verdict_mod

WHY_ENDED = {"one left": "one candidate left",
             "planned": "its planned rounds ran",
             "budget": "the budget (the others not resolved against the race pick)",
             "every candidate failed": "every candidate failed"}


def _knobs(label: str) -> str:
    return label.partition(":")[2].replace(":", ", ") or "defaults"


def _gain(entry: dict[str, Any], interrupted: bool = False) -> tuple[str, str]:
    """(the gain's ratio, its outcome in words) of a backend: what its confirmation showed, or, in a tune that was
    interrupted, what it had not yet decided (nothing is called best without a launch)."""
    g = entry["gain"]
    race = entry["race"]
    if not race.walls:
        return "–", "never launched (the tune was interrupted first)" if interrupted else "no launch made"
    if not any(race.values.get(c) for c in race.candidates):
        return "–", "no launch finished (the tune was interrupted)" if interrupted else "every launch failed"
    if interrupted and g is None:
        return "–", "not decided: the tune was interrupted before its confirmation"
    if entry["best"] == entry["default"]:
        return "–", "not tested: the race picked the defaults"
    if g is None:
        return "–", "not tested: a confirmation launch failed"
    return verdict_mod.ratio_text(g), g["outcome"]


def _detectable(entry: dict[str, Any]) -> str:
    """The smallest gain the confirmation of this backend's race pick could have resolved with 80% power."""
    d = entry.get("detectable")
    return "–" if d is None else f"{d:.0%}"


def verdicts(records: list[dict[str, Any]], found: dict[str, dict[str, Any]]
             ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The comparison at defaults and at best, each from the confirmation rounds alone (every backend's defaults;
    every backend's best)."""
    conf = [r for r in records if tuning.trial(r).get("stage") == "confirm"]
    out = []
    for pick in ("default", "best"):
        labels = {e[pick] for e in found.values()}
        recs = [r for r in conf if r["label"] in labels]
        out.append(verdict_mod.analyse(recs) if len({r["label"] for r in recs}) >= 2 else None)
    return out[0], out[1]


def changes(found: dict[str, dict[str, Any]], at_default, at_best) -> list[str]:
    """The pairs of backends whose outcome differs between the two verdicts."""
    if at_default is None or at_best is None:
        return []
    names = list(found)
    lines = []
    for i, x in enumerate(names):
        for y in names[i + 1:]:
            dx, dy, bx, by = found[x]["default"], found[y]["default"], found[x]["best"], found[y]["best"]
            if {dx, dy} - set(at_default["ranked"]) or {bx, by} - set(at_best["ranked"]):
                continue
            d = oriented(at_default["pairs"], dx, dy)
            b = oriented(at_best["pairs"], bx, by)
            if d["outcome"] != b["outcome"]:
                lines.append(f"{x} against {y}: {d['outcome']} at defaults ({verdict_mod.ratio_text(d)}), "
                             f"{b['outcome']} at the race picks ({verdict_mod.ratio_text(b)})")
    return lines


def ready_rows(found: dict[str, dict[str, Any]]) -> str:
    """The `compare run` line whose rows are the winners."""
    return "compare run -a " + ",".join(e["winner"] for e in found.values())


def render(out: Path, records: list[dict[str, Any]]) -> Path:
    found = tuning.confirmed(records)
    r0 = records[0]
    plan = next((r.get("tune_plan") for r in records if r.get("tune_plan")), {}) or {}
    summary = next((r.get("tune_summary") for r in records if r.get("tune_summary")), None)
    hw = r0["env"]["gpus"][0] if r0["env"].get("gpus") else f"{r0['env']['cpu_cores_usable']}-core CPU"
    md = [f"# Tuned: {', '.join(found) or 'nothing'} on {r0['workload']} at world size {r0['world_size']} on {hw}", ""]
    budget = f"{duration(plan.get('budget_s', 0))} {'per backend' if plan.get('per_backend') else 'in all'}"
    md += ["## How it was tuned", "",
           f"Each backend's defaults and one candidate per knob value it declares, one knob changed at a time (knob "
           f"interactions are not searched), raced in rounds of fresh launches in a shuffled order: from round "
           f"{tuning.MIN_ROUNDS} on, a candidate is dropped once the backend's race pick (its highest geometric mean "
           f"so far) is resolved faster than it (paired t on log samples/s over the rounds they share, Holm over the "
           f"backend's live candidates, 5% level). Then the defaults and the race pick of each backend ran again on "
           f"fresh launches (confirmation), and every gain and both verdicts below come from those launches alone, "
           f"never from the launches that made the choice. Budget: {budget}."
           + ("" if summary is None else
              f" Used: {summary['race_rounds']} race round(s), {summary['confirm_rounds']} confirmation round(s), "
              f"{duration(summary['elapsed_s'])}." + _overrun(summary, plan)), ""]
    md += _sizing(summary, plan)
    if r0.get("run_interrupted"):
        md += [f"**The tune was interrupted {r0['run_interrupted']}**: what follows is what it had measured.", ""]
    for name, why in {**plan.get("untunable", {}), **plan.get("unavailable", {})}.items():
        md += [f"- **{name}** was not tuned: {why}."]
    for label, why in (plan.get("skipped") or {}).items():
        md += [f"- Candidate **{label}** was not tried: {why}."]
    if plan.get("untunable") or plan.get("unavailable") or plan.get("skipped"):
        md.append("")
    md += ["## Each backend's race pick, and what the confirmation said of it", "",
           "| backend | race pick | gain over its defaults, confirmation only [95% interval] | outcome | smallest gain "
           "it could resolve (80% power) | candidates | race rounds | race ended |", "|---|---|---|---|---|---|---|---|"]
    interrupted = bool(r0.get("run_interrupted"))
    for b, e in found.items():
        ratio, outcome = _gain(e, interrupted)
        race = e["race"]
        ended = WHY_ENDED.get((summary or {}).get("race_ended", {}).get(b, ""), "interrupted" if summary is None
                              else "–")
        measured = any(race.values.get(c) for c in race.candidates)
        md.append(f"| {b} | {_knobs(e['best']) if measured else '–'} | {ratio} | {outcome} | "
                  f"{_detectable(e) if measured else '–'} | {len(race.candidates)} | {race.rounds} | {ended} |")
    never = tuning.never_launched(records)
    if summary is not None and not interrupted:
        md += ["", "Gains: the race pick over the defaults, paired within confirmation rounds, Holm-adjusted over the "
                   "backends; a gain is kept only where it is resolved faster, and \"not resolved\" is not \"no gain\": "
                   "the column beside it says how large a gain the rounds run could have resolved"
                   + (" (this tune predates the race's variance being kept: from the confirmation rounds' own spread "
                      "of each paired log ratio)" if any(e.get("detectable_from") == "confirmation"
                                                         for e in found.values()) else "")
                   + ". The rows that "
                   "reproduce each backend's winner (its race pick where the confirmation resolved it faster, else its "
                   "defaults):", "",
               f"    {ready_rows(found)}", "",
               f"or `compare run --tuned {out}`.", ""]
    else:
        md += ["", "No winner was confirmed: the tune did not finish, so no backend's race pick was measured against "
                   "its defaults on launches of its own (and `compare run --tuned` refuses it); run the tune again, "
                   "its command is under Provenance."
               + (f" Never launched: {', '.join(never)}." if never else ""), ""]
    md += ["## Every candidate", ""]
    for b, e in found.items():
        race = e["race"]
        md += [f"**{b}**", "", "| candidate | samples/s in the race, the launches that made the choice [95% "
                                "interval] | launches | what became of it |", "|---|---|---|---|"]
        for c in race.candidates:
            vals = race.values.get(c, [])
            shown = verdict_mod.interval_text(geomean_interval(vals)) if vals else "–"
            d = race.dropped.get(c)
            if c in never:
                fate = "never launched: the tune was interrupted first"
            elif d and d["why"] == "interrupted":
                fate = f"interrupted in round {d['round'] + 1}, where the tune was stopped: {d['reason']}"
            elif d and d["why"] == "failed":
                fate = f"failed in round {d['round'] + 1}: {d['reason']}"
            elif d and d["why"] == "budget":
                fate = (f"not tested: left out after round {d['round'] + 1} to fit the budget, {d['ratio']:.2f}× its "
                        f"defaults in that round's one launch, the slowest of those left (successive halving)")
            elif d:
                fate = (f"dropped after round {d['round'] + 1}: {d['ratio']:.2f}× the race pick ({d['best']}) "
                        f"[{d['lo']:.2f}–{d['hi']:.2f}], Holm p = {d['p_holm']:.3g}")
            elif c == e["best"] and interrupted:
                fate = "best so far, when the tune was interrupted"
            elif c == e["best"]:
                fate = "race pick" + ("" if c == e["default"] else " (against its defaults in the confirmation: see "
                                                                    "above)")
            elif c == e["default"]:
                fate = "the defaults (against the race pick in the confirmation: see above)"
            else:
                fate = "not resolved against the race pick in the race; not tested further"
            md.append(f"| {c} | {shown} | {len(vals)} | {fate} |")
        md.append("")
    at_default, at_best = verdicts(records, found)
    for title, a in (("The comparison at defaults", at_default), ("The comparison at the race picks", at_best)):
        md += [f"## {title}", "", "From the confirmation rounds.", ""]
        md += verdict_mod.markdown(a) if a is not None else ["Fewer than two backends measured: nothing to compare.",
                                                             ""]
    changed = changes(found, at_default, at_best)
    md += ["## What tuning changed", ""] + ([f"- {line}" for line in changed] if changed else
                                            ["No conclusion between backends changed." if at_best else "–"]) + [""]
    md += ["## Every row over all its launches (race and confirmation)", "",
           "The race picks' figures here include the launches that chose them, which favour them; the gains above "
           "come from the confirmation alone.", "", run_rows.markdown_table(run_rows.table_rows(records)), ""]
    md += ["## Provenance", ""] + run_report.provenance(records) + [""]
    path = out / "report.md"
    write_text(path, "\n".join(md))
    return path


def console_lines(records: list[dict[str, Any]]) -> list[str]:
    """What `compare tune` prints at the end: each backend's best and gain, what changed, the ready rows."""
    if records and records[0].get("run_interrupted"):
        never = tuning.never_launched(records)
        return [f"the tune was interrupted {records[0]['run_interrupted']}: no winner was confirmed (report.md shows "
                f"what it had measured)" + (f"; never launched: {', '.join(never)}" if never else "")]
    found = tuning.confirmed(records)
    lines = []
    for b, e in found.items():
        ratio, outcome = _gain(e)
        could = (f"; the rounds run could resolve {e['detectable']:.0%} or more (80% power)"
                 if e.get("detectable") is not None and e["winner"] == e["default"] else "")
        lines.append(f"{b}: race pick {_knobs(e['best'])}; gain over defaults {ratio} ({outcome}){could}")
    at_default, at_best = verdicts(records, found)
    for line in changes(found, at_default, at_best):
        lines.append(f"changed by tuning: {line}")
    if found:
        lines.append(f"winners as rows: {ready_rows(found)}")
    return lines


def _sizing(summary: dict | None, plan: dict) -> list[str]:
    """How the tune sized its rounds for --min-gain, what that needed against the budget, and, where the budget cut
    it short, the smallest gain it could have confirmed (tunes made before --min-gain: nothing)."""
    if not summary or summary.get("min_gain") is None:
        return []
    gain, plans = summary["min_gain"], summary.get("plans") or {}
    text = (f"Sized for a gain of {gain:.0%} over the defaults (`--min-gain`): after {tuning.MIN_ROUNDS} race rounds, "
            f"the variance of a candidate's log ratio to its defaults per round (pooled over the backend's candidates; "
            f"its {tuning.VARIANCE_CONFIDENCE:.0%} upper confidence bound) set the race's rounds, so that a candidate "
            f"{gain:.0%} faster than the others is the race pick {tuning.SELECT_PROBABILITY:.0%} of the time, and the "
            f"confirmation's, for {tuning.CONFIRM_POWER:.0%} power to resolve it (paired t, Holm over the backends "
            f"taken as Bonferroni).")
    if plans:
        text += " Planned: " + "; ".join(
            f"{b} {p['select_rounds']} race and {p['confirm_rounds']} confirmation rounds (SD of the log ratio per "
            f"round {p['variance'] ** 0.5:.1%}, {p['df']} df)" for b, p in plans.items()) + "."
    needed, ran, planned = summary.get("needed_s"), summary["confirm_rounds"], summary.get("confirm_planned") or 0
    if needed:
        text += (f" That plan needed about {duration(needed)} at these launches' times"
                 + (f", more than the {duration(summary['budget_s'])} budget: the confirmation ran {ran} of its "
                    f"{planned} planned rounds, and the column \"smallest gain it could resolve\" says what this tune "
                    f"could have found" if ran < planned or any(
                        e == "budget" for e in (summary.get("race_ended") or {}).values()) else
                    f", within the {duration(summary['budget_s'])} budget") + ".")
    return [text, ""]


def _overrun(summary: dict, plan: dict) -> str:
    """Why a tune took longer than its budget: the least rounds always run (said only where it happened)."""
    if summary.get("per_backend"):
        over = [b for b, s in (summary.get("spent_s") or {}).items() if s > summary["budget_s"]]
    else:
        over = list(plan.get("backends") or []) if summary["elapsed_s"] > summary["budget_s"] else []
    if not over:
        return ""
    return (f" Past the budget{' for ' + ', '.join(over) if summary.get('per_backend') else ''}: the least rounds "
            f"({tuning.MIN_ROUNDS} race rounds of each backend's defaults and of the candidates the first round "
            f"kept, at least one besides the defaults, then {tuning.MIN_ROUNDS} confirmation rounds) always run, and "
            f"here they took longer than it; a larger --budget, fewer --steps or fewer backends fit it.")
