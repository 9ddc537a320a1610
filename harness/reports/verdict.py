"""The verdict of a `compare run`: which rows are faster, by how much, and only as far as the launches support it.

Runs in: the parent (report, and `compare run --precision`, which asks after every round how wide the widest interval
still is). Everything comes from the records: per row, one throughput per launch (samples over the summed slowest-rank
step time of its timed window); per row a 95% interval over launches; per row against the baseline a ratio with its 95%
interval (harness/core/stats.py: Student t on log throughput, Welch for ratios). Rows are grouped into tiers: a tier is
the fastest row left and every row whose ratio interval against it contains 1. A run with fewer than three launches per
row ranks nothing and says how to get a ranking.

Which rows are ranked: measured rows that used as many devices as the world size. A row that used fewer (DataParallel
without GPUs is one process on one device) measures something else and is named as left out. Rows of another
precision are ranked with the others but carry their precision in the verdict, never silently.
"""

from __future__ import annotations

import statistics
from typing import Any

from harness.core.estimate import duration
from harness.core.record import MEASURED, precision_label
from harness.core.stats import (CONFIDENCE, INTERVAL_METHOD, MIN_LAUNCHES, excludes_one, geomean_interval, half_width,
                                ratio_interval, tiers)


def _launches(records: list[dict[str, Any]]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in records:
        if r["status"] in MEASURED and r.get("samples_per_s"):
            out.setdefault(r["label"], []).append(r)
    return out


def analyse(records: list[dict[str, Any]], baseline: str | None = None) -> dict[str, Any]:
    """Per-row intervals, ratios against the baseline, tiers and the verdict's lines (markdown)."""
    # Rows in the order asked for (records are written in the shuffled order they ran): the default baseline is the
    # first row asked for that runs on the whole world size, whatever order the launches took.
    asked_order = records[0].get("row_order") or []
    order = [k for k in asked_order if any(r["label"] == k for r in records)]
    order += [k for k in dict.fromkeys(r["label"] for r in records) if k not in order]
    launches = _launches(records)
    ranked, left_out = [], []
    for label in order:
        if label not in launches:
            continue
        first = launches[label][0]
        used, ws = first["topology"].get("devices_used"), first["world_size"]
        (ranked if used is None or used >= ws else left_out).append(label)
    values = {k: [r["samples_per_s"] for r in launches[k]] for k in launches}
    rows = {k: {**geomean_interval(values[k]), "precision": precision_label(launches[k][0]["controls"]),
                "cpu_s_per_step": _mean([r.get("cpu_s_per_step") for r in launches[k]])} for k in launches}
    asked = baseline if baseline is not None else records[0].get("baseline")
    base = asked if asked in ranked else (ranked[0] if ranked else None)
    ratios = {}
    if base is not None:
        for k in ranked:
            if k != base:
                ratios[k] = ratio_interval(values[k], values[base])
                cpu_k, cpu_b = rows[k]["cpu_s_per_step"], rows[base]["cpu_s_per_step"]
                ratios[k]["cpu_ratio"] = cpu_k / cpu_b if cpu_k and cpu_b else None
    n_min = min((len(values[k]) for k in ranked), default=0)
    out = {"rows": rows, "ranked": ranked, "left_out": left_out, "baseline": base, "asked_baseline": asked,
           "ratios": ratios, "n_min": n_min, "method": INTERVAL_METHOD,
           "tiers": tiers({k: values[k] for k in ranked}) if n_min >= MIN_LAUNCHES else None}
    out["widest"] = widest(out)
    out["lines"] = _lines(out, launches)
    return out


def _mean(values: list[float | None]) -> float | None:
    v = [x for x in values if x is not None]
    return sum(v) / len(v) if v else None


def widest(analysis: dict[str, Any]) -> tuple[str, float] | None:
    """The ratio with the widest interval (label, relative half-width); None while some ratio has no interval."""
    worst = None
    for label, ratio in analysis["ratios"].items():
        hw = half_width(ratio)
        if hw is None:
            return None
        if worst is None or hw > worst[1]:
            worst = (label, hw)
    return worst


def interval_text(row: dict[str, Any], fmt: str = ",.0f") -> str:
    """"29,550 [27,103–31,902]", or "29,550 (n=1: no interval)"."""
    est = format(row["estimate"], fmt)
    if row["lo"] is None:
        return f"{est} (n={row['n']}: no interval)"
    return f"{est} [{format(row['lo'], fmt)}–{format(row['hi'], fmt)}]"


def ratio_text(ratio: dict[str, Any]) -> str:
    if ratio["lo"] is None:
        return f"{ratio['estimate']:.2f}× (no interval)"
    return f"{ratio['estimate']:.2f}× [{ratio['lo']:.2f}–{ratio['hi']:.2f}]"


def _name(analysis, label) -> str:
    prec = analysis["rows"][label]["precision"]
    return f"{label} ({prec})" if prec != "fp32" else label


def _lines(a: dict[str, Any], launches) -> list[str]:
    ranked = a["ranked"]
    out: list[str] = []
    if len(ranked) < 2:
        out.append("**Verdict: nothing to rank** — fewer than two rows were measured on the full world size.")
    elif a["tiers"] is None:
        counts = sorted({len(launches[k]) for k in ranked})
        n = " to ".join(map(str, counts[:1] + counts[-1:])) if len(counts) > 1 else str(counts[0])
        walls = [statistics.median(r["wall_time_s"] for r in launches[k]) for k in ranked
                 if all(r.get("wall_time_s") for r in launches[k])]
        cost = (f" (about {duration(10 * sum(walls))} here, from these launches' times)"
                if len(walls) == len(ranked) else "")
        out.append(f"**Verdict: no ranking.** Each row ran {n} launch(es); a row needs at least {MIN_LAUNCHES} for an "
                   "interval, and one launch cannot separate a backend's speed from launch-to-launch variation. "
                   f"For a ranking: `--repeats 10`{cost}, or `--precision 5% --budget 10m` (rounds are added until "
                   "every ratio's interval is that narrow or the budget is spent).")
    else:
        top = a["tiers"][0]
        counts = sorted({len(launches[k]) for k in ranked})
        n = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
        if len(top) == len(ranked):
            out.append(f"**Verdict: no difference resolvable** between {' ≈ '.join(_name(a, k) for k in top)} "
                       f"({n} launches each; {CONFIDENCE:.0%} intervals). More launches (`--precision`) may "
                       "resolve one; a tie is a result, not a failure.")
        else:
            tied = (f"{' ≈ '.join(_name(a, k) for k in top)} (no difference resolvable among them)"
                    if len(top) > 1 else _name(a, top[0]))
            parts = [f"**Verdict — fastest: {tied}**"]
            # Ratios from the baseline when it ties for fastest (the same ratios as the table), else the fastest row.
            # A tie is not transitive: a row is in a later tier because its interval against the fastest row of
            # the tier before excludes 1, which need not hold against every faster row; where it does not, the
            # verdict says so and names the comparison that did resolve it.
            lead = a["baseline"] if a["baseline"] in top else top[0]
            values = {k: [r["samples_per_s"] for r in launches[k]] for k in ranked}
            for i, tier in enumerate(a["tiers"][1:], 1):
                said = []
                for k in tier:
                    ratio = ratio_interval(values[lead], values[k])
                    text = f"{ratio_text(ratio)} ahead of {_name(a, k)}"
                    if not excludes_one(ratio):
                        by = a["tiers"][i - 1][0]
                        text += (f" (not resolved; resolved behind {_name(a, by)}: "
                                 f"{ratio_text(ratio_interval(values[by], values[k]))})")
                    else:
                        open_ = [j for t in a["tiers"][:i] for j in t
                                 if j != lead and not excludes_one(ratio_interval(values[j], values[k]))]
                        if open_:
                            text += " (not resolved against " + ", ".join(
                                f"{_name(a, j)}: {ratio_text(ratio_interval(values[j], values[k]))}"
                                for j in open_) + ")"
                    said.append(text)
                parts.append(f"{lead} {', '.join(said)}" + (" (these tie with each other)" if len(tier) > 1 else ""))
            out.append("; then ".join(parts) + f". ({n} launches per row, {CONFIDENCE:.0%} intervals.)")
    if a["left_out"]:
        out.append("Left out of the ranking: " + ", ".join(
            f"{k} (ran on {launches[k][0]['topology'].get('devices_used')} device(s) of "
            f"{launches[k][0]['world_size']}: not data-parallel across the world size)" for k in a["left_out"]) + ".")
    if a["asked_baseline"] and a["asked_baseline"] != a["baseline"]:
        out.append(f"The baseline {a['asked_baseline']} has no measurement on the full world size; ratios are "
                   f"against {a['baseline']}.")
    return out


def markdown(a: dict[str, Any]) -> list[str]:
    """The verdict lines, then the table of every ranked row against the baseline."""
    md = [x for line in a["lines"] for x in (line, "")]
    if a["baseline"] is None or not a["ratios"]:
        return md
    md += [f"Against the baseline **{a['baseline']}** ({a['method']}; CPU time: the ranks' own process CPU time "
           "over the timed window, per step, mean over ranks and launches):", "",
           "| row | samples/s [95% interval] | launches | ratio to baseline [95% interval] | resolved | CPU ms per step "
           "per rank (ratio) |", "|---|---|---|---|---|---|"]
    for k in a["ranked"]:
        row = a["rows"][k]
        cpu = row["cpu_s_per_step"]
        if k == a["baseline"]:
            ratio, said, cpu_ratio = "1 (baseline)", "–", ""
        else:
            r = a["ratios"][k]
            ratio = ratio_text(r)
            said = ("no interval" if r["lo"] is None else "faster" if r["lo"] > 1 else "slower" if r["hi"] < 1
                    else "no difference")
            cpu_ratio = f" ({r['cpu_ratio']:.2f}×)" if r.get("cpu_ratio") else ""
        md.append(f"| {_name(a, k)} | {interval_text(row)} | {row['n']} | {ratio} | {said} | "
                  f"{'–' if cpu is None else f'{cpu * 1e3:.2f}'}{cpu_ratio} |")
    return md + [""]
