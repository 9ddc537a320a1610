"""The report of a `compare tune`: each backend's best knobs and its gain over its defaults, every candidate and how
it was dropped, and the verdict at defaults beside the verdict at best. From the records alone (the race is replayed
by harness/core/tuning.py, exactly as it was decided).

Runs in: the parent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.core import race as tuning
from harness.core.estimate import duration
from harness.core.outdir import write_text
from harness.core.stats import geomean_interval
from harness.reports import run_report
from harness.reports import verdict as verdict_mod

WHY_ENDED = {"one left": "one candidate left", "budget": "budget reached (the others are within noise of the best)",
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
        return "–", "the defaults were best"
    if g is None:
        return "–", "not confirmed (a confirmation launch failed)"
    return verdict_mod.ratio_text(g), g["outcome"]


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
            d = verdict_mod.oriented(at_default["pairs"], dx, dy)
            b = verdict_mod.oriented(at_best["pairs"], bx, by)
            if d["outcome"] != b["outcome"]:
                lines.append(f"{x} against {y}: {d['outcome']} at defaults ({verdict_mod.ratio_text(d)}), "
                             f"{b['outcome']} at best ({verdict_mod.ratio_text(b)})")
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
           f"{tuning.MIN_ROUNDS} on, a candidate is dropped once the backend's best is resolved faster than it "
           f"(paired t on log samples/s over the rounds they share, Holm over the backend's live candidates, 5% "
           f"level). Then the defaults and the best of each backend ran again on fresh launches (confirmation: at "
           f"least {tuning.MIN_ROUNDS} rounds), and every gain and both verdicts below come from those launches alone, "
           f"never from the launches that chose the best. Budget: {budget}."
           + ("" if summary is None else
              f" Used: {summary['race_rounds']} race round(s), {summary['confirm_rounds']} confirmation round(s), "
              f"{duration(summary['elapsed_s'])}." + _overrun(summary, plan)), ""]
    if r0.get("run_interrupted"):
        md += [f"**The tune was interrupted {r0['run_interrupted']}**: what follows is what it had measured.", ""]
    for name, why in {**plan.get("untunable", {}), **plan.get("unavailable", {})}.items():
        md += [f"- **{name}** was not tuned: {why}."]
    for label, why in (plan.get("skipped") or {}).items():
        md += [f"- Candidate **{label}** was not tried: {why}."]
    if plan.get("untunable") or plan.get("unavailable") or plan.get("skipped"):
        md.append("")
    md += ["## Each backend at its best", "",
           "| backend | best knobs | gain over its defaults [95% interval] | outcome | candidates | race rounds | "
           "race ended |", "|---|---|---|---|---|---|---|"]
    interrupted = bool(r0.get("run_interrupted"))
    for b, e in found.items():
        ratio, outcome = _gain(e, interrupted)
        race = e["race"]
        ended = WHY_ENDED.get((summary or {}).get("race_ended", {}).get(b, ""), "interrupted" if summary is None
                              else "–")
        measured = any(race.values.get(c) for c in race.candidates)
        md.append(f"| {b} | {_knobs(e['best']) if measured else '–'} | {ratio} | {outcome} | {len(race.candidates)} "
                  f"| {race.rounds} | {ended} |")
    never = tuning.never_launched(records)
    if summary is not None and not interrupted:
        md += ["", "Gains: the best over the defaults, paired within confirmation rounds, Holm-adjusted over the "
                   "backends; a gain is kept only where it is resolved faster. The rows that reproduce each backend's "
                   "winner (its best where that was confirmed faster, else its defaults):", "",
               f"    {ready_rows(found)}", "",
               f"or `compare run --tuned {out}`.", ""]
    else:
        md += ["", "No winner was confirmed: the tune did not finish, so no backend's best was measured against its "
                   "defaults on launches of its own (and `compare run --tuned` refuses it); run the tune again, its "
                   "command is under Provenance."
               + (f" Never launched: {', '.join(never)}." if never else ""), ""]
    md += ["## Every candidate", ""]
    for b, e in found.items():
        race = e["race"]
        md += [f"**{b}**", "", "| candidate | samples/s in the race [95% interval] | launches | what became of it |",
               "|---|---|---|---|"]
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
                fate = (f"left out after round {d['round'] + 1} to fit the budget: {d['ratio']:.2f}× its defaults in "
                        f"that round's launch, the slowest of those left (successive halving; not measured further)")
            elif d:
                fate = (f"dropped after round {d['round'] + 1}: {d['ratio']:.2f}× the best ({d['best']}) "
                        f"[{d['lo']:.2f}–{d['hi']:.2f}], Holm p = {d['p_holm']:.3g}")
            elif c == e["best"] and interrupted:
                fate = "best so far, when the tune was interrupted"
            elif c == e["best"]:
                fate = "best"
            else:
                fate = "left in the race, within noise of the best"
            md.append(f"| {c} | {shown} | {len(vals)} | {fate} |")
        md.append("")
    at_default, at_best = verdicts(records, found)
    for title, a in (("The comparison at defaults", at_default), ("The comparison at best", at_best)):
        md += [f"## {title}", "", "From the confirmation rounds.", ""]
        md += verdict_mod.markdown(a) if a is not None else ["Fewer than two backends measured: nothing to compare.",
                                                             ""]
    changed = changes(found, at_default, at_best)
    md += ["## What tuning changed", ""] + ([f"- {line}" for line in changed] if changed else
                                            ["No conclusion between backends changed." if at_best else "–"]) + [""]
    md += ["## Every row over all its launches (race and confirmation)", "", run_report.markdown_table(run_report.table_rows(records)), ""]
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
        lines.append(f"{b}: best {_knobs(e['best'])}; gain over defaults {ratio} ({outcome})")
    at_default, at_best = verdicts(records, found)
    for line in changes(found, at_default, at_best):
        lines.append(f"changed by tuning: {line}")
    if found:
        lines.append(f"winners as rows: {ready_rows(found)}")
    return lines


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
