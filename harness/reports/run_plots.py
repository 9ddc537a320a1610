"""The run report's figures: throughput, loss and step times per row, and every pair of rows as a matrix.

Runs in: the parent."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from harness.core.analysis import oriented
from harness.ground.record import MEASURED, precision_of
from harness.reports import figures, palette
from harness.reports import verdict as verdict_mod

def plot(out: Path, records: list[dict[str, Any]], rows: list[dict[str, Any]], scope: str) -> list[Path]:
    """throughput.png, loss.png and step_times.png, each titled with what it covers (`scope`: figures.scope)."""
    drawing = figures.of_run(records, rows)
    if drawing is None:
        return []
    plt, ok, title = drawing
    paths = []
    legend = palette.legend_of(records)

    aside = figures.not_ranked(records)

    def named(r, text):  # a row the verdict leaves out says so on its bar
        return text + (f" [{aside[r['adapter']]}]" if r["adapter"] in aside else "")
    labels = [figures.wrap_label(named(r, f"{r['adapter']} ({precision_of(r['first'])})")) for r in ok]
    fig, ax = plt.subplots(figsize=(7, 0.6 * len(ok) + 0.2 * sum(label.count("\n") for label in labels) + 1.5))
    sps = [r["samples_per_s"] for r in ok]
    gb = [r["first"]["controls"]["global_batch"] for r in ok]
    notes = [""] * len(ok)
    if all(r.get("interval") for r in ok):  # schema 2: the 95% interval over launches (none below 2 launches)
        # a row without an interval gets no whisker (a zero-width one reads as a very tight interval): its bar says
        # how many launches it has instead
        spans = [(r["interval"]["lo"], r["interval"]["hi"]) for r in ok]
        drawn = [i for i, (a, b) in enumerate(spans) if a is not None and b is not None]
        lo = [sps[i] - spans[i][0] if i in drawn else 0.0 for i in range(len(ok))]
        hi = [spans[i][1] - sps[i] if i in drawn else 0.0 for i in range(len(ok))]
        notes = ["" if i in drawn else f" (n={r['interval']['n']}: no interval)"
                 for i, r in enumerate(ok)]
        whiskers = ("; whiskers: 95% interval over launches" if drawn else
                    "; one launch per row: no interval, no whiskers")
    else:
        lo = [s - g / r["step_p90"] for s, g, r in zip(sps, gb, ok)]
        hi = [g / r["step_p10"] - s for s, g, r in zip(sps, gb, ok)]
        drawn = list(range(len(ok)))
        whiskers = "; whiskers: p90..p10 step time"
    ax.barh(labels, sps, color=[palette.colour(r["adapter"], legend) for r in ok])
    if drawn:
        ax.errorbar([sps[i] for i in drawn], drawn, xerr=[[lo[i] for i in drawn], [hi[i] for i in drawn]],
                    fmt="none", ecolor="black", capsize=4)
    for i, s in enumerate(sps):
        ax.text(s + hi[i], i, f"  {s:,.0f}{notes[i]}", va="center", ha="left", fontsize=9)  # right of the whisker
    ax.invert_yaxis()
    ax.set_xlabel(f"samples/s (global{whiskers})")
    ax.set_title(f"Throughput: {title}\n{scope}", fontsize=10)
    ax.margins(x=0.45 if any(notes) else 0.25)  # room for "n=1: no interval" beside the longest bar
    paths.append(figures.save(fig, out / "throughput.png"))

    fig, ax = plt.subplots(figsize=(7, 4))
    style = palette.styles([r["adapter"] for r in ok], legend)
    curves: dict[tuple, str] = {}
    for r in ok:
        uncounted = set(r["first"].get("uncounted_steps") or ())  # no loss there: a gap, not a dip to 0
        curve = [math.nan if i in uncounted else v for i, v in enumerate(r["first"]["loss_curve"])]
        same = curves.setdefault(tuple(round(v, 4) for v in r["first"]["loss_curve"]), r["adapter"])
        # rows that trained alike (every fp32 backend does, to rounding) overlap: the legend says so
        label = figures.wrap_label(r["adapter"] if same == r["adapter"] else
                                   f"{r['adapter']} (same curve as {same})", 40)
        ax.plot(range(1, len(curve) + 1), curve, label=label, linewidth=1, color=palette.colour(r["adapter"], legend),
                linestyle=style[r["adapter"]])
    ax.set_xlabel("step (warm-up included)")
    ax.set_ylabel("training loss (global batch)")
    ax.set_title(f"Loss: {title}\n{scope}", fontsize=10)
    ax.legend()
    paths.append(figures.save(fig, out / "loss.png"))

    fig, ax = plt.subplots(figsize=(7, 0.6 * len(ok) + 1.5))
    data = [[t * 1e3 for rec in records if rec["label"] == r["adapter"] and rec["status"] in MEASURED
             for t in rec["step_times_s"]] for r in ok]
    ax.boxplot(data, orientation="horizontal", tick_labels=[figures.wrap_label(named(r, r["adapter"])) for r in ok],
               whis=(10, 90), showfliers=False)
    ax.invert_yaxis()
    ax.set_xlabel("step time, ms (slowest rank; box: p25..p75, whiskers: p10..p90)")
    ax.set_title(f"Step times: {title}\n{scope}", fontsize=10)
    paths.append(figures.save(fig, out / "step_times.png"))
    return paths


def pairs_plot(out: Path, records: list[dict[str, Any]], a: dict[str, Any], scope: str) -> list[Path]:
    """The verdict's pairwise matrix as a heat map (pairs.png): each cell the row's geometric-mean throughput over
    the column's, coloured by log2 of it (red: the row is slower, blue: faster), marked with the pair's outcome
    after Holm's correction (`a`: the verdict's analysis of `records`), titled with what it covers (`scope`). Nothing where fewer than two rows rank, or a
    row has fewer than 3 launches."""
    plt = figures.pyplot()
    order = a["order"]
    if plt is None or len(order) < 2 or a["letters"] is None:  # fewer than 3 launches a row: nothing ranks
        return []
    import math

    cells = [[None if x == y else oriented(a["pairs"], x, y) for y in order] for x in order]
    logs = [[0.0 if c is None else math.log2(c["estimate"]) for c in row] for row in cells]
    span = max(0.05, max(abs(v) for row in logs for v in row))
    size = 1.1 * len(order) + 2.5
    # at least as wide as the title's longest line takes at 9 points (two rows cut it off at both sides)
    fig, ax = plt.subplots(figsize=(max(size, 6.5), size * 0.8))
    ax.imshow(logs, cmap="RdBu", vmin=-span, vmax=span)
    for i, row in enumerate(cells):
        for j, c in enumerate(row):
            text = "—" if c is None else f"{c['estimate']:.2f}×\n{verdict_mod.symbol(c)}"
            ax.text(j, i, text, ha="center", va="center", fontsize=9,
                    color="white" if abs(logs[i][j]) > 0.6 * span else "black")  # readable on the darkest cells
    ax.set_xticks(range(len(order)), order, rotation=30, ha="right")
    ax.set_yticks(range(len(order)), order)
    ax.set_xlabel("column")
    ax.set_ylabel("row")
    r0 = records[0]
    ax.set_title(f"Row ÷ column, samples/s ({r0['workload']}, world size {r0['world_size']}; {a['n_min']}+ launches "
                 f"per row)\n▲ faster, ▼ slower, ≈ equivalent within ±{a['margin'] * 100:g}%, ? not resolved "
                 f"(Holm over {len(a['pairs'])} pair{'s' if len(a['pairs']) != 1 else ''})\n{scope}", fontsize=9)
    path = figures.save(fig, out / "pairs.png")
    return [path]
