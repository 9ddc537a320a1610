"""`compare diff RUN_A RUN_B`: the same rows of two runs (another torch or framework version, another knob set in the
environment, another machine) as per-row ratios B / A with their intervals and one outcome each, the regression
check PyTorch's DDP benchmark offers with diff.py and pyperf with compare_to.

Runs in: the parent. From the records alone: per row, one throughput per launch in each run; B / A as the ratio of
geometric means with a 95% Welch interval (two runs share no rounds, so nothing is paired), a two-sided t test of
"no difference" and an equivalence test within the margin (TOST), each family Holm-adjusted over the rows compared.
Runs of different workloads, workload options, world sizes or global batches are refused: their samples/s measure
different things.
"""

from __future__ import annotations

from typing import Any

from harness.core.record import MEASURED
from harness.core.stats import ALPHA, DEFAULT_MARGIN, MIN_LAUNCHES, adjust, compare_pair, geomean_interval
from harness.reports.verdict import holm_note

IDENTITY = (("workload", lambda r: r.get("workload")),
            ("workload options", lambda r: (r.get("controls") or {}).get("workload_options") or {}),
            ("world size", lambda r: r.get("world_size")),
            ("global batch", lambda r: (r.get("controls") or {}).get("global_batch")))
"""What two runs must share for their rows' samples/s to be compared."""
CONTEXT = (("torch", lambda r: (r.get("env") or {}).get("torch")),
           ("git commit", lambda r: (r.get("env") or {}).get("git_commit")),
           ("CPU", lambda r: (r.get("env") or {}).get("cpu_model")),
           ("python", lambda r: (r.get("env") or {}).get("python")),
           ("timed steps", lambda r: (r.get("controls") or {}).get("steps")))
"""What may differ between the runs, said beside the ratios (the usual reason to diff two runs)."""


class NotComparable(ValueError):
    """Two runs whose rows cannot be compared; the message is one line naming the difference."""


def _measured(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        if r.get("status") in MEASURED and r.get("samples_per_s"):
            out.setdefault(r["label"], []).append(r)
    return out


def _first(records):
    return next((r for r in records if r.get("status") in MEASURED), records[0])


def compare(a: list[dict[str, Any]], b: list[dict[str, Any]], margin: float = DEFAULT_MARGIN,
            names: tuple[str, str] = ("A", "B")) -> dict[str, Any]:
    """Every row measured in both runs as B / A, Holm-adjusted over the rows; NotComparable when the runs differ
    in what samples/s means."""
    for name, records in zip(names, (a, b)):
        kinds = {r.get("kind", "run") for r in records}
        if kinds != {"run"}:
            raise NotComparable(f"{name} holds {', '.join(sorted(map(str, kinds)))} records; compare diff compares "
                                "two `compare run` results")
    fa, fb = _first(a), _first(b)
    for what, get in IDENTITY:
        if get(fa) != get(fb):
            raise NotComparable(f"the runs differ in {what}: {names[0]} has {get(fa)}, {names[1]} has {get(fb)}; "
                                "compare diff compares the same rows of the same workload, world size and batch")
    ma, mb = _measured(a), _measured(b)
    common = [k for k in ma if k in mb]
    rows = []
    for k in common:
        va, vb = [r["samples_per_s"] for r in ma[k]], [r["samples_per_s"] for r in mb[k]]
        rows.append({"label": k, "a": geomean_interval(va), "b": geomean_interval(vb),
                     **compare_pair(vb, va, paired=False, margin=margin)})
    for r in adjust(rows):
        r["outcome"] = ("no interval" if r["p"] is None else
                        ("faster in " if r["estimate"] > 1 else "slower in ") + names[1] if r["p_holm"] < ALPHA else
                        "equivalent" if r["p_equivalent_holm"] < ALPHA else "not resolved")
    context = [(what, get(fa), get(fb)) for what, get in CONTEXT if get(fa) != get(fb)]
    return {"rows": rows, "only_a": [k for k in ma if k not in mb], "only_b": [k for k in mb if k not in ma],
            "unmeasured": sorted({r["label"] for r in a + b} - set(ma) - set(mb)), "margin": margin,
            "names": names, "workload": fa.get("workload"), "world_size": fa.get("world_size"), "context": context}


def _iv(row: dict[str, Any]) -> str:
    if row["lo"] is None:
        return f"{row['estimate']:,.0f} (n={row['n']})"
    return f"{row['estimate']:,.0f} [{row['lo']:,.0f}–{row['hi']:,.0f}]"


def lines(d: dict[str, Any]) -> list[str]:
    """The comparison as Markdown: what was compared, the table, one sentence per outcome, what differs."""
    a, b = d["names"]
    out = [f"{b} against {a}: {d['workload']}, world size {d['world_size']}; per row B / A of the geometric means "
           f"over launches with a 95% Welch interval; differences and equivalence within ±{d['margin']:.0%} (TOST) "
           f"Holm-adjusted over the {len(d['rows'])} row(s) compared", "",
           f"| row | {a} samples/s [95%] | {b} samples/s [95%] | {b} / {a} [95%] | outcome |", "|---|---|---|---|---|"]
    for r in d["rows"]:
        ratio = (f"{r['estimate']:.3f}× (no interval)" if r["lo"] is None else
                 f"{r['estimate']:.3f}× [{r['lo']:.3f}–{r['hi']:.3f}]")
        out.append(f"| {r['label']} | {_iv(r['a'])} | {_iv(r['b'])} | {ratio} | {r['outcome']}{holm_note(r)} |")
    out.append("")
    said = {}
    for r in d["rows"]:
        said.setdefault(r["outcome"], []).append(r["label"])
    if said:
        out.append("; ".join(f"{outcome}: {', '.join(labels)}" for outcome, labels in said.items()) + ".")
    moved = {r["outcome"] for r in d["rows"] if r["outcome"].startswith(("faster", "slower"))}
    if len(moved) == 1 and len(d["rows"]) > 1 and all(r["outcome"] != "equivalent" for r in d["rows"]):
        out.append(f"Every resolved row moved the same way: two runs share no rounds, so a change of the machine "
                   f"between them (load, frequency, another VM) moves every row alike; `compare doctor` shows what "
                   f"this machine is doing, and a row's ratio to another row of the same run is free of it.")
    if any(r["lo"] is None for r in d["rows"]):
        out.append(f"A row needs at least {MIN_LAUNCHES} launches in each run for an interval (`compare run "
                   f"--repeats {MIN_LAUNCHES}` or more).")
    for name, labels in ((a, d["only_a"]), (b, d["only_b"])):
        if labels:
            out.append(f"Only measured in {name}: {', '.join(labels)}.")
    if d["unmeasured"]:
        out.append(f"Measured in neither: {', '.join(d['unmeasured'])}.")
    if d["context"]:
        out.append("What differs: " + "; ".join(f"{what} {x} → {y}" for what, x, y in d["context"]) + ".")
    return out
