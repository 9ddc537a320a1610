"""Where a step's time goes, per row (--breakdown), and the dtypes each backend really held: report sections and the
stacked-bar figure.

Runs in: the parent, from the records alone (their `breakdown` and `dtypes`, harness/core/assemble.py), so a run
re-renders identically; records without them give nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.ground.record import MEASURED
from harness.reports import figures
from harness.core.analysis import oriented
from harness.shared import step_parts
from harness.shared.step_parts import PART_NAMES, PARTS, largest_difference

DTYPE_HEADS = {"params": "parameters", "master": "master copy", "compute": "compute", "grads": "gradients",
               "reduce": "reduced on the wire", "optimizer": "optimizer state"}
COLOURS = {"forward": "#4C72B0", "backward": "#55A868", "optimizer": "#8172B2", "other": "#CCB974",
           "comm_exposed": "#C44E52", "waiting": "#DD8452"}


def _in_row_order(rows: dict[str, Any], order: list[str] | None) -> dict[str, Any]:
    """`rows` by label in `order` (the report's row order, run_rows.group: the order the rows were asked for,
    not the shuffled order their launches ran in); None: as they came."""
    if order is None:
        return rows
    return dict(sorted(rows.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)))


def _rows(records: list[dict[str, Any]], order: list[str] | None) -> dict[str, list[dict[str, Any]]]:
    rows: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        if r["status"] in MEASURED and r.get("breakdown"):
            rows.setdefault(r["label"], []).append(r)
    return _in_row_order(rows, order)


def mean_parts(recs: list[dict[str, Any]]) -> dict[str, Any]:
    """A row's breakdown over its launches: each part's mean (so they still add up), the exposed communication by
    collective, the timed step's mean."""
    n = len(recs)
    out = step_parts.mean([r["breakdown"] for r in recs])
    timed = [r["breakdown"]["timed_step_s"] for r in recs if r["breakdown"].get("timed_step_s")]
    out["timed_step_s"] = sum(timed) / len(timed) if timed else None
    out["launches"] = n
    out["steps"] = sum(r["breakdown"]["steps"] for r in recs)
    out["overlap_seen"] = all(r["breakdown"].get("overlap_seen", True) for r in recs)
    return out


def _ms(x: float) -> str:
    return f"{x * 1e3:.2f}"


def section(records: list[dict[str, Any]], analysis: dict[str, Any] | None,
            order: list[str] | None = None) -> list[str]:
    """The "Where a step's time goes" section: what was measured, the table, one sentence per resolved pair of the
    verdict, and where the parts do not account for the timed step."""
    rows = _rows(records, order)
    if not rows:
        return []
    parts = {label: mean_parts(recs) for label, recs in rows.items()}
    tol = next(iter(rows.values()))[0]["breakdown"]["tolerance"]
    steps = {r["breakdown"]["steps"] for recs in rows.values() for r in recs}
    lines = [f"{'/'.join(map(str, sorted(steps)))} step(s) per launch profiled with torch.profiler after the "
             "evaluation (so the timed steps and the accuracy are those of a run without it), every rank at once; ms "
             "per step, the mean over ranks, steps and launches. An instant of a step is the phase's compute while an "
             "operator runs, exposed communication while a collective is in flight and none runs, else host time of "
             "the phase it falls in; a rank's exposed time short of the busiest rank's compute in the same step is "
             "waiting for the slowest rank. The parts add up to the profiled step; communication overlapped with "
             "compute is inside the phases and shown apart.", "",
             "| adapter | " + " | ".join(PART_NAMES[p] for p in PARTS)
             + " | profiled step | timed step | profiled vs timed | comm overlapped (not added) |",
             "|---|" + "---:|" * (len(PARTS) + 4)]
    for label, m in parts.items():
        vs = (f"{m['step_s'] / m['timed_step_s'] - 1:+.0%}" if m["timed_step_s"] else "—")
        if m["timed_step_s"] and abs(m["step_s"] / m["timed_step_s"] - 1) > tol:
            vs += " ⚠"
        overlap = _ms(m["overlapped"]) if m["overlap_seen"] else "not seen"
        lines.append(f"| {label} | " + " | ".join(_ms(m[p]) for p in PARTS)
                     + f" | {_ms(m['step_s'])} | {_ms(m['timed_step_s']) if m['timed_step_s'] else '—'} | {vs} "
                       f"| {overlap} |")
    lines.append("")
    lines += _slowest(rows)
    lines += _why(parts, analysis)
    off = [label for label, m in parts.items()
           if m["timed_step_s"] and abs(m["step_s"] / m["timed_step_s"] - 1) > tol]
    if off:
        gaps = "; ".join(f"{label} {_ms(parts[label]['timed_step_s'] - parts[label]['step_s'])} ms"
                         for label in off)
        lines.append(f"⚠ {', '.join(off)}: the profiled steps differ from the timed steps by more than "
                     f"±{tol:.0%}, so the parts explain the profiled step, not the timed one (the profiler's own cost "
                     "per operator, or a machine that was busier in one of the two windows). Unaccounted, timed less "
                     f"profiled, per step: {gaps}.")
        lines.append("")
    # a row's mean can sit inside the tolerance while its launches do not (one +11%, another -10%): each such launch
    # of a row whose mean is inside is named, as its own profiled step is what the parts explain
    launches = {label: [(r.get("repeat", i), r["breakdown"]["profiled_vs_timed"]) for i, r in enumerate(recs)
                        if r["breakdown"].get("profiled_vs_timed") is not None
                        and abs(r["breakdown"]["profiled_vs_timed"]) > tol]
                for label, recs in rows.items()}
    launches = {label: out for label, out in launches.items() if out and label not in off}  # off: said above
    if launches:
        named = ", ".join(f"{label}#{k} ({d:+.1%})" for label, out in launches.items() for k, d in out)
        lines.append(f"⚠ Launches whose own profiled step differs from their timed step by more than ±{tol:.0%}, in "
                     f"rows whose mean does not: {named}. The table's figures are means over launches; these "
                     "launches' parts explain their profiled steps, not their timed ones.")
        lines.append("")
    unseen = [label for label, m in parts.items() if not m["overlap_seen"]]
    if unseen:
        lines.append(f"{', '.join(unseen)}: the framework's collectives run outside torch, where torch.profiler does "
                     "not see them; the adapter marks the training thread's wait for them, so their exposed part "
                     "and the wait for the slowest rank are measured, but not their overlap with compute.")
        lines.append("")
    lines += _traces(rows)
    return lines


