"""`compare diff RUN_A RUN_B`: the same rows of two conditions (another torch or framework version, another knob set in
the environment) as per-row ratios B / A with their intervals and one outcome each, the regression check PyTorch's DDP
benchmark offers with diff.py and pyperf with compare_to — with the variation between runs counted where it can be.

Runs in: the parent. From the records alone. A side is one run or several runs of the same request joined as sessions
(harness/core/joins.py: `compare run --join`, `compare join`). Two single runs share no rounds and no session, so the
only interval they give is Welch's over launches, which leaves out the variation between runs at other times: on a
shared machine a row moves between runs of the identical command by more than that interval allows (docs/usage.md
gives this project's measurement), so the report says it cannot separate the change from
run-to-run variation. With two sessions or more a side, each row's sessions are the unit: each session's log
geometric mean counted once, B's against A's by Welch's t over the two sets of session estimates
(harness/ground/stats.py: random_effects_difference). A join against one run is refused: one run gives no spread
between sessions, and pooling the join's launches as one run's would drop the join's. Either way a difference and an
equivalence within the margin (TOST) are tested per row, each family Holm-adjusted over the rows. Runs of different workloads,
workload options, world sizes or global batches are refused (their samples/s measure different things), and so is a
change of machine unless asked for (`--across-machines`: then it compares the machines). Beside the speed, what
each row learned on each side (its check against the single-process reference, final loss, metric) and each change of
it in words: a regression check that reads only samples/s passes a change that broke what a backend learns.
"""

from __future__ import annotations

import statistics
from typing import Any

from harness.core import joins
from harness.core.analysis import RESOLVED, outcome
from harness.ground.errors import BadInput
from harness.ground.record import MEASURED, throughput_clock
from harness.ground.stats import (DEFAULT_MARGIN, MIN_LAUNCHES, adjust, compare_pair, geomean_interval,
                                  random_effects, random_effects_difference, session_estimate, worst)
from harness.reports.verdict import holm_note

IDENTITY = (("workload", lambda r: r.get("workload")),
            ("workload options", lambda r: (r.get("controls") or {}).get("workload_options") or {}),
            ("world size", lambda r: r.get("world_size")),
            ("global batch", lambda r: (r.get("controls") or {}).get("global_batch")),
            ("what samples/s divides by", throughput_clock))
"""What two runs must share for their rows' samples/s to be compared."""
CONTEXT = (("torch", lambda r: (r.get("env") or {}).get("torch")),
           ("git commit", lambda r: (r.get("env") or {}).get("git_commit")),
           ("CPU", lambda r: (r.get("env") or {}).get("cpu_model")),
           ("python", lambda r: (r.get("env") or {}).get("python")),
           ("tuning variables", lambda r: None if (r.get("env") or {}).get("tuning_env") is None else ",".join(
               f"{k}={v}" for k, v in r["env"]["tuning_env"].items()) or "none"),
           ("timed steps", lambda r: (r.get("controls") or {}).get("steps")),
           ("gradient clip (--max-grad-norm)", lambda r: (r.get("controls") or {}).get("max_grad_norm") or "none"),
           ("nodes", lambda r: (r.get("topology") or {}).get("nodes") or 1),
           ("processes per node", lambda r: (r.get("topology") or {}).get("processes_per_node")
            or [(r.get("topology") or {}).get("processes")]),
           ("hosts started by", lambda r: (r.get("topology") or {}).get("host_launcher") or "local"),
           ("cores per node", lambda r: (r.get("topology") or {}).get("cores_per_node")
            or [(r.get("env") or {}).get("cpu_cores_usable")]),
           ("threads per rank", lambda r: (r.get("controls") or {}).get("threads_per_rank")))
"""What may differ between the runs, said beside the ratios (the usual reason to diff two runs): the code and its
versions (each row's framework too: joins.software_changes), the tuning variables, the machine, and how the ranks
were laid out and started (one node against two, ssh against SLURM)."""


class NotComparable(BadInput):
    """Two runs whose rows cannot be compared: bad input, one line naming the difference."""


