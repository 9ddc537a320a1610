"""The time-to-target part of a run report (`compare run --until-target`): table, verdict, two plots.

Runs in: the parent (report). Everything comes from the records' `ttt` objects (harness/ground/record.py
`until_target`): per row, over repeats, the median and the range of steps to target, training time to target
and end-to-end time to target; which backend got there first and by how much; whether the fp32 rows needed the
same number of steps (they should: same seed, data order and arithmetic; a difference is reported as a finding).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from harness.ground.record import MEASURED, has_intervals, precision_of
from harness.reports import figures


def settings(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The run's until-target settings (target, metric, eval_every, max_steps), None for a fixed-length run."""
    return next((r["until_target"] for r in records if r.get("until_target")), None)


def summarise(label: str, recs: list[dict[str, Any]]) -> dict[str, Any]:
    """One row from a label's repeats: medians and ranges over the repeats that reached the target."""
    measured = [r for r in recs if r["status"] in MEASURED and r.get("ttt")]
    reached = [r for r in measured if r["ttt"]["reached"]]
    first = (reached or measured or recs)[0]
    row: dict[str, Any] = {"label": label, "adapter": first["adapter"], "first": first, "records": recs,
                           "repeats": len(recs),
                           "measured": len(measured), "reached": len(reached), "status": first["status"],
                           "reasons": sorted({r["reason"] for r in recs if r["status"] not in MEASURED
                                              and r["reason"]})}
    if not measured:
        return row
    row["precision"] = precision_of(first)
    for key in ("steps_to_target", "train_time_to_target_s", "e2e_time_to_target_s", "startup_to_target_s"):
        values = [r["ttt"][key] for r in reached]
        row[key] = {"median": statistics.median(values), "min": min(values), "max": max(values),
                    "values": values} if values else None
    row["samples_per_s"] = statistics.median(r["samples_per_s"] for r in measured)
    row["final_metric"] = statistics.median(r["ttt"]["final_metric"] for r in measured)
    row["best_metric"] = max(r["ttt"]["best_metric"] for r in measured)
    row["missed"] = [r for r in measured if not r["ttt"]["reached"]]
    row["eval_s"] = statistics.median(s for r in measured for s in r["ttt"]["eval_s_each"])
    # The repeat each plot shows: the one with the median of what that plot's axis measures (the lower middle one
    # of an even number): training time for the curve, end-to-end time for the bars.
    for shown, key in (("shown_train", "train_time_to_target_s"), ("shown_e2e", "e2e_time_to_target_s")):
        row[shown] = sorted(reached, key=lambda r: r["ttt"][key])[(len(reached) - 1) // 2] if reached else measured[0]
    return row


def table_rows(records: list[dict[str, Any]], groups) -> list[dict[str, Any]]:
    """Rows in the report's row order (`groups`: label -> records, as harness/reports/run_rows.py groups them)."""
    return [summarise(label, recs) for label, recs in groups.items()]


def _spread(stat: dict | None, fmt: str) -> str:
    if stat is None:
        return "–"
    if stat["min"] == stat["max"]:
        return format(stat["median"], fmt)
    return f"{format(stat['median'], fmt)} [{format(stat['min'], fmt)}–{format(stat['max'], fmt)}]"


def _status(row) -> str:
    if not row["measured"]:
        return f"**{row['status']}**: " + ("; ".join(row["reasons"]) or row["status"]).replace("|", "/")
    parts = [f"reached {row['reached']}/{row['repeats']}"] if row["reached"] else []
    if row["missed"]:
        worst = row["missed"][0]["ttt"]
        parts.append(f"**not reached** {len(row['missed'])}/{row['repeats']} (best {worst['best_metric']:.4f} "
                     f"after step {worst['best_step']} of {worst['budget_steps']})")
    other = row["repeats"] - row["measured"]
    if other:
        parts.append(f"{other}/{row['repeats']} failed: " + "; ".join(row["reasons"]).replace("|", "/"))
    return ", ".join(parts)


def markdown_table(rows: list[dict[str, Any]], cfg: dict[str, Any]) -> str:
    head = (f"| adapter | precision | steps to target | training time to target, s | end-to-end time to target, s "
            f"| end-to-end − training, s | samples/s | {cfg['metric']}: final (best) | status |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for row in rows:
        if not row["measured"]:
            lines.append(f"| {row['label']} | | | | | | | | {_status(row)} |")
            continue
        lines.append(
            f"| {row['label']} | {row['precision']} | {_spread(row['steps_to_target'], 'g')} "
            f"| {_spread(row['train_time_to_target_s'], '.3f')} | {_spread(row['e2e_time_to_target_s'], '.2f')} "
            f"| {_spread(row['startup_to_target_s'], '.2f')} | {row['samples_per_s']:,.0f} "
            f"| {row['final_metric']:.4f} ({row['best_metric']:.4f}) | {_status(row)} |")
    return "\n".join(lines)


def _full_world(row: dict[str, Any]) -> bool:
    """Whether the row used every device of the world size (DataParallel without GPUs is one process on one)."""
    used = (row["first"].get("topology") or {}).get("devices_used")
    return used is None or used >= row["first"]["world_size"]


def _times(row: dict[str, Any], key: str) -> dict[Any, float]:
    """round (repeat) -> time to target, for the repeats of `row` that reached it."""
    return {r["repeat"]: r["ttt"][key] for r in row["records"] if r["status"] in MEASURED and r.get("ttt")
            and r["ttt"]["reached"] and r["ttt"].get(key) is not None}


def _family(ranked: list[dict[str, Any]], key: str, fmt: str) -> str:
    """With intervals (schema 2, at least 3 repeats that reached the target in every ranked row): every pair of rows
    as one family, as the throughput verdict compares them (harness/ground/stats.py): the ratio of geometric-mean
    times with its 95% interval, paired within rounds where every row reached the target once in each of the same
    rounds (a round runs every row once, in a shuffled order), else Welch; Holm-adjusted over the pairs. A row is
    named first only where it is resolved ahead of every other; otherwise no row is."""
    from itertools import combinations

    from harness.core.analysis import RESOLVED, outcome
    from harness.ground.stats import adjust, compare_pair, geomean_interval
    from harness.reports.verdict import holm_note

    times = {r["label"]: _times(r, key) for r in ranked}
    mean = {k: geomean_interval(list(v.values()))["estimate"] for k, v in times.items()}
    ranked = sorted(ranked, key=lambda r: mean[r["label"]])
    rounds = [sorted(times[r["label"]], key=str) for r in ranked]
    paired = all(len(set(rs)) == len(rs) and rs == rounds[0] for rs in rounds)

    def values(r):
        t = times[r["label"]]
        return [t[k] for k in rounds[0]] if paired else list(t.values())

    pairs = [(fast, slow, compare_pair(values(slow), values(fast), paired=paired))
             for fast, slow in combinations(ranked, 2)]
    adjust([c for _, _, c in pairs])
    how = (f"{'paired within rounds' if paired else 'Welch, as rows reached it in different rounds'}; 95% "
           f"intervals, all {len(pairs)} pair{'s' if len(pairs) != 1 else ''} Holm-adjusted, p < 0.05")

    def said(s, c):
        return f"{_name(s)} {c['estimate']:.2f}× [{c['lo']:.2f}–{c['hi']:.2f}] as long{holm_note(c)}"

    best = ranked[0]
    ahead = [(s, c) for f, s, c in pairs if f is best and outcome(c) in RESOLVED]
    if len(ahead) == len(ranked) - 1:
        return (f"**{_name(best)}**, {format(mean[best['label']], fmt)} s (geometric mean of "
                f"{len(times[best['label']])}), resolved ahead of every other row: "
                + ", ".join(said(s, c) for s, c in ahead) + f" ({how})")
    text = (f"no row resolved first ({how}): " + ", ".join(
        f"{_name(r)} {format(mean[r['label']], fmt)} s" for r in ranked) + " (geometric means)")
    resolved = [(f, s, c) for f, s, c in pairs if outcome(c) in RESOLVED]
    open_ = [(f, s, c) for f, s, c in pairs if outcome(c) not in RESOLVED]
    if resolved:
        text += "; resolved: " + ", ".join(f"{_name(f)} ahead of {said(s, c)}" for f, s, c in resolved)
    if open_:
        text += "; not resolved: " + ", ".join(f"{_name(f)} vs {said(s, c)}" for f, s, c in open_)
    return text


def _first(rows: list[dict[str, Any]], key: str, fmt: str) -> str:
    """Which ranked row reached the target first by `key`, only as far as the repeats support it: with intervals,
    every pair (`_family`); without, no row is named first and the medians are given as what they are."""
    from harness.ground.stats import MIN_LAUNCHES

    ranked = sorted((r for r in rows if r.get(key)), key=lambda r: r[key]["median"])
    if not ranked:
        return "no row that used every device reached it"
    if len(ranked) == 1:
        return f"**{_name(ranked[0])}**, {format(ranked[0][key]['median'], fmt)} s (the only ranked row that reached it)"
    if (has_intervals([r["first"] for r in ranked])
            and all(len(r[key]["values"]) >= MIN_LAUNCHES and r["reached"] == r["repeats"] for r in ranked)):
        return _family(ranked, key, fmt)
    why = ("records of schema 1 carry no intervals" if not has_intervals([r["first"] for r in ranked]) else
           f"a row needs {MIN_LAUNCHES} repeats that reached the target for an interval")
    n = sorted({len(r[key]["values"]) for r in ranked})
    of = f"median of {n[0]}" if len(n) == 1 else f"medians of {n[0]}–{n[-1]}"
    return (f"no row resolved first ({why}): " + ", ".join(
        f"{_name(r)} {format(r[key]['median'], fmt)} s" for r in ranked) + f" ({of} repeats)")


def _name(row) -> str:
    """The row's label, with its precision when that is not plain fp32 (never compared silently)."""
    return row["label"] + ("" if row["precision"] == "fp32" else f" ({row['precision']})")


def verdict(rows: list[dict[str, Any]], cfg: dict[str, Any]) -> list[str]:
    """Which backend reached the target first and by how much; whether the fp32 rows needed the same steps."""
    got = [r for r in rows if r.get("reached")]
    if not got:
        return [f"No backend reached {cfg['metric']} {cfg['target']:g} within the {cfg['max_steps']}-step budget."]
    ranked, left = [r for r in got if _full_world(r)], [r for r in got if not _full_world(r)]
    train, e2e = _first(ranked, "train_time_to_target_s", ".3f"), _first(ranked, "e2e_time_to_target_s", ".2f")
    out = [f"First to {cfg['metric']} {cfg['target']:g} in training time: {train}. End to end, from starting the "
           f"launch command (start-up included): {e2e}.",
           "These hold for one training: every repeat trains from the workload's seed on the same data order, so "
           "the steps to target are one draw of that training's randomness, the same in every repeat, and the "
           "intervals are over launch timing alone: another seed may need another number of steps, and with them "
           "another time."]
    if left:
        out.append("Left out of the ranking: " + ", ".join(
            f"{r['label']} (ran on {r['first']['topology'].get('devices_used')} device(s) of "
            f"{r['first']['world_size']}: not data-parallel across the world size)" for r in left) + ".")
    missed = [r["label"] for r in rows if r["measured"] and not r["reached"]]
    if missed:
        out.append(f"Did not reach the target within {cfg['max_steps']} steps in any repeat: {', '.join(missed)}.")
    fp32 = [r for r in rows if r["measured"] and r["precision"] == "fp32"]
    counts = {r["label"]: sorted({*(r["steps_to_target"]["values"] if r["steps_to_target"] else []),
                                  *(None for _ in r["missed"])}, key=lambda v: (v is None, v)) for r in fp32}
    distinct = {v for vs in counts.values() for v in vs}
    if fp32:
        if len(distinct) == 1 and None not in distinct:
            out.append(f"Every fp32 row needed exactly {distinct.pop()} steps in every repeat (evaluated every "
                       f"{cfg['eval_every']} steps): the same seed, data order and arithmetic give the same "
                       "training, as they should.")
        else:
            said = "; ".join(f"{label} " + ", ".join("not reached" if v is None else str(v) for v in vs)
                             for label, vs in counts.items())
            out.append(f"**Finding: the fp32 rows did not need the same number of steps** ({said}; evaluated every "
                       f"{cfg['eval_every']} steps). With the same seed, data order and fp32 arithmetic they should; "
                       "a difference means the runs diverged enough to cross the target at a different evaluation "
                       "(float rounding in a different all-reduce order, or a real difference in what the backend "
                       "computes: see max_param_diff in the table below).")
    for r in rows:
        if r["measured"] and r["precision"] != "fp32" and r["steps_to_target"]:
            out.append(f"{r['label']} ({r['precision']}) needed {_spread(r['steps_to_target'], 'g')} steps: its "
                       "arithmetic differs from fp32, so its count need not equal the fp32 rows'.")
    for r in rows:
        e2e, train, rest = r.get("e2e_time_to_target_s"), r.get("train_time_to_target_s"), r.get("startup_to_target_s")
        if e2e and e2e["max"] > 1.5 * e2e["min"]:
            out.append(f"{r['label']}: end-to-end time to target ranged from {e2e['min']:.2f} to {e2e['max']:.2f} s "
                       f"over the repeats (training {train['min']:.3f}–{train['max']:.3f} s, the rest "
                       f"{rest['min']:.2f}–{rest['max']:.2f} s): a repeat slowed by other load on the machine, or a "
                       "one-time cost such as a JIT build, looks like this (it widens the row's interval, or without "
                       "intervals moves its median), and \"Where the time went\" shows each phase.")
    return out


def controls(cfg: dict[str, Any], test_samples: int | None) -> str:
    """How the run measured, for the report's controls."""
    whole = f"all {test_samples} test samples" if test_samples else "the whole test set"
    return (f"- Until target: {cfg['metric']} ≥ {cfg['target']:g}, evaluated after every {cfg['eval_every']} steps "
            f"and after the last step of the {cfg['max_steps']}-step budget; each evaluation is the harness's one "
            f"exact evaluation ({whole}, each counted once, averaged once through the adapter's own all-reduce, so "
            f"every rank sees the same figure and all stop after the same step), the same call for every adapter. "
            f"Every step from the first counts as training: nothing is discarded as warm-up (a user's training does "
            f"not get to discard its first steps); per-step time is the slowest rank's. Training time to target = "
            f"the sum of those step times up to and including the step after which the target was first reached "
            f"(where ranks drift apart, the rank that waited sets each step, so this sum can exceed the wall time "
            f"spent in steps by that skew; end-to-end time is wall-clock and is not affected). "
            f"End-to-end time to target = from starting the launch command to the end of that step (launcher, "
            f"interpreter, imports, rendezvous, framework set-up and any JIT build included), less the evaluation "
            f"time before it. Evaluation time is recorded apart and left out of both; so is the harness's one "
            f"parameter snapshot for the equivalence check. Launches run one at a time, never overlapping (no "
            f"pipelining: start-up is part of the measurement). samples/s = global batch / median step time over "
            f"every step run. A row that has not reached the target after the budget is `not_reached`, with its best "
            f"{cfg['metric']} and all its measurements.")


def _wrapped(text: str, width: int = 90) -> str:
    """A title that fits a 7-inch figure at 9 points: wrapped at `width` characters."""
    import textwrap

    return "\n".join(textwrap.wrap(text, width))


def plots(out: Path, records: list[dict[str, Any]], rows: list[dict[str, Any]], cfg: dict[str, Any],
          scope: str) -> list[Path]:
    """ttt_curve.png (metric vs training time, target line) and ttt_time.png (time to target, start-up stacked), each
    titled with what it covers (`scope`: figures.scope)."""
    drawing = figures.of_run(records, rows)
    if drawing is None:
        return []
    plt, shown, title = drawing
    paths = []

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for r in shown:
        curve = r["shown_train"]["ttt"]["curve"]
        line, = ax.plot([c[1] for c in curve], [c[2] for c in curve], marker=".", linewidth=1,
                        label=f"{r['label']} ({r['precision']})")
        t = r["shown_train"]["ttt"]
        if t["reached"]:
            ax.plot([t["train_time_to_target_s"]], [next(c[2] for c in curve if c[0] == t["steps_to_target"])],
                    marker="*", markersize=12, color=line.get_color())
    ax.axhline(cfg["target"], color="#444444", linestyle="--", linewidth=1)
    ax.text(ax.get_xlim()[0], cfg["target"], f" target {cfg['target']:g}", va="bottom", fontsize=8)
    ax.set_xlabel("training time, s\n(sum of step times; evaluations and start-up excluded)", fontsize=9)
    ax.set_ylabel(cfg["metric"])
    ax.set_title(_wrapped(f"{cfg['metric'].capitalize()} vs training time (median repeat by training time; ★ "
                          f"target): {title}") + f"\n{scope}", fontsize=9)
    ax.legend(fontsize=8)
    paths.append(figures.save(fig, out / "ttt_curve.png"))

    fig, ax = plt.subplots(figsize=(7, 0.6 * len(shown) + 2.2))
    labels = [f"{r['label']} ({r['precision']})" for r in shown]
    train = [r["shown_e2e"]["ttt"]["train_time_to_target_s"] or 0.0 for r in shown]
    start = [r["shown_e2e"]["ttt"]["startup_to_target_s"] or 0.0 for r in shown]
    ax.barh(labels, train, color="#4C72B0", label="training (sum of step times)")
    ax.barh(labels, start, left=train, color="#C44E52", label="start-up and time between steps (end to end "
                                                              "minus training)")
    ranged = False
    for i, r in enumerate(shown):
        t = r["shown_e2e"]["ttt"]
        e2e = r.get("e2e_time_to_target_s")
        end = train[i] + start[i]
        if t["reached"] and e2e and len(e2e["values"]) > 1:  # the spread over repeats, as the table gives it
            ax.errorbar([end], [i], xerr=[[max(0.0, end - e2e["min"])], [max(0.0, e2e["max"] - end)]], fmt="none",
                        ecolor="#222222", elinewidth=1, capsize=3,
                        label=None if ranged else "end to end: range over the repeats")
            ranged, end = True, max(end, e2e["max"])
        text = (f"  {t['e2e_time_to_target_s']:.2f} s (step {t['steps_to_target']})" if t["reached"]
                else f"  not reached (best {t['best_metric']:.4f} in {t['budget_steps']} steps)")
        ax.text(end, i, text, va="center", ha="left", fontsize=8)
    ax.invert_yaxis()
    ax.margins(x=0.35)
    ax.set_xlabel("seconds to target: end to end = training + start-up\n(the repeat with the median end to end"
                  + ("; whiskers: the range over the repeats)" if ranged else ")"), fontsize=9)
    ax.set_title(_wrapped(f"Time to {cfg['metric']} {cfg['target']:g}: {title}") + f"\n{scope}", fontsize=9)
    fig.legend(*ax.get_legend_handles_labels(), loc="lower center", ncol=2, fontsize=7, frameon=False)
    room = (0.07 if len(shown) > 3 else 0.1) + (0.04 if ranged else 0.0)  # a second legend row for the whiskers
    paths.append(figures.save(fig, out / "ttt_time.png", rect=(0, room, 1, 1)))
    return paths


def console_table(records: list[dict[str, Any]], groups, cfg: dict[str, Any]):
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=f"{records[0]['workload']} until {cfg['metric']} ≥ {cfg['target']:g} — world size "
                    f"{records[0]['world_size']}")
    for col in ("adapter", "precision", "steps", "train s", "end-to-end s", "samples/s", "final (best)", "status"):
        t.add_column(col, justify="left" if col in ("adapter", "status") else "right")
    for row in table_rows(records, groups):
        if not row["measured"]:
            t.add_row(row["label"], "", "", "", "", "", "", escape(f"{row['status']}: " + "; ".join(row["reasons"])))
            continue
        status = ", ".join(([f"reached {row['reached']}/{row['repeats']}"] if row["reached"] else [])
                           + ([f"not reached {len(row['missed'])}/{row['repeats']}"] if row["missed"] else []))
        t.add_row(row["label"], row["precision"], _spread(row["steps_to_target"], "g"),
                  _spread(row["train_time_to_target_s"], ".3f"), _spread(row["e2e_time_to_target_s"], ".2f"),
                  f"{row['samples_per_s']:,.0f}", f"{row['final_metric']:.4f} ({row['best_metric']:.4f})", status)
    return t