def console_lines(records: list[dict[str, Any]], order: list[str] | None = None) -> list[str]:
    """One terminal line per row with a breakdown: its profiled step's largest parts (the table is in report.md),
    and the rank the others waited for, where one did."""
    out = []
    rows = _rows(records, order)
    slow = straggler(rows)
    for label, recs in rows.items():
        m = mean_parts(recs)
        top = [p for p in sorted(PARTS, key=lambda p: -m[p]) if m[p] > 0][:3]
        out.append(f"{label}: a step of {_ms(m['step_s'])} ms profiled: " + ", ".join(
            f"{PART_NAMES[p]} {_ms(m[p])}" for p in top)
                   + (f"; rank {slow[label]['rank']} the slowest, the others waiting for it" if label in slow else "")
                   + " (where a step's time goes: report.md)")
    return out


STRAGGLER = 0.10
"""A rank is named the slowest where, in each profiled launch of its row, the others waited for it more than this
share of the step: the table's parts, a mean over ranks, are then no rank's own."""


def straggler(rows: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per row, the rank the others waited for in every profiled launch (its record's slowest_rank, the busiest by
    compute and host time), where they waited more than STRAGGLER of the step: {"rank", "busy_s" (its compute and host
    time a step), "others_busy_s", "waiting_s" (the others' wait), means over launches}. Rows without one are left
    out."""
    out = {}
    for label, recs in rows.items():
        found = []
        for r in recs:
            ranks = r["breakdown"].get("ranks") or []
            if len(ranks) < 2:
                break
            busy = [step_parts.busy(x) for x in ranks]
            k = r["breakdown"].get("slowest_rank")  # the busiest, as the record says (assemble.step_breakdown)
            if k is None:
                break
            others = [x for i, x in enumerate(ranks) if i != k]
            waiting = sum(x["waiting"] for x in others) / len(others)
            step = sum(x["step_s"] for x in ranks) / len(ranks)
            if not step or waiting <= STRAGGLER * step:
                break
            found.append((k, busy[k], (sum(busy) - busy[k]) / len(others), waiting))
        else:
            if found and len({k for k, *_ in found}) == 1:
                n = len(found)
                out[label] = {"rank": found[0][0], "busy_s": sum(f[1] for f in found) / n,
                              "others_busy_s": sum(f[2] for f in found) / n, "waiting_s": sum(f[3] for f in found) / n}
    return out


def _slowest(rows: dict[str, list[dict[str, Any]]]) -> list[str]:
    """A sentence per row whose ranks waited for one of them (`straggler`)."""
    slow = straggler(rows)
    return [f"{label}: rank {s['rank']} was the slowest in every profiled launch (compute and host time "
            f"{_ms(s['busy_s'])} ms a step, the other ranks' {_ms(s['others_busy_s'])} ms), and the others waited "
            f"{_ms(s['waiting_s'])} ms a step for it: the table's parts, a mean over ranks, are no rank's own, and "
            f"the row is as slow as that rank." for label, s in slow.items()] + ([""] if slow else [])


def _why(parts: dict[str, dict[str, Any]], analysis: dict[str, Any] | None) -> list[str]:
    """One sentence per pair the verdict resolved: the part by which the slower row's step exceeds the faster's the
    most."""
    if analysis is None:
        return ["No verdict (fewer than 3 launches a row): no pair is resolved, so no part is named as the cause of "
                "a difference.", ""]
    said = []
    for p in analysis["pairs"]:
        if p["outcome"] != "faster" or p["a"] not in parts or p["b"] not in parts:
            continue
        fast, slow = parts[p["a"]], parts[p["b"]]
        part, by = largest_difference(slow, fast)
        ratio = oriented(analysis["pairs"], p["b"], p["a"])["estimate"]
        said.append(f"- **{p['b']} behind {p['a']}** ({ratio:.2f}×): +{by * 1e3:.2f} ms {part} per step "
                    f"(profiled step {_ms(slow['step_s'])} against {_ms(fast['step_s'])} ms).")
    if not said:
        return ["The verdict resolves no pair of these rows, so no part is named as the cause of a difference.", ""]
    return ["Where each resolved pair of the verdict differs most:", "", *said, ""]


def _traces(rows: dict[str, list[dict[str, Any]]]) -> list[str]:
    links, cost = [], []
    for label, recs in rows.items():
        for r in recs:
            traces = r["breakdown"].get("traces") or {}
            if traces:
                links.append(f"{label}: " + ", ".join(f"[rank {k}]({v})" for k, v in sorted(traces.items())))
                cost.append(r["breakdown"].get("trace_s") or 0.0)
    if not links:
        return []
    return [f"Traces of the profiled steps (rank 0 and the slowest other rank of each row's first launch; open them "
            f"in https://ui.perfetto.dev or chrome://tracing): {'; '.join(links)}. Writing them took up to "
            f"{max(cost):.2f} s a launch, after its measurement.", ""]


def dtypes_section(records: list[dict[str, Any]], analysis: dict[str, Any] | None,
                   order: list[str] | None = None) -> list[str]:
    """The dtypes each row's backend held after its last timed step, read from its live objects, and the pairs the
    verdict compares that differ in any of them."""
    held: dict[str, dict[str, str]] = {}
    for r in records:
        if r["status"] in MEASURED and r.get("dtypes"):
            held.setdefault(r["label"], r["dtypes"])
    if not held:
        return []
    held = _in_row_order(held, order)
    lines = ["Read from each backend's live objects (rank 0), not from its knobs: the gradients after the first "
             "backward, the rest after the last timed step.", "",
             "| adapter | " + " | ".join(DTYPE_HEADS.values()) + " |", "|---|" + "---|" * len(DTYPE_HEADS)]
    lines += [f"| {label} | " + " | ".join(d.get(k, "—") for k in DTYPE_HEADS) + " |" for label, d in held.items()]
    lines.append("")
    labels = list(held)
    compared = ([(p["a"], p["b"]) for p in analysis["pairs"]] if analysis is not None
                else [(a, b) for i, a in enumerate(labels) for b in labels[i + 1:]])
    differ = []
    for a, b in compared:
        if a in held and b in held:
            a, b = sorted((a, b), key=labels.index)  # in row order, whichever was faster
            diff = [f"{DTYPE_HEADS[k]} {held[a].get(k)} / {held[b].get(k)}" for k in DTYPE_HEADS
                    if held[a].get(k) != held[b].get(k)]
            if diff:
                differ.append(f"- {a} / {b}: {'; '.join(diff)}")
    if differ:
        lines += ["These rows compared by the verdict do not hold the same dtypes:", "", *differ, "",
                  "A difference in the parameters, compute, gradients, wire or optimizer state changes the arithmetic "
                  "or the bytes moved, and so what the comparison compares; a master copy alone costs memory (and "
                  "its copy back), not arithmetic.", ""]
    return lines


def plot(out: Path, records: list[dict[str, Any]], order: list[str] | None, scope: str) -> Path | None:
    """step_breakdown.png: a stacked bar per row of the parts of its profiled step, titled with what it covers
    (`scope`: figures.scope); None without a breakdown."""
    rows = _rows(records, order)
    plt = figures.pyplot()
    if not rows or plt is None:
        return None
    parts = {label: mean_parts(recs) for label, recs in rows.items()}
    labels = list(parts)
    shown = [figures.wrap_label(label) for label in labels]
    fig, ax = plt.subplots(figsize=(7.5, 0.55 * len(labels) + 0.2 * sum(t.count("\n") for t in shown) + 1.8))
    left = [0.0] * len(labels)
    for p in PARTS:
        widths = [parts[label][p] * 1e3 for label in labels]
        ax.barh(shown, widths, left=left, color=COLOURS[p], label=PART_NAMES[p])
        left = [a + w for a, w in zip(left, widths)]
    for i, label in enumerate(labels):
        timed = parts[label]["timed_step_s"]
        if timed:
            ax.plot([timed * 1e3] * 2, [i - 0.4, i + 0.4], color="black", linewidth=1.5)
    ax.invert_yaxis()
    ax.set_xlabel("ms per step (profiled; black tick: the timed step's mean)")
    ax.set_title(f"Where a step's time goes: {records[0]['workload']}, world size {records[0]['world_size']}\n"
                 f"{scope}", fontsize=10)
    ax.legend(fontsize=8, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.25 if len(labels) < 4 else -0.15))
    path = figures.save(fig, out / "step_breakdown.png")
    return path