def _measured(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        if r.get("status") in MEASURED and r.get("samples_per_s"):
            out.setdefault(r["label"], []).append(r)
    return out


def _first(records):
    return next((r for r in records if r.get("status") in MEASURED), records[0])


def _sessions(side) -> list[tuple[str, list[dict[str, Any]]]]:
    """A side as (name, records) per session: a list of records is one session."""
    if side and isinstance(side[0], dict):
        return [("", side)]
    return list(side)


def _machine(records) -> list:
    env = joins.env_of(records)
    return [get(env) for _, get in joins.MACHINE]


def compare(a, b, margin: float = DEFAULT_MARGIN, names: tuple[str, str] = ("A", "B"),
            across_machines: bool = False) -> dict[str, Any]:
    """Every row measured in both sides as B / A, Holm-adjusted over the rows; a side is a run's records or a list of
    (name, records) sessions. NotComparable when the sides differ in what samples/s means, when a side's sessions
    are not one request on one machine, or (unless `across_machines`) when the sides ran on different machines."""
    sa, sb = _sessions(a), _sessions(b)
    for name, side in zip(names, (sa, sb)):
        for _, records in side:
            kinds = {r.get("kind", "run") for r in records}
            if kinds != {"run"}:
                raise NotComparable(f"{name} holds {', '.join(sorted(map(str, kinds)))} records; compare diff "
                                    "compares two `compare run` results")
        if len(side) > 1:
            try:
                joins.check(side)
            except joins.NotJoinable as exc:
                raise NotComparable(f"{name}'s sessions: {exc}") from None
    if min(len(sa), len(sb)) == 1 < max(len(sa), len(sb)):
        joined, one = (names[0], names[1]) if len(sa) > 1 else (names[1], names[0])
        raise NotComparable(
            f"{joined} is a join of {max(len(sa), len(sb))} sessions and {one} one run: a join's sessions are its unit, "
            f"and one run gives no spread between sessions to set against them (pooling the join's launches as one "
            f"run's would drop that spread); join runs of {one}'s condition (`compare run --join {one}`, or "
            f"`compare join`) and diff the joins, or diff one of {joined}'s runs against {one} (a run made with "
            f"`compare run --join` alone: its DIR/records.jsonl)")
    fa, fb = _first(sa[0][1]), _first(sb[0][1])
    for what, get in IDENTITY:
        if get(fa) != get(fb):
            raise NotComparable(f"the runs differ in {what}: {names[0]} has {get(fa)}, {names[1]} has {get(fb)}; "
                                "compare diff compares the same rows of the same workload, world size and batch")
    if not across_machines:
        for (what, _), x, y in zip(joins.MACHINE, _machine(sa[0][1]), _machine(sb[0][1])):
            if x != y:
                shown = (lambda v: ",".join(map(str, v)) or "none") if isinstance(x, list) else str
                raise NotComparable(f"{names[0]} and {names[1]} ran on different machines ({what} {shown(x)} against "
                                    f"{shown(y)}): a diff of them compares the machines, not the change; say "
                                    "--across-machines to compare them")
    paired = _paired(sa, sb)
    if paired:  # B's row under A's label from here on: its conditions and knobs then read as what changed
        sb = [(name, [{**r, "label": paired[r["label"]]} if r.get("label") in paired else r for r in records])
              for name, records in sb]
    per_a = [_measured(records) for _, records in sa]
    per_b = [_measured(records) for _, records in sb]
    labels = list(dict.fromkeys(k for m in per_a + per_b for k in m))
    in_a = [k for k in labels if any(k in m for m in per_a)]
    in_b = [k for k in labels if any(k in m for m in per_b)]
    common = [k for k in in_a if k in in_b]
    sessions = len(sa) >= 2  # and so is B: a join against one run is refused above
    rows = []
    for k in common:
        va = [[r["samples_per_s"] for r in m[k]] for m in per_a if k in m]
        vb = [[r["samples_per_s"] for r in m[k]] for m in per_b if k in m]
        if sessions:
            ea = [session_estimate(v) for v in va if len(v) >= MIN_LAUNCHES]
            eb = [session_estimate(v) for v in vb if len(v) >= MIN_LAUNCHES]
            row = {"label": k, "a": random_effects(ea, margin), "b": random_effects(eb, margin),
                   "sessions_a": len(ea), "sessions_b": len(eb), **random_effects_difference(ea, eb, margin)}
            row["a"]["n"], row["b"]["n"] = sum(map(len, va)), sum(map(len, vb))
            if row["estimate"] is None:  # a row with too few launches in every session: no estimate to give
                row["estimate"] = geomean_interval(sum(vb, []))["estimate"] / geomean_interval(sum(va, []))["estimate"]
        else:
            flat_a, flat_b = sum(va, []), sum(vb, [])
            row = {"label": k, "a": geomean_interval(flat_a), "b": geomean_interval(flat_b),
                   **compare_pair(flat_b, flat_a, paired=False, margin=margin)}
        rows.append(row)
    for r in adjust(rows):
        r["outcome"] = outcome(r) + (f" in {names[1]}" if outcome(r) in RESOLVED else "")
    if common:  # a row both ran: how many processes a rank layout has is a row's (dp runs one)
        fa, fb = (next(r for m in per for r in m.get(common[0], [])) for per in (per_a, per_b))
    # each side's value over all its sessions, read from the same row (a join of runs on two commits holds both)
    def side_value(get, per, first):
        values = []
        for r in [m[common[0]][0] for m in per if common and m.get(common[0])] or [first]:
            if get(r) not in values:
                values.append(get(r))
        return values[0] if len(values) == 1 else ", ".join(map(str, values))

    context = [(what, x, y) for what, get in CONTEXT
               for x, y in [(side_value(get, per_a, fa), side_value(get, per_b, fb))] if x != y]
    # what a row ran under beyond its label (a knob set with --knob, binding, warm-up), row by row
    said = {what for what, _ in CONTEXT}
    conditions = joins.condition_changes(sa[0][1], sb[0][1])
    context += [(f"{label}'s {what}", "default" if x is None else x, "default" if y is None else y)
                for label, what, x, y in conditions if label in common and what not in said]
    # a row's framework at another version (deepspeed 0.19.8 against 0.18.0; one that only names torch's, not again)
    software = joins.software_changes(sa[0][1], sb[0][1])
    context += [(f"{label}'s {what}", x, y) for label, what, x, y in software if label in common]
    # the rows whose own condition changed (a knob, a framework's version), each held against those that did not
    changed = sorted({label for label, _, _, _ in conditions + software if label in common})
    against = [] if sessions else _against_unchanged(per_a[0], per_b[0], changed, common, margin, names[1])
    every = {r["label"] for _, records in sa + sb for r in records}

    def why_not(side, label):  # a row measured on one side only: what the other side's launches of it did
        seen = [r for _, records in side for r in records if r.get("label") == label]
        if not seen:
            return None
        status = seen[-1].get("status")
        reason = " ".join(str(seen[-1].get("reason") or "").split())
        return f"{status}: {reason}" if reason else str(status)
    missing = {**{k: (names[1], why_not(sb, k)) for k in in_a if k not in in_b},
               **{k: (names[0], why_not(sa, k)) for k in in_b if k not in in_a}}
    return {"rows": rows, "against_unchanged": against, "missing": missing,
            "paired": {a_label: b_label for b_label, a_label in paired.items()},
            "learned": [_learned(k, sa, sb) for k in common],
            "only_a": [k for k in in_a if k not in in_b], "only_b": [k for k in in_b if k not in in_a],
            "unmeasured": sorted(every - set(in_a) - set(in_b)), "margin": margin,
            "names": names, "workload": fa.get("workload"), "world_size": fa.get("world_size"), "context": context,
            "sessions": (len(sa), len(sb)), "by_sessions": sessions, "across_machines": across_machines,
            "disturbed": (_disturbed(sa), _disturbed(sb))}


def _paired(sa, sb) -> dict[str, str]:
    """{B's label: A's label} for the rows of one adapter measured under another label a side (`ddp` in A,
    `ddp:sync_bn=true` in B): where an adapter has exactly one such row in each, they are that adapter's row under
    two conditions, as a knob given with -k is one row under two."""
    def unmatched(side, other):
        labels = {r["label"]: r.get("adapter") for _, records in side for r in records
                  if r.get("label") and r.get("status") in MEASURED and r.get("samples_per_s")}
        theirs = {r.get("label") for _, records in other for r in records}
        by_adapter: dict[str, list[str]] = {}
        for label, adapter in labels.items():
            if label not in theirs and adapter:
                by_adapter.setdefault(adapter, []).append(label)
        return by_adapter
    in_a, in_b = unmatched(sa, sb), unmatched(sb, sa)
    return {in_b[adapter][0]: in_a[adapter][0] for adapter in in_a
            if len(in_a[adapter]) == 1 and len(in_b.get(adapter, [])) == 1}


LOSS_MOVED = 1e-3
"""A row's final loss that moved by more than this, relatively, between the runs is said: the same seeds, data and
steps give the same loss to within rounding of the reductions' order, and a change of the code, a knob or a
version that alters what is learned moves it further."""


def _learned(label: str, sa, sb) -> dict[str, Any]:
    """What a row learned on each side, over its launches of every session: the largest parameter difference from
    the single-process reference with the check's tolerance (✓/✗ as the report marks it), the median final loss, the
    median evaluation metric and whether each launch met its target."""
    def side(sessions):
        ok = [r for _, records in sessions for r in records
              if r.get("label") == label and r.get("status") in MEASURED and r.get("samples_per_s")]
        losses = [r["final_loss"] for r in ok if r.get("final_loss") is not None]
        evaluated = [r["eval"] for r in ok if isinstance(r.get("eval"), dict) and r["eval"].get("accuracy")
                     is not None]
        diffs = [r.get("max_param_diff") for r in ok]
        met = [e.get("target_met") for e in evaluated if e.get("target") is not None]
        return {"max_param_diff": worst(diffs) if diffs and None not in diffs else None,
                "first": ok[0] if ok else {},
                "final_loss": statistics.median(losses) if losses else None,
                "accuracy": statistics.median(e["accuracy"] for e in evaluated) if evaluated else None,
                "target_met": all(met) if met else None}
    return {"label": label, "a": side(sa), "b": side(sb)}


def _verdict(row: dict[str, Any]) -> str | None:
    """A row's equivalence check in one word: passed, failed or None where it was not checked."""
    eq = (row.get("first") or {}).get("equivalence") or {}
    d = row.get("max_param_diff")
    if d is None or not eq.get("checked"):
        return None
    return "passed" if d <= eq["tolerance"] else "failed"


def _against_unchanged(ma, mb, changed: list[str], common: list[str], margin: float,
                       b: str) -> list[dict[str, Any]]:
    """Where some rows ran under another condition in B (a knob, a framework's version) and others did not: each
    changed row's ratio to each unchanged row within its run's rounds (its launch over the other's of the same round,
    as the run's own verdict pairs them), B's against A's by Welch's interval over the rounds. What moved every row
    between the runs (the machine's load, its clock) cancels in such a ratio, where the table's B / A keeps it: a
    row made slower by its change read "faster in B" beside rows that sped up more. Holm-adjusted over the pairs."""
    unchanged = [k for k in common if k not in changed]
    if not changed or not unchanged:
        return []

    def ratios(m, t, c):
        by_round = {r["repeat"]: r["samples_per_s"] for r in m[c]}
        return [r["samples_per_s"] / by_round[r["repeat"]] for r in m[t] if r["repeat"] in by_round]
    pairs = []
    for t in changed:
        for c in unchanged:
            ra, rb = ratios(ma, t, c), ratios(mb, t, c)
            pairs.append({"label": t, "control": c, **compare_pair(rb, ra, paired=False, margin=margin)})
    for r in adjust(pairs):
        r["outcome"] = outcome(r) + (f" in {b}" if outcome(r) in RESOLVED else "")
    return pairs


def _disturbed(side) -> tuple[int, int]:
    """(launches measured under interference, launches measured) over a side's sessions: each launch's noise flags
    (other processes or steal over its timed window, read from /proc/stat)."""
    measured = [r for _, records in side for r in records if r.get("status") == "ok" and r.get("samples_per_s")]
    return sum(1 for r in measured if (r.get("noise") or {}).get("flags")), len(measured)


def _iv(row: dict[str, Any]) -> str:
    if row["lo"] is None:
        return f"{row['estimate']:,.0f} (n={row['n']})"
    return f"{row['estimate']:,.0f} [{row['lo']:,.0f}–{row['hi']:,.0f}]"


def lines(d: dict[str, Any]) -> list[str]:
    """The comparison as Markdown: what was compared, the table, one sentence per outcome, what differs."""
    a, b = d["names"]
    ka, kb = d["sessions"]
    if d["by_sessions"]:
        how = (f"{ka} sessions of {a} against {kb} of {b}: per row each session's log geometric mean, counted once, "
               f"B's against A's by Welch's 95% t interval over the sessions' estimates, so the intervals include "
               f"the variation between runs")
    else:
        how = "per row B / A of the geometric means over launches with a 95% Welch interval"
    # the margin as given: :.0% would round 99.9% to 100%
    out = [f"{b} against {a}: {d['workload']}, world size {d['world_size']}; {how}; differences and equivalence within "
           f"±{d['margin'] * 100:g}% (TOST) Holm-adjusted over the {len(d['rows'])} row(s) compared", ""]
    if not d["by_sessions"]:
        one = " and ".join(n for n, k in zip(d["names"], d["sessions"]) if k == 1)
        out += [f"**{one} {'is' if ' and ' not in one else 'are each'} one run**: these intervals count the "
                "variation between launches, not between runs at other times, which on a shared machine can move "
                "every row by more than that, so this diff cannot separate the change from run-to-run variation. "
                "Join two runs or more a side (`compare run --join DIR`, or `compare join`) and diff the joins: each "
                "row's sessions are then the unit.", ""]
    out += [f"| row | {a} samples/s [95%] | {b} samples/s [95%] | {b} / {a} [95%] | outcome |", "|---|---|---|---|---|"]
    paired = d.get("paired") or {}

    def named(label):  # a row paired across labels names both
        return f"{label} → {paired[label]}" if label in paired else label
    for r in d["rows"]:
        ratio = (f"{r['estimate']:.3f}× (no interval)" if r["lo"] is None else
                 f"{r['estimate']:.3f}× [{r['lo']:.3f}–{r['hi']:.3f}]")
        out.append(f"| {named(r['label'])} | {_iv(r['a'])} | {_iv(r['b'])} | {ratio} | {r['outcome']}"
                   f"{holm_note(r)} |")
    out.append("")
    said = {}
    for r in d["rows"]:
        said.setdefault(r["outcome"], []).append(r["label"])
    if said:
        # one run a side: an outcome holds between these runs' launches, as the paragraph above says; the summary
        # says so too, where it is quoted alone
        scope = "" if d["by_sessions"] else "Between these runs' launches alone (not runs at other times): "
        out.append(scope + "; ".join(f"{outcome}: {', '.join(labels)}" for outcome, labels in said.items()) + ".")
    if d["by_sessions"]:
        taus = [f"{r['label']} {r['tau']:.1%}" for r in d["rows"] if r.get("tau") is not None]
        if taus:
            out.append("Between-session standard deviation of each row's log samples/s (τ): " + ", ".join(taus) + ".")
    resolved = [r for r in d["rows"] if r["outcome"].startswith(("faster", "slower"))]
    moved = {r["outcome"] for r in resolved}
    # a change of the machine moves every row alike: said where at least two rows are resolved one way and every
    # other row's estimate lies on that side too (one row that moved beside rows that did not is that row's change)
    if (len(moved) == 1 and len(resolved) >= 2
            and all((r["estimate"] > 1) == (resolved[0]["estimate"] > 1) for r in d["rows"])):
        out.append(f"Every row moved the same way: runs share no rounds, so a change of the machine between them "
                   f"(load, frequency, another VM) moves every row alike; `compare doctor` shows what this machine "
                   f"is doing, and a row's ratio to another row of the same run is free of it.")
    (da, na), (db, nb) = d.get("disturbed") or ((0, 0), (0, 0))
    if da or db:
        out.append(f"Launches measured under interference (other processes or steal over their timed windows; each "
                   f"side's report names them): {a} {da} of {na}, {b} {db} of {nb}"
                   + (": a row's change between the sides may be what that interference did to it, not a change of "
                      "the code or the machine" if (da / max(na, 1)) != (db / max(nb, 1)) else "") + ".")
    if any(r["lo"] is None for r in d["rows"]):
        out.append(f"A row needs at least {MIN_LAUNCHES} launches in each run for an interval" + (
            ", and two such sessions a side" if d["by_sessions"] else "")
            + f" (`compare run --repeats {MIN_LAUNCHES}` or more).")
    missing = d.get("missing") or {}
    for name, labels in ((a, d["only_a"]), (b, d["only_b"])):
        if labels:
            why = "; ".join(f"{k} in {missing[k][0]}: {missing[k][1]}" for k in labels
                            if k in missing and missing[k][1])
            out.append(f"Only measured in {name}: {', '.join(labels)}" + (f" ({why})" if why else "") + ".")
    if d["unmeasured"]:
        out.append(f"Measured in neither: {', '.join(d['unmeasured'])}.")
    if paired:
        out.append("Paired across labels, the only row of its adapter measured under another label a side: "
                   + "; ".join(f"{x} in {a} with {y} in {b}" for x, y in paired.items()) + ".")
    if d["context"]:
        out.append("What differs: " + "; ".join(f"{what} {x} → {y}" for what, x, y in d["context"]) + ".")
    against = d.get("against_unchanged") or []
    if against:
        def shown(r):
            iv = "no interval" if r["lo"] is None else f"[{r['lo']:.3f}–{r['hi']:.3f}]"
            return f"{r['label']}/{r['control']} {r['estimate']:.3f}× {iv}, {r['outcome']}{holm_note(r)}"
        out.append(f"Against the rows whose condition did not change ({b} / {a} of a changed row's ratio to an "
                   f"unchanged one within each run's rounds, Welch's 95% interval, Holm over the {len(against)} "
                   f"pair(s); what moved every row between the runs cancels in it, so this, not the table's ratio, "
                   f"is the change's own effect): " + "; ".join(map(shown, against)) + ".")
    if d["across_machines"] and any(what == "CPU" for what, _, _ in d["context"]):
        out.append("The runs are on different machines (--across-machines): the ratios compare the machines, "
                   "with whatever else changed.")
    return out + _learned_lines(d, named)


def _learned_lines(d: dict[str, Any], named) -> list[str]:
    """What each row learned in A and in B, beside how fast it ran: its check against the single-process reference
    (✓/✗ as the run's report marks it), its final loss and its evaluation metric; then, in words, each check that
    passed on one side and failed on the other (with the failed side's reason), each final loss that moved by more
    than LOSS_MOVED, or that nothing did."""
    from harness.reports.run_rows import accuracy_text, diff_text

    learned = [x for x in d.get("learned") or [] if x["a"]["first"] or x["b"]["first"]]
    if not learned:
        return []
    a, b = d["names"]
    metrics = {x[s]["first"].get("eval", {}).get("metric") for x in learned for s in "ab"
               if isinstance(x[s]["first"].get("eval"), dict)} - {None}
    metric = metrics.pop() if len(metrics) == 1 else "test accuracy"
    out = ["", f"What each row learned ({a} → {b}): its largest parameter difference from the single-process "
           f"reference (✓ within the check's tolerance, ✗ not), its final loss and its {metric}, medians over "
           f"launches.", "", f"| row | max_param_diff {a} → {b} | final loss {a} → {b} | {metric} {a} → {b} |",
           "|---|---|---|---|"]
    for x in learned:
        out.append(f"| {named(x['label'])} | {diff_text(x['a'], short=True)} → {diff_text(x['b'], short=True)} | "
                   f"{_loss(x['a'])} → {_loss(x['b'])} | {accuracy_text(x['a'])} → {accuracy_text(x['b'])} |")
    out.append("")
    said = []
    for x in learned:
        va, vb = _verdict(x["a"]), _verdict(x["b"])
        if {va, vb} == {"passed", "failed"}:
            failed = a if va == "failed" else b
            why = " ".join(str((x["a"] if va == "failed" else x["b"])["first"]["equivalence"].get("why_failed")
                               or "").split())
            said.append(f"{named(x['label'])} matched the reference in {b if failed == a else a} and not in {failed}"
                        + (f" ({failed}'s report: {why})" if why else ""))
        elif va != vb:
            said.append(f"{named(x['label'])}'s check {_checked(va)} in {a}, {_checked(vb)} in {b}")
    # a row that trained other steps (timed or warm-up) learned to another point
    steps = any(what == "timed steps" or what.endswith("warm-up steps") for what, _, _ in d["context"])
    moved = [x for x in learned if x["a"]["final_loss"] is not None and x["b"]["final_loss"] is not None
             and not abs(x["b"]["final_loss"] - x["a"]["final_loss"]) <= LOSS_MOVED * abs(x["a"]["final_loss"])]
    if moved and not steps:
        said.append("final loss moved by more than " + f"{LOSS_MOVED:.1%}: " + ", ".join(
            f"{named(x['label'])} {x['a']['final_loss']:.5g} → {x['b']['final_loss']:.5g}" for x in moved))
    if said:
        out.append("What changed in what was learned: " + "; ".join(said) + ".")
    elif steps:
        out.append("Every row's check reads the same in both; their final losses are after different numbers of "
                   "timed steps, so they differ by that too.")
    else:
        out.append(f"Every row's check reads the same in both, and every final loss is within {LOSS_MOVED:.1%} of "
                   f"{a}'s.")
    return out


def _checked(verdict: str | None) -> str:
    return "was not made" if verdict is None else verdict


def _loss(row: dict[str, Any]) -> str:
    return "–" if row["final_loss"] is None else f"{row['final_loss']:.4g}"
